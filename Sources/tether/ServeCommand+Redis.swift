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

/// A backend's publisher on the cluster's engine, for `tether push` and `tether publish`.
enum BackendPublisher {
    case postgres(PostgresPublisher)
    case redis(RedisPublisher)

    /// Connects to the engine; an error comes on one line.
    static func connect(postgres: PostgresOptions?, redis: RedisOptions?, limits: MailboxLimits = MailboxLimits()) async throws(TetherError) -> BackendPublisher {
        do throws(TetherError) {
            if let redis { return .redis(try await RedisPublisher(configuration: redis.configuration, limits: limits)) }
            guard let postgres else { throw TetherError(code: .invalidArgument, message: "no cluster to publish to") }
            return .postgres(try await PostgresPublisher(configuration: PostgresConfiguration(url: postgres.url), limits: limits))
        } catch {
            throw error.onOneLine
        }
    }

    func push(_ frame: Frame, toClients clientIDs: [String], timeToLive: Duration?) async throws(TetherError) -> [UInt64] {
        switch self {
        case .postgres(let publisher): try await publisher.push(frame, toClients: clientIDs, timeToLive: timeToLive)
        case .redis(let publisher): try await publisher.push(frame, toClients: clientIDs, timeToLive: timeToLive)
        }
    }

    func publish(_ content: [UInt8], to channel: String, timeToLive: Duration?) async throws(TetherError) -> UInt64 {
        switch self {
        case .postgres(let publisher): try await publisher.publish(content, to: channel, timeToLive: timeToLive)
        case .redis(let publisher): try await publisher.publish(content, to: channel, timeToLive: timeToLive)
        }
    }

    func close() async {
        switch self {
        case .postgres(let publisher): await publisher.close()
        case .redis(let publisher): await publisher.close()
        }
    }

    /// Runs `body` with the publisher, closing it after; an error comes on one line.
    func run(_ body: (BackendPublisher) async throws -> Void) async throws -> ExitStatus {
        do {
            try await body(self)
        } catch {
            await close()
            throw (error as? TetherError)?.onOneLine ?? error
        }
        await close()
        return .success
    }
}
