#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import TetherPostgres
import TetherTesting
@testable import Tether

/// What one round of a claim race ended with: pushes the newest connection got, and the
/// mailbox row's holder after them.
private struct Round: Sendable, CustomStringConvertible {
    var number: Int
    var delivered: [UInt32]
    var expected: Int
    var holder: String?
    var failure: String?

    var complete: Bool { delivered == Array(1...UInt32(expected)) && failure == nil }

    var description: String {
        "round \(number): \(delivered.count) of \(expected) pushes, holder \(holder ?? "NULL")\(failure.map { ", \($0)" } ?? "")"
    }
}

/// Reads from `socket` until it has `count` pushes of type 0x10 (other frames are skipped),
/// it closes, or a read waits `bound`: the serials read, in order.
private func pushes(_ count: Int, from socket: RawSocket, within bound: Duration) async throws -> [UInt32] {
    try await offThread {
        var serials: [UInt32] = []
        while serials.count < count {
            guard let frame = try? socket.readFrameBlocking(timeout: bound) else { break }
            if frame.type == 0x10 { serials.append(frame.serial) }
        }
        return serials
    }
}

/// Sends a seed hello for `clientID` on a new connection to `endpoint`, without waiting
/// for its answer.
private func sendHello(_ clientID: String, to endpoint: Endpoint) throws -> RawSocket {
    let socket = try RawSocket.connect(to: endpoint)
    let hello = SessionWire.encode(SessionWire.Hello(clientID: clientID, token: nil, lastSequence: 0))
    try socket.write(seedBytes(type: 0x401, serial: 1, payload: hello))
    return socket
}

/// One round of the attack: `hellos` hellos of one client back to back on node 1, every
/// connection but the newest closed at once; then pushes through node 1, node 2 and a
/// publisher, which the newest connection must all get, in order.
private func race(round: Int, hellos: Int, nodes: [RunningNode], publisher: PostgresPublisher) async throws -> Round {
    let clientID = "twin-\(hellos)-\(round)"
    let events = nodes[0].server.events
    // Each older connection is closed as soon as its hello is written, before the next
    // hello goes: their claims are still in flight when the newest's hello arrives. (Two
    // open connections' hellos on two sockets can be read in either order; which one is
    // newer is then the server's read order, and a close that comes only after the server
    // decided would leave the client with neither. Closing each before the next hello
    // makes the newest the one a client means.)
    for _ in 0..<(hellos - 1) {
        try sendHello(clientID, to: nodes[0].endpoint).close()
    }
    let newest = try sendHello(clientID, to: nodes[0].endpoint)
    defer { newest.close() }
    let count = 30
    var result = Round(number: round, delivered: [], expected: count)
    guard let welcome = try await newest.readFrame(timeout: .seconds(30)), welcome.serial == 1 else {
        result.failure = "the newest connection got no welcome"
        return result
    }
    // Every older connection has ended on node 1 (so its hello went into the hub's queue),
    // and a push through node 1 queues behind whatever their claims left to do.
    _ = try await TetherTesting.collect(hellos - 1, from: events.filter { $0.kind == .peerDisconnected }, within: .seconds(30))
    try await nodes[0].server.push(indexed(0), toClient: clientID)
    for number in 1..<count {
        if number.isMultiple(of: 2) {
            try await nodes[1].server.push(indexed(number), toClient: clientID)
        } else {
            _ = try await publisher.push(indexed(number), toClient: clientID)
        }
    }
    // Every push is stored by now: a connection that gets them gets them at once. The bound
    // only ends a round whose pushes never come.
    result.delivered = try await pushes(count, from: newest, within: .seconds(10))
    result.holder = try await nodes[0].cluster.holder(ofClient: clientID)
    return result
}

