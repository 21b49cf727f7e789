import Synchronization
import Testing
@testable import TetherPostgres
import TetherTesting
@testable import Tether

/// What one client received: the indexes of its pushes and their serials, in order.
private actor Received {
    var indexes: [String: [Int]] = [:]
    var serials: [String: [UInt32]] = [:]

    func add(_ frame: Frame, for clientID: String) {
        indexes[clientID, default: []].append(index(of: frame) ?? -1)
        serials[clientID, default: []].append(frame.serial)
    }
}

@Suite("A cluster of servers, on PostgreSQL (and on Redis where a test takes an engine)", .timeLimit(.guarded))
struct PostgresClusterTests {
    @Test("three nodes, 100 clients, 1,000 pushes from every node; 10 clients moved mid-stream and one node stopped: each client gets exactly its pushes, in order, with no gap and no duplicate", arguments: ClusterEngineKind.allCases)
    func threeNodes(kind: ClusterEngineKind) async throws {
        try await withClusterNodes(kind, 3) { nodes, _ in
            let endpoints = nodes.map(\.endpoint)
            var connections: [String: Connection] = [:]
            var receivers: [Task<[Frame], any Error>] = []
            for number in 0..<100 {
                let clientID = String(format: "client-%03d", number)
                let home = number % 3
                let alternates = (1...2).map { endpoints[(home + $0) % 3] }
                let connection = try await clusterClient(clientID, endpoints[home], alternates: alternates)
                let notifications = connection.notifications
                receivers.append(Task { try await TetherTesting.collect(30, from: notifications, within: .seconds(60)) })
                connections[clientID] = connection
            }
            var live = [0, 1, 2]
            for push in 0..<3000 {
                let clientID = String(format: "client-%03d", push % 100)
                if push == 900 {
                    // Ten clients are sent away by the node they are on; each comes back on
                    // another node and takes its session over.
                    for moved in 0..<10 {
                        let id = String(format: "client-%03d", moved * 7)
                        for node in nodes {
                            for peer in node.server.peers where await peer.clientID == id { await peer.close() }
                        }
                    }
                }
                if push == 1800 {
                    // n3 stops with its clients connected: they come back on n1 or n2.
                    await nodes[2].stop()
                    live = [0, 1]
                }
                let node = nodes[live[push % live.count]]
                try await node.server.push(indexed(push), toClient: clientID)
            }
            for number in 0..<100 {
                let frames = try await receivers[number].value
                let expected = Array(stride(from: number, to: 3000, by: 100))
                #expect(frames.map(index(of:)) == expected, "client \(number)")
                #expect(frames.map(\.serial) == Array(1...30), "client \(number)")
            }
            var duplicates = 0
            for connection in connections.values {
                duplicates += await connection.metrics.duplicateNotifications
                await connection.close()
            }
            Attachment.record("duplicates dropped by clients: \(duplicates)", named: "duplicates.txt")
        }
    }

    @Test("a publisher with no server pushes to a connected client on any node and to an offline one, who gets it when it comes")
    func publisher() async throws {
        try await withPostgresNodes(2) { nodes, url in
            let publisher = try await PostgresPublisher(url: url)
            let online = try await clusterClient("on", nodes[1].endpoint)
            let notifications = online.notifications
            #expect(try await publisher.push(indexed(1), toClient: "on") == 1)
            #expect(try await publisher.push(indexed(2), toClients: ["on", "off", "off"]) == [2, 1, 2])
            #expect(try await TetherTesting.collect(2, from: notifications, within: .seconds(10)).map(index(of:)) == [1, 2])
            let offline = try await clusterClient("off", nodes[0].endpoint)
            let later = offline.notifications
            let frames = try await TetherTesting.collect(2, from: later, within: .seconds(10))
            #expect(frames.map(index(of:)) == [2, 2])
            #expect(frames.map(\.serial) == [1, 2])
            #expect(try await nodes[0].cluster.holder(ofClient: "off") == "n1")
            #expect(try await nodes[0].cluster.holder(ofClient: "on") == "n2")
            #expect(try await nodes[0].cluster.holder(ofClient: "nobody") == nil)
            await online.close()
            await offline.close()
            await publisher.close()
        }
    }

