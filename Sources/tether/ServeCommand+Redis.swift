import Tether
import TetherPostgres
import TetherRedis

/// The cluster a `tether serve` is a node of: on PostgreSQL (`--postgres`) or on Redis
/// (`--redis`).
enum ClusterEngine: Sendable {
    case postgres(PostgresCluster, endpoint: String)
    case redis(RedisCluster, endpoint: String)

    var cluster: any SessionCluster {
        switch self {
        case .postgres(let cluster, _): cluster
        case .redis(let cluster, _): cluster
        }
    }

    /// What the `listening on` line says of the cluster.
    var notes: [String] {
        switch self {
        case .postgres(let cluster, let endpoint): ["node \(cluster.nodeName)", "PostgreSQL \(endpoint)"]
        case .redis(let cluster, let endpoint): ["node \(cluster.nodeName)", "Redis \(endpoint)"]
        }
    }

    /// Logs when the engine's server stops answering, and when it answers again.
    func watch() async throws {
        switch self {
        case .postgres(let cluster, let endpoint):
            try await ServeCommand.watchDatabase(of: cluster, at: endpoint)
        case .redis(let cluster, let endpoint):
            var lost = false
            while true {
                try await Task.sleep(for: ServeCommand.databaseCheckInterval)
                do {
                    try await cluster.check()
                    if lost {
                        Console.err("Redis at \(endpoint) answers again")
                        lost = false
                    }
                } catch {
                    if !lost {
                        Console.err("lost Redis at \(endpoint): \(oneLine(error.message)); pushes and hellos fail until it is back")
                        lost = true
                    }
                }
            }
        }
    }

    func close() async {
        switch self {
        case .postgres(let cluster, _): await cluster.close()
        case .redis(let cluster, _): await cluster.close()
        }
    }
}

/// `--redis URL`: the Redis server of a cluster, checked when the arguments are read.
struct RedisOptions: Sendable {
    var configuration: RedisConfiguration
    var url: String

    /// `--redis URL`; `nil` when it is absent.
    ///
    /// - Throws: ``ArgumentError`` for a URL that is not `redis://…`.
    static func parse(_ arguments: inout Arguments) throws(ArgumentError) -> RedisOptions? {
        guard let url = try arguments.option("--redis") else { return nil }
        do {
            return RedisOptions(configuration: try RedisConfiguration(url: url), url: url)
        } catch {
            throw ArgumentError("--redis: \(error.message)")
        }
    }

    /// `HOST:PORT`, for messages: never the password.
    var endpoint: String {
        configuration.host.contains(":") ? "[\(configuration.host)]:\(configuration.port)" : "\(configuration.host):\(configuration.port)"
    }
}
