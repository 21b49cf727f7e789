#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
public import Tether

/// A ``Tether/Server`` that runs for the length of a test, and can be stopped and started again on
/// the same port.
///
/// By default it listens on 127.0.0.1, on a port the system picks; the handlers closure
/// installs the request handlers on every ``Tether/Server`` it makes. ``start()`` returns once the
/// server listens, ``stop()`` once it has stopped and freed its port, and ``restart()``
/// makes a new server with the same configuration and handlers on the same port, so that
/// clients reconnect to it.
///
/// ```swift
/// try await withTestServer(handlers: { server in
///     server.handle(type: 0x401) { request, _ in Response(payload: request.payload) }
/// }) { server in
///     let connection = try await Connection.connect(to: server.endpoint)
///     try await server.restart()          // the connection reconnects to the new server
///     await connection.close()
/// }
/// ```
///
/// With real sockets and a numeric host, the port stays reserved for as long as the
/// `TestServer` lives: a socket bound to it (with `SO_REUSEADDR`, never listening) keeps the
/// system from handing it out as the source port of another connection, which would keep
/// the next server from listening on it. While the server is stopped, connections to the
/// port are refused. With a host name instead of a numeric address, the port is not
/// reserved between a stop and the next start.
///
/// Every server gets the same configuration value, so what it refers to is shared: a
/// restarted server has the mailbox store of the one before (pushes stored before the
/// restart are replayed after it). For a server that starts afresh, make another
/// `TestServer` with its own configuration on the same ``port``.
///
/// A configuration for an in-memory network works the same way: the server listens on the
/// network, ``endpoint`` is the configuration's host with the port it got there, and a
/// restart listens on that host and port of the network again.
///
/// Call ``stop()`` before the test ends (or use ``withTestServer(configuration:handlers:isolation:_:)``,
/// which always does): a running server runs on after the `TestServer` is gone. `start()`,
/// `stop()` and `restart()` are for one task at a time.
public final class TestServer: Sendable {
    /// The configuration of every server, with the port it was given: the reserved port,
    /// or the configuration's own when it named one.
    public let configuration: ServerConfiguration
    private let install: @Sendable (Server) -> Void
    /// The socket that keeps the port reserved, or `nil`.
    private let reservation: Descriptor?
    private let state: Lock<State>

    private struct State {
        /// The current server: running, stopped, or not started yet.
        var server: Server
        /// Whether `server` has been started; a server runs only once.
        var used = false
        /// The task running `server`, until it is stopped.
        var task: Task<Void, any Error>?
        /// The port every server listens on; 0 until the first one listens when the
        /// configuration asked for any port and none could be reserved.
        var port: Int
    }

    /// The configuration of a test server by default: host `127.0.0.1`, port 0 (one the
    /// system picks), no ``Tether/ServerConfiguration/handshakeTimeout``, everything else
    /// ``Tether/ServerConfiguration``'s defaults.
    ///
    /// The handshake timeout is off because on real sockets it runs in real time: on a busy
    /// machine a client may send its first frame more than 10 s after it connected, and the
    /// server would close a connection the test did not mean to time. A test about the
    /// handshake timeout sets it.
    public static var defaultConfiguration: ServerConfiguration {
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.handshakeTimeout = nil
        return configuration
    }

    /// Makes the first server and installs its handlers; nothing listens until ``start()``.
    ///
    /// With real sockets, a numeric host and port 0, a free port is reserved at once, so
    /// ``endpoint`` is known before the server starts.
    ///
    /// - Parameters:
    ///   - configuration: How the server listens. Default ``defaultConfiguration``
    ///     (127.0.0.1, a port the system picks).
    ///   - handlers: Installs request handlers on a new server; called once for every
    ///     server made, before it starts. Default: none.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/bindFailed`` when the port cannot
    ///   be reserved.
    public init(
        configuration: ServerConfiguration = TestServer.defaultConfiguration,
        handlers: @escaping @Sendable (Server) -> Void = { _ in }
    ) throws {
        var configuration = configuration
        if configuration.network is SocketNetwork, let address = TetherSocketAddress(ipAddress: configuration.host, port: configuration.port) {
            let (fd, port) = try Self.reserve(address)
            reservation = fd
            configuration.port = port
        } else {
            reservation = nil
        }
        self.configuration = configuration
        install = handlers
        let server = Server(configuration: configuration)
        handlers(server)
        state = Lock(State(server: server, port: configuration.port))
    }

    /// The current server: the one running, or the last one stopped, or the one the next
    /// ``start()`` runs.
    public var server: Server { state.withLock { $0.server } }

    /// The port the server listens on; 0 before the first ``start()`` when it could not be
    /// known in advance (an in-memory network, or a host name, with port 0).
    public var port: Int { state.withLock { $0.port } }

