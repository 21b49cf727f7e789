public import Tether

/// Where a Redis (or Valkey) server is and how Tether talks to it.
///
/// ```swift
/// var configuration = try RedisConfiguration(url: "redis://:secret@cache.internal:6379/2")
/// configuration.commandTimeout = .seconds(5)
/// let store = try await RedisMailboxStore(configuration: configuration)
/// ```
///
/// The client speaks RESP itself, on Tether's event loops: connections are nonblocking
/// sockets of the loops that carry Tether's own connections, commands are pipelined, and no
/// thread waits for the server.
public struct RedisConfiguration: Sendable {
    /// The server's host name or address.
    public var host: String
    /// The server's port. Default 6379.
    public var port: Int = 6379
    /// The user for `AUTH`, with ``password``; `nil` for the default user.
    public var user: String?
    /// The password for `AUTH`; `nil` for none.
    public var password: String?
    /// The logical database (`SELECT`). Default 0.
    public var database: Int = 0
    /// What every key the store writes starts with, so several stores (or other data) can
    /// share a server. Default `tether:`.
    public var keyPrefix: String = "tether:"
    /// How many connections run commands at once; each pipelines its commands. Default 2.
    public var connections: Int = 2
    /// How long connecting (and reconnecting) may take before it fails. Default 5 s.
    public var connectTimeout: Duration = .seconds(5)
    /// How long one command may wait for its answer; past it the connection is given up, and
    /// every command waiting on it fails. Default 30 s.
    public var commandTimeout: Duration = .seconds(30)
    /// TLS for every connection, made with `TetherTLS`
    /// (`.client(trustRoots: .file("ca.pem"), serverName: "cache.internal")`), for a server
    /// with `tls-port`; `nil` for plain TCP. The server's certificate is verified for
    /// ``host`` unless the configuration names another. Default `nil`.
    public var tls: TLSConfiguration?
    /// The most bytes one reply may bring (a bulk string); a larger one ends the connection
    /// with an error that says so. Default 64 MiB.
    public var maximumReplyBytes: Int = 64 << 20

    /// A configuration with the defaults, for the server at `url`.
    ///
    /// - Parameter url: `redis://[[user]:password@]host[:port][/database]`.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument`` for a
    ///   URL of another form; the message says what is wrong.
    public init(url: String) throws(TetherError) {
        guard url.hasPrefix("redis://") else {
            throw TetherError(code: .invalidArgument, message: "\"\(url)\" is not a redis:// URL (redis://[[user]:password@]host[:port][/database])")
        }
        var rest = Substring(url.dropFirst("redis://".count))
        if let slash = rest.firstIndex(of: "/") {
            let path = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
            if !path.isEmpty {
                guard let database = Int(path), database >= 0 else {
                    throw TetherError(code: .invalidArgument, message: "the database \"\(path)\" in \(url) is not a number")
                }
                self.database = database
            }
        }
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                let user = credentials[..<colon]
                self.user = user.isEmpty ? nil : String(user)
                self.password = String(credentials[credentials.index(after: colon)...])
            } else {
                self.password = String(credentials)
            }
        }
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            rest = rest[rest.index(after: close)...]
            if rest.hasPrefix(":") {
                guard let port = Int(rest.dropFirst()), (1...65_535).contains(port) else {
                    throw TetherError(code: .invalidArgument, message: "the port in \(url) is not one")
                }
                self.port = port
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            guard let port = Int(rest[rest.index(after: colon)...]), (1...65_535).contains(port) else {
                throw TetherError(code: .invalidArgument, message: "the port in \(url) is not one")
            }
            self.port = port
        } else {
            host = String(rest)
        }
        guard !host.isEmpty else { throw TetherError(code: .invalidArgument, message: "\(url) names no host") }
    }

    /// A configuration with the defaults, for the server at `host` and `port`.
    ///
    /// - Parameters:
    ///   - host: The server's host name or address.
    ///   - port: The server's port.
    public init(host: String, port: Int = 6379) {
        self.host = host
        self.port = port
    }

    /// `host:port`, for messages.
    var endpointName: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