@Suite("Claims of one client racing on one PostgreSQL node", .serialized, .timeLimit(.guarded))
struct ClusterClaimRaceTests {
    @Test(
        "hellos of one client back to back on one node, the older connections closed at once: in every one of 8 rounds the newest keeps the claim and gets every push from every node and a publisher, in order",
        arguments: [2, 4]
    )
    func backToBackHellos(hellos: Int) async throws {
        // The claim check off: the claims must settle by themselves.
        try await withPostgresNodes(2, { $0.claimCheckInterval = nil }) { nodes, url in
            let publisher = try await PostgresPublisher(url: url)
            var rounds: [Round] = []
            for round in 0..<8 {
                rounds.append(try await race(round: round, hellos: hellos, nodes: nodes, publisher: publisher))
            }
            await publisher.close()
            let failed = rounds.filter { !$0.complete }
            Attachment.record(rounds.map(\.description).joined(separator: "\n"), named: "rounds-\(hellos).txt")
            #expect(failed.isEmpty, "\(failed.count) of 8 rounds lost pushes:\n\(failed.map(\.description).joined(separator: "\n"))")
            #expect(rounds.allSatisfy { $0.holder == "n1" })
        }
    }
}

@Suite("A tether serve --postgres node frozen and thawed", .serialized, .timeLimit(.guarded))
struct FrozenNodeTests {
    @Test("a node stopped (SIGSTOP) while its client reconnects, then continued: the reconnects queued meanwhile settle on the newest, which gets every push of a publisher, in order, in each of 8 rounds")
    func frozenAndThawed() async throws {
        let url = try await PostgresFixture.freshDatabase()
        let (node, endpoint, _) = try await clusterServe(url, ["--node", "n1"])
        defer {
            _ = kill(node.pid, SIGCONT)
            node.kill()
        }
        let publisher = try await PostgresPublisher(url: url)
        var failed: [String] = []
        for round in 0..<8 {
            let clientID = "frozen-\(round)"
            let client = try await clusterClient(clientID, endpoint) {
                $0.heartbeat = .every(.milliseconds(100), timeout: .milliseconds(150), maximumMissed: 1)
                $0.connectTimeout = .milliseconds(300)
                $0.prepareTimeout = .milliseconds(300)
            }
            let watcher = StateWatcher(client)
            let notifications = client.notifications
            #expect(try await publisher.push(indexed(0), toClient: clientID) == 1)
            #expect(try await TetherTesting.collect(1, from: notifications, within: .seconds(30)).map(\.serial) == [1])
            kill(node.pid, SIGSTOP)
            // The client gives the frozen node up and tries again, twice: each attempt
            // leaves a connection with its hello in the node's backlog.
            try await watcher.next("the third attempt", within: .seconds(30)) { $0.phase == .reconnecting && ($0.attempt ?? 0) >= 3 }
            kill(node.pid, SIGCONT)
            try await watcher.next(.connected, within: .seconds(30))
            // One push at a time, each awaited: the claims of the queued connections
            // settle while they go.
            var serials: [UInt32] = [1]
            do {
                for number in 1..<20 {
                    _ = try await publisher.push(indexed(number), toClient: clientID)
                    serials += try await TetherTesting.collect(1, from: notifications, within: .seconds(10)).map(\.serial)
                }
            } catch {
                failed.append("round \(round): \(serials.count) of 20 pushes, holder \(try await holder(of: clientID, in: url) ?? "NULL")")
            }
            if serials.count == 20 { #expect(serials == Array(1...20), "round \(round)") }
            await client.close()
        }
        await publisher.close()
        Attachment.record(failed.joined(separator: "\n"), named: "frozen.txt")
        #expect(failed.isEmpty, "\(failed.count) of 8 rounds stalled:\n\(failed.joined(separator: "\n"))")
    }
}

/// The holder the mailbox row of `clientID` names, read straight from the database.
private func holder(of clientID: String, in url: String) async throws -> String? {
    let database = PostgresDatabase(configuration: PostgresConfiguration(url: url))
    defer { Task { await database.close() } }
    return try await database.transaction { session in
        try session.execute("SELECT holder FROM tether_mailboxes WHERE client_id = $1", [.text(clientID)]).text(0, 0)
    }
}
