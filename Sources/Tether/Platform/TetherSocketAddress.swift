#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#endif
import CTetherShims

/// A socket address: an IPv4 or IPv6 address and a port, or the path of a Unix domain
/// socket.
public struct TetherSocketAddress: Sendable, Hashable, CustomStringConvertible {
    enum Storage: Sendable, Hashable {
        case v4(host: [UInt8], port: UInt16)
        case v6(host: [UInt8], port: UInt16, scope: UInt32)
        /// A Unix domain socket's path; empty for an unnamed socket (a client's end).
        case unix(path: String)
    }

    let storage: Storage

    /// The port number; 0 for a Unix domain socket.
    public var port: Int {
        switch storage {
        case .v4(_, let port), .v6(_, let port, _): Int(port)
        case .unix: 0
        }
    }

    /// The path of a Unix domain socket's address (empty for an unnamed one, as a client's
    /// end is); `nil` for an IP address.
    public var unixPath: String? {
        if case .unix(let path) = storage { return path }
        return nil
    }

    /// The address of the Unix domain socket at `path`.
    ///
    /// - Parameter path: The socket file's path; at most 107 bytes on Linux, 103 on Darwin.
    /// - Returns: The address, or `nil` when the path is too long for a socket address.
    public init?(unixPath path: String) {
        guard path.utf8.count < Self.unixPathCapacity else { return nil }
        storage = .unix(path: path)
    }

    /// The bytes of `sun_path`, the terminating zero included.
    static var unixPathCapacity: Int {
        MemoryLayout.size(ofValue: sockaddr_un().sun_path)
    }

    /// Whether the address is this host's: 127.0.0.0/8, `::1`, or a Unix domain socket.
    var isLoopback: Bool {
        switch storage {
        case .v4(let bytes, _): bytes.first == 127
        case .v6(let bytes, _, _): bytes == [UInt8](repeating: 0, count: 15) + [1]
        case .unix: true
        }
    }

    /// Whether this is an IPv6 address.
    public var isIPv6: Bool {
        if case .v6 = storage { return true }
        return false
    }

    /// The IP address as text, without the port: `127.0.0.1` or `::1`; a Unix domain
    /// socket's path.
    public var ipAddress: String {
        switch storage {
        case .unix(let path):
            return path
        case .v4(let host, _):
            return host.map(String.init).joined(separator: ".")
        case .v6(let host, _, _):
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            var raw = in6_addr()
            withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: host) }
            _ = inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count))
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    /// `127.0.0.1:9000`, `[::1]:9000`, or `unix:///run/app.sock` (`unix:unnamed` for the
    /// unnamed end of a Unix domain socket).
    public var description: String {
        if let unixPath { return unixPath.isEmpty ? "unix:unnamed" : "unix://\(unixPath)" }
        return isIPv6 ? "[\(ipAddress)]:\(port)" : "\(ipAddress):\(port)"
    }

    /// Parses a numeric IPv4 or IPv6 address.
    ///
    /// - Parameters:
    ///   - ipAddress: A numeric address such as `127.0.0.1` or `::1`.
    ///   - port: The port number.
    /// - Returns: The address, or `nil` when `ipAddress` is not numeric.
    public init?(ipAddress: String, port: Int) {
        guard (0...65535).contains(port) else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, ipAddress, &v4) == 1 {
            storage = .v4(host: withUnsafeBytes(of: &v4) { Array($0) }, port: UInt16(port))
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, ipAddress, &v6) == 1 {
            storage = .v6(host: withUnsafeBytes(of: &v6) { Array($0) }, port: UInt16(port), scope: 0)
            return
        }
        return nil
    }

    init(storage: sockaddr_storage) {
        var storage = storage
        if Int32(storage.ss_family) == AF_UNIX {
            let path = withUnsafeBytes(of: &storage) { raw in
                let offset = MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path)!
                let bytes = raw[offset..<min(raw.count, offset + Self.unixPathCapacity)]
                return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            self.storage = .unix(path: path)
        } else if Int32(storage.ss_family) == AF_INET6 {
            let address = withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in6.self) }
            var host = address.sin6_addr
            self.storage = .v6(
                host: withUnsafeBytes(of: &host) { Array($0) },
                port: UInt16(bigEndian: address.sin6_port),
                scope: address.sin6_scope_id
            )
        } else {
            let address = withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in.self) }
            var host = address.sin_addr
            self.storage = .v4(host: withUnsafeBytes(of: &host) { Array($0) }, port: UInt16(bigEndian: address.sin_port))
        }
    }

    package var family: Int32 {
        switch storage {
        case .v4: AF_INET
        case .v6: AF_INET6
        case .unix: AF_UNIX
        }
    }

    /// Calls `body` with this address as a `sockaddr` pointer and its length.
    func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        switch storage {
        case .v4(let host, let port):
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            #if canImport(Darwin)
            address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
            #endif
            address.sin_port = port.bigEndian
            withUnsafeMutableBytes(of: &address.sin_addr) { $0.copyBytes(from: host) }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        case .v6(let host, let port, let scope):
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            #if canImport(Darwin)
            address.sin6_len = UInt8(MemoryLayout<sockaddr_in6>.size)
            #endif
            address.sin6_port = port.bigEndian
            address.sin6_scope_id = scope
            withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: host) }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        case .unix(let path):
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8.prefix(Self.unixPathCapacity - 1))
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
            #if canImport(Darwin)
            address.sun_len = UInt8(MemoryLayout<sockaddr_un>.size)
            #endif
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }
    }
}

