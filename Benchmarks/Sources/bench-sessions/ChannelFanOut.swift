import BenchCore
import Tether

/// Publishes to channels with many subscribers, server and clients in this process.
///
/// One server with channels listens on 127.0.0.1; C clients connect, and client `i`
/// subscribes to channel `ch<i mod K>`. Every round publishes one message to each of the K
/// channels with `server.publish(_:to:)`: each message is stored once in its channel and
/// written to its C/K subscribers. The clock runs from the first publication of a phase
/// until every client has every message of it; each client checks that its offsets are
/// consecutive. The first 8 bytes of every message are the monotonic time of the publish
/// call, so each client also records the latency from that call to its subscription.
///
/// With `nodes` (a cluster's mailboxes, one per node), one server per node has channels on
/// the cluster's engine; client `i` connects to node `i mod N`, and each round publishes to
/// the channels at once (up to 16 publications in flight), channel `k` through node
/// `k mod N`: every message goes through the engine to every node.
enum ChannelFanOut {
    struct Phase {
        var rounds: Int
        var seconds: Double
        var latencies: Histogram
    }

    static func run(nodes: [MailboxConfiguration] = [], clients: Int, channels: Int, rounds: Int, warmup: Int, size: Int, timeout: Double) async throws -> [Phase] {
        precondition(size >= 8 && channels >= 1)
        var servers: [Server] = []
        var serverTasks: [Task<Void, Never>] = []
        var endpoints: [Endpoint] = []
        for mailboxes in nodes.isEmpty ? [nil] : nodes.map(Optional.some) {
            var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
            configuration.channels = ChannelConfiguration()
            configuration.mailboxes = mailboxes
            configuration.maximumConnections = max(configuration.maximumConnections, clients + 16)
            let server = Server(configuration: configuration)
            let (serverTask, endpoint) = try await start(server)
            servers.append(server)
            serverTasks.append(serverTask)
            endpoints.append(endpoint)
        }

        var connections: [Connection] = []
        var subscriptions: [ChannelSubscription] = []
        for index in 0..<clients {
            var client = ConnectionConfiguration()
            client.heartbeat = .disabled
            client.channelBufferSize = max(4_096, rounds + warmup)
            let connection = try await Connection.connect(to: endpoints[index % endpoints.count], configuration: client)
            connections.append(connection)
            subscriptions.append(try await connection.subscribe(to: "ch\(index % channels)"))
        }

        let tally = Tally()
        let latencies = Latencies()
        var subscribers: [Task<Int, Never>] = []
        for (index, subscription) in subscriptions.enumerated() {
            subscribers.append(Task {
                var received = 0
                for await event in subscription {
                    let now = monotonicNanoseconds()
                    guard case .message(let message) = event else {
                        tally.error("client \(index): \(event) instead of a message")
                        continue
                    }
                    received += 1
                    if message.offset != UInt64(received) {
                        tally.error("client \(index): message \(received) has offset \(message.offset)")
                        received = Int(message.offset)
                    }
                    if message.payload.count != size {
                        tally.error("client \(index): message \(received) has \(message.payload.count) bytes, not \(size)")
                    } else {
                        let sent = message.payload.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                        latencies.record(now &- sent)
                    }
                    tally.add()
                }
                return received
            })
        }

        let filler = [UInt8](repeating: 0x63, count: size - 8)
        var target = 0
        var phases: [Phase] = []
        for count in [warmup, rounds] where count > 0 {
            _ = latencies.take()
            let start = monotonicNanoseconds()
            for _ in 0..<count {
                if servers.count == 1 {
                    for channel in 0..<channels {
                        let sent = monotonicNanoseconds()
                        let payload = (0..<8).map { UInt8(truncatingIfNeeded: sent >> (56 - 8 * $0)) } + filler
                        try await servers[0].publish(payload, to: "ch\(channel)")
                    }
                    continue
                }
                // In a cluster each publication waits for the database: up to 16 at once,
                // one at a time per channel so that its offsets follow the rounds.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for channel in 0..<channels {
                        if channel >= 16 { try await group.next() }
                        let server = servers[channel % servers.count]
                        group.addTask {
                            let sent = monotonicNanoseconds()
                            let payload = (0..<8).map { UInt8(truncatingIfNeeded: sent >> (56 - 8 * $0)) } + filler
                            try await server.publish(payload, to: "ch\(channel)")
                        }
                    }
                    try await group.waitForAll()
                }
            }
            target += count * clients
            await tally.wait(until: target, timeout: timeout) { [connections] in
                "\(connections.count) clients"
            }
            let end = monotonicNanoseconds()
            if let failure = tally.failure { fail("message wrong after \(tally.value) received: \(failure.first)") }
            phases.append(Phase(rounds: count, seconds: seconds(from: start, to: end), latencies: latencies.take()))
        }
        if warmup > 0 { phases.removeFirst() }

        for connection in connections { await connection.close() }
        let perClient = target / clients
        for (index, subscriber) in subscribers.enumerated() {
            let received = await subscriber.value
            if received != perClient { fail("client \(index) received \(received) messages, not \(perClient)") }
        }
        for serverTask in serverTasks {
            serverTask.cancel()
            await serverTask.value
        }
        return phases
    }
}