    /// Where clients connect: the configuration's host (127.0.0.1 or `::1` for a wildcard
    /// address) and ``port``.
    public var endpoint: Endpoint {
        let host = switch configuration.host {
        case "0.0.0.0": "127.0.0.1"
        case "::": "::1"
        default: configuration.host
        }
        return Endpoint(host: host, port: port)
    }

    /// Whether a server is running: started and not stopped.
    public var isRunning: Bool { state.withLock { $0.task != nil } }

    /// Starts the server and returns once it listens.
    ///
    /// After a ``stop()`` it makes a new ``Tether/Server`` (a server runs only once), with the same
    /// configuration and handlers, on the same port. When the server is running already it
    /// returns at once. When the port is still in use for a moment (a child process that
    /// another thread is starting holds a copy of the closed listener until it runs its
    /// program), it tries again every 10 ms, for up to 2 s.
    ///
    /// - Throws: What ``Tether/Server/run()`` throws when it cannot listen, such as
    ///   ``Tether/TetherError`` with ``Tether/TetherError/Code/bindFailed``; the server is then stopped.
    public func start() async throws {
        // A restart listens on the port the server before it has just closed. Until a child
        // process that another thread is starting reaches its `exec`, the child holds a copy
        // of every descriptor, that closed listener's too, and the port is still in use: a
        // few tries, 10 ms apart and at most 2 s in all, outlast that.
        var tries = 0
        while true {
            do {
                try await startOnce()
                return
            } catch let error as TetherError where error.code == .bindFailed && (error.underlying as? Errno)?.rawValue == EADDRINUSE && tries < 200 && state.withLock({ $0.port != 0 }) {
                tries += 1
                try await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    private func startOnce() async throws {
        let server = state.withLock { state -> Server? in
            guard state.task == nil else { return nil }
            if state.used {
                var configuration = configuration
                configuration.port = state.port
                state.server = Server(configuration: configuration)
                install(state.server)
            }
            state.used = true
            let server = state.server
            state.task = Task { try await server.run() }
            return server
        }
        guard let server else { return }
        do {
            let address = try await server.listeningAddress()
            state.withLock { state in
                if state.port == 0 { state.port = address.port }
            }
        } catch {
            await stop()
            throw error
        }
    }

    /// Stops the server and returns once ``Tether/Server/run()`` has returned: its peers are
    /// closed and its port is free. Does nothing when no server runs.
    public func stop() async {
        let task = state.withLock { state -> Task<Void, any Error>? in
            defer { state.task = nil }
            return state.task
        }
        guard let task else { return }
        task.cancel()
        _ = try? await task.value
    }

    /// Stops the server, then starts a new one with the same configuration and handlers on
    /// the same port.
    ///
    /// Clients that were connected lose their connection when the old server stops, and
    /// can reconnect once this returns.
    ///
    /// - Throws: What ``start()`` throws.
    public func restart() async throws {
        await stop()
        try await start()
    }

    /// Binds a socket to `address` (port 0: a free one) with `SO_REUSEADDR`, without
    /// listening.
    private static func reserve(_ address: TetherSocketAddress) throws -> (Descriptor, Int) {
        do {
            // Closed when dropped, if anything below fails.
            let socket = Descriptor(adopting: try Syscall.makeSocket(family: address.isIPv6 ? AF_INET6 : AF_INET, type: SocketOptions.streamType))
            try Syscall.setOption(socket.raw, level: SocketOptions.socketLevel, name: SocketOptions.reuseAddress, value: 1)
            if address.isIPv6 {
                try? Syscall.setOption(socket.raw, level: Int32(IPPROTO_IPV6), name: IPV6_V6ONLY, value: 1)
            }
            try Syscall.bindAddress(socket.raw, address)
            return (socket, try Syscall.localAddress(socket.raw).port)
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot reserve port \(address.port) of \(address.ipAddress) for a test server: \(error)", underlying: error)
        }
    }
}

/// Runs `body` with a ``TestServer`` that listens, then stops the server, however `body`
/// ends.
///
/// - Parameters:
///   - configuration: How the server listens. Default ``TestServer/defaultConfiguration``
///     (127.0.0.1, a port the system picks).
///   - handlers: Installs request handlers on every server made. Default: none.
///   - isolation: The actor `body` runs on; the caller's by default.
///   - body: The test, given the running server.
/// - Returns: What `body` returns.
/// - Throws: What ``TestServer/init(configuration:handlers:)``, ``TestServer/start()`` or
///   `body` throws.
@discardableResult
public func withTestServer<Result>(
    configuration: ServerConfiguration = TestServer.defaultConfiguration,
    handlers: @escaping @Sendable (Server) -> Void = { _ in },
    isolation: isolated (any Actor)? = #isolation,
    _ body: (TestServer) async throws -> sending Result
) async throws -> sending Result {
    let server = try TestServer(configuration: configuration, handlers: handlers)
    try await server.start()
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}