    @Test("pushes larger than a notice are read from the mailbox by the node that holds the client; broadcasts of every size reach every node's peers", arguments: ClusterEngineKind.allCases)
    func largePayloads(kind: ClusterEngineKind) async throws {
        try await withClusterNodes(kind, 2) { nodes, _ in
            let client = try await clusterClient("big", nodes[1].endpoint)
            let notifications = client.notifications
            let large = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            try await nodes[0].server.push(Frame(type: 0x10, serial: 0, payload: large), toClient: "big")
            try await nodes[0].server.push(indexed(7), toClient: "big")
            let frames = try await TetherTesting.collect(2, from: notifications, within: .seconds(10))
            #expect(frames.map(\.payload) == [large, Array("7".utf8)])
            #expect(frames.map(\.serial) == [1, 2])
            // A broadcast reaches the peers attached when it arrives: wait for this one.
            let events = nodes[1].server.events
            let plain = try await Connection.connect(to: nodes[1].endpoint, configuration: reconnecting(after: .milliseconds(20)))
            let broadcasts = plain.notifications
            _ = try await firstEvent(events, "the plain peer on n2") { $0.kind == .peerConnected }
            let small = Frame(type: 0x20, serial: 0, payload: Array("hi".utf8))
            let huge = Frame(type: 0x21, serial: 0, payload: large)
            #expect(await nodes[0].server.broadcast(small) == 0)
            #expect(await nodes[0].server.broadcast(huge) == 0)
            let received = try await TetherTesting.collect(2, from: broadcasts, within: .seconds(10))
            #expect(received == [small, huge])
            #expect(try await nodes[0].holder(ofClient: "big") == "n2")
            await client.close()
            await plain.close()
        }
    }

    @Test("PostgreSQL restarted mid-stream: pushes that failed are retried, none acknowledged as stored is lost, and routing resumes between nodes")
    func databaseRestart() async throws {
        let instance = try await PostgresInstance.start()
        let url = instance.url()
        do {
            try await withPostgresNodes(2, url: url, { $0.partitionGrace = .seconds(60) }) { nodes, _ in
                let client = try await clusterClient("rita", nodes[0].endpoint)
                let notifications = client.notifications
                let receiving = Task { try await TetherTesting.collect(60, from: notifications, within: .seconds(90)) }
                var failures = 0
                for push in 0..<60 {
                    if push == 30 {
                        try await instance.stop()
                        // While the database is down a push fails, saying where, and stores nothing.
                        await #expect {
                            try await nodes[1].server.push(indexed(push), toClient: "rita")
                        } throws: { error in
                            (error as? TetherError)?.code == .storeFailed
                                && (error as? TetherError)?.message.contains("PostgreSQL at 127.0.0.1:\(instance.port)") == true
                        }
                        try await instance.restart()
                    }
                    // Pushes go through n2; the client is on n1: every one crosses a notice.
                    while true {
                        do {
                            let sequence = try await nodes[1].server.push(indexed(push), toClient: "rita")
                            #expect(sequence == UInt64(push + 1))
                            break
                        } catch let error as TetherError where error.code == .storeFailed {
                            failures += 1
                            #expect(error.message.contains("PostgreSQL at 127.0.0.1:\(instance.port)"), "\(error.message)")
                            // Each pooled connection that broke fails one call, then reconnects.
                            try #require(failures <= 4, "pushes kept failing after the restart: \(error.message)")
                        }
                    }
                }
                let frames = try await receiving.value
                #expect(frames.map(index(of:)) == Array(0..<60))
                #expect(frames.map(\.serial) == Array(1...60))
                Attachment.record("pushes that failed and were retried: \(failures)", named: "failures.txt")
                await client.close()
            }
            try await instance.stop()
        } catch {
            try? await instance.stop()
            throw error
        }
    }

    @Test("a node cut off from the database closes its clients' connections after the grace; they resume on a node that hears their pushes, and nothing is lost")
    func cutOffNode() async throws {
        let url = try await PostgresFixture.freshDatabase()
        let port = try #require(Int(url.split(separator: ":").last?.split(separator: "/").first ?? ""))
        let proxy = try FaultProxy(upstream: Endpoint(host: "127.0.0.1", port: port))
        let proxied = url.replacingOccurrences(of: "127.0.0.1:\(port)", with: "127.0.0.1:\(proxy.port)")
        let n1 = try await RunningNode.start("n1", url: proxied) {
            $0.partitionGrace = .milliseconds(300)
            $0.database.connectTimeout = .seconds(1)
            $0.database.reconnectDelay = .milliseconds(50)
        }
        let n2 = try await RunningNode.start("n2", url: url)
        do {
            let client = try await clusterClient("cora", n1.endpoint, alternates: [n2.endpoint])
            let notifications = client.notifications
            let watcher = StateWatcher(client)
            try await n2.server.push(indexed(0), toClient: "cora")
            #expect(try await TetherTesting.collect(1, from: notifications, within: .seconds(10)).map(index(of:)) == [0])
            // n1 loses the database: it can no longer hear of cora's pushes.
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

    @Test("the cluster's mailboxes wiped while a client is away, then 8 pushes: the client is told its history is gone and gets all 8 from 1")
    func wipedHistory() async throws {
        try await withPostgresNodes(2) { nodes, url in
            // No acknowledgements: one of the old history still on its way when the tables
            // are emptied would delete pushes of the new one (they carry no epoch).
            let client = try await clusterClient("wade", nodes[0].endpoint) { $0.session?.acknowledgesAutomatically = false }
            let watcher = StateWatcher(client)
            let notifications = client.notifications
            let events = client.sessionEvents
            for number in 0..<5 { try await nodes[1].server.push(indexed(number), toClient: "wade") }
            #expect(try await TetherTesting.collect(5, from: notifications, within: .seconds(10)).map(\.serial) == [1, 2, 3, 4, 5])
            let before = await client.sessionPosition
            #expect(before.lastSequence == 5)
            await client.suspend()
            try await watcher.next(.suspended)
            // An operator empties the tables: every mailbox, and its sequence, is gone.
            let database = PostgresDatabase(configuration: PostgresConfiguration(url: url))
            try await database.transaction { session in
                try session.execute("TRUNCATE tether_mailboxes, tether_messages")
                try session.execute("UPDATE tether_totals SET mailboxes = 0, stored_bytes = 0")
            }
            await database.close()
            for number in 100..<108 { try await nodes[1].server.push(indexed(number), toClient: "wade") }
            await client.resume()
            try await watcher.next(.connected)
            let frames = try await TetherTesting.collect(8, from: notifications, within: .seconds(10))
            #expect(frames.map(index(of:)) == Array(100..<108))
            #expect(frames.map(\.serial) == Array(1...8))
            let welcome = try await TetherTesting.collect(2, from: events, within: .seconds(10))
            #expect(welcome.map(\.kind) == [.reset, .resumed])
            let after = await client.sessionPosition
            #expect(after.lastSequence == 8)
            #expect(after.epoch != before.epoch)
            await client.close()
        }
    }

    @Test("a node name that cannot name a channel is refused before anything connects")
    func badNodeName() async throws {
        await #expect(throws: TetherError.self) {
            _ = try await PostgresCluster(url: "postgresql://nobody@127.0.0.1:1/none", node: "has space")
        }
    }
}

