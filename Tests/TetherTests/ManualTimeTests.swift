import Testing
import TetherTesting
@testable import Tether

extension Connection {
    /// Whether a reconnect waits for its backoff timer.
    var waitsForBackoff: Bool { reconnectHandles.backoffTimer != nil }
    /// Whether a connect task runs.
    var dialsForTesting: Bool { attemptHandles.connectTask != nil }
    /// The last sequence the session has acknowledged to the server.
    var acknowledgedThrough: UInt64? { session?.lastAcknowledged }
}

@Suite("Timeouts on a manual clock", .timeLimit(.guarded))
struct ManualTimeTests {
    let endpoint = Endpoint(host: "server", port: 9000)

    @Test("a request times out exactly at its deadline: not 1 ns before, with timedOut at it")
    func requestTimeout() async throws {
        try await withTestNetwork { network in
            let (reached, arrival) = AsyncStream<UInt32>.makeStream()
            try await withNetworkServer(on: network, handlers: { server in
                server.handle(type: 0x402) { request, _ in
                    arrival.yield(request.serial)
                    try await untilCancelledByServer()
                    return Response()
                }
            }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: .testing(on: network))
                let key = await connection.nextRequestKey()
                let pending = Task { try await connection.request(Request(type: 0x402, json: ["n": 1]), timeout: .seconds(5)) }
                // The request reached the server, so its deadline is set: 5 s from 0, since
                // the clock has not moved.
                #expect(try await firstElement(of: reached) == key.serial)

                await network.advance(by: .seconds(5) - .nanoseconds(1))
                #expect(await connection.isPending(key), "timed out before its deadline")
                await network.advance(by: .nanoseconds(1))
                #expect(network.clock.elapsed == .seconds(5))
                // The timer's callback ends the request in the turn it fires.
                #expect(await !connection.isPending(key), "not timed out at its deadline")
                let outcome = try await withTimeLimit { await pending.result }
                #expect(throws: TetherError.self) { try outcome.get() }
                if case .failure(let error as TetherError) = outcome {
                    #expect(error.code == .timedOut)
                }
                #expect(await connection.metrics.requestsTimedOut == 1)
                await connection.close()
            }
        }
    }

    @Test("unanswered heartbeats end the connection interval × (misses + 1) after the last ack, not 1 ns sooner")
    func heartbeatMisses() async throws {
        try await withTestNetwork { network in
            let interval: Duration = .seconds(10)
            // The server answers the first heartbeat, then no more.
            let gate = HandlerGate()
            let (reached, arrival) = AsyncStream<UInt32>.makeStream()
            try await withNetworkServer(on: network, configure: { $0.profile = heartbeatsAsRequests }, handlers: { server in
                server.handle(type: 0x1) { request, _ in
                    arrival.yield(request.serial)
                    await gate.pass()
                    return Response()
                }
            }) { _, endpoint in
                let connection = Connection(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.heartbeat = .every(interval, timeout: interval, maximumMissed: 3)
                })
                let log = HeartbeatLog(connection)
                let watcher = StateWatcher(connection)
                try await connection.connect()
                let answered = try await log.take(2)
                #expect(answered == [Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero)])
                gate.close()

                await network.advance(by: interval * 4 - .nanoseconds(1))
                #expect(await connection.currentState.phase == .connected)
                await network.advance(by: .nanoseconds(1))
                #expect(network.clock.elapsed == interval * 4)
                let closed = try await watcher.next(.closed)
                #expect(closed.reason?.code == .heartbeatTimeout)

                let events = try await log.take(6)
                #expect(events.map(\.serial) == [2, 2, 3, 3, 4, 4])
                #expect(events.map(\.outcome) == [.sent, .missed, .sent, .missed, .sent, .missed])
                #expect(await connection.metrics.heartbeatsMissed == 3)
                #expect(try await collect(4, from: reached, "the heartbeats at the server") == [1, 2, 3, 4])
            }
        }
    }

    @Test("a reconnect starts exactly when its backoff has passed on the clock, and the backoff grows")
    func reconnectBackoff() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: { server in
                server.handle(type: 0x407) { _, peer in
                    await peer.close()
                    return Response()
                }
            }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.reconnect = .backoff(initialDelay: .seconds(2), multiplier: 2, jitter: 0)
                })
                let watcher = StateWatcher(connection)
                var start = Duration.zero
                for (attempt, delay) in [(1, Duration.seconds(2)), (2, .seconds(4))] {
                    // The server closes the connection; nothing came back on it.
                    _ = try? await connection.request(Request(type: 0x407), timeout: .seconds(5))
                    let waiting = try await watcher.next(.reconnecting)
                    #expect(waiting.attempt == attempt)
                    #expect(waiting.delay == delay)
                    // The loss was read without the clock moving: the backoff counts from now.
                    await network.advance(by: delay - .nanoseconds(1))
                    #expect(await connection.waitsForBackoff, "attempt \(attempt) started before its backoff")
                    #expect(await !connection.dialsForTesting)
                    await network.advance(by: .nanoseconds(1))
                    #expect(await !connection.waitsForBackoff, "attempt \(attempt) did not start at its backoff")
                    try await watcher.next(.connected)
                    start += delay
                    #expect(network.clock.elapsed == start)
                }
                await connection.close()
            }
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
