import Testing
import TetherTesting
@testable import Tether

/// Three servers on one in-memory network, nodes n1, n2, n3 of one in-process cluster, at
/// server:9001…9003, running while `body` runs.
private func withThreeNodes<T: Sendable>(
    _ cluster: InProcessCluster,
    on network: TestNetwork,
    _ body: ([Server]) async throws -> T
) async throws -> T {
    func node(_ number: Int, _ servers: [Server], _ body: ([Server]) async throws -> T) async throws -> T {
        guard number <= 3 else { return try await body(servers) }
        return try await withNetworkServer(on: network, port: 9000 + number, configure: {
            $0.mailboxes = MailboxConfiguration(cluster: cluster.node("n\(number)"))
        }, handlers: echoHandlers) { server, _ in
            try await node(number + 1, servers + [server], body)
        }
    }
    return try await node(1, [], body)
}

private func nodeEndpoint(_ number: Int) -> Endpoint {
    Endpoint(host: "server", port: 9000 + number)
}

@Suite("Servers as nodes of a cluster", .timeLimit(.guarded))
struct ClusterNodeTests {
    @Test("a push stored on any node reaches the client on the node that holds it, once, in sequence order")
    func routing() async throws {
        let cluster = InProcessCluster()
        try await withTestNetwork { network in
            try await withThreeNodes(cluster, on: network) { servers in
                let connection = try await Connection.connect(to: nodeEndpoint(3), configuration: session("ann", on: network))
                let notifications = connection.notifications
                #expect(cluster.holder(of: "ann") == "n3")
                var sequences: [UInt64] = []
                for number in 0..<30 {
                    sequences.append(try await servers[number % 3].push(indexed(number), toClient: "ann"))
                }
                #expect(sequences == Array(1...30))
                let received = try await collect(30, from: notifications, "the 30 pushes")
                #expect(received.map(index(of:)) == Array(0..<30))
                #expect(received.map(\.serial) == Array(1...30))
                #expect(servers[2].peer(forClient: "ann") != nil)
                #expect(servers[0].peer(forClient: "ann") == nil)
                #expect(await connection.metrics.duplicateNotifications == 0)
                await connection.close()
            }
        }
    }

    @Test("a client that comes back on another node takes its session over: the old node closes its connection, and delivery goes on from its last sequence with no gap and no duplicate")
    func takeover() async throws {
        let cluster = InProcessCluster()
        try await withTestNetwork { network in
            try await withThreeNodes(cluster, on: network) { servers in
                let first = try await Connection.connect(to: nodeEndpoint(1), configuration: session("bea", on: network) { $0.reconnect = .disabled })
                let firstNotifications = first.notifications
                for number in 0..<5 { try await servers[1].push(indexed(number), toClient: "bea") }
                #expect(try await collect(5, from: firstNotifications, "the first five on n1").map(index(of:)) == Array(0..<5))
                let lastSequence = await first.lastSequence
                #expect(lastSequence == 5)
                // Pushes the client has not had when it moves: they wait in the store.
                for number in 5..<8 { try await servers[0].push(indexed(number), toClient: "bea") }
                let n1Events = servers[0].events
                let moved = try await Connection.connect(to: nodeEndpoint(2), configuration: session("bea", on: network) {
                    $0.session?.resumeAfter = lastSequence
                })
                let notifications = moved.notifications
                let final = try await finalState(of: first)
                #expect(final.reason?.code == .sessionTakenOver)
                _ = try await firstEvent(n1Events, "the stale peer to end on n1") { $0.kind == .peerDisconnected }
                #expect(servers[0].peer(forClient: "bea") == nil)
                #expect(cluster.holder(of: "bea") == "n2")
                for number in 8..<12 { try await servers[number % 3].push(indexed(number), toClient: "bea") }
                let rest = try await collect(7, from: notifications, "the three stored and four live pushes on n2")
                #expect(rest.map(index(of:)) == Array(5..<12))
                #expect(rest.map(\.serial) == Array(6...12))
                #expect(await moved.metrics.duplicateNotifications == 0)
                await moved.close()
            }
        }
    }

