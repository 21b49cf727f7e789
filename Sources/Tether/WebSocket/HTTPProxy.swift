/// An HTTP proxy that opens tunnels with `CONNECT` (RFC 9110, section 9.3.6): the way out of
/// networks where only a proxy reaches the internet. The value of
/// ``WebSocketClientConfiguration/proxy``.
///
/// A connection through the proxy dials the proxy (the same address race and connect
/// timeout as any endpoint), sends `CONNECT host:port HTTP/1.1` for the endpoint with the
/// extra ``headers``, and waits for a `2xx` answer; then TLS (for `wss://`), the WebSocket
/// upgrade and Tether's frames go through the tunnel unchanged. The answer must arrive
/// within what is left of ``ConnectionConfiguration/connectTimeout`` and fit in
/// ``maximumResponseHeadSize``. Any other answer fails the attempt with
/// ``TetherError/Code/connectFailed`` and a message that quotes the proxy's status line
/// (`407 Proxy Authentication Required` when it wants credentials), a proxy that closes or
/// stays silent fails it too, and the fallback and reconnect policies treat it as an
/// endpoint that cannot connect.
///
/// ```swift
/// var configuration = ConnectionConfiguration()
/// configuration.webSocket.proxy = HTTPProxy(url: "http://alice:secret@proxy.example.com:3128")
/// ```
public struct HTTPProxy: Sendable, Hashable, CustomStringConvertible {
    /// The proxy's host name or numeric address.
    public var host: String
    /// The proxy's TCP port.
    public var port: Int
    /// Extra header fields of the `CONNECT` request, such as `Proxy-Authorization`. The
    /// `Host` field is always sent and must not be repeated here. Default: none.
    public var headers: TetherHTTPHeaders
    /// The largest head of the proxy's answer accepted; a larger one fails the attempt.
    /// Default 8 KiB.
    public var maximumResponseHeadSize: Int = 8 << 10

    /// A proxy at `host:port`.
    ///
    /// - Parameters:
    ///   - host: The proxy's host name or numeric address.
    ///   - port: The proxy's TCP port.
    ///   - headers: Extra header fields of the `CONNECT` request. Default: none.
    public init(host: String, port: Int, headers: TetherHTTPHeaders = [:]) {
        self.host = host
        self.port = port
        self.headers = headers
    }

    /// A proxy from an `http://[user:password@]host[:port]` URL; credentials become a
    /// `Proxy-Authorization: Basic …` field. The port defaults to 8080.
    ///
    /// - Parameter url: The proxy's URL.
    /// - Returns: The proxy, or `nil` when the text is not an `http://` URL with a host and a
    ///   valid port.
    public init?(url: String) {
        guard url.lowercased().hasPrefix("http://") else { return nil }
        var rest = url.dropFirst(7)
        if let slash = rest.firstIndex(of: "/") {
            guard rest[slash...].allSatisfy({ $0 == "/" }) else { return nil }
            rest = rest[..<slash]
        }
        var headers: TetherHTTPHeaders = [:]
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            guard credentials.contains(":") else { return nil }
            headers = ["Proxy-Authorization": "Basic \(Base64.encode(Array(credentials.utf8)))"]
            rest = rest[rest.index(after: at)...]
        }
        guard !rest.isEmpty else { return nil }
        if let parsed = Endpoint(parsing: String(rest)) {
            self.init(host: parsed.host, port: parsed.port, headers: headers)
        } else if !rest.contains(":") || (rest.hasPrefix("[") && rest.hasSuffix("]")) {
            let host = rest.hasPrefix("[") ? String(rest.dropFirst().dropLast()) : String(rest)
            self.init(host: host, port: 8080, headers: headers)
        } else {
            return nil
        }
    }

    /// The proxy's endpoint.
    var endpoint: Endpoint { Endpoint(host: host, port: port) }

    /// `http://host:port`, without credentials.
    public var description: String { "http://\(endpoint)" }
}

/// The `CONNECT` exchange with a proxy, over any stream that carries an exchange before its
/// transport (``OpenedStream/exchange(_:headEnd:limit:timeout:on:isolation:)``): a socket,
/// or an end of the in-memory network.
enum ProxyTunnel {
    /// `host:port`, with brackets around an IPv6 address.
    static func authority(of target: Endpoint) -> String {
        target.host.contains(":") ? "[\(target.host)]:\(target.port)" : "\(target.host):\(target.port)"
    }

