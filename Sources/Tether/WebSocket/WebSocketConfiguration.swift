/// How a client connects over WebSocket: the options of ``ConnectionConfiguration/webSocket``,
/// used for every ``Endpoint`` with a ``Endpoint/webSocketPath``.
///
/// Tether frames travel in binary WebSocket messages (RFC 6455) after an HTTP/1.1 upgrade,
/// so a connection passes where only web traffic does. Text messages are not Tether: one
/// ends the connection with close code 1003.
public struct WebSocketClientConfiguration: Sendable {
    /// Extra header fields of the upgrade request, such as
    /// `["Authorization": "Bearer …"]` or an `Origin`. The fields the handshake needs
    /// (`Host`, `Upgrade`, `Connection`, `Sec-WebSocket-Key`, `Sec-WebSocket-Version`) are
    /// always sent and must not be repeated here. Default: none.
    public var headers: TetherHTTPHeaders = [:]
    /// The largest message accepted from the server, summed over its fragments; a larger
    /// one ends the connection with close code 1009 and ``TetherError/Code/frameTooLarge``.
    /// Default 16 MiB + 64 KiB: one frame of the default largest payload with its header.
    public var maximumMessageSize: Int = (16 << 20) + (64 << 10)
    /// How long the server may take to answer the upgrade request with `101`; past it the
    /// attempt fails with ``TetherError/Code/handshakeTimeout``. Default 10 s.
    public var handshakeTimeout: Duration = .seconds(10)
    /// The largest HTTP head of the server's answer accepted. Default 8 KiB.
    public var maximumResponseHeadSize: Int = 8 << 10
    /// An HTTP proxy that WebSocket endpoints are reached through with `CONNECT`; `nil`
    /// connects to them directly. Plain TCP endpoints never use it. Default `nil`.
    public var proxy: HTTPProxy?

    /// The defaults.
    public init() {}
}

/// A WebSocket port of a ``Server``: the value of ``ServerConfiguration/webSocket``.
///
/// The server accepts WebSocket clients on a port of its own, next to its TCP port, and
/// serves them exactly like TCP peers: the same handlers, sessions, heartbeats, limits and
/// timeouts. The upgrade request must arrive within ``ServerConfiguration/handshakeTimeout``
/// and fit ``maximumRequestHeadSize``; a request that is not a valid upgrade is answered
/// with `400 Bad Request`, a wrong `Sec-WebSocket-Version` with `426 Upgrade Required`, a
/// path not served with `404 Not Found`, an origin not allowed with `403 Forbidden`, a
/// head too large with `431`, and the connection is closed.
///
/// The port is plain TCP (`ws://`) unless ``tls`` is set (`wss://`); it does not use
/// ``ServerConfiguration/tls``. With ``sharesMainPort`` there is no port of its own: the
/// server's main port takes both Tether frames and WebSocket upgrades, told apart by the
/// first four bytes, after the main port's TLS when it has it.
public struct WebSocketServerConfiguration: Sendable {
    /// The address to listen on; `nil` uses the server's ``ServerConfiguration/host``.
    /// Default `nil`.
    public var host: String?
    /// The port; 0 lets the system choose one (read it from
    /// ``Server/webSocketAddress()``). Default 0.
    public var port: Int = 0
    /// The request path served, such as `/tether`; a request for another path is answered
    /// `404`. `nil` serves every path. Default `nil`.
    public var path: String?
    /// The `Origin` values accepted, exactly as browsers send them
    /// (`https://app.example.com`); a request with another origin is answered `403`. A
    /// request without `Origin` (not from a browser) is always accepted. `nil` accepts any
    /// origin. Default `nil`.
    public var allowedOrigins: [String]?
    /// The largest upgrade request head accepted; a larger one is answered `431` and
    /// closed. Default 8 KiB.
    public var maximumRequestHeadSize: Int = 8 << 10
    /// The largest message accepted from a client, summed over its fragments; a larger one
    /// ends that connection with close code 1009. Default 16 MiB + 64 KiB: one frame of the
    /// default largest payload with its header.
    public var maximumMessageSize: Int = (16 << 20) + (64 << 10)
    /// TLS for the WebSocket port (`wss://`): make one with `.server(…)` from the
    /// `TetherTLS` module, as for ``ServerConfiguration/tls``. Each connection's TLS
    /// handshake must finish within ``TLSConfiguration/handshakeTimeout``, and the upgrade
    /// request after it within ``ServerConfiguration/handshakeTimeout`` of connecting; the
    /// server reports the finished TLS handshake with ``ServerEvent/Kind/peerSecured`` and
    /// ``Peer/tlsDetails``, as for a TLS peer on the main port. Not used with
    /// ``sharesMainPort``, where the main port's ``ServerConfiguration/tls`` applies.
    /// Default `nil`: plain TCP (`ws://`).
    public var tls: TLSConfiguration?
    /// Whether WebSocket clients connect to the server's main port rather than a port of
    /// their own.
    ///
    /// Each connection on the main port is read until its first four bytes (after the TLS
    /// handshake, when ``ServerConfiguration/tls`` is set): exactly `GET ` makes it a
    /// WebSocket peer, answered with ``path``, ``allowedOrigins`` and the limits of this
    /// configuration; any other byte makes it a Tether peer, whose frame decoder gets every
    /// byte from the first. The wait for those bytes is bounded by
    /// ``ServerConfiguration/handshakeTimeout``. ``host``, ``port`` and ``tls`` are not
    /// used, and ``Server/webSocketAddress()`` returns the main port's address. A profile
    /// whose frames can begin with the bytes `GET ` (a line-based profile, a seed frame of
    /// type `0x47455420`) must not share its port. Default `false`: a port of its own.
    public var sharesMainPort = false

