import BenchCore
import Synchronization
import Tether
import TetherPostgres
import TetherRedis

/// Pushes to many identified clients, connected and subscribed, all in this process.
///
/// One or more servers (the nodes of a cluster, when there are several) each listen on
/// their own port of 127.0.0.1; client `c<i>` connects to node `i mod n`. Every round is
/// one frame to every client: `server.push(_:toClients:)` (one store transaction, each
/// client its own next sequence), made by the nodes in turn, or by a `PostgresPublisher`
/// that holds no connection, or, for the reference, the unsequenced `server.broadcast(_:)`.
/// The clock runs from the first push of a phase until every client has counted every
/// push of it; each client checks that its serials are consecutive (or 0, for broadcasts).
/// The first 8 bytes of every payload are the monotonic time of the push call, so each
/// client also records the latency from that call to its receiving the push.
enum PushFanOut {
    /// Who makes the pushes.
    enum Source {
        /// The servers, in turn, round by round.
        case servers
        /// The unsequenced broadcast of the first server, for reference.
        case broadcast
        /// A publisher with no connection, storing in the cluster's database.
        case publisher(PostgresPublisher)
        /// A publisher with no connection, storing on the cluster's Redis.
        case redisPublisher(RedisPublisher)
    }

    struct Phase {
        var pushers: Int
        var rounds: Int
        var seconds: Double
        /// From the push call to the client receiving the push, every push of the phase.
        var latencies: Histogram
        /// How long each push call of the phase took to return (the store's transaction).
        var calls: Histogram
    }

    static func run(nodes mailboxes: [MailboxConfiguration], source: Source, clients: Int, rounds: Int, warmup: Int, size: Int, acknowledgeDelay: Duration?, timeout: Double) async throws -> [Phase] {
        precondition(!mailboxes.isEmpty && size >= 8)
        var servers: [Server] = []
        var serverTasks: [Task<Void, Never>] = []
        var endpoints: [Endpoint] = []
        for configuration in mailboxes {
            var serverConfiguration = ServerConfiguration(host: "127.0.0.1", port: 0)
            serverConfiguration.mailboxes = configuration
            serverConfiguration.maximumConnections = max(serverConfiguration.maximumConnections, clients + 16)
            let server = Server(configuration: serverConfiguration)
            let (task, endpoint) = try await start(server)
            servers.append(server)
            serverTasks.append(task)
            endpoints.append(endpoint)
        }

        let ids = (0..<clients).map { "c\($0)" }
        let connections = try await connect(ids, to: { [endpoints] in endpoints[$0 % endpoints.count] }, acknowledgeDelay: acknowledgeDelay, concurrency: 32)
        let deadline = monotonicNanoseconds() + UInt64(timeout * 1e9)
        for (index, id) in ids.enumerated() {
            while servers[index % servers.count].peer(forClient: id) == nil {
                if monotonicNanoseconds() > deadline {
                    fail("client \(id) is not identified on node \(index % servers.count + 1) \(format(timeout, decimals: 0)) s after connecting")
                }
                try await Task.sleep(for: .milliseconds(1))
            }
        }

        let tally = Tally()
        let latencies = Latencies()
        let calls = Latencies()
        let sequenced: Bool
        if case .broadcast = source { sequenced = false } else { sequenced = true }
        var subscribers: [Task<Int, Never>] = []
        for (id, connection) in zip(ids, connections) {
            let notifications = connection.notifications
            subscribers.append(Task {
                var received = 0
                for await frame in notifications {
                    let now = monotonicNanoseconds()
                    received += 1
                    let expected = sequenced ? UInt32(truncatingIfNeeded: received) : 0
                    if frame.serial != expected {
                        tally.error("client \(id): push \(received) has serial \(frame.serial), not \(expected)")
                        received = Int(frame.serial)
                    }
                    if frame.payload.count != size {
                        tally.error("client \(id): push \(received) has \(frame.payload.count) bytes, not \(size)")
                    } else {
                        let sent = frame.payload.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                        if sent > now { tally.error("client \(id): push \(received) carries a time after its receipt") }
                        latencies.record(now &- sent)
                    }
                    tally.add()
                }
                return received
            })
        }

        let filler = [UInt8](repeating: 0x68, count: size - 8)
        let turns = Turns()
        let nodes = servers
        @Sendable func round() async {
            let sent = monotonicNanoseconds()
            let frame = Frame(type: 0x10, payload: (0..<8).map { UInt8(truncatingIfNeeded: sent >> (56 - 8 * $0)) } + filler)
            do {
                let sequences: [UInt64]
                switch source {
                case .broadcast:
                    let delivered = await nodes[0].broadcast(frame)
                    if delivered != ids.count { fail("broadcast reached \(delivered) of \(ids.count) peers") }
                    return
                case .servers:
                    sequences = try await nodes[turns.next() % nodes.count].push(frame, toClients: ids)
                case .publisher(let publisher):
                    sequences = try await publisher.push(frame, toClients: ids)
                case .redisPublisher(let publisher):
                    sequences = try await publisher.push(frame, toClients: ids)
                }
                calls.record(monotonicNanoseconds() - sent)
                if sequences.count != ids.count { fail("push(_:toClients:) returned \(sequences.count) sequences for \(ids.count) clients") }
            } catch {
                fail("push(_:toClients:) failed: \(error)")
            }
        }

        var target = 0
        var phases: [Phase] = []
        for (pushers, count) in [(1, warmup), (1, rounds), (4, rounds)] where count > 0 {
            let perPusher = (count + pushers - 1) / pushers
            _ = latencies.take()
            _ = calls.take()
            let start = monotonicNanoseconds()
            await withDiscardingTaskGroup { group in
                for _ in 0..<pushers {
                    group.addTask {
                        for _ in 0..<perPusher { await round() }
                    }
                }
            }
            target += perPusher * pushers * clients
            await tally.wait(until: target, timeout: timeout) { [connections] in
                var dropped = 0
                for connection in connections { dropped += await connection.metrics.droppedElements }
                return "\(dropped) dropped by subscribers' buffers"
            }
            let end = monotonicNanoseconds()
            if let failure = tally.failure { fail("push wrong after \(tally.value) received: \(failure.first)") }
            phases.append(Phase(pushers: pushers, rounds: perPusher * pushers, seconds: seconds(from: start, to: end), latencies: latencies.take(), calls: calls.take()))
        }
        if warmup > 0 { phases.removeFirst() }

        await withDiscardingTaskGroup { group in
            for connection in connections {
                group.addTask { await connection.close() }
            }
        }
        let perClient = target / clients
        for (id, subscriber) in zip(ids, subscribers) {
            let received = await subscriber.value
            if received != perClient { fail("client \(id) received \(received) pushes, not \(perClient)") }
        }
        for task in serverTasks { task.cancel() }
        for task in serverTasks { await task.value }
        return phases
    }

