import Synchronization
import Testing
@testable import TetherRedis
import TetherTesting
@testable import Tether

/// A server on 127.0.0.1 that is a node of the cluster on a Redis server, running until
/// ``stop()``.
final class RedisNode: Sendable {
    let name: String
    let cluster: RedisCluster
    let server: Server
    let endpoint: Endpoint
    private let running: Task<Void, any Error>

    private init(name: String, cluster: RedisCluster, server: Server, endpoint: Endpoint, running: Task<Void, any Error>) {
        self.name = name
        self.cluster = cluster
        self.server = server
        self.endpoint = endpoint
        self.running = running
    }

    static func start(
        _ name: String,
        redis: RedisConfiguration,
        _ change: (inout RedisClusterConfiguration) -> Void = { _ in },
        server changeServer: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> RedisNode {
        var configuration = RedisClusterConfiguration(redis: redis, node: name)
        configuration.heartbeatInterval = .milliseconds(200)
        change(&configuration)
        let cluster = try await RedisCluster(configuration: configuration)
        var serverConfiguration = ServerConfiguration(host: "127.0.0.1", port: 0)
        serverConfiguration.handshakeTimeout = nil
        serverConfiguration.mailboxes = .redis(cluster)
        changeServer(&serverConfiguration)
        let server = Server(configuration: serverConfiguration)
        echoHandlers(server)
        let running = Task { try await server.run() }
        do {
            let address = try await server.listeningAddress()
            return RedisNode(name: name, cluster: cluster, server: server, endpoint: Endpoint(host: "127.0.0.1", port: address.port), running: running)
        } catch {
            running.cancel()
            await cluster.close()
            throw error
        }
    }

    func stop() async {
        running.cancel()
        _ = await running.result
        await cluster.close()
    }
}

/// Runs `body` with `count` nodes n1, n2, … on `redis` (a fresh part of the shared server
/// by default), stopping them after.
func withRedisNodes<T: Sendable>(
    _ count: Int,
    redis: RedisConfiguration? = nil,
    _ change: @escaping @Sendable (inout RedisClusterConfiguration) -> Void = { _ in },
    server changeServer: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in },
    _ body: ([RedisNode], RedisConfiguration) async throws -> T
) async throws -> T {
    let configuration: RedisConfiguration
    if let redis { configuration = redis } else { configuration = try await RedisFixture.freshConfiguration() }
    var nodes: [RedisNode] = []
    do {
        for number in 1...count {
            nodes.append(try await RedisNode.start("n\(number)", redis: configuration, change, server: changeServer))
        }
        let result = try await body(nodes, configuration)
        for node in nodes { await node.stop() }
        return result
    } catch {
        for node in nodes { await node.stop() }
        throw error
    }
}

