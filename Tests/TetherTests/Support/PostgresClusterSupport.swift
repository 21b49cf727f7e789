import Testing
import TetherPostgres
@testable import Tether

/// A server on 127.0.0.1 that is a node of the cluster on a PostgreSQL database, running
/// until ``stop()``.
final class RunningNode: Sendable {
    let name: String
    let cluster: PostgresCluster
    let server: Server
    let endpoint: Endpoint
    private let running: Task<Void, any Error>

    private init(name: String, cluster: PostgresCluster, server: Server, endpoint: Endpoint, running: Task<Void, any Error>) {
        self.name = name
        self.cluster = cluster
        self.server = server
        self.endpoint = endpoint
        self.running = running
    }

    /// Starts node `name` on the database at `url`.
    static func start(
        _ name: String,
        url: String,
        _ change: (inout PostgresClusterConfiguration) -> Void = { _ in },
        server changeServer: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> RunningNode {
        var configuration = PostgresClusterConfiguration(url: url, node: name)
        configuration.database.connectTimeout = .seconds(5)
        change(&configuration)
        let cluster = try await PostgresCluster(configuration: configuration)
        var serverConfiguration = ServerConfiguration(host: "127.0.0.1", port: 0)
        serverConfiguration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        serverConfiguration.mailboxes = .postgres(cluster)
        changeServer(&serverConfiguration)
        let server = Server(configuration: serverConfiguration)
        echoHandlers(server)
        let running = Task { try await server.run() }
        do {
            let address = try await server.listeningAddress()
            return RunningNode(name: name, cluster: cluster, server: server, endpoint: Endpoint(host: "127.0.0.1", port: address.port), running: running)
        } catch {
            running.cancel()
            await cluster.close()
            throw error
        }
    }

    /// Stops the server, waits until it has, and closes its connections to the database.
    func stop() async {
        running.cancel()
        _ = await running.result
        await cluster.close()
    }
}

/// Runs `body` with `count` nodes n1, n2, … on a fresh database, stopping them after.
func withPostgresNodes<T: Sendable>(
    _ count: Int,
    url: String? = nil,
    _ change: @escaping @Sendable (inout PostgresClusterConfiguration) -> Void = { _ in },
    server changeServer: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in },
    _ body: ([RunningNode], String) async throws -> T
) async throws -> T {
    let database: String
    if let url { database = url } else { database = try await PostgresFixture.freshDatabase() }
    var nodes: [RunningNode] = []
    do {
        for number in 1...count {
            nodes.append(try await RunningNode.start("n\(number)", url: database, change, server: changeServer))
        }
        let result = try await body(nodes, database)
        for node in nodes { await node.stop() }
        return result
    } catch {
        for node in nodes { await node.stop() }
        throw error
    }
}

/// A client with a session for `clientID` on `endpoint` (then `alternates`, in turn, after
/// each loss), reconnecting after 20 ms.
func clusterClient(
    _ clientID: String,
    _ endpoint: Endpoint,
    alternates: [Endpoint] = [],
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) async throws -> Connection {
    try await Connection.connect(to: endpoint, configuration: sessionConfiguration(clientID) {
        $0.alternateEndpoints = alternates
        $0.reconnect.maximumAttempts = nil
        change(&$0)
    })
}
