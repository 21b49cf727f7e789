import Testing
import TetherPostgres
import TetherRedis
@testable import Tether

/// The cluster engines a scenario runs on.
enum ClusterEngineKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case postgres
    case redis

    var testDescription: String { rawValue }
}

/// A server that is a node of a cluster, on either engine.
protocol ClusterTestNode: Sendable {
    var name: String { get }
    var server: Server { get }
    var endpoint: Endpoint { get }
    func stop() async
    /// The node that holds the client now, as the engine says.
    func holder(ofClient clientID: String) async throws -> String?
}

extension RunningNode: ClusterTestNode {
    func holder(ofClient clientID: String) async throws -> String? { try await cluster.holder(ofClient: clientID) }
}

extension RedisNode: ClusterTestNode {
    func holder(ofClient clientID: String) async throws -> String? { try await cluster.holder(ofClient: clientID) }
}

/// A backend with no connection that publishes to the cluster's channels.
struct ClusterBackend: Sendable {
    fileprivate let publishing: @Sendable ([UInt8], String) async throws -> UInt64
    fileprivate let closing: @Sendable () async -> Void

    /// Runs `body`, then closes the publisher, whatever `body` did.
    fileprivate func closing<T>(after body: () async throws -> T) async throws -> T {
        do {
            let result = try await body()
            await closing()
            return result
        } catch {
            await closing()
            throw error
        }
    }

    @discardableResult
    func publish(_ content: [UInt8], to channel: String) async throws -> UInt64 {
        try await publishing(content, channel)
    }
}

/// Runs `body` with `count` nodes n1, n2, … of a fresh cluster on `kind`, and a backend
/// publisher, stopping them after.
func withClusterNodes<T: Sendable>(
    _ kind: ClusterEngineKind,
    _ count: Int,
    server changeServer: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in },
    _ body: ([any ClusterTestNode], ClusterBackend) async throws -> T
) async throws -> T {
    switch kind {
    case .postgres:
        return try await withPostgresNodes(count, server: changeServer) { nodes, url in
            let publisher = try await PostgresPublisher(url: url)
            let backend = ClusterBackend(publishing: { try await publisher.publish($0, to: $1) }, closing: { await publisher.close() })
            return try await backend.closing(after: { try await body(nodes, backend) })
        }
    case .redis:
        return try await withRedisNodes(count, server: changeServer) { nodes, redis in
            let publisher = try await RedisPublisher(configuration: redis)
            let backend = ClusterBackend(publishing: { try await publisher.publish($0, to: $1) }, closing: { await publisher.close() })
            return try await backend.closing(after: { try await body(nodes, backend) })
        }
    }
}