@Suite("A cluster of servers on Redis: its own failures", .timeLimit(.guarded))
struct RedisClusterTests {
    @Test("Redis restarted mid-stream with its append-only file: pushes that failed are retried, none stored is lost, and routing resumes between nodes")
    func restartWithPersistence() async throws {
        let redis = try await RedisInstance.start(persistent: true)
        let configuration = try RedisConfiguration(url: redis.url)
        try await withRedisNodes(2, redis: configuration, { $0.partitionGrace = .seconds(60) }) { nodes, _ in
            let client = try await clusterClient("rita", nodes[0].endpoint)
            let notifications = client.notifications
            let receiving = Task { try await TetherTesting.collect(60, from: notifications, within: .seconds(90)) }
            var failures = 0
            for push in 0..<60 {
                if push == 30 {
                    await redis.kill()
                    await #expect {
                        try await nodes[1].server.push(indexed(push), toClient: "rita")
                    } throws: { error in
                        (error as? TetherError)?.message.contains("Redis at 127.0.0.1:\(redis.port)") == true
                    }
                    try await redis.restart()
                }
                // Pushes go through n2; the client is on n1: every one crosses a notice.
                while true {
                    do {
                        #expect(try await nodes[1].server.push(indexed(push), toClient: "rita") == UInt64(push + 1))
                        break
                    } catch let error as TetherError where error.code == .storeFailed {
                        failures += 1
                        try #require(failures <= 4, "pushes kept failing after the restart: \(error.message)")
                    }
                }
            }
            let frames = try await receiving.value
            #expect(frames.map(index(of:)) == Array(0..<60))
            #expect(frames.map(\.serial) == Array(1...60))
            await client.close()
        }
    }

    @Test("Redis restarted without persistence while a client is away: its history is gone, the client is told so and gets the new pushes from 1; routing resumes")
    func restartWithoutPersistence() async throws {
        let redis = try await RedisInstance.start()
        let configuration = try RedisConfiguration(url: redis.url)
        try await withRedisNodes(2, redis: configuration, { $0.partitionGrace = .seconds(60) }) { nodes, _ in
            let client = try await clusterClient("wade", nodes[0].endpoint) { $0.session?.acknowledgesAutomatically = false }
            let watcher = StateWatcher(client)
            let notifications = client.notifications
            let events = client.sessionEvents
            for number in 0..<5 { try await nodes[1].server.push(indexed(number), toClient: "wade") }
            #expect(try await TetherTesting.collect(5, from: notifications, within: .seconds(10)).map(\.serial) == [1, 2, 3, 4, 5])
            let before = await client.sessionPosition
            await client.suspend()
            try await watcher.next(.suspended)
            await redis.kill()
            try await redis.restart()
            var pushed = 0
            var failures = 0
            while pushed < 8 {
                do {
                    try await nodes[1].server.push(indexed(100 + pushed), toClient: "wade")
                    pushed += 1
                } catch let error as TetherError where error.code == .storeFailed {
                    failures += 1
                    try #require(failures <= 4, "pushes kept failing after the restart: \(error.message)")
                }
            }
            await client.resume()
            try await watcher.next(.connected)
            let frames = try await TetherTesting.collect(8, from: notifications, within: .seconds(10))
            #expect(frames.map(index(of:)) == Array(100..<108))
            #expect(frames.map(\.serial) == Array(1...8))
            #expect(try await TetherTesting.collect(2, from: events, within: .seconds(10)).map(\.kind) == [.reset, .resumed])
            #expect(await client.sessionPosition.epoch != before.epoch)
            // Routing works again: a push on n2 reaches the client on n1.
            try await nodes[1].server.push(indexed(200), toClient: "wade")
            #expect(try await TetherTesting.collect(1, from: notifications, within: .seconds(10)).map(index(of:)) == [200])
            await client.close()
        }
    }

    @Test("a node cut off from Redis closes its clients' connections after the grace; they resume on a node that hears their pushes, and nothing is lost")
    func cutOffNode() async throws {
        let redis = try await RedisFixture.freshConfiguration()
        let proxy = try FaultProxy(upstream: Endpoint(host: "127.0.0.1", port: redis.port))
        var proxied = redis
        proxied.port = proxy.port
        proxied.connectTimeout = .seconds(1)
        proxied.commandTimeout = .seconds(1)
        let n1 = try await RedisNode.start("n1", redis: proxied) {
            $0.partitionGrace = .milliseconds(300)
            $0.reconnectDelay = .milliseconds(50)
        }
        let n2 = try await RedisNode.start("n2", redis: redis)
        do {
            let client = try await clusterClient("cora", n1.endpoint, alternates: [n2.endpoint])
            let notifications = client.notifications
            let watcher = StateWatcher(client)
            try await n2.server.push(indexed(0), toClient: "cora")
            #expect(try await TetherTesting.collect(1, from: notifications, within: .seconds(10)).map(index(of:)) == [0])
            proxy.refusesConnections = true
            proxy.cutAll()
            try await n2.server.push(indexed(1), toClient: "cora")
            try await watcher.next(.reconnecting, within: .seconds(20))
            try await watcher.next(.connected, within: .seconds(20))
            #expect(try await n2.cluster.holder(ofClient: "cora") == "n2")
            #expect(n1.server.peer(forClient: "cora") == nil)
            try await n2.server.push(indexed(2), toClient: "cora")
            let rest = try await TetherTesting.collect(2, from: notifications, within: .seconds(10))
            #expect(rest.map(index(of:)) == [1, 2])
            #expect(rest.map(\.serial) == [2, 3])
            await client.close()
        } catch {
            await n1.stop()
            await n2.stop()
            await proxy.stop()
            throw error
        }
        proxy.refusesConnections = false
        await n1.stop()
        await n2.stop()
        await proxy.stop()
    }

    @Test("notices read back as written; malformed ones read as nothing; a node name that cannot be used is refused before anything connects")
    func noticesAndNames() async throws {
        var reader = try #require(NoticeReader(Array("12:5:alicerest".utf8)))
        #expect(reader.number(until: UInt8(ascii: ":")) == 12)
        #expect(reader.counted() == "alice")
        #expect(reader.rest == Array("rest".utf8))
        var short = try #require(NoticeReader(Array("9:abc".utf8)))
        #expect(short.counted() == nil)
        var letters = try #require(NoticeReader(Array("x1:".utf8)))
        #expect(letters.number(until: UInt8(ascii: ":")) == nil)
        var huge = try #require(NoticeReader(Array("99999999999999999999:".utf8)))
        #expect(huge.number(until: UInt8(ascii: ":")) == nil)
        let error = await #expect(throws: TetherError.self) {
            _ = try await RedisCluster(configuration: RedisClusterConfiguration(redis: RedisConfiguration(host: "127.0.0.1", port: 1), node: "bad name"))
        }
        #expect(error?.code == .invalidArgument)
    }
}