    /// The defaults: any port, any path, any origin.
    public init() {}

    /// A WebSocket port.
    ///
    /// - Parameters:
    ///   - port: The port; 0 lets the system choose.
    ///   - path: The request path served; `nil` serves every path.
    public init(port: Int, path: String? = nil) {
        self.port = port
        self.path = path
    }
}

extension Endpoint {
    /// An endpoint reached over WebSocket, from a `ws://host:port/path` or
    /// `wss://host:port/path` URL.
    ///
    /// The port defaults to 80 for `ws://` and 443 for `wss://`, and the path to `/`; a
    /// query is kept as part of the path. A `wss://` endpoint sets ``webSocketSecure``: the
    /// WebSocket then runs over TLS made with ``ConnectionConfiguration/tls``, which must be
    /// set.
    ///
    /// ```swift
    /// let endpoint = Endpoint(webSocket: "ws://127.0.0.1:8080/tether")!
    /// let secure = Endpoint(webSocket: "wss://tether.example.com/tether")!   // port 443
    /// ```
    ///
    /// - Parameter url: The URL, starting with `ws://` or `wss://`.
    /// - Returns: The endpoint, or `nil` when the text is not a `ws://` or `wss://` URL with
    ///   a host and a valid port.
    public init?(webSocket url: String) {
        let lowered = url.lowercased()
        let secure: Bool
        if lowered.hasPrefix("ws://") {
            secure = false
        } else if lowered.hasPrefix("wss://") {
            secure = true
        } else {
            return nil
        }
        let rest = url.dropFirst(secure ? 6 : 5)
        let authority: Substring
        let path: String
        if let slash = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) {
            authority = rest[..<slash]
            path = rest[slash] == "?" ? "/" + rest[slash...] : String(rest[slash...])
        } else {
            authority = rest
            path = "/"
        }
        guard !authority.isEmpty, !authority.contains("@") else { return nil }
        if let parsed = Endpoint(parsing: String(authority)) {
            self.init(host: parsed.host, port: parsed.port, webSocketPath: path)
        } else if !authority.contains(":") || (authority.hasPrefix("[") && authority.hasSuffix("]")) {
            let host = authority.hasPrefix("[") ? String(authority.dropFirst().dropLast()) : String(authority)
            self.init(host: host, port: secure ? 443 : 80, webSocketPath: path)
        } else {
            return nil
        }
        webSocketSecure = secure
    }

    /// An endpoint reached over WebSocket at `webSocketPath`.
    ///
    /// - Parameters:
    ///   - host: A host name or a numeric IPv4 or IPv6 address.
    ///   - port: The TCP port.
    ///   - webSocketPath: The request path of the upgrade, starting with `/`.
    public init(host: String, port: Int, webSocketPath: String) {
        self.init(host: host, port: port)
        self.webSocketPath = webSocketPath
    }

    /// Why a connection with `tls` cannot reach this endpoint, if it cannot: a `wss://`
    /// endpoint needs TLS settings, and a `ws://` endpoint with TLS settings would drop the
    /// encryption they ask for. `nil` for a plain TCP endpoint and a consistent one.
    func webSocketSecurityMismatch(tls: TLSConfiguration?) -> TetherError? {
        guard webSocketPath != nil else { return nil }
        if webSocketSecure, tls == nil {
            return TetherError(code: .invalidArgument, message: "\(self) is WebSocket over TLS but ConnectionConfiguration.tls is not set: set it (the certificate is verified for \(host))")
        }
        if !webSocketSecure, tls != nil {
            var secure = self
            secure.webSocketSecure = true
            return TetherError(code: .invalidArgument, message: "\(self) is WebSocket without TLS but ConnectionConfiguration.tls is set: use \(secure) to keep the connection encrypted")
        }
        return nil
    }

    /// The `Host` header of an upgrade request to this endpoint: without the port when it
    /// is the scheme's default (80, or 443 for `wss://`).
    var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == (webSocketSecure ? 443 : 80) ? name : "\(name):\(port)"
    }
}