    @Test("wake-ups that come late, twice, or past a push not yet written: the node reads what is missing from the store and writes each push once, in order")
    func wakeUpsAreHints() async throws {
        let cluster = InProcessCluster()
        try await withTestNetwork { network in
            try await withThreeNodes(cluster, on: network) { servers in
                let connection = try await Connection.connect(to: nodeEndpoint(2), configuration: session("cal", on: network))
                let notifications = connection.notifications
                let node = try #require(cluster.state.withLock { $0.nodes["n2"] })
                // Stored straight into the shared store: nobody woke n2.
                let drafts = (0..<4).map { MailboxMessage.Draft(clientID: "cal", type: 0x10, payload: Array("\($0)".utf8)) }
                let stored = try await cluster.store.append(drafts, limits: MailboxLimits(), now: network.clock.mailboxClock())
                #expect(stored == [1, 2, 3, 4])
                let pushes = try await cluster.store.messages(for: "cal", after: 0, limit: 10)
                // The third arrives first: the first two are read from the store.
                node.deliver(pushes[2])
                node.deliver(pushes[2])
                node.deliver(pushes[0])
                #expect(try await collect(3, from: notifications, "pushes 1 to 3").map(\.serial) == [1, 2, 3])
                // A wake-up without content, then a late one for what was written already.
                node.wake(clientID: "cal", through: 4)
                node.wake(clientID: "cal", through: 2)
                #expect(try await collect(1, from: notifications, "push 4").map(\.serial) == [4])
                // A live push after all that is the next one.
                #expect(try await servers[0].push(indexed(99), toClient: "cal") == 5)
                let last = try await collect(1, from: notifications, "push 5")
                #expect(last.map(\.serial) == [5])
                #expect(last.map(index(of:)) == [99])
                #expect(await connection.metrics.duplicateNotifications == 0)
                await connection.close()
            }
        }
    }

    @Test("a takeover notice older than the claim a node holds leaves its connection alone")
    func staleTakeover() async throws {
        let cluster = InProcessCluster()
        try await withTestNetwork { network in
            try await withThreeNodes(cluster, on: network) { servers in
                let connection = try await Connection.connect(to: nodeEndpoint(1), configuration: session("dee", on: network))
                let generation = try #require(cluster.state.withLock { $0.presence["dee"]?.generation })
                let node = try #require(cluster.state.withLock { $0.nodes["n1"] })
                #expect(node.sessions == [ClusterSession(clientID: "dee", generation: generation)])
                node.takenOver(clientID: "dee", generation: generation, by: "n2")
                node.takenOver(clientID: "dee", generation: generation - 1, by: "n3")
                node.takenOver(clientID: "nobody", generation: 99, by: "n2")
                // Still connected: a push written after the notices arrives.
                let notifications = connection.notifications
                try await servers[2].push(indexed(1), toClient: "dee")
                #expect(try await collect(1, from: notifications, "the push").map(index(of:)) == [1])
                #expect(servers[0].peer(forClient: "dee") != nil)
                // A newer claim does close it, and the client is told: it does not come back.
                let ended = StateWatcher(connection)
                node.takenOver(clientID: "dee", generation: generation + 1, by: "n2")
                let closed = try await ended.next(.closed)
                #expect(closed.reason?.code == .sessionTakenOver, "\(closed)")
                await connection.close()
            }
        }
    }

    @Test("a takeover notice that comes before the node has registered its own, older claim closes that connection as it registers")
    func takeoverBeforeRegistration() async throws {
        let cluster = InProcessCluster()
        try await withTestNetwork { network in
            try await withThreeNodes(cluster, on: network) { servers in
                cluster.state.withLock { $0.overtaken["fay"] = "n2" }
                let connection = Connection(to: nodeEndpoint(1), configuration: session("fay", on: network) { $0.reconnect = .disabled })
                let final = Task { try await finalState(of: connection) }
                await #expect(throws: TetherError.self) { try await connection.connect() }
                _ = try await final.value
                #expect(servers[0].peer(forClient: "fay") == nil)
                #expect(cluster.holder(of: "fay") == "n2")
                #expect(await servers[0].metrics().sessionsResumed == 0)
            }
        }
    }

