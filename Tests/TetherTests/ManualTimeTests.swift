import Testing
@testable import Tether

/// A client connected to a raw socket server on 127.0.0.1: the client on `group`, the
/// server's end of the connection returned with it.
private func connectToRawServer(
    group: EventLoopGroup,
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) async throws -> (Connection, RawSocket, RawSocket) {
    let (listener, endpoint) = try RawSocket.listen()
    let configuration = testConfiguration {
        $0.eventLoopGroup = group
        change(&$0)
    }
    async let accepted = listener.accept()
    let connection = try await Connection.connect(to: endpoint, configuration: configuration)
    return (connection, listener, try await accepted)
}

extension Connection {
    /// Whether a reconnect waits for its backoff timer.
    var waitsForBackoff: Bool { backoffTimer != nil }
    /// The last sequence the session has acknowledged to the server.
    var acknowledgedThrough: UInt64? { session?.lastAcknowledged }
}

/// Heartbeat events of a connection, collected from before it connects.
private actor HeartbeatLog {
    private var iterator: Subscription<Heartbeat>.AsyncIterator
    private(set) var seen: [Heartbeat] = []

    init(_ connection: Connection) {
        iterator = connection.heartbeats.makeAsyncIterator()
    }

    /// Consumes `count` more events, within the bound.
    func take(_ count: Int) async throws -> [Heartbeat] {
        try await bounded("\(count) heartbeat events") { [self] in await consume(count) }
    }

    private func consume(_ count: Int) async -> [Heartbeat] {
        var local = iterator
        var taken: [Heartbeat] = []
        while taken.count < count, let event = await local.next(isolation: self) {
            taken.append(event)
        }
        seen += taken
        return taken
    }
}

@Suite("Timeouts on a manual clock, over loopback sockets", .timeLimit(.minutes(1)))
struct ManualTimeTests {
    @Test("a request times out exactly at its deadline: not 1 ns before, with timedOut at it")
    func requestTimeout() async throws {
        try await withManualLoop { clock, group in
            let (connection, listener, server) = try await connectToRawServer(group: group)
            defer { listener.close(); server.close() }
            let key = await connection.nextRequestKey()
            let start = clock.now
            let pending = Task { try await connection.request(Request(type: 0x402, json: ["n": 1]), timeout: .seconds(5)) }
            // The request is on the wire, so its deadline is set: `start` plus 5 s, since the
            // clock has not moved.
            let written = try await server.readFrame()
            #expect(written?.type == 0x402)
            #expect(written?.serial == key.serial)

            await clock.advance(by: .seconds(5) - .nanoseconds(1))
            #expect(await connection.isPending(key), "timed out before its deadline")
            await clock.advance(by: .nanoseconds(1))
            #expect(clock.now == start + 5_000_000_000)
            // The timer's callback ends the request in the turn it fires.
            #expect(await !connection.isPending(key), "not timed out at its deadline")
            let outcome = try await bounded("the request's outcome") { await pending.result }
            #expect(throws: TetherError.self) { try outcome.get() }
            if case .failure(let error as TetherError) = outcome {
                #expect(error.code == .timedOut)
            }
            #expect(await connection.metrics.requestsTimedOut == 1)
            await connection.close()
        }
    }