@Suite("Notices between nodes")
struct PostgresNoticeTests {
    @Test("each notice reads back as written; malformed ones read as nothing")
    func roundTrip() throws {
        let push = MailboxMessage(clientID: "a b\u{1F600}", sequence: 42, type: 0x10, payload: [0, 1, 255], storedAt: MailboxTime(millisecondsSince1970: 1_700_000_000_123))
        let notices: [PostgresNotice] = [
            .push(push),
            .wake(clientID: "x y", through: 9),
            .takeover(clientID: "c", generation: 7, node: "gw-2"),
            .broadcast(origin: "n1", type: 3, payload: Array("hello".utf8)),
            .storedBroadcast(origin: "n2", id: 12),
            .channelMessage(ChannelRecord(channel: "room/42", epoch: "e1", offset: 5, storedAt: MailboxTime(millisecondsSince1970: 1_700_000_000_000), expiresAt: nil, content: [1, 2])),
            .channelMessage(ChannelRecord(channel: "r", epoch: "e1", offset: 6, storedAt: MailboxTime(millisecondsSince1970: 1), expiresAt: MailboxTime(millisecondsSince1970: 2), content: [])),
            .channelStored(channel: "room/42", epoch: "e1", through: 99),
            .presence(origin: "n1", ChannelPresenceChange(channel: "room", member: ChannelMember(connection: "n1/peer#3", clientID: "a b", info: ["name": "A"]), joined: true)),
            .presence(origin: "n2", ChannelPresenceChange(channel: "room", member: ChannelMember(connection: "n2/peer#4", clientID: nil, info: nil), joined: false)),
        ]
        for notice in notices {
            #expect(PostgresNotice(notice.text) == notice)
        }
        for bad in ["", "p 1 2", "w x eA==", "t 1 !!! n", "q 1 2 3", "p 1 2 3 eA== eA== extra", "b n1 notanumber eA==", "c e1 x 1 - cg== AQ==", "c e1 1 1 soon cg== AQ==", "C e1 1", "j n1 cg== eA== - !!!"] {
            #expect(PostgresNotice(bad) == nil, "\(bad)")
        }
    }

    @Test("a push rides in its notice up to the inline bound and PostgreSQL's 7,999 bytes; beyond, the notice only wakes")
    func inlineBound() {
        func push(_ bytes: Int) -> MailboxMessage {
            MailboxMessage(clientID: "c", sequence: 1, type: 1, payload: [UInt8](repeating: 7, count: bytes), storedAt: MailboxTime(millisecondsSince1970: 0))
        }
        #expect(PostgresNotice.wakeUp(for: push(4_000), inlineLimit: 6_000) == .push(push(4_000)))
        #expect(PostgresNotice.wakeUp(for: push(5_000), inlineLimit: 6_000) == .wake(clientID: "c", through: 1))
        #expect(PostgresNotice.wakeUp(for: push(5_900), inlineLimit: 100_000) == .push(push(5_900)))
        #expect(PostgresNotice.wakeUp(for: push(5_900), inlineLimit: 100_000).text.utf8.count <= PostgresNotice.maximumLength)
        #expect(PostgresNotice.wakeUp(for: push(6_000), inlineLimit: 100_000) == .wake(clientID: "c", through: 1))
        #expect(PostgresNotice.isValidNodeName("gw-1.eu_west"))
        #expect(!PostgresNotice.isValidNodeName(""))
        #expect(!PostgresNotice.isValidNodeName("a b"))
        #expect(!PostgresNotice.isValidNodeName(String(repeating: "n", count: 49)))
    }
}
