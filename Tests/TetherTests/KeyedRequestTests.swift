import Synchronization
import Testing
import TetherSQLite
import TetherTesting
@testable import Tether

/// How often each key's handler ran, across server restarts.
private final class RunCounter: Sendable {
    private let runs = Mutex<[String: Int]>([:])

    /// Counts a run of `key`; how many there were with it.
    func run(_ key: String) -> Int {
        runs.withLock { runs in
            runs[key, default: 0] += 1
            return runs[key]!
        }
    }

    var all: [String: Int] { runs.withLock { $0 } }
}

/// A handler of 0x407 that counts the runs of the key in its content and answers
/// `{"key": …, "runs": n}`.
private func countingHandlers(_ counter: RunCounter, before: @escaping @Sendable (Peer) async -> Void = { _ in }) -> @Sendable (Server) -> Void {
    { server in
        server.handle(type: 0x407) { request, peer in
            let key = request.text
            let runs = counter.run(key)
            await before(peer)
            return Response(json: ["key": .string(key), "runs": .int(runs)])
        }
    }
}

@Suite("Requests that run once", .timeLimit(.guarded))
struct KeyedRequestTests {
    @Test("1,000 keyed requests from 10 clients through a proxy that cuts every connection after 400 bytes: every handler runs once per key, every caller gets one response, the one of that run")
    func throughCuts() async throws {
        let counter = RunCounter()
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = MailboxConfiguration(store: InMemoryMailboxStore())
        let server = try TestServer(configuration: configuration, handlers: countingHandlers(counter))
        try await server.start()
        try await withFaultProxy(to: server.endpoint, mode: .cut(after: 400, reset: true)) { proxy in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for client in 0..<10 {
                    group.addTask {
                        let connection = try await Connection.connect(to: proxy.endpoint, configuration: sessionConfiguration("c\(client)") {
                            $0.requestTimeout = .seconds(120)
                        })
                        // One at a time: a session's hello and welcome take about 250 of
                        // the 400 bytes, so a connection carries one request and its answer
                        // at most, and each request sees a cut around it.
                        for step in 0..<100 {
                            let key = "c\(client)-\(step)"
                            let response = try await connection.request(Request(type: 0x407, payload: Array(key.utf8)), idempotencyKey: key)
                            #expect(response.json == ["key": .string(key), "runs": 1], "\(key)")
                        }
                        await connection.close()
                    }
                }
                try await group.waitForAll()
            }
            #expect(proxy.counters.accepted > 20, "the proxy cut nothing")
        }
        let runs = counter.all
        #expect(runs.count == 1_000)
        #expect(runs.values.allSatisfy { $0 == 1 }, "\(runs.filter { $0.value != 1 })")
        await server.stop()
    }

    @Test("a keyed request whose answer was lost with its connection, then the server restarted on its SQLite file: the repeat gets the first run's answer, and the handler ran once")
    func serverRestarted() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let counter = RunCounter()
        let store = WatchedMailboxStore(try SQLiteMailboxStore(path: directory.file("mailboxes.sqlite")))
        let finished = store.finishedRequests
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = MailboxConfiguration(store: store)
        let gate = Mutex<FaultProxy?>(nil)
        // The first run closes its client's connection before the answer is written, and
        // keeps the client out until the server has restarted.
        let server = try TestServer(configuration: configuration, handlers: countingHandlers(counter) { peer in
            guard let proxy = gate.withLock({ $0 }) else { return }
            proxy.refusesConnections = true
            await peer.close()
        })
        try await server.start()
        try await withFaultProxy(to: server.endpoint) { proxy in
            gate.withLock { $0 = proxy }
            let connection = try await Connection.connect(to: proxy.endpoint, configuration: sessionConfiguration("rita") {
                $0.requestTimeout = .seconds(60)
            })
            let answer = Task { try await connection.request(Request(type: 0x407, payload: Array("pay-1".utf8)), idempotencyKey: "pay-1") }
            #expect(try await collect(1, from: finished, "the first run's record") == ["rita pay-1"])
            gate.withLock { $0 = nil }
            await server.stop()
            try await server.start()
            proxy.refusesConnections = false
            let response = try await answer.value
            #expect(response.json == ["key": "pay-1", "runs": 1])
            #expect(counter.all == ["pay-1": 1])
            // A later repeat of the key, on the same connection, is answered from the record too.
            let again = try await connection.request(Request(type: 0x407, payload: Array("pay-1".utf8)), idempotencyKey: "pay-1")
            #expect(again.json == ["key": "pay-1", "runs": 1])
            #expect(counter.all == ["pay-1": 1])
            await connection.close()
        }
        await server.stop()
    }

    @Test("a keyed request whose answer was lost on one PostgreSQL node is repeated on the other, where the client lands: answered from the record, the handler ran once")
    func movedBetweenNodes() async throws {
        try await withPostgresNodes(2) { nodes, _ in
            let counter = RunCounter()
            let closing = Mutex(true)
            for node in nodes {
                countingHandlers(counter) { peer in
                    // The first run loses its answer with its connection.
                    if closing.withLock({ first in defer { first = false }; return first }) { await peer.close() }
                }(node.server)
            }
            let client = try await clusterClient("mo", nodes[0].endpoint, alternates: [nodes[1].endpoint]) {
                $0.requestTimeout = .seconds(60)
            }
            let response = try await client.request(Request(type: 0x407, payload: Array("mv-1".utf8)), idempotencyKey: "mv-1")
            #expect(response.json == ["key": "mv-1", "runs": 1])
            #expect(counter.all == ["mv-1": 1])
            var holders: [String] = []
            for node in nodes {
                for peer in node.server.peers where await peer.clientID == "mo" { holders.append(node.name) }
            }
            #expect(holders == ["n2"])
            await client.close()
        }
    }

    @Test("honest outcomes: a repeat past the client's window is outcomeUnknown, exact; a keyed request without a session or with a bad key is refused before it is sent")
    func outcomes() async throws {
        let counter = RunCounter()
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = MailboxConfiguration(store: InMemoryMailboxStore())
        let server = try TestServer(configuration: configuration, handlers: countingHandlers(counter) { peer in
            // Every run loses its answer with its connection.
            await peer.close()
        })
        try await server.start()
        // A window of zero: the first break is already past it.
        let connection = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("sam") {
            $0.session?.requestWindow = .zero
        })
        let error = await #expect(throws: TetherError.self) {
            try await connection.request(Request(type: 0x407, payload: Array("k1".utf8)), idempotencyKey: "k1")
        }
        #expect(error?.code == .outcomeUnknown)
        #expect(error?.message.contains("may or may not have run") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("SessionConfiguration.requestWindow") == true, "\(error?.message ?? "")")
        #expect(counter.all == ["k1": 1])
        await connection.close()

        let plain = try await Connection.connect(to: server.endpoint, configuration: testConfiguration())
        let noSession = await #expect(throws: TetherError.self) {
            try await plain.request(Request(type: 0x407), idempotencyKey: "k2")
        }
        #expect(noSession?.code == .invalidArgument)
        await plain.close()
        let badKey = await #expect(throws: TetherError.self) {
            try await connection.request(Request(type: 0x407), idempotencyKey: "has space")
        }
        #expect(badKey?.code == .invalidArgument)
        await server.stop()
    }

    @Test("a keyed request whose answer was lost, then the client's mailbox removed as idle before it came back: the repeat into the new history is outcomeUnknown, not run again")
    func historyBeganAgain() async throws {
        let counter = RunCounter()
        let store = InMemoryMailboxStore()
        let now = Mutex(MailboxTime(millisecondsSince1970: 1_700_000_000_000))
        var mailboxes = MailboxConfiguration(store: store)
        mailboxes.limits.maximumAge = .seconds(60)
        mailboxes.expiryInterval = nil
        mailboxes.clock = { now.withLock { $0 } }
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = mailboxes
        let gate = Mutex<FaultProxy?>(nil)
        let server = try TestServer(configuration: configuration, handlers: countingHandlers(counter) { peer in
            guard let proxy = gate.withLock({ $0 }) else { return }
            proxy.refusesConnections = true
            await peer.close()
        })
        try await server.start()
        try await withFaultProxy(to: server.endpoint) { proxy in
            gate.withLock { $0 = proxy }
            let connection = try await Connection.connect(to: proxy.endpoint, configuration: sessionConfiguration("ivy") {
                $0.requestTimeout = .seconds(60)
            })
            let watcher = StateWatcher(connection)
            let serverEvents = server.server.events
            let answer = Task { try await connection.request(Request(type: 0x407, payload: Array("t-1".utf8)), idempotencyKey: "t-1") }
            try await watcher.next(.reconnecting)
            _ = try await firstEvent(serverEvents, "the server to see ivy leave") { $0.kind == .peerDisconnected && $0.clientID == "ivy" }
            // Away past the age bound: the mailbox goes, and a new one will have a new epoch.
            let later = now.withLock { time in
                time = time.adding(.seconds(61))
                return time
            }
            #expect(try await store.removeExpired(limits: mailboxes.limits, now: later, keeping: []) == ["ivy"])
            gate.withLock { $0 = nil }
            proxy.refusesConnections = false
            let error = await #expect(throws: TetherError.self) { try await answer.value }
            #expect(error?.code == .outcomeUnknown)
            #expect(error?.message.contains("began again") == true, "\(error?.message ?? "")")
            #expect(counter.all == ["t-1": 1])
            await connection.close()
        }
        await server.stop()
    }

    @Test("the wire: a keyed request reads back as written; malformed ones read as nothing")
    func wire() {
        let keyed = KeyedWire.Keyed(key: "order-17", type: 0x407, epoch: "e1", payload: [1, 2, 3])
        let opened = KeyedWire.open(KeyedWire.envelope(keyed))
        #expect(opened?.key == "order-17")
        #expect(opened?.type == 0x407)
        #expect(opened?.epoch == "e1")
        #expect(opened?.payload == [1, 2, 3])
        #expect(KeyedWire.open(KeyedWire.envelope(KeyedWire.Keyed(key: "k", type: 1, epoch: nil, payload: [])))?.epoch == nil)
        for bad: [UInt8] in [[], [0], [3, 0x61], [1, 0x61, 0, 0, 4], [1, 0x20, 0, 0, 4, 7, 0], [1, 0x61, 0, 0, 4, 7, 5, 0x65]] {
            #expect(KeyedWire.open(bad) == nil, "\(bad)")
        }
        #expect(KeyedWire.keyProblem(String(repeating: "k", count: 129)) != nil)
        #expect(KeyedWire.keyProblem("") != nil)
        #expect(KeyedWire.keyProblem("ok-1") == nil)
    }
}
