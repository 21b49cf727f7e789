import Testing
import TetherTesting
@testable import Tether
@testable import TetherSQLite
import TetherPostgres
import TetherRedis

/// Mailboxes of `kind` for a server test, with `change` applied; a SQLite file lives in
/// `directory`, PostgreSQL tables in a database of their own.
private func mailboxes(_ kind: MailboxStoreKind, in directory: TemporaryDirectory, _ change: (inout MailboxConfiguration) -> Void = { _ in }) async throws -> MailboxConfiguration {
    var configuration: MailboxConfiguration
    switch kind {
    case .inMemory: configuration = .inMemory
    case .sqlite: configuration = try .sqlite(path: directory.file("mail.sqlite"))
    case .postgres: configuration = MailboxConfiguration(store: try await PostgresMailboxStore(url: try await PostgresFixture.freshDatabase()))
    case .redis: configuration = MailboxConfiguration(store: try await RedisMailboxStore(configuration: try await RedisFixture.freshConfiguration()))
    }
    change(&configuration)
    return configuration
}

/// A client on the wire: sends a seed hello for `clientID` and returns the socket and the
/// answer's payload.
private func hello(_ clientID: String, to endpoint: Endpoint, serial: UInt32 = 1) async throws -> (RawSocket, [UInt8]) {
    let raw = try RawSocket.connect(to: endpoint)
    let hello = SessionWire.encode(SessionWire.Hello(clientID: clientID, token: nil, lastSequence: 0))
    try raw.write(seedBytes(type: 0x401, serial: serial, payload: hello))
    guard let answer = try await raw.readFrame() else {
        raw.close()
        throw TimedOut(what: "the answer to the hello of \(clientID)")
    }
    #expect(answer.serial == serial)
    return (raw, withoutEpoch(answer.payload))
}

private func welcome(_ clientID: String) -> [UInt8] {
    SessionWire.encode(SessionWire.Welcome(accepted: true, clientID: clientID, lastSequence: 0, resumeAfter: 0))
}

/// A store that refuses messages of type 0x666, and holds an append with a message of type
/// 0x100 until the test lets it go, so that the pushes made meanwhile queue up behind it.
private final class GatedStore: MailboxStore {
    let inner = InMemoryMailboxStore()
    let (entered, enteredSink) = AsyncStream.makeStream(of: Void.self)
    let (release, releaseSink) = AsyncStream.makeStream(of: Void.self)

    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws -> [UInt64] {
        if messages.contains(where: { $0.type == 0x666 }) {
            throw TetherError(code: .storeFailed, message: "type 0x666 is refused")
        }
        if messages.contains(where: { $0.type == 0x100 }) {
            enteredSink.yield()
            for await _ in release { break }
        }
        return try await inner.append(messages, limits: limits, now: now)
    }

    func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> MailboxSummary {
        try await inner.openMailbox(for: clientID, limits: limits, now: now)
    }

    func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage] {
        try await inner.messages(for: clientID, after: sequence, limit: limit)
    }

    func acknowledge(_ clientID: String, through sequence: UInt64) async throws {
        try await inner.acknowledge(clientID, through: sequence)
    }

    func clientIDs() async throws -> [String] {
        try await inner.clientIDs()
    }
}

@Suite("Mailbox bounds on a server", .timeLimit(.guarded))
struct MailboxBoundsTests {
    @Test("past the mailbox bound a new client's hello gets a passing refusal that says why, and a push to a new client id fails; known clients go on", arguments: MailboxStoreKind.allCases)
    func mailboxBound(kind: MailboxStoreKind) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let configuration = try await mailboxes(kind, in: directory) { $0.limits.maximumMailboxes = 2 }
        try await withServer(configure: { $0.mailboxes = configuration }, handlers: echoHandlers) { server, endpoint in
            let (alice, aliceAnswer) = try await hello("alice", to: endpoint)
            defer { alice.close() }
            #expect(aliceAnswer == welcome("alice"))
            #expect(try await server.push(indexed(0), toClient: "bob") == 1)

            let (carol, carolAnswer) = try await hello("carol", to: endpoint, serial: 7)
            defer { carol.close() }
            let refusal = "the mailbox store holds its maximum of 2 mailboxes: none for new client \"carol\" until idle ones expire"
            #expect(carolAnswer == SessionWire.encode(SessionWire.Refusal(error: refusal, rejected: false)))

            let error = await #expect(throws: TetherError.self) {
                try await server.push(indexed(1), toClient: "dave")
            }
            #expect(error?.code == .mailboxesFull)
            #expect(error?.message == "the mailbox store holds its maximum of 2 mailboxes: none for new client \"dave\" until idle ones expire")
            #expect(try await server.clientIDs() == ["alice", "bob"])