    @Test("unanswered heartbeats end the connection interval × (misses + 1) after the last ack, not 1 ns sooner")
    func heartbeatMisses() async throws {
        try await withManualLoop { clock, group in
            let interval: Duration = .seconds(10)
            let (listener, endpoint) = try RawSocket.listen()
            defer { listener.close() }
            let connection = Connection(to: endpoint, configuration: testConfiguration {
                $0.eventLoopGroup = group
                $0.heartbeat = .every(interval, timeout: interval, maximumMissed: 3)
            })
            let log = HeartbeatLog(connection)
            let watcher = StateWatcher(connection)
            async let accepted = listener.accept()
            try await connection.connect()
            let server = try await accepted
            defer { server.close() }
            let start = clock.now

            // The first heartbeat goes out at once; the server answers it, then no more.
            let first = try #require(try await server.readFrame())
            #expect(first.type == 0x1 && first.serial == 1)
            try server.write(seedBytes(type: 0x1, serial: 1))
            let answered = try await log.take(2)
            #expect(answered.map(\.outcome) == [.sent, .acked])
            #expect(answered[1].roundTripTime == .zero)

            for serial in UInt32(2)...4 {
                await clock.advance(by: interval)
                let frame = try await server.readFrame()
                #expect(frame?.type == 0x1)
                #expect(frame?.serial == serial)
            }
            await clock.advance(by: interval - .nanoseconds(1))
            #expect(await connection.currentState.phase == .connected)
            await clock.advance(by: .nanoseconds(1))
            #expect(clock.now == start + 4 * 10_000_000_000)
            let closed = try await watcher.next(.closed)
            #expect(closed.reason?.code == .heartbeatTimeout)
            #expect(try await server.waitForClose())

            let events = try await log.take(6)
            #expect(events.map(\.serial) == [2, 2, 3, 3, 4, 4])
            #expect(events.map(\.outcome) == [.sent, .missed, .sent, .missed, .sent, .missed])
            #expect(await connection.metrics.heartbeatsMissed == 3)
        }
    }

    @Test("a reconnect starts exactly when its backoff has passed on the clock, and the backoff grows")
    func reconnectBackoff() async throws {
        try await withManualLoop { clock, group in
            let (connection, listener, first) = try await connectToRawServer(group: group) {
                $0.reconnect = .backoff(initialDelay: .seconds(2), multiplier: 2, jitter: 0)
            }
            defer { listener.close() }
            let watcher = StateWatcher(connection)
            var server = first
            for (attempt, delay) in [(1, Duration.seconds(2)), (2, .seconds(4))] {
                server.close()
                let waiting = try await watcher.next(.reconnecting)
                #expect(waiting.attempt == attempt)
                #expect(waiting.delay == delay)
                // The loss was read without the clock moving: the backoff counts from now.
                await clock.advance(by: delay - .nanoseconds(1))
                #expect(await connection.waitsForBackoff, "attempt \(attempt) started before its backoff")
                #expect(await connection.connectTask == nil)
                await clock.advance(by: .nanoseconds(1))
                #expect(await !connection.waitsForBackoff, "attempt \(attempt) did not start at its backoff")
                server = try await listener.accept()
                try await watcher.next(.connected)
            }
            server.close()
            await connection.close()
        }
    }