/// Where to connect: a host name or numeric address, and a port.
public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
    /// A host name (`chat.example.com`, `localhost`) or a numeric address (`127.0.0.1`, `::1`).
    public var host: String
    /// The TCP port.
    public var port: Int
    /// The request path of a WebSocket upgrade, such as `/tether`: when set, the connection
    /// runs over WebSocket (``WebSocketClientConfiguration``) rather than plain TCP. Default
    /// `nil`: plain TCP.
    public var webSocketPath: String?
    /// Whether the WebSocket runs over TLS (`wss://`): the connection then makes a TLS
    /// session with ``ConnectionConfiguration/tls`` (verifying the certificate for
    /// ``host``) before the upgrade. Only meaningful with a ``webSocketPath``; set by
    /// ``init(webSocket:)`` for a `wss://` URL. A `wss://` endpoint without
    /// ``ConnectionConfiguration/tls`` fails to connect with
    /// ``TetherError/Code/invalidArgument``, and so does a `ws://` endpoint with it: the
    /// connection never drops encryption it was configured with. Default `false`.
    public var webSocketSecure = false
    /// The path of the Unix domain socket to connect to, for a `unix:///run/app.sock`
    /// endpoint (``init(unixSocket:)``): the connection then goes over that socket, on this
    /// machine, and ``host`` is `localhost` and ``port`` 0. Default `nil`: TCP.
    public var unixSocketPath: String?

    /// An endpoint on the Unix domain socket at `path`: a sidecar or a daemon on this
    /// machine.
    ///
    /// ```swift
    /// let daemon = Endpoint(unixSocket: "/run/app.sock")
    /// ```
    ///
    /// - Parameter path: The socket file's path.
    public init(unixSocket path: String) {
        self.host = "localhost"
        self.port = 0
        self.unixSocketPath = path
    }

    /// Creates an endpoint.
    ///
    /// - Parameters:
    ///   - host: A host name or a numeric IPv4 or IPv6 address.
    ///   - port: The TCP port.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT`, `[IPV6]:PORT` or `IPV6-ADDRESS:PORT` text, or `unix:///PATH`
    /// for a Unix domain socket.
    ///
    /// - Parameter text: The endpoint as text, such as `127.0.0.1:9000`, `[::1]:9000` or
    ///   `unix:///run/app.sock`.
    /// - Returns: The endpoint, or `nil` when the text has no valid port (or no path).
    public init?(parsing text: String) {
        if text.hasPrefix("unix://") {
            let path = String(text.dropFirst("unix://".count))
            guard path.hasPrefix("/"), TetherSocketAddress(unixPath: path) != nil else { return nil }
            self.init(unixSocket: path)
            return
        }
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            let host = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":"), let port = Int(rest.dropFirst()), (0...65535).contains(port) else { return nil }
            self.init(host: host, port: port)
            return
        }
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else { return nil }
        let host = String(text[..<colon])
        guard !host.isEmpty else { return nil }
        self.init(host: host, port: port)
    }

    /// `host:port`, with brackets around an IPv6 address; `ws://host:port/path` for a
    /// WebSocket endpoint, `wss://host:port/path` for one over TLS.
    public var description: String {
        if let unixSocketPath { return "unix://\(unixSocketPath)" }
        let authority = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        guard let webSocketPath else { return authority }
        return "\(webSocketSecure ? "wss" : "ws")://\(authority)\(webSocketPath)"
    }
}
