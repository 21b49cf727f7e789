#if canImport(Glibc)
import Glibc
#endif
@testable import Tether

/// A server that can be stopped and started again on the same port, for reconnect tests.
final class RestartableServer: Sendable {
    let port: Int
    private let running = Lock<(server: Server, task: Task<Void, any Error>)?>(nil)
    private let install: @Sendable (Server) -> Void
    private let configure: @Sendable (inout ServerConfiguration) throws -> Void
    /// A socket bound to the port (with `SO_REUSEADDR`, never listening) for as long as this
    /// object lives: the system never hands a bound port out as the source port of another
    /// test's outgoing connection, which would stop the server from binding it again. While
    /// the server is down, connections to the port are refused.
    private let reservation: Int32

    /// Starts a server on a free port of 127.0.0.1.
    init(
        configure: @escaping @Sendable (inout ServerConfiguration) throws -> Void = { _ in },
        handlers: @escaping @Sendable (Server) -> Void = echoHandlers
    ) async throws {
        install = handlers
        self.configure = configure
        let (fd, port) = try Self.reservePort()
        reservation = fd
        self.port = port
        do {
            try await start()
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    deinit {
        Glibc.close(reservation)
    }

    /// Binds a socket to a free port of 127.0.0.1, without listening.
    private static func reservePort() throws -> (Int32, Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(4))
        let address = SocketAddress(ipAddress: "127.0.0.1", port: 0)!
        guard address.withSockAddr({ bind(fd, $0, $1) }) == 0 else {
            let error = Errno.current
            Glibc.close(fd)
            throw error
        }
        do {
            return (fd, try Syscall.localAddress(fd).port)
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    var endpoint: Endpoint { Endpoint(host: "127.0.0.1", port: port) }
    var server: Server? { running.withLock { $0?.server } }

    /// Stops the server (its peers are closed) and waits until it has.
    func stop() async throws {
        guard let current = running.withLock({ slot -> (server: Server, task: Task<Void, any Error>)? in
            defer { slot = nil }
            return slot
        }) else { return }
        current.task.cancel()
        try await bounded("the server to stop") { try await current.task.value }
    }

    /// Starts a new server on the same port.
    func start() async throws {
        var configuration = ServerConfiguration(port: port)
        try configure(&configuration)
        let server = Server(configuration: configuration)
        install(server)
        let task = Task { try await server.run() }
        _ = try await bounded("the server to listen") { try await server.listeningAddress() }
        running.withLock { $0 = (server, task) }
    }
}
