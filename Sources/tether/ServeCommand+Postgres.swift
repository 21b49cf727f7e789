import Tether
import TetherPostgres

extension ServeCommand {
    /// How often a node checks that its database answers, to log when it stops and when it
    /// answers again.
    static let databaseCheckInterval: Duration = .seconds(2)

    /// Connects to the cluster's database as this server's node.
    ///
    /// - Throws: ``TetherError`` with its message on one line when the database is
    ///   unreachable or refuses the tables.
    static func cluster(_ options: PostgresOptions, port: Int) async throws(TetherError) -> PostgresCluster {
        do {
            return try await PostgresCluster(url: options.url, node: options.nodeName(port: port))
        } catch {
            throw error.onOneLine
        }
    }

    /// Logs when the database stops answering this node, and when it answers again, until
    /// cancelled. Meanwhile pushes and hellos fail; past the cluster's partition grace the
    /// node closes its clients' connections (their peers' lines say why).
    static func watchDatabase(of cluster: PostgresCluster, at endpoint: String) async throws {
        var lost = false
        while true {
            try await Task.sleep(for: databaseCheckInterval)
            do {
                _ = try await cluster.liveNodes()
                if lost {
                    Console.err("PostgreSQL at \(endpoint) answers again")
                    lost = false
                }
            } catch {
                if !lost {
                    Console.err("lost PostgreSQL at \(endpoint): \(oneLine(error.message)); pushes and hellos fail until it is back")
                    lost = true
                }
            }
        }
    }
}

extension Optional {
    /// `map` with an asynchronous transform.
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
