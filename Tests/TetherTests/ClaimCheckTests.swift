import Testing
@testable import TetherPostgres
import TetherTesting
@testable import Tether

/// Runs `statement` on the database at `url`, as an operator or another bug would.
private func execute(_ statement: String, _ parameters: [PostgresValue], in url: String) async throws {
    let database = PostgresDatabase(configuration: PostgresConfiguration(url: url))
    do {
        try await database.transaction { session in _ = try session.execute(statement, parameters) }
    } catch {
        await database.close()
        throw error
    }
    await database.close()
}

/// The generation of the mailbox row of `clientID`.
private func generation(of clientID: String, in url: String) async throws -> UInt64 {
    let database = PostgresDatabase(configuration: PostgresConfiguration(url: url))
    let value = try await database.transaction { session in
        try session.execute("SELECT generation FROM tether_mailboxes WHERE client_id = $1", [.text(clientID)]).int(0, 0)
    }
    await database.close()
    return UInt64(value ?? 0)
}

@Suite("The claim check's decisions")
struct ClaimRepairTests {
    private let held = ClusterSession(clientID: "c", generation: 7)

    private func row(_ holder: String?, _ generation: UInt64) -> PostgresCluster.HeldRow {
        PostgresCluster.HeldRow(clientID: "c", holder: holder, generation: generation, lastSequence: 42)
    }

    @Test("every state of the row against a connection of generation 7 on n1")
    func table() {
        #expect(ClaimRepair(held: held, row: row("n1", 7), node: "n1") == .intact(through: 42))
        #expect(ClaimRepair(held: held, row: row("n1", 9), node: "n1") == .adopt(generation: 9, through: 42))
        #expect(ClaimRepair(held: held, row: row(nil, 7), node: "n1") == .reclaim(seen: 7))
        #expect(ClaimRepair(held: held, row: row(nil, 9), node: "n1") == .reclaim(seen: 9))
        #expect(ClaimRepair(held: held, row: row("n1", 5), node: "n1") == .reclaim(seen: 5))
        #expect(ClaimRepair(held: held, row: row("n2", 8), node: "n1") == .close(generation: 8, holder: "n2"))
        // Another node with an older generation (a row made anew): the takeover must still
        // be newer than the connection's claim to close it.
        #expect(ClaimRepair(held: held, row: row("n2", 3), node: "n1") == .close(generation: 8, holder: "n2"))
        #expect(ClaimRepair(held: held, row: nil, node: "n1") == .close(generation: 8, holder: "none"))
    }
}

@Suite("A node's check of its clients' claims on PostgreSQL", .serialized, .timeLimit(.guarded))
struct ClaimCheckTests {
    @Test("a row whose holder was cleared while its client stays connected: one check claims it again, and in each of 8 rounds every push of the other node and a publisher made meanwhile and after reaches the client, in order")
    func clearedHolder() async throws {
        try await withPostgresNodes(2, { $0.claimCheckInterval = nil }) { nodes, url in
            let publisher = try await PostgresPublisher(url: url)
            let client = try await clusterClient("cleo", nodes[0].endpoint)
            let notifications = client.notifications
            var sequence: UInt32 = 0
            for round in 0..<8 {
                try await execute("UPDATE tether_mailboxes SET holder = NULL WHERE client_id = $1", [.text("cleo")], in: url)
                #expect(try await nodes[0].cluster.holder(ofClient: "cleo") == nil)
                // Stored, but no node hears of them.
                try await nodes[1].server.push(indexed(round * 10), toClient: "cleo")
                _ = try await publisher.push(indexed(round * 10 + 1), toClient: "cleo")
                let check = try await nodes[0].cluster.checkClaims()
                #expect(check == ClaimCheck(checked: 1, adopted: 0, reclaimed: 1, closed: 0), "round \(round)")
                #expect(try await nodes[0].cluster.holder(ofClient: "cleo") == "n1", "round \(round)")
                try await nodes[1].server.push(indexed(round * 10 + 2), toClient: "cleo")
                _ = try await publisher.push(indexed(round * 10 + 3), toClient: "cleo")
                let frames = try await TetherTesting.collect(4, from: notifications, within: .seconds(30))
                #expect(frames.map(index(of:)) == (0..<4).map { round * 10 + $0 }, "round \(round)")
                #expect(frames.map(\.serial) == (1...4).map { sequence + $0 }, "round \(round)")
                sequence += 4
            }
            // The connection holds the newest claim: its release clears the row. A push
            // through the node, once the peer is gone, queues behind that release.
            let events = nodes[0].server.events
            await client.close()
            await publisher.close()
            _ = try await firstEvent(events, "cleo's peer to end") { $0.kind == .peerDisconnected }
            #expect(try await nodes[0].server.push(indexed(999), toClient: "cleo") == UInt64(sequence + 1))
            #expect(try await nodes[0].cluster.holder(ofClient: "cleo") == nil)
        }
    }