    @Test("a broadcast reaches the peers of every node; when the cluster cannot take it, the local peers still get it and the failure is counted")
    func broadcast() async throws {
        let cluster = InProcessCluster()
        try await withTestNetwork { network in
            try await withThreeNodes(cluster, on: network) { servers in
                var streams: [Subscription<Frame>] = []
                var connections: [Connection] = []
                for number in 1...3 {
                    let events = servers[number - 1].events
                    let connection = try await Connection.connect(to: nodeEndpoint(number), configuration: .testing(on: network))
                    _ = try await firstEvent(events, "the peer on n\(number)") { $0.kind == .peerConnected }
                    connections.append(connection)
                    streams.append(connection.notifications)
                }
                let hello = Frame(type: 0x20, serial: 0, payload: Array("all".utf8))
                #expect(await servers[1].broadcast(hello) == 1)
                for (number, stream) in streams.enumerated() {
                    #expect(try await collect(1, from: stream, "the broadcast on n\(number + 1)") == [hello])
                }
                cluster.setBroadcastsFailing(true)
                let local = Frame(type: 0x20, serial: 0, payload: Array("n1 only".utf8))
                #expect(await servers[0].broadcast(local) == 1)
                #expect(try await collect(1, from: streams[0], "the local broadcast") == [local])
                #expect(await servers[0].metrics().clusterBroadcastsFailed == 1)
                for connection in connections { await connection.close() }
            }
        }
    }

    @Test("frames of queueBroadcast reach the peers of every node, in the order of the calls")
    func queuedBroadcasts() async throws {
        let cluster = InProcessCluster()
        try await withTestNetwork { network in
            try await withThreeNodes(cluster, on: network) { servers in
                var streams: [Subscription<Frame>] = []
                var connections: [Connection] = []
                for number in 1...3 {
                    let events = servers[number - 1].events
                    let connection = try await Connection.connect(to: nodeEndpoint(number), configuration: .testing(on: network))
                    _ = try await firstEvent(events, "the peer on n\(number)") { $0.kind == .peerConnected }
                    connections.append(connection)
                    streams.append(connection.notifications)
                }
                let frames = (1...20).map { Frame(type: 0x20, serial: 0, payload: [UInt8($0)]) }
                for frame in frames { #expect(servers[2].queueBroadcast(frame) == 1) }
                for (number, stream) in streams.enumerated() {
                    #expect(try await collect(20, from: stream, "the queued broadcasts on n\(number + 1)") == frames)
                }
                #expect(await servers[2].metrics().clusterBroadcastsFailed == 0)
                for connection in connections { await connection.close() }
            }
        }
    }

    @Test("closing a node's sessions sends its clients back; they resume from the store with nothing lost")
    func closeSessions() async throws {
        let cluster = InProcessCluster()
        try await withTestNetwork { network in
            try await withThreeNodes(cluster, on: network) { servers in
                // Reconnects at once, so no time needs to pass: n1 refuses the hello while it
                // is cut off, n2 takes it.
                let connection = try await Connection.connect(to: nodeEndpoint(1), configuration: session("eve", on: network) {
                    $0.alternateEndpoints = [nodeEndpoint(2)]
                    $0.reconnect.initialDelay = .zero
                })
                let notifications = connection.notifications
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                try await servers[1].push(indexed(0), toClient: "eve")
                // n1 no longer hears of pushes for its clients: it sends them away.
                cluster.setDeaf("n1", true)
                let node = try #require(cluster.state.withLock { $0.nodes["n1"] })
                node.closeSessions(reason: "the cluster is unreachable from n1")
                try await watcher.next(.reconnecting)
                #expect(servers[0].peer(forClient: "eve") == nil)
                try await servers[2].push(indexed(1), toClient: "eve")
                try await watcher.next(.connected)
                #expect(cluster.holder(of: "eve") == "n2")
                try await servers[2].push(indexed(2), toClient: "eve")
                let received = try await collect(3, from: notifications, "the three pushes")
                #expect(received.map(index(of:)) == [0, 1, 2])
                #expect(received.map(\.serial) == [1, 2, 3])
                await connection.close()
            }
        }
    }
}

