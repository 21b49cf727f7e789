import Testing
@testable import Tether

/// The server's session events (identified, resumed with its replay, ended, taken over) with
/// the client id on them and on the peer's disconnection, and the client's word that its
/// session is (re)established: exact sequences, over real loopback sockets.
@Suite("Session events", .timeLimit(.guarded))
struct SessionEventTests {
    /// One line per event, every field that matters and nothing that varies between runs.
    static func line(_ event: ServerEvent) -> String {
        [
            event.kind.description,
            event.peer.map(String.init(describing:)) ?? "-",
            event.clientID ?? "-",
            event.pushesToReplay.map(String.init) ?? "-",
            event.reason.map { "\($0.code)" } ?? "-",
        ].joined(separator: " ")
    }

    /// The next `count` events about peers, as lines.
    static func lines(_ count: Int, of events: Subscription<ServerEvent>, _ what: String) async throws -> [String] {
        try await collect(count, from: events.filter { $0.kind != .listening }, what).map(line)
    }

    @Test("a first hello is identified, the end of its connection ends the session, and the next hello resumes with the pushes stored meanwhile to replay")
    func identifiedEndedResumed() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }) { server, endpoint in
            let events = server.events
            let first = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.session = SessionConfiguration(clientID: "alice")
            })
            let pushes = first.notifications
            #expect(try await server.push(indexed(1), toClient: "alice") == 1)
            _ = try await collect(1, from: pushes, "the live push")
            #expect(try await Self.lines(2, of: events, "the first session") == [
                "peerConnected peer#1 - - -",
                "sessionIdentified peer#1 alice 0 -",
            ])
            await first.close()
            #expect(try await Self.lines(2, of: events, "the end of the first session") == [
                "sessionEnded peer#1 alice - \(TetherError.Code.peerClosed)",
                "peerDisconnected peer#1 alice - \(TetherError.Code.peerClosed)",
            ])
            #expect(try await server.push(indexed(2), toClient: "alice") == 2)
            #expect(try await server.push(indexed(3), toClient: "alice") == 3)
            let second = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.session = SessionConfiguration(clientID: "alice", resumeAfter: 1)
            })
            #expect(try await Self.lines(2, of: events, "the resumed session") == [
                "peerConnected peer#2 - - -",
                "sessionResumed peer#2 alice 2 -",
            ])
            await second.close()
        }
    }

    @Test("a newer connection of the same client takes the session over: the older peer says so, then disconnects with its client id")
    func takenOver() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }) { server, endpoint in
            let events = server.events
            let older = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.session = SessionConfiguration(clientID: "bob")
            })
            #expect(try await Self.lines(2, of: events, "the first session") == [
                "peerConnected peer#1 - - -",
                "sessionIdentified peer#1 bob 0 -",
            ])
            let olderAddress = try #require(await older.localAddress)
            let newer = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.session = SessionConfiguration(clientID: "bob")
            })
            let newerAddress = try #require(await newer.localAddress)
            let seen = try await collect(4, from: events, "the takeover")
            // Each peer's events in order; the two peers run on their own loops.
            #expect(seen.filter { $0.peer?.rawValue == 2 }.map(Self.line) == [
                "peerConnected peer#2 - - -",
                "sessionIdentified peer#2 bob 0 -",
            ])
            let gone = seen.filter { $0.peer?.rawValue == 1 }
            #expect(gone.map(Self.line) == [
                "sessionTakenOver peer#1 bob - \(TetherError.Code.sessionTakenOver)",
                "peerDisconnected peer#1 bob - \(TetherError.Code.sessionTakenOver)",
            ])
            #expect(gone.first?.reason?.message == "client bob connected again from \(newerAddress); closed its older connection from \(olderAddress)")
            #expect(gone.first?.description == "peer#1 lost client bob to a newer connection: client bob connected again from \(newerAddress); closed its older connection from \(olderAddress)")
            await older.close()
            await newer.close()
        }
    }

    @Test("a client sent on by a draining server hears its session established on each connection, exactly once, and names its client id only while connected")
    func reestablishedAfterDrain() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }) { second, endpoint in
            var configuration = ServerConfiguration(port: 0)
            configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
            configuration.mailboxes = .inMemory
            let first = Server(configuration: configuration)
            let firstEvents = first.events
            let secondEvents = second.events
            let running = Task { try await first.run() }
            let address = try await bounded("the first server to listen") { try await first.listeningAddress() }
            let connection = Connection(to: Endpoint(host: address.ipAddress, port: address.port), configuration: testConfiguration {
                $0.reconnect = .backoff(initialDelay: .seconds(5))
                $0.alternateEndpoints = [endpoint]
                $0.session = SessionConfiguration(clientID: "carol")
            })
            let sessionEvents = connection.sessionEvents
            #expect(await connection.sessionClientID == nil)
            try await connection.connect()
            #expect(await connection.sessionClientID == "carol")
            try await bounded("drain() to return") { await first.drain() }
            try await bounded("run() to return") { try await running.value }
            #expect(try await Self.lines(4, of: firstEvents, "the first server's events") == [
                "peerConnected peer#1 - - -",
                "sessionIdentified peer#1 carol 0 -",
                // The client leaves as soon as it has read the notice: it closes first.
                "sessionEnded peer#1 carol - \(TetherError.Code.peerClosed)",
                "peerDisconnected peer#1 carol - \(TetherError.Code.peerClosed)",
            ])
            #expect(try await Self.lines(2, of: secondEvents, "the second server's events") == [
                "peerConnected peer#1 - - -",
                "sessionIdentified peer#1 carol 0 -",
            ])
            // The second server keeps another mailbox history: the client hears so first.
            #expect(try await collect(3, from: sessionEvents, "the session events") == [
                SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 0),
                SessionEvent(kind: .reset, lastSequence: 0, serverSequence: 0),
                SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 0),
            ])
            #expect(await connection.sessionClientID == "carol")
            #expect(await connection.metrics.reconnectAttempts == 0)
            await connection.close()
            #expect(await connection.sessionClientID == nil)
        }
    }
}
