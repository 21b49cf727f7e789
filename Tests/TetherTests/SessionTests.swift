import Synchronization
import Testing
import TetherTesting
@testable import Tether
import TetherTesting

/// A client configuration with a session for `clientID`, reconnecting quickly.
func sessionConfiguration(
    _ clientID: String,
    token: String? = nil,
    reconnectAfter initial: Duration = .milliseconds(20),
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) -> ConnectionConfiguration {
    reconnecting(after: initial) {
        $0.session = SessionConfiguration(clientID: clientID, token: token)
        change(&$0)
    }
}

/// A push whose payload is its index, for tests that check order and completeness.
func indexed(_ index: Int, type: UInt32 = 0x10) -> Frame {
    Frame(type: type, serial: 0, payload: Array("\(index)".utf8))
}

func index(of frame: Frame) -> Int? {
    Int(String(decoding: frame.payload, as: UTF8.self))
}

/// Requires that the server has `clientID` connected, once its connection has been
/// welcomed (`connect()` returned, or the state became `.connected`): the server registers
/// the client before it writes the welcome, so there is nothing to wait for.
func awaitClient(_ clientID: String, on server: Server) async throws {
    guard server.peer(forClient: clientID) != nil else {
        throw TimedOut(what: "\(clientID) to be connected on the server, registered before its welcome")
    }
}

/// A client on `network` with a session for `clientID`.
func session(
    _ clientID: String,
    on network: TestNetwork,
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration.testing(on: network)
    configuration.session = SessionConfiguration(clientID: clientID)
    change(&configuration)
    return configuration
}