    /// Connects a session for each id, `concurrency` at a time, in the order of `ids`, the
    /// one at index `i` to `endpoint(i)`, acknowledging after `acknowledgeDelay` (or 64
    /// pushes) when it is given, else after Tether's default.
    static func connect(_ ids: [String], to endpoint: @escaping @Sendable (Int) -> Endpoint, acknowledgeDelay: Duration?, concurrency: Int) async throws -> [Connection] {
        try await withThrowingTaskGroup(of: (Int, Connection).self) { group in
            var connections = [Connection?](repeating: nil, count: ids.count)
            var next = 0
            func add() {
                let index = next
                next += 1
                var configuration = sessionConfiguration(ids[index])
                if let acknowledgeDelay { configuration.session?.acknowledgeDelay = acknowledgeDelay }
                group.addTask { [configuration] in (index, try await Connection.connect(to: endpoint(index), configuration: configuration)) }
            }
            while next < min(concurrency, ids.count) { add() }
            while let (index, connection) = try await group.next() {
                connections[index] = connection
                if next < ids.count { add() }
            }
            return connections.map { $0! }
        }
    }
}

/// Whose turn it is to push: 0, 1, 2, … across the pushing tasks.
final class Turns: Sendable {
    private let count = Atomic<Int>(0)

    /// The next turn.
    func next() -> Int {
        count.add(1, ordering: .relaxed).oldValue
    }
}

/// One latency histogram that every subscriber records into.
final class Latencies: Sendable {
    private let histogram = Mutex(Histogram())

    /// Records one latency, in nanoseconds.
    func record(_ nanoseconds: UInt64) {
        histogram.withLock { $0.record(nanoseconds) }
    }

    /// The samples recorded since the last call, leaving the histogram empty.
    func take() -> Histogram {
        histogram.withLock { histogram in
            defer { histogram = Histogram() }
            return histogram
        }
    }
}
