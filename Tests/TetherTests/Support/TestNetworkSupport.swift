import TetherTesting
@testable import Tether

/// Runs `server` while `body` runs, then stops it and waits until its `run()` has returned.
///
/// `body` starts once the server listens, on its network or on its socket.
func whileRunning<T: Sendable>(_ server: Server, _ body: () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await server.run() }
        defer { group.cancelAll() }
        _ = try await server.listeningAddress()
        return try await body()
    }
}

/// A server on `network` at `server:9000` (or `port`), with handlers installed by
/// `handlers`, running while `body` runs.
func withNetworkServer<T: Sendable>(
    on network: TestNetwork,
    port: Int = 9000,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    handlers: (Server) -> Void = { _ in },
    _ body: (Server, Endpoint) async throws -> T
) async throws -> T {
    var configuration = ServerConfiguration.testing(on: network, port: port)
    configure(&configuration)
    // Mailboxes set by `configure` age on the network's clock too.
    configuration.use(network)
    let server = Server(configuration: configuration)
    handlers(server)
    return try await whileRunning(server) {
        try await body(server, Endpoint(host: "server", port: port))
    }
}