    /// The `CONNECT` request for `target`.
    static func request(for target: Endpoint, headers: TetherHTTPHeaders) -> [UInt8] {
        let authority = authority(of: target)
        var text = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
        for field in headers { text += "\(field.name): \(field.value)\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }

    /// Asks `proxy`, on `stream` (connected to it), for a tunnel to `target` within
    /// `timeout`. Returns the stream, now a tunnel, or an error that names the proxy and
    /// quotes its answer; the stream is closed then.
    static func open(
        _ stream: any OpenedStream,
        through proxy: HTTPProxy,
        to target: Endpoint,
        timeout: Duration,
        on loop: EventLoop,
        isolation: isolated any Actor
    ) async -> Result<any OpenedStream, TetherError> {
        let authority = authority(of: target)
        let limit = proxy.maximumResponseHeadSize
        let outcome = await stream.exchange(
            request(for: target, headers: proxy.headers),
            headEnd: { WebSocketHandshake.endOfHead($0) },
            limit: limit,
            timeout: timeout,
            on: loop,
            isolation: isolation
        )
        switch outcome {
        case .success(let (tunnel, answer)):
            guard let end = answer.withUnsafeBytes({ WebSocketHandshake.endOfHead($0) }) else {
                preconditionFailure("an exchange ended before the head did")
            }
            let head = String(decoding: answer[..<(end - 4)], as: UTF8.self)
            if let error = verdict(on: head, extra: answer.count - end, proxy: proxy, authority: authority) {
                tunnel.refuse(notice: nil, drainTimeout: .zero, on: loop)
                return .failure(error)
            }
            return .success(tunnel)
        case .failure(let failure):
            return .failure(error(for: failure, proxy: proxy, authority: authority, timeout: timeout, limit: limit))
        }
    }

    /// The error for an exchange that did not get the proxy's whole answer.
    private static func error(for failure: StreamExchangeFailure, proxy: HTTPProxy, authority: String, timeout: Duration, limit: Int) -> TetherError {
        switch failure {
        case .unsupported:
            TetherError(code: .invalidArgument, message: "cannot reach \(authority) through the proxy \(proxy): the stream to the proxy cannot carry CONNECT")
        case .unwatchable(let error):
            TetherError(code: .systemCall, message: "cannot watch the socket to the proxy \(proxy): \(error)")
        case .writeFailed(let error):
            TetherError(code: .connectFailed, message: "cannot send CONNECT \(authority) to the proxy \(proxy): \(error)", underlying: error)
        case .readFailed(let error):
            TetherError(code: .connectFailed, message: "the proxy \(proxy) broke the connection before answering CONNECT \(authority): \(error)", underlying: error)
        case .closed:
            TetherError(code: .connectFailed, message: "the proxy \(proxy) closed the connection without answering CONNECT \(authority)")
        case .headTooLarge:
            TetherError(code: .connectFailed, message: "the proxy \(proxy) answered CONNECT \(authority) with a head over \(limit) bytes")
        case .timedOut:
            TetherError(code: .connectTimedOut, message: "the proxy \(proxy) did not answer CONNECT \(authority) within \(describe(timeout))")
        case .cancelled:
            TetherError(code: .connectFailed, message: "connecting to \(authority) through the proxy \(proxy) was cancelled", underlying: CancellationError())
        }
    }

    /// `nil` for a `2xx` answer with nothing after it; the attempt's failure otherwise.
    private static func verdict(on head: String, extra: Int, proxy: HTTPProxy, authority: String) -> TetherError? {
        let (start, _) = WebSocketHandshake.parseHead(head)
        let parts = start.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            return TetherError(code: .connectFailed, message: "the proxy \(proxy) did not answer CONNECT \(authority) with HTTP (first line \"\(start.prefix(80))\")")
        }
        guard (200...299).contains(status) else {
            let hint = status == 407 ? ": it wants credentials (HTTPProxy.headers, Proxy-Authorization)" : ""
            return TetherError(code: .connectFailed, message: "the proxy \(proxy) refused CONNECT \(authority) with \"\(start.prefix(80))\"\(hint)")
        }
        // The server behind says nothing before the client speaks (TLS, the WebSocket
        // upgrade): bytes after the head cannot belong to the tunnel.
        guard extra == 0 else {
            return TetherError(code: .protocolError, message: "the proxy \(proxy) sent \(extra) bytes after its answer to CONNECT \(authority), before the tunnel carried anything")
        }
        return nil
    }
}