    @Test("a row that names a later claim of this node: the connection takes it on, and its release clears the row")
    func laterClaimOfThisNode() async throws {
        try await withPostgresNodes(1, { $0.claimCheckInterval = nil }) { nodes, url in
            let client = try await clusterClient("ada", nodes[0].endpoint)
            let before = try await generation(of: "ada", in: url)
            try await execute("UPDATE tether_mailboxes SET generation = generation + 5 WHERE client_id = $1", [.text("ada")], in: url)
            #expect(try await nodes[0].cluster.checkClaims() == ClaimCheck(checked: 1, adopted: 1, reclaimed: 0, closed: 0))
            #expect(nodes[0].cluster.state.withLock { $0.node }?.sessions == [ClusterSession(clientID: "ada", generation: before + 5)])
            #expect(try await nodes[0].cluster.checkClaims() == ClaimCheck(checked: 1, adopted: 0, reclaimed: 0, closed: 0))
            let events = nodes[0].server.events
            await client.close()
            // A push through the node, once the peer is gone, queues behind its release.
            _ = try await firstEvent(events, "ada's peer to end") { $0.kind == .peerDisconnected }
            try await nodes[0].server.push(indexed(1), toClient: "ada")
            #expect(try await nodes[0].cluster.holder(ofClient: "ada") == nil)
        }
    }

    @Test("a row that names another node: the check closes the connection here as taken over; a client that takes its session back comes back, claims again and gets its pushes")
    func anotherHolder() async throws {
        try await withPostgresNodes(2, { $0.claimCheckInterval = nil }) { nodes, url in
            // A newer connection elsewhere holds the session: by default the client stops
            // (sessionTakenOver); this one is set to take it back.
            let client = try await clusterClient("otto", nodes[0].endpoint) { $0.session?.reconnectsWhenTakenOver = true }
            let watcher = StateWatcher(client)
            let notifications = client.notifications
            try await execute("UPDATE tether_mailboxes SET holder = 'gone', generation = generation + 1 WHERE client_id = $1", [.text("otto")], in: url)
            try await nodes[1].server.push(indexed(0), toClient: "otto")
            #expect(try await nodes[0].cluster.checkClaims() == ClaimCheck(checked: 1, adopted: 0, reclaimed: 0, closed: 1))
            let reconnecting = try await watcher.next(.reconnecting, within: .seconds(30))
            #expect(reconnecting.reason?.code == .sessionTakenOver, "\(String(describing: reconnecting.reason))")
            try await watcher.next(.connected, within: .seconds(30))
            #expect(try await nodes[0].cluster.holder(ofClient: "otto") == "n1")
            try await nodes[1].server.push(indexed(1), toClient: "otto")
            let frames = try await TetherTesting.collect(2, from: notifications, within: .seconds(30))
            #expect(frames.map(index(of:)) == [0, 1])
            #expect(frames.map(\.serial) == [1, 2])
            await client.close()
        }
    }

    @Test("with a claim check every 100 ms, a cleared holder is claimed again by the node's own timer: in each of 8 rounds the other node's push made meanwhile arrives, in order")
    func periodic() async throws {
        try await withPostgresNodes(2, { $0.claimCheckInterval = .milliseconds(100) }) { nodes, url in
            let client = try await clusterClient("tim", nodes[0].endpoint)
            let notifications = client.notifications
            for round in 0..<8 {
                try await execute("UPDATE tether_mailboxes SET holder = NULL WHERE client_id = $1", [.text("tim")], in: url)
                try await nodes[1].server.push(indexed(round), toClient: "tim")
                // No notice reaches n1 for it: only the check brings it.
                let frames = try await TetherTesting.collect(1, from: notifications, within: .seconds(30))
                #expect(frames.map(index(of:)) == [round])
                #expect(frames.map(\.serial) == [UInt32(round + 1)])
            }
            #expect(nodes[0].cluster.repairs.reclaimed >= 8)
            await client.close()
        }
    }
}