            // Known clients: alice gets her push at once, bob resumes and gets his.
            #expect(try await server.push(indexed(2), toClient: "alice") == 1)
            #expect(try await alice.readFrame() == Frame(type: 0x10, serial: 1, payload: Array("2".utf8)))
            let (bob, bobAnswer) = try await hello("bob", to: endpoint)
            defer { bob.close() }
            #expect(bobAnswer == SessionWire.encode(SessionWire.Welcome(accepted: true, clientID: "bob", lastSequence: 1, resumeAfter: 0)))
            #expect(try await bob.readFrame() == Frame(type: 0x10, serial: 1, payload: Array("0".utf8)))

            // The refused connection may try again once there is room; it is still open.
            #expect(try await server.push(indexed(3), toClient: "alice") == 2)
            #expect(try await alice.readFrame() == Frame(type: 0x10, serial: 2, payload: Array("3".utf8)))
        }
    }

    @Test("a client that never comes back loses its mailbox to the periodic expiry, on the server's clock, with no write or open to trigger it; a connected client keeps its own; its receipts are dropped, one with a time to live expires on that clock")
    func periodicExpiry() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: {
                $0.mailboxes = .inMemory
                $0.mailboxes?.limits.maximumAge = .seconds(60)
                // The only pass comes 1 ms after the pushes are 60 s old.
                $0.mailboxes?.expiryInterval = .milliseconds(60_001)
                $0.idleTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let alice = try await Connection.connect(to: endpoint, configuration: session("alice", on: network))
                let pushes = alice.notifications
                try await awaitClient("alice", on: server)
                let hub = try #require(server.hub)
                let expiries = hub.expiries
                for number in 0..<2 { try await server.push(indexed(number), toClient: "ghost") }
                let receipt = try await server.pushWithReceipt(indexed(2), toClient: "ghost")
                let expiring = try await server.pushWithReceipt(indexed(3), toClient: "ghost", timeToLive: .seconds(30))
                #expect(try await server.clientIDs() == ["alice", "ghost"])

                await network.advance(by: .seconds(30))
                #expect(await expiring.outcome() == .expired, "on the server's clock")
                #expect(receipt.settled == nil)
                await network.advance(by: .seconds(30))
                #expect(try await server.clientIDs() == ["alice", "ghost"], "expired before the pass")
                await network.advance(by: .milliseconds(1))
                let expiry = try #require(try await firstElement(of: expiries))
                #expect(expiry.now == MailboxTime(millisecondsSince1970: 1_700_000_060_001))
                #expect(try expiry.removed.get() == ["ghost"])
                #expect(try await server.clientIDs() == ["alice"])
                #expect(await server.metrics().mailboxesRemoved == 1)
                #expect(await receipt.outcome() == .dropped("the client's mailbox was removed as idle before it acknowledged the push"))

                // Nothing is left of ghost: it starts again from 1.
                #expect(try await server.push(indexed(9), toClient: "ghost") == 1)
                #expect(try await server.push(indexed(10), toClient: "alice") == 1)
                #expect(try await collect(1, from: pushes, "alice's push") == [Frame(type: 0x10, serial: 1, payload: Array("10".utf8))])
                await alice.close()
            }
        }
    }

    @Test("a store without removeExpired of its own gets the default: the periodic expiry drops expired pushes by opening each idle client's mailbox")
    func defaultExpiry() async throws {
        let store = GatedStore()
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: {
                $0.mailboxes = MailboxConfiguration(store: store)
                $0.mailboxes?.limits.maximumAge = .seconds(60)
                $0.mailboxes?.expiryInterval = .milliseconds(60_001)
            }, handlers: echoHandlers) { server, _ in
                let hub = try #require(server.hub)
                let expiries = hub.expiries
                for number in 0..<2 { try await server.push(indexed(number), toClient: "ghost") }
                await network.advance(by: .milliseconds(60_001))
                let expiry = try #require(try await firstElement(of: expiries))
                #expect(expiry.now == MailboxTime(millisecondsSince1970: 1_700_000_060_001))
                #expect(try expiry.removed.get() == [])
                #expect(try await store.inner.messages(for: "ghost", after: 0, limit: 10).isEmpty)
                let summary = try await store.inner.openMailbox(for: "ghost", limits: MailboxLimits(), now: expiry.now)
                #expect(summary.withoutEpoch == MailboxSummary(lastSequence: 2, acknowledged: 0, lostThrough: 2, lossReason: .expired, count: 0))
            }
        }
    }

    @available(macOS 26, iOS 26, *)  // Task.immediate
    @Test("a push the store cannot take fails its own caller only: pushes queued with it are stored and delivered")
    func failedAppendIsolated() async throws {
        let store = GatedStore()
        try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: echoHandlers) { server, endpoint in
            let (bob, answer) = try await hello("bob", to: endpoint)
            defer { bob.close() }
            #expect(answer == welcome("bob"))
            try await awaitClient("bob", on: server)

            let gated = Task { try await server.push(Frame(type: 0x100, payload: [1]), toClient: "bob") }
            try await bounded("the gated append to reach the store") {
                for await _ in store.entered { break }
            }
            // Started here and run up to their first suspension, which is in the hub's queue:
            // both wait there, to be stored in one append once the gate opens.
            let refused = Task.immediate { try await server.push(Frame(type: 0x666, payload: [2]), toClient: "bob") }
            let good = Task.immediate { try await server.push(Frame(type: 0x10, payload: [3]), toClient: "bob") }
            let hub = try #require(server.hub)
            #expect(hub.state.withLock { $0.queue.count } == 2)
            store.releaseSink.yield()

            #expect(try await gated.value == 1)
            let error = await #expect(throws: TetherError.self) { try await refused.value }
            #expect(error?.code == .storeFailed)
            #expect(error?.message == "pushes could not be stored: type 0x666 is refused")
            #expect(try await good.value == 2)
            #expect(try await bob.readFrame() == Frame(type: 0x100, serial: 1, payload: [1]))
            #expect(try await bob.readFrame() == Frame(type: 0x10, serial: 2, payload: [3]))
        }
    }

    @Test("a full SQLite file: the push throws to its caller, nothing of it reaches the connected client, and the next push after room is made arrives with the next sequence")
    func fullDisk() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        let store = try SQLiteMailboxStore(path: path)
        try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: echoHandlers) { server, endpoint in
            let (bob, answer) = try await hello("bob", to: endpoint)
            defer { bob.close() }
            #expect(answer == welcome("bob"))
            try await awaitClient("bob", on: server)
            #expect(try await server.push(indexed(1), toClient: "bob") == 1)
            #expect(try await bob.readFrame() == Frame(type: 0x10, serial: 1, payload: Array("1".utf8)))

            // The file may not grow: SQLite answers as it does when the disk is full.
            try store.executeOnConnection("PRAGMA max_page_count = 1")
            let big = Frame(type: 0x10, payload: [UInt8](repeating: 0xAB, count: 256 * 1024))
            let error = await #expect(throws: TetherError.self) {
                try await server.push(big, toClients: ["bob", "zoe"])
            }
            #expect(error?.code == .storeFailed)
            #expect(error?.message == "pushes could not be stored: mailbox store \(path) could not append 2 messages: database or disk is full")
            #expect(try await server.clientIDs() == ["bob"])

            try store.executeOnConnection("PRAGMA max_page_count = 1073741823")
            #expect(try await server.push(indexed(2), toClient: "bob") == 2)
            // The next frame is this push: the refused one was never written.
            #expect(try await bob.readFrame() == Frame(type: 0x10, serial: 2, payload: Array("2".utf8)))
            #expect(try await store.messages(for: "bob", after: 0, limit: 10).map(\.sequence) == [1, 2])
        }
    }
}