@Suite("Sessions and mailboxes", .timeLimit(.guarded))
struct SessionTests {
    @Test("pushes to a connected client carry its sequence 1, 2, 3 in their serials, and the hello is the first frame")
    func sequencedPushes() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("alice"))
            let frames = connection.frames
            // A push counts as delivered once a subscriber of notifications has it.
            let notifications = connection.notifications
            try await awaitClient("alice", on: server)
            var sequences: [UInt64] = []
            for number in 0..<3 {
                sequences.append(try await server.push(indexed(number), toClient: "alice"))
            }
            #expect(sequences == [1, 2, 3])
            let received = try await collect(3, from: frames, "three pushes")
            #expect(received == [
                Frame(type: 0x10, serial: 1, payload: Array("0".utf8)),
                Frame(type: 0x10, serial: 2, payload: Array("1".utf8)),
                Frame(type: 0x10, serial: 3, payload: Array("2".utf8)),
            ])
            #expect(try await collect(3, from: notifications, "the three pushes again") == received)
            #expect(await connection.lastSequence == 3)
            let peers = server.peers
            #expect(peers.count == 1)
            #expect(await peers[0].clientID == "alice")
            let metrics = await server.metrics()
            #expect(metrics.pushesStored == 3)
            #expect(metrics.offlinePushes == 0)
            #expect(metrics.sessionsResumed == 1)
            await connection.close()
        }
    }

    @Test("the client suspended, 100 pushes stored; resumed: all 100 delivered in order, then live ones")
    func suspendAndResume() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("bob"))
            let watcher = StateWatcher(connection)
            let notifications = connection.notifications
            try await watcher.next(.connected)
            try await awaitClient("bob", on: server)
            let serverEvents = server.events
            await connection.suspend()
            try await watcher.next(.suspended)
            // The server lets go of the client before it tells of the disconnect.
            _ = try await firstEvent(serverEvents, "bob to be gone on the server") { $0.kind == .peerDisconnected }
            #expect(server.peer(forClient: "bob") == nil)
            let (offline, offlineSink) = AsyncStream.makeStream(of: UInt64.self)
            server.onOfflinePush { push in offlineSink.yield(push.sequence) }
            for number in 0..<100 {
                try await server.push(indexed(number), toClient: "bob")
            }
            await connection.resume()
            try await watcher.next(.connected)
            let replayed = try await collect(100, from: notifications, "the 100 stored pushes")
            #expect(replayed.map(index(of:)) == Array(0..<100))
            #expect(replayed.map(\.serial) == Array(1...100))
            for number in 100..<105 {
                try await server.push(indexed(number), toClient: "bob")
            }
            let live = try await collect(5, from: notifications, "the live pushes")
            #expect(live.map(index(of:)) == Array(100..<105))
            #expect(await connection.lastSequence == 105)
            #expect(try await collect(100, from: offline, "the offline callbacks") == Array(1...100))
            let metrics = await server.metrics()
            #expect(metrics.offlinePushes == 100)
            #expect(metrics.notificationsReplayed == 100)
            await connection.close()
        }
    }

    @Test("1,000 pushes while the connection is cut 20 times at random moments: the subscriber sees 0…999, each once, in order")
    func pushesAcrossCuts() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("carol", reconnectAfter: .milliseconds(5)) { $0.use(network) })
                let notifications = connection.notifications
                let watcher = StateWatcher(connection)
                try await awaitClient("carol", on: server)
                var random = SplitMix(seed: 0x5EED_0008)
                var cuts = Set<Int>()
                while cuts.count < 20 { cuts.insert(Int.random(in: 1..<1000, using: &random)) }
                // The bound covers the whole run of 1,000 pushes and 20 reconnects, which a
                // machine busy with the thread sanitizer and other suites can stretch.
                let receiving = Task {
                    try await TetherTesting.collect(1000, from: notifications, within: .seconds(50))
                }
                for number in 0..<1000 {
                    var down = false
                    if cuts.contains(number) {
                        // Each cut hits a live session: wait for the client to be back (its
                        // hello accepted) first. This push is made while it is down, the next
                        // ones while it reconnects and replays.
                        try await watcher.next(.connected)
                        network.links.last?.cut()
                        try await watcher.next(.reconnecting)
                        down = true
                    }
                    try await server.push(indexed(number), toClient: "carol")
                    if down { await network.advance(by: .milliseconds(5)) }
                }
                let received = try await receiving.value
                #expect(received.map(index(of:)) == Array(0..<1000))
                #expect(await connection.lastSequence == 1000)
                let metrics = await connection.metrics
                Attachment.record("connects \(metrics.connects), duplicates dropped \(metrics.duplicateNotifications)", named: "cuts.txt")
                #expect(metrics.connects == 21)
                #expect(network.links.count == 21)
                await connection.close()
            }
        }
    }

    @Test("a mailbox over its limit: the resuming client gets a gap event that names the lost range, then the rest")
    func overflowGap() async throws {
        try await withServer(configure: {
            $0.mailboxes = .inMemory
            $0.mailboxes?.limits = MailboxLimits(maximumMessages: 10, maximumAge: nil)
        }, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("dave"))
            let watcher = StateWatcher(connection)
            let notifications = connection.notifications
            let events = connection.sessionEvents
            try await watcher.next(.connected)
            await connection.suspend()
            try await watcher.next(.suspended)
            for number in 0..<25 {
                try await server.push(indexed(number), toClient: "dave")
            }
            await connection.resume()
            let seen = try await collect(2, from: events, "the events")
            #expect(seen == [
                SessionEvent(kind: .gap, lastSequence: 15, missed: 1...15, reason: .overflow),
                SessionEvent(kind: .resumed, lastSequence: 15, serverSequence: 25),
            ])
            let delivered = try await collect(10, from: notifications, "the 10 kept")
            #expect(delivered.map(index(of:)) == Array(15..<25))
            #expect(delivered.map(\.serial) == Array(16...25))
            await connection.close()
        }
    }

    @Test("messages older than the mailbox's age limit are reported as expired; one exactly that old is kept")
    func expiredGap() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: {
                $0.mailboxes = .inMemory
                $0.mailboxes?.limits = MailboxLimits(maximumMessages: 100, maximumAge: .seconds(60))
            }, handlers: echoHandlers) { server, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: session("erin", on: network))
                let watcher = StateWatcher(connection)
                let notifications = connection.notifications
                let events = connection.sessionEvents
                try await watcher.next(.connected)
                await connection.suspend()
                try await watcher.next(.suspended)
                // Stored at 0 ms, 1 ms and 60,001 ms of the server's mailbox clock; the
                // client resumes at 60,001 ms, when the first three are 1 ms past the limit
                // and the fourth exactly at it.
                for number in 0..<3 { try await server.push(indexed(number), toClient: "erin") }
                await network.advance(by: .milliseconds(1))
                try await server.push(indexed(3), toClient: "erin")
                await network.advance(by: .seconds(60))
                try await server.push(indexed(4), toClient: "erin")
                await connection.resume()
                let seen = try await collect(2, from: events, "the events")
                #expect(seen == [
                    SessionEvent(kind: .gap, lastSequence: 3, missed: 1...3, reason: .expired),
                    SessionEvent(kind: .resumed, lastSequence: 3, serverSequence: 5),
                ])
                let delivered = try await collect(2, from: notifications, "the 2 kept")
                #expect(delivered.map(index(of:)) == [3, 4])
                await connection.close()
            }
        }
    }

    @Test("a rejected hello: connect throws sessionRejected with the server's reason, and a rejection on reconnect ends in failed without more attempts")
    func rejectedHello() async throws {
        let allowed = Lock<Set<String>>(["frank"])
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: { server in
            echoHandlers(server)
            server.authenticate { hello in
                guard allowed.withLock({ $0.contains(hello.clientID) }), hello.token == "secret" else {
                    throw TetherError(code: .sessionRejected, message: "unknown client or bad token")
                }
            }
        }) { server, endpoint in
            let error = await #expect(throws: TetherError.self) {
                try await Connection.connect(to: endpoint, configuration: sessionConfiguration("frank", token: "wrong"))
            }
            #expect(error?.code == .sessionRejected)
            #expect(error?.message == "\(endpoint.host):\(endpoint.port) rejected the session of client frank: unknown client or bad token")
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: sessionConfiguration("frank", token: "secret"))
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                allowed.withLock { $0.removeAll() }
                proxy.cutAll()
                let failed = try await watcher.next(.failed)
                #expect(failed.reason?.code == .sessionRejected)
                #expect(await watcher.phases == [.connected, .reconnecting, .connecting, .failed])
                #expect(proxy.counters.accepted == 2)
                let request = await #expect(throws: TetherError.self) { try await connection.request(Request(type: 0x402, json: [:])) }
                #expect(request?.code == .notConnected)
            }
            #expect(await server.metrics().sessionsRejected == 2)
        }
    }

    @Test("requests made while the hello waits for the server go out only after it is accepted")
    func requestsWaitForHello() async throws {
        let gate = Lock<CheckedContinuation<Void, Never>?>(nil)
        let (held, heldSink) = AsyncStream.makeStream(of: Void.self)
        let hellos = Atomic<Int>(0)
        let handledBeforeAccept = Atomic<Int>(0)
        try await withTestNetwork { network in try await withNetworkServer(on: network, configure: { $0.mailboxes = .inMemory }, handlers: { server in
            server.handle(type: 0x402) { request, peer in
                if await peer.clientID == nil { handledBeforeAccept.add(1, ordering: .relaxed) }
                return Response(json: ["echo": request.json ?? nil])
            }
            server.authenticate { _ in
                // The second hello (after the cut) waits until the test opens the gate.
                if hellos.add(1, ordering: .relaxed).newValue == 2 {
                    await withCheckedContinuation { continuation in
                        gate.withLock { $0 = continuation }
                        heldSink.yield()
                    }
                }
            }
        }) { server, endpoint in
            do {
                let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("gina") { $0.use(network) })
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                await network.link(1).cut()
                let lost = try await watcher.next(.reconnecting)
                await network.advance(by: try #require(lost.delay))
                try await watcher.next(.connecting)
                _ = try await collect(1, from: held, "the second hello to be held")
                // Settled on the network's clock: the request has reached the queue.
                let reply = await connection.startRequest(Request(type: 0x402, json: ["n": 7]), settlingOn: network.clock)
                #expect(await connection.metrics.queuedRequests == 1)
                #expect(await connection.currentState.phase == .connecting)
                gate.withLock { $0 }?.resume()
                #expect(try await bounded("the reply") { try await reply.value }.json == ["echo": ["n": 7]])
                #expect(handledBeforeAccept.load(ordering: .relaxed) == 0)
                await connection.close()
            }
        } }
    }

    @Test("the same client id connecting again closes its older connection; pushes go to the new one")
    func replacedConnection() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let old = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("hana") { $0.reconnect = .disabled })
            try await awaitClient("hana", on: server)
            let serverEvents = server.events
            let fresh = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("hana"))
            let final = try await finalState(of: old)
            #expect(final.reason?.code == .sessionTakenOver)
            let notifications = fresh.notifications
            try await server.push(indexed(1), toClient: "hana")
            #expect(try await collect(1, from: notifications, "the push").map(index(of:)) == [1])
            _ = try await firstEvent(serverEvents, "the older peer to be gone on the server") { $0.kind == .peerDisconnected }
            #expect(server.peerCount == 1)
            await fresh.close()
        }
    }

    @Test("a server whose store was replaced (in memory, restarted): the client hears a reset and takes the new sequence from 1")
    func resetAfterStoreLoss() async throws {
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = .inMemory
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        let connection = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("ivan"))
        let watcher = StateWatcher(connection)
        let notifications = connection.notifications
        let events = connection.sessionEvents
        try await watcher.next(.connected)
        try await awaitClient("ivan", on: server.server)
        for number in 0..<3 { try await server.server.push(indexed(number), toClient: "ivan") }
        #expect(try await collect(3, from: notifications, "the first pushes").map(\.serial) == [1, 2, 3])
        await server.stop()
        try await watcher.next(.reconnecting)
        // A new server on the same port, with a new, empty store.
        configuration.port = server.port
        configuration.mailboxes = .inMemory
        let replacement = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await replacement.start()
        try await watcher.next(.connected)
        #expect(try await collect(2, from: events, "the events") == [
            SessionEvent(kind: .reset, lastSequence: 0, serverSequence: 0),
            SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 0),
        ])
        try await replacement.server.push(indexed(10), toClient: "ivan")
        let next = try await collect(1, from: notifications, "the first push of the new store")
        #expect(next == [Frame(type: 0x10, serial: 1, payload: Array("10".utf8))])
        await connection.close()
        await replacement.stop()
    }

    @Test("with manual acknowledgement the mailbox keeps pushes until acknowledge(through:); automatic ones empty it by count, and the rest at the acknowledgement delay, not 1 ns before")
    func acknowledgementsEmptyTheMailbox() async throws {
        let store = WatchedMailboxStore(InMemoryMailboxStore())
        let limits = MailboxLimits()
        let now = MailboxTime(millisecondsSince1970: 0)
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: {
                $0.mailboxes = MailboxConfiguration(store: store)
            }, handlers: echoHandlers) { server, endpoint in
                let manual = try await Connection.connect(to: endpoint, configuration: session("judy", on: network) {
                    $0.session?.acknowledgesAutomatically = false
                })
                let automatic = try await Connection.connect(to: endpoint, configuration: session("kim", on: network) {
                    $0.session?.acknowledgeEvery = 10
                })
                let manualPushes = manual.notifications
                let automaticPushes = automatic.notifications
                try await awaitClient("judy", on: server)
                try await awaitClient("kim", on: server)
                // One at a time, each once kim has the one before: kim reads each alone, and
                // counts to 10 exactly (pushes read together are counted together).
                for number in 0..<25 {
                    try await server.push(indexed(number), toClients: ["judy", "kim"])
                    _ = try await collect(1, from: automaticPushes, "kim's push \(number)")
                }
                _ = try await collect(25, from: manualPushes, "judy's pushes")
                // kim acknowledged at 10 and 20 by count, and the rest after the delay: two
                // hellos and two acknowledgements have reached the server so far. (The
                // server may hand the store both acknowledgements as one.)
                await network.runUntilIdle()
                #expect(await server.metrics().framesIn == 4)
                _ = try await firstElement(of: store.acknowledgements.filter { $0 == "kim 20" })
                #expect(try await store.openMailbox(for: "kim", limits: limits, now: now).count == 5)
                await network.advance(by: SessionConfiguration(clientID: "kim").acknowledgeDelay - .nanoseconds(1))
                #expect(await server.metrics().framesIn == 4, "acknowledged before the delay")
                await network.advance(by: .nanoseconds(1))
                #expect(await server.metrics().framesIn == 5, "not acknowledged at the delay")
                #expect(network.clock.elapsed == .milliseconds(500))
                #expect(try await collect(1, from: store.acknowledgements, "kim's acknowledgement after the delay") == ["kim 25"])
                #expect(try await store.openMailbox(for: "kim", limits: limits, now: now).count == 0)
                #expect(try await store.openMailbox(for: "judy", limits: limits, now: now).count == 25)
                await manual.acknowledge(through: 20)
                #expect(try await collect(1, from: store.acknowledgements, "judy's acknowledgement") == ["judy 20"])
                let judy = try await store.openMailbox(for: "judy", limits: limits, now: now)
                #expect(judy.count == 5)
                #expect(try await store.messages(for: "judy", after: 0, limit: 100).map(\.sequence) == Array(21...25))
                await manual.close()
                await automatic.close()
            }
        }
    }

    @Test("pushes to a connected client are written live and do not reach the offline callback; pushes to one never seen do")
    func offlineCallback() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let (calls, callSink) = AsyncStream.makeStream(of: OfflinePush.self)
            server.onOfflinePush { push in callSink.yield(push) }
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("lena"))
            let notifications = connection.notifications
            try await awaitClient("lena", on: server)
            #expect(try await server.push(indexed(1), toClients: ["lena", "mo", "lena", "mo"]) == [1, 1, 2, 2])
            #expect(try await collect(2, from: notifications, "lena's pushes").map(\.serial) == [1, 2])
            #expect(try await collect(2, from: calls, "the offline callbacks") == [
                OfflinePush(clientID: "mo", sequence: 1, frame: Frame(type: 0x10, serial: 1, payload: Array("1".utf8))),
                OfflinePush(clientID: "mo", sequence: 2, frame: Frame(type: 0x10, serial: 2, payload: Array("1".utf8))),
            ])
            #expect(try await server.clientIDs() == ["lena", "mo"])
            await connection.close()
        }
    }

    @Test("pushing to a client id on a server without mailboxes is an invalid-argument error")
    func noMailboxes() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let error = await #expect(throws: TetherError.self) { try await server.push(indexed(0), toClient: "x") }
            #expect(error?.code == .invalidArgument)
            // A client with a session is refused for good: the server does not know the hello.
            let refused = await #expect(throws: TetherError.self) {
                try await Connection.connect(to: endpoint, configuration: sessionConfiguration("x"))
            }
            #expect(refused?.code == .sessionRejected)
            #expect(refused?.message == "\(endpoint.host):\(endpoint.port) rejected the session of client x: unknown type 0x401")
        }
    }

    @Test("a store that fails while a client resumes: that attempt is refused for now, and the client retries until it works")
    func storeFailureIsRetried() async throws {
        let store = FlakyMailboxStore(failingOpens: [2])
        try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: echoHandlers) { server, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: sessionConfiguration("nora"))
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                proxy.cutAll()
                let refused = try await watcher.next("the refused resume") { $0.reason?.code == .sessionRejected }
                #expect(refused.phase == .reconnecting)
                #expect(refused.reason?.message == "127.0.0.1:\(proxy.endpoint.port) could not resume client nora now: the mailbox of nora could not be opened: the store is down")
                try await watcher.next(.connected)
                #expect(await watcher.phases == [.connected, .reconnecting, .connecting, .reconnecting, .connecting, .connected])
                #expect(store.opens == 3)
                await connection.close()
            }
        }
    }

    @Test("bad hellos on the wire: malformed JSON, an empty or oversized client id, a second hello; each gets a refusal, and other peers are untouched")
    func badHellos() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let good = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("pat"))
            let goodPushes = good.notifications
            let cases: [(payload: String, error: String)] = [
                ("{not json", "malformed session hello: expected {\"clientID\": …, \"lastSequence\": …}"),
                (#"{"clientID": "", "lastSequence": 0}"#, "client id must be 1 to 256 bytes"),
                (#"{"clientID": "\#(String(repeating: "x", count: 257))", "lastSequence": 0}"#, "client id must be 1 to 256 bytes"),
            ]
            for (serial, bad) in cases.enumerated() {
                let raw = try RawSocket.connect(to: endpoint)
                defer { raw.close() }
                try raw.write(seedBytes(type: 0x401, serial: UInt32(serial + 1), payload: Array(bad.payload.utf8)))
                let answer = try #require(try await raw.readFrame())
                #expect(answer.serial == UInt32(serial + 1))
                #expect(answer.payload == SessionWire.encode(SessionWire.Refusal(error: bad.error, rejected: true)))
            }
            let twice = try RawSocket.connect(to: endpoint)
            defer { twice.close() }
            let hello = SessionWire.encode(SessionWire.Hello(clientID: "quinn", token: nil, lastSequence: 0))
            try twice.write(seedBytes(type: 0x401, serial: 1, payload: hello) + seedBytes(type: 0x401, serial: 2, payload: hello))
            // Answers are matched by serial: the refusal may come first.
            var answers: [UInt32: Frame] = [:]
            for _ in 0..<2 {
                let answer = try #require(try await twice.readFrame())
                answers[answer.serial] = answer
            }
            #expect(withoutEpoch(answers[1])?.payload == SessionWire.encode(SessionWire.Welcome(accepted: true, clientID: "quinn", lastSequence: 0, resumeAfter: 0)))
            #expect(answers[2]?.payload == SessionWire.encode(SessionWire.Refusal(error: "this connection is already identified as quinn", rejected: true)))
            // A garbage acknowledgement is ignored; the session goes on.
            try twice.write(seedBytes(type: 0x400, serial: 9, payload: Array("{]".utf8)))
            try await server.push(indexed(5), toClient: "quinn")
            #expect(try await twice.readFrame() == Frame(type: 0x10, serial: 1, payload: Array("5".utf8)))
            try await server.push(indexed(6), toClient: "pat")
            #expect(try await collect(1, from: goodPushes, "pat's push").map(\.serial) == [1])
            await good.close()
        }
    }

    @Test("pushes replayed as a fresh connection opens reach a subscription made after connect() returns; with init and connect(), events too")
    func replayOnFirstConnect() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            for number in 0..<5 { try await server.push(indexed(number), toClient: "rita") }
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("rita"))
            let pushes = try await collect(5, from: connection.notifications, "the pushes stored before the first connect")
            #expect(pushes.map(\.serial) == Array(1...5))
            await connection.close()

            for number in 5..<8 { try await server.push(indexed(number), toClient: "sam") }
            let early = Connection(to: endpoint, configuration: sessionConfiguration("sam"))
            let events = early.sessionEvents
            let notifications = early.notifications
            try await early.connect()
            #expect(try await collect(1, from: events, "the first resume") == [SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 3)])
            #expect(try await collect(3, from: notifications, "sam's pushes").map(index(of:)) == [5, 6, 7])
            let again = await #expect(throws: TetherError.self) { try await early.connect() }
            #expect(again?.code == .invalidArgument)
            await early.close()
        }
    }

    @Test("plain pushes to an identified client go out with serial 0 and leave its sequence alone")
    func plainPushesToSessions() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("tom"))
            let notifications = connection.notifications
            try await awaitClient("tom", on: server)
            #expect(await server.broadcast(Frame(type: 0x11, serial: 77, payload: [1])) == 1)
            try await server.push(indexed(0), toClient: "tom")
            #expect(try await collect(2, from: notifications, "both pushes") == [
                Frame(type: 0x11, serial: 0, payload: [1]),
                Frame(type: 0x10, serial: 1, payload: Array("0".utf8)),
            ])
            #expect(await connection.lastSequence == 1)
            await connection.close()
        }
    }

    @Test("a replay far larger than the subscriber buffer size loses nothing for a subscriber that consumes late")
    func replayLargerThanBuffers() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let drafts = Array(repeating: "uma", count: 3000)
            _ = try await server.push(indexed(0), toClients: drafts)
            let connection = Connection(to: endpoint, configuration: sessionConfiguration("uma") {
                $0.limits.subscriberBufferSize = 16
            })
            // Everything arrives before the subscriber reads a single element: a second
            // subscriber, which takes each push as it comes, says when.
            let notifications = connection.notifications
            let counter = connection.notifications
            try await connection.connect()
            _ = try await collect(3000, from: counter, "the replay, as it arrives")
            #expect(await connection.metrics.notificationsReceived == 3000)
            let received = try await collect(3000, from: notifications, "the replay")
            #expect(received.map(\.serial) == Array(1...3000))
            #expect(await connection.metrics.droppedElements == 0)
            await connection.close()
        }
    }
}

/// An in-memory store whose `openMailbox` fails on the given calls (1 for the first).
final class FlakyMailboxStore: MailboxStore {
    private let base = InMemoryMailboxStore()
    private let failing: Set<Int>
    private let count = Lock(0)

    init(failingOpens: Set<Int>) { failing = failingOpens }

    var opens: Int { count.withLock { $0 } }

    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws -> [UInt64] {
        try await base.append(messages, limits: limits, now: now)
    }

    func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> MailboxSummary {
        let call = count.withLock { value -> Int in
            value += 1
            return value
        }
        if failing.contains(call) { throw TetherError(code: .storeFailed, message: "the store is down") }
        return try await base.openMailbox(for: clientID, limits: limits, now: now)
    }

    func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage] {
        try await base.messages(for: clientID, after: sequence, limit: limit)
    }

    func acknowledge(_ clientID: String, through sequence: UInt64) async throws {
        try await base.acknowledge(clientID, through: sequence)
    }

    func clientIDs() async throws -> [String] {
        try await base.clientIDs()
    }
}