    @Test("a server closes a peer that sends nothing exactly at its idle timeout")
    func serverIdleTimeout() async throws {
        try await withManualLoop { clock, group in
            try await withServer(configure: {
                $0.eventLoopGroup = group
                $0.idleTimeout = .seconds(30)
                $0.handshakeTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let quiet = try RawSocket.connect(to: endpoint)
                defer { quiet.close() }
                let local = try Syscall.localAddress(quiet.fd).port
                // The peer's timers are armed before it is announced.
                _ = try await firstEvent(events, "the peer to connect") { $0.kind == .peerConnected }
                await clock.advance(by: .seconds(30) - .nanoseconds(1))
                #expect(server.peerCount == 1)
                await clock.advance(by: .nanoseconds(1))
                #expect(try await quiet.waitForClose())
                let gone = try await firstEvent(events, "the peer to be closed") { $0.kind == .peerDisconnected }
                #expect(gone.reason?.code == .idleTimeout)
                #expect(gone.reason?.message == "peer 127.0.0.1:\(local) sent nothing for 30 s")
                let metrics = await server.metrics()
                #expect(metrics.idleTimeouts == 1)
                #expect(metrics.handshakeTimeouts == 0)
            }
        }
    }

    @Test("a server closes a peer that sends part of a frame exactly at its handshake timeout")
    func serverHandshakeTimeout() async throws {
        try await withManualLoop { clock, group in
            try await withServer(configure: {
                $0.eventLoopGroup = group
                $0.handshakeTimeout = .seconds(10)
                $0.idleTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let stuck = try RawSocket.connect(to: endpoint)
                defer { stuck.close() }
                let local = try Syscall.localAddress(stuck.fd).port
                _ = try await firstEvent(events, "the peer to connect") { $0.kind == .peerConnected }
                try stuck.write(Array(seedBytes(type: 0x402, serial: 1).prefix(3)))
                await clock.advance(by: .seconds(10) - .nanoseconds(1))
                #expect(server.peerCount == 1)
                await clock.advance(by: .nanoseconds(1))
                #expect(try await stuck.waitForClose())
                let gone = try await firstEvent(events, "the peer to be closed") { $0.kind == .peerDisconnected }
                #expect(gone.reason?.code == .handshakeTimeout)
                #expect(gone.reason?.message == "peer 127.0.0.1:\(local) sent no complete frame within 10 s of connecting")
                let metrics = await server.metrics()
                #expect(metrics.handshakeTimeouts == 1)
                #expect(metrics.bytesIn == 3)
                #expect(metrics.framesIn == 0)
            }
        }
    }

    @Test("mailbox ages and the periodic expiry follow the manual clock: a push older than the maximum age goes at the first pass after, not at the one at its age")
    func mailboxExpiry() async throws {
        try await withManualLoop { clock, group in
            var mailboxes = MailboxConfiguration.inMemory
            mailboxes.clock = clock.mailboxClock(startingAt: MailboxTime(millisecondsSince1970: 1_000_000))
            mailboxes.limits.maximumAge = .seconds(60)
            mailboxes.expiryInterval = .seconds(30)
            try await withServer(configure: {
                $0.eventLoopGroup = group
                $0.mailboxes = mailboxes
            }, handlers: echoHandlers) { server, _ in
                let hub = try #require(server.hub)
                // Stored once the hub runs, so its passes are timed from before this.
                #expect(try await server.push(Frame(type: 0x10, payload: Array("1".utf8)), toClient: "ghost") == 1)
                for (seconds, removed) in [(30, [String]()), (60, []), (90, ["ghost"])] {
                    await clock.advance(by: .seconds(30))
                    let pass = try await bounded("the expiry pass at \(seconds) s") {
                        for await pass in hub.expiries { return pass }
                        throw TimedOut(what: "an expiry pass: the hub stopped")
                    }
                    #expect(pass.now == MailboxTime(millisecondsSince1970: 1_000_000 + Int64(seconds) * 1_000))
                    #expect(try pass.removed.get() == removed)
                }
                #expect(try await server.clientIDs() == [])
                #expect(await server.metrics().mailboxesRemoved == 1)
            }
        }
    }

    @Test("a session acknowledges the pushes it got exactly at its acknowledgement delay, when too few came to acknowledge by count")
    func acknowledgementDelay() async throws {
        try await withManualLoop { clock, group in
            let store = WatchedMailboxStore(InMemoryMailboxStore())
            try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: echoHandlers) { server, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("ruth") {
                    $0.eventLoopGroup = group
                    $0.session?.acknowledgeEvery = 100
                    $0.session?.acknowledgeDelay = .seconds(2)
                })
                let notifications = connection.notifications
                try await awaitClient("ruth", on: server)
                for number in 1...3 {
                    try await server.push(Frame(type: 0x10, payload: Array("\(number)".utf8)), toClient: "ruth")
                }
                // Read without the clock moving: the timer was set as the first arrived.
                #expect(try await collect(3, from: notifications, "ruth's pushes").map(\.serial) == [1, 2, 3])
                await clock.advance(by: .seconds(2) - .nanoseconds(1))
                #expect(await connection.acknowledgedThrough == 0)
                await clock.advance(by: .nanoseconds(1))
                #expect(await connection.acknowledgedThrough == 3)
                try await awaitAcknowledged(3, by: "ruth", in: store)
                await connection.close()
            }
        }
    }
}
