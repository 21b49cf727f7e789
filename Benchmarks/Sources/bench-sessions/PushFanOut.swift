import BenchCore
import Tether

/// Pushes to many identified clients, connected and subscribed, all in this process.
///
/// Every round is one frame to every client: `server.push(_:toClients:)` (one store
/// transaction, each client its own next sequence) or, for the reference, the unsequenced
/// `server.broadcast(_:)`. The clock runs from the first push of a phase until every
/// client has counted every push of it; each client checks that its serials are
/// consecutive (or 0, for broadcasts).
enum PushFanOut {
    enum Mode: String {
        case sqlite, memory, broadcast
    }

    struct Phase {
        var pushers: Int
        var rounds: Int
        var seconds: Double
    }

    static func run(mode: Mode, store: any MailboxStore, clients: Int, rounds: Int, warmup: Int, size: Int, timeout: Double) async throws -> [Phase] {
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.mailboxes = MailboxConfiguration(store: store)
        configuration.maximumConnections = max(configuration.maximumConnections, clients + 16)
        let server = Server(configuration: configuration)
        let (serverTask, endpoint) = try await start(server)

        let ids = (0..<clients).map { "c\($0)" }
        let connections = try await connect(ids, to: endpoint, concurrency: 32)
        let deadline = monotonicNanoseconds() + UInt64(timeout * 1e9)
        for id in ids {
            while server.peer(forClient: id) == nil {
                if monotonicNanoseconds() > deadline {
                    fail("client \(id) is not identified on the server \(format(timeout, decimals: 0)) s after connecting")
                }
                try await Task.sleep(for: .milliseconds(1))
            }
        }

        let tally = Tally()
        let sequenced = mode != .broadcast
        var subscribers: [Task<Int, Never>] = []
        for (id, connection) in zip(ids, connections) {
            let notifications = connection.notifications
            subscribers.append(Task {
                var received = 0
                for await frame in notifications {
                    received += 1
                    let expected = sequenced ? UInt32(truncatingIfNeeded: received) : 0
                    if frame.serial != expected {
                        tally.error("client \(id): push \(received) has serial \(frame.serial), not \(expected)")
                        received = Int(frame.serial)
                    }
                    if frame.payload.count != size {
                        tally.error("client \(id): push \(received) has \(frame.payload.count) bytes, not \(size)")
                    }
                    tally.add()
                }
                return received
            })
        }

        let frame = Frame(type: 0x10, payload: [UInt8](repeating: 0x68, count: size))
        @Sendable func round() async {
            if sequenced {
                do {
                    let sequences = try await server.push(frame, toClients: ids)
                    if sequences.count != ids.count { fail("push(_:toClients:) returned \(sequences.count) sequences for \(ids.count) clients") }
                } catch {
                    fail("push(_:toClients:) failed: \(error)")
                }
            } else {
                let delivered = await server.broadcast(frame)
                if delivered != ids.count { fail("broadcast reached \(delivered) of \(ids.count) peers") }
            }
        }

        var target = 0
        var phases: [Phase] = []
        for (pushers, count) in [(1, warmup), (1, rounds), (4, rounds)] where count > 0 {
            let perPusher = (count + pushers - 1) / pushers
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
            phases.append(Phase(pushers: pushers, rounds: perPusher * pushers, seconds: seconds(from: start, to: end)))
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
        serverTask.cancel()
        await serverTask.value
        return phases
    }

    /// Connects a session for each id, `concurrency` at a time, in the order of `ids`.
    static func connect(_ ids: [String], to endpoint: Endpoint, concurrency: Int) async throws -> [Connection] {
        try await withThrowingTaskGroup(of: (Int, Connection).self) { group in
            var connections = [Connection?](repeating: nil, count: ids.count)
            var next = 0
            func add() {
                let index = next
                next += 1
                group.addTask { (index, try await Connection.connect(to: endpoint, configuration: sessionConfiguration(ids[index]))) }
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
