import Synchronization
import Testing
import TetherTesting
@testable import Tether

@Suite("Switching user", .timeLimit(.guarded))
struct SessionSwitchTests {
    @Test("alice's pushes before the switch, bob's after: exact sequences, alice's deliveries acknowledged first, no alice push after the switch event, the same subscriptions throughout, a request in flight failed")
    func switchUser() async throws {
        let store = WatchedMailboxStore(InMemoryMailboxStore())
        let hellos = HelloLog()
        let (stalled, stalledSink) = AsyncStream.makeStream(of: Void.self)
        try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x405) { _, _ in
                stalledSink.yield()
                try await suspendUntilCancelled()
            }
            server.authenticate { hellos.record($0) }
        }) { server, endpoint in
            // Acknowledgements only by the delay, which the test never waits for: the switch
            // must send alice's itself.
            let connection = Connection(to: endpoint, configuration: sessionConfiguration("alice", token: "a") {
                $0.session?.acknowledgeDelay = .seconds(600)
            })
            let pushes = connection.notifications
            let events = connection.sessionEvents
            try await connection.connect()
            for number in 0..<3 {
                try await server.push(indexed(number), toClient: "alice")
            }
            #expect(try await collect(3, from: pushes, "alice's pushes") == [
                Frame(type: 0x10, serial: 1, payload: Array("0".utf8)),
                Frame(type: 0x10, serial: 2, payload: Array("1".utf8)),
                Frame(type: 0x10, serial: 3, payload: Array("2".utf8)),
            ])
            let request = Task { try await connection.request(Request(type: 0x405, json: [:])) }
            _ = try await collect(1, from: stalled, "the request to reach the server")

            try await connection.switchSession(to: SessionIdentity(clientID: "bob", token: "b"))

            try await awaitAcknowledged(3, by: "alice", in: store)
            let failure = await #expect(throws: TetherError.self) { try await request.value }
            #expect(failure?.code == .connectionLost)
            #expect(failure?.message.hasSuffix("failed: connection lost: the session switched from client alice to client bob") == true)
            #expect(await connection.lastSequence == 0)
            #expect(server.peer(forClient: "bob") != nil)
            try await server.push(indexed(3), toClient: "alice")
            for number in 100..<103 {
                try await server.push(indexed(number), toClient: "bob")
            }
            #expect(try await collect(3, from: pushes, "bob's pushes") == [
                Frame(type: 0x10, serial: 1, payload: Array("100".utf8)),
                Frame(type: 0x10, serial: 2, payload: Array("101".utf8)),
                Frame(type: 0x10, serial: 3, payload: Array("102".utf8)),
            ])
            #expect(try await collect(3, from: events, "the session events") == [
                SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 0),
                SessionEvent(kind: .switched, lastSequence: 0, clientID: "bob"),
                SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 0),
            ])
            #expect(await connection.lastSequence == 3)
            #expect(hellos.seen == ["alice a", "bob b"])
            #expect(await connection.metrics.connects == 2)
            let reply = try await connection.request(Request(type: 0x402, json: ["n": 2]))
            #expect(reply.json == ["echo": ["n": 2]])
            await connection.close()
        }
    }

    @Test("a push of the earlier user held for a subscriber to come is dropped at the switch: the first subscriber of its type later gets only the new user's")
    func heldPushesDropped() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let connection = Connection(to: endpoint, configuration: sessionConfiguration("alice"))
            let plain = connection.notifications(ofType: 0x10)
            try await connection.connect()
            try await server.push(Frame(type: 0x11, payload: Array("alice".utf8)), toClient: "alice")
            try await server.push(Frame(type: 0x10, payload: Array("after".utf8)), toClient: "alice")
            // In order on the wire: once this one is here, alice's 0x11 is held.
            #expect(try await collect(1, from: plain, "alice's 0x10") == [Frame(type: 0x10, serial: 2, payload: Array("after".utf8))])
            #expect(await connection.metrics.heldNotifications == 1)
            try await connection.switchSession(to: SessionIdentity(clientID: "bob"))
            #expect(await connection.metrics.heldNotifications == 0)
            try await server.push(Frame(type: 0x11, payload: Array("bob".utf8)), toClient: "bob")
            try await server.push(Frame(type: 0x10, payload: Array("bob".utf8)), toClient: "bob")
            #expect(try await collect(1, from: plain, "bob's 0x10") == [Frame(type: 0x10, serial: 2, payload: Array("bob".utf8))])
            let late = connection.notifications(ofType: 0x11)
            #expect(try await collect(1, from: late, "the held 0x11") == [Frame(type: 0x11, serial: 1, payload: Array("bob".utf8))])
            await connection.close()
        }
    }

    @Test("switching to a user the server rejects: switchSession throws sessionRejected and the connection fails; after that it throws notConnected")
    func switchRejected() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: { server in
            echoHandlers(server)
            server.authenticate { hello in
                guard hello.clientID == "alice" else { throw TetherError(code: .sessionRejected, message: "unknown user") }
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("alice"))
            let watcher = StateWatcher(connection)
            try await watcher.next(.connected)
            let error = await #expect(throws: TetherError.self) {
                try await connection.switchSession(to: SessionIdentity(clientID: "mallory"))
            }
            #expect(error?.code == .sessionRejected)
            #expect(error?.message == "\(endpoint.host):\(endpoint.port) rejected the session of client mallory: unknown user")
            #expect(try await watcher.next(.failed).reason == error)
            #expect(await watcher.phases == [.connected, .connecting, .failed])
            let after = await #expect(throws: TetherError.self) {
                try await connection.switchSession(to: SessionIdentity(clientID: "alice"))
            }
            #expect(after?.code == .notConnected)
        }
    }

    @Test("switching to a provider: it is asked with connect for the new user, and answers a rejection once more")
    func switchToProvider() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: { server in
            echoHandlers(server)
            server.authenticate { hello in
                guard hello.token != "stale" else { throw TetherError(code: .sessionRejected, message: "token expired") }
            }
        }) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("alice"))
            let log = ProviderLog()
            let provider = SessionIdentityProvider { context in
                _ = log.record(context)
                return SessionIdentity(clientID: "carol", token: context.reason == .rejected ? "fresh" : "stale")
            }
            try await connection.switchSession(to: provider, resumeAfter: 0)
            #expect(log.asked.map(\.reason) == [.connect, .rejected])
            #expect(log.asked.first?.previous == nil)
            #expect(server.peer(forClient: "carol") != nil)
            await connection.close()
        }
    }

    @Test("before connect(), a switch replaces the configured identity and returns at once; after close(), it throws")
    func switchOutsideALiveConnection() async throws {
        let hellos = HelloLog()
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: { server in
            echoHandlers(server)
            server.authenticate { hellos.record($0) }
        }) { _, endpoint in
            let connection = Connection(to: endpoint, configuration: sessionConfiguration("alice"))
            let events = connection.sessionEvents
            try await connection.switchSession(to: SessionIdentity(clientID: "dora", token: "d"), resumeAfter: 0)
            try await connection.connect()
            #expect(hellos.seen == ["dora d"])
            #expect(try await collect(2, from: events, "the events") == [
                SessionEvent(kind: .switched, lastSequence: 0, clientID: "dora"),
                SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 0),
            ])
            await connection.close()
            let error = await #expect(throws: TetherError.self) {
                try await connection.switchSession(to: SessionIdentity(clientID: "erin"))
            }
            #expect(error?.code == .connectionClosed)
        }
    }
}
