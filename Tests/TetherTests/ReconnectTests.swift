import Testing
@testable import Tether
import TetherTesting

/// A configuration that reconnects quickly, without jitter, so tests can predict delays.
func reconnecting(
    after initial: Duration = .milliseconds(20),
    attempts: Int? = nil,
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) -> ConnectionConfiguration {
    testConfiguration {
        $0.reconnect = .backoff(initialDelay: initial, multiplier: 2, maximumDelay: max(initial, .milliseconds(200)), jitter: 0, maximumAttempts: attempts)
        change(&$0)
    }
}

/// Waits, within the bound, until `condition` holds for the connection.
func until(_ what: String, _ connection: Connection, _ condition: @escaping @Sendable (ConnectionMetrics) -> Bool) async throws {
    try await until(what) { condition(await connection.metrics) }
}

/// Waits, within the bound, until `condition` holds, looking every millisecond: for state
/// that announces no event of its own (a server's peer count, a connection's metrics).
func until(_ what: String, _ condition: @escaping @Sendable () async -> Bool) async throws {
    try await bounded(what) {
        while !(await condition()) {
            try await Task.sleep(for: .milliseconds(1))
        }
    }
}

@Suite("Reconnect policy")
struct ReconnectPolicyTests {
    @Test("delays start at the initial delay, grow by the multiplier and stop at the maximum")
    func growth() {
        let policy = ReconnectPolicy()
        let seconds = (1...14).map { policy.delay(forAttempt: $0, random: 0) }
        #expect(seconds.prefix(5) == [.seconds(1), .milliseconds(1600), .milliseconds(2560), .milliseconds(4096), .nanoseconds(6_553_600_000)])
        #expect(seconds.last == .seconds(120))
        #expect(zip(seconds, seconds.dropFirst()).allSatisfy { $0 <= $1 })
    }

    @Test("jitter moves each delay by at most ±20 %, both ways")
    func jitter() {
        let policy = ReconnectPolicy()
        #expect(policy.delay(forAttempt: 1, random: -1) == .milliseconds(800))
        #expect(policy.delay(forAttempt: 1, random: 1) == .milliseconds(1200))
        #expect(policy.delay(forAttempt: 30, random: 1) == .seconds(144))
        var generator = SplitMix(seed: 42)
        let delays = (0..<1000).map { _ in policy.delay(forAttempt: 2, using: &generator) }
        #expect(delays.allSatisfy { $0 >= .milliseconds(1280) && $0 <= .milliseconds(1920) })
        #expect(delays.contains { $0 < .milliseconds(1500) } && delays.contains { $0 > .milliseconds(1700) })
    }
}

/// A small seeded generator, so tests see the same numbers every run: the one the backoff
/// jitter uses.
typealias SplitMix = BackoffRandom

@Suite("Reconnecting over real sockets", .timeLimit(.minutes(1)))
struct ReconnectTests {
    @Test("a server restarted on the same port: the client comes back by itself, a request made meanwhile goes out, pushes reach the old subscription")
    func serverRestart() async throws {
        let host = try TestServer(handlers: echoHandlers)
        try await host.start()
        let connection = try await Connection.connect(to: host.endpoint, configuration: reconnecting(after: .milliseconds(50)))
        let watcher = StateWatcher(connection)
        let notifications = connection.notifications
        try await watcher.next(.connected)
        await host.stop()
        let lost = try await watcher.next(.reconnecting)
        #expect(lost.reason?.code == .peerClosed)
        #expect(lost.attempt == 1)
        #expect(lost.delay == .milliseconds(50))
        let pending = Task { try await connection.request(Request(type: 0x402, json: ["n": 1]), timeout: .seconds(10)) }
        try await until("the request to queue", connection) { $0.queuedRequests == 1 }
        try await host.start()
        try await watcher.next(.connected)
        let reply = try await bounded("the queued request's response") { try await pending.value }
        #expect(reply.json == ["echo": ["n": 1]])
        let server = host.server
        try await bounded("the server to see the peer") {
            while server.peerCount == 0 { try await Task.sleep(for: .milliseconds(1)) }
        }
        await server.broadcast(Frame(type: 0x2, serial: 7, payload: [42]))
        let pushes = try await collect(1, from: notifications, "the push after reconnecting")
        #expect(pushes == [Frame(type: 0x2, serial: 7, payload: [42])])
        let metrics = await connection.metrics
        // Two connections at least; a connect that lands in the old listener's backlog just
        // as it closes makes a third, which is as it should be.
        #expect(metrics.connects >= 2)
        #expect(metrics.reconnectAttempts >= 1)
        #expect(metrics.requestsCompleted == 1)
        #expect(metrics.requestsFailed == 0)
        #expect(metrics.framesOut == 1)
        #expect(metrics.framesIn == 2)
        #expect(metrics.bytesOut == 12 + 7)
        #expect(metrics.bytesIn >= 12 + 1)
        await connection.close()
        await host.stop()
        let phases = await watcher.phases
        #expect(phases.first == .connected)
        #expect(phases.filter { $0 == .connected }.count == 2)
    }

    @Test("a server shutting down mid-request answers nothing made up: the request fails with connectionLost")
    func shutdownMidRequest() async throws {
        for round in 0..<5 {
            let host = try TestServer(handlers: echoHandlers)
            try await host.start()
            let connection = try await Connection.connect(to: host.endpoint, configuration: testConfiguration())
            let slow = Task { try await connection.request(Request(type: 0x404, json: ["delay_ms": 5000]), timeout: .seconds(10)) }
            try await until("the slow request to be in flight", connection) { $0.inFlightRequests == 1 }
            await host.stop()
            // Not the handler's cancellation dressed up as an error response.
            let error = await #expect(throws: TetherError.self, "round \(round)") { try await bounded("the request to fail") { try await slow.value } }
            #expect(error?.code == .connectionLost, "round \(round)")
            // A clean close, or a reset when the server's socket still held unread bytes.
            #expect([.peerClosed, .connectionReset].contains((error?.underlying as? TetherError)?.code), "round \(round)")
            await connection.close()
        }
    }

    @Test("close() during the reconnect backoff ends everything at once, with no further attempt")
    func closeDuringBackoff() async throws {
        // On a manual clock the 1 s backoff cannot end in real time, however busy the
        // machine: close() comes 1 ns before its deadline, then time moves far past it.
        try await withManualLoop { clock, group in
            let (listener, endpoint) = try RawSocket.listen()
            defer { listener.close() }
            async let accepted = listener.accept()
            let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .seconds(1)) { $0.eventLoopGroup = group })
            let watcher = StateWatcher(connection)
            let peer = try await accepted
            let deadline = clock.now &+ 1_000_000_000
            peer.close()
            let lost = try await watcher.next(.reconnecting)
            #expect(lost.reason?.code == .peerClosed)
            #expect(lost.attempt == 1)
            #expect(lost.delay == .seconds(1))
            let queued = Task { try await connection.request(Request(type: 0x402), timeout: .seconds(10)) }
            try await until("the request to queue", connection) { $0.queuedRequests == 1 }
            await clock.advance(to: deadline &- 1)
            let pending = await connection.backoff
            #expect(pending?.deadline == deadline, "the backoff is not pending 1 ns before its deadline")
            #expect(pending?.connecting == false)
            #expect(await connection.metrics.reconnectAttempts == 0)

            await connection.close()
            // At once: when close() returns the request has failed and the backoff is gone,
            // with the clock still 1 ns before the deadline.
            let atClose = await connection.metrics
            #expect(atClose.queuedRequests == 0)
            #expect(atClose.requestsFailed == 1)
            #expect(await connection.currentState.phase == .closed)
            #expect(await connection.backoff == nil)
            let error = await #expect(throws: TetherError.self) { try await bounded("the queued request to fail") { try await queued.value } }
            #expect(error?.code == .connectionClosed)
            let closed = try await watcher.next(.closed)
            #expect(closed.reason?.code == .connectionClosed)
            #expect(await watcher.phases == [.connected, .reconnecting, .closed])

            // Past the backoff's deadline, and far past any later one: no attempt, ever.
            await clock.advance(to: deadline)
            await clock.advance(by: .seconds(600))
            #expect(await connection.currentState.phase == .closed)
            #expect(await connection.metrics.reconnectAttempts == 0)
            #expect(await connection.metrics.connects == 1)
            #expect(await connection.backoff == nil)
            // Nothing knocks on the listener either.
            await #expect(throws: TimedOut.self) { _ = try await listener.accept(timeout: .milliseconds(300)) }
        }
    }

    @Test("when every allowed attempt fails the connection ends failed, with the last error and each step observable")
    func attemptsExhausted() async throws {
        var (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .milliseconds(10), attempts: 2))
        let watcher = StateWatcher(connection)
        let peer = try await listener.accept()
        listener.close()
        peer.close()
        listener = try RawSocket.bindOnly().0
        let failed = try await watcher.next(.failed)
        #expect(failed.reason?.code == .connectionRefused)
        #expect(failed.reason?.message == "gave up on \(endpoint) after 2 reconnect attempts: connection refused by \(endpoint.host):\(endpoint.port)")
        let seen = await watcher.seen
        #expect(seen.map(\.phase) == [.connected, .reconnecting, .connecting, .reconnecting, .connecting, .failed])
        #expect(seen.compactMap(\.attempt) == [1, 2])
        #expect(seen.compactMap(\.delay) == [.milliseconds(10), .milliseconds(20)])
        #expect(seen[1].reason?.code == .peerClosed)
        #expect(seen[3].reason?.code == .connectionRefused)
        #expect(try await finalState(of: connection) == failed)
        let after = await #expect(throws: TetherError.self) { _ = try await connection.request(Request(type: 0x402)) }
        #expect(after?.code == .notConnected)
        #expect(await connection.metrics.reconnectAttempts == 2)
        _ = listener
    }

    @Test("requests made while reconnecting fail at once when they may not wait, and beyond the queue limit")
    func failFastAndQueueLimit() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let impatient = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .seconds(30)) { $0.requestsWaitForConnection = false })
        let patient = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .seconds(30)) { $0.limits.maximumQueuedRequests = 2 })
        let first = try await listener.accept()
        let second = try await listener.accept()
        first.close()
        second.close()
        try await StateWatcher(impatient).next(.reconnecting)
        try await StateWatcher(patient).next(.reconnecting)
        let refused = await #expect(throws: TetherError.self) { _ = try await impatient.request(Request(type: 0x402)) }
        #expect(refused?.code == .notConnected)
        #expect(refused?.message == "not connected to \(endpoint) (reconnecting), and requests do not wait for the connection")
        let waiting = (0..<2).map { _ in Task { try await patient.request(Request(type: 0x402), timeout: .seconds(10)) } }
        try await until("two requests to queue", patient) { $0.queuedRequests == 2 }
        let over = await #expect(throws: TetherError.self) { _ = try await patient.request(Request(type: 0x402)) }
        #expect(over?.code == .tooManyPendingRequests)
        #expect(over?.message == "2 requests are already waiting to be sent to \(endpoint), the limit")
        #expect(await patient.metrics.requestsRefused == 1)
        await patient.close()
        for task in waiting {
            let error = await #expect(throws: TetherError.self) { try await task.value }
            #expect(error?.code == .connectionClosed)
        }
        await impatient.close()
    }

    @Test("at the in-flight limit further requests wait, and go out in order as responses free places")
    func inFlightLimit() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: reconnecting { $0.limits.maximumInFlightRequests = 2 })
        let peer = try await listener.accept()
        let calls = (0..<4).map { index in
            Task { try await connection.request(Request(type: 0x402, payload: [UInt8(index)]), timeout: .seconds(10)) }
        }
        try await until("two in flight and two queued", connection) { $0.inFlightRequests == 2 && $0.queuedRequests == 2 }
        let a = try #require(try await peer.readFrame())
        let b = try #require(try await peer.readFrame())
        await #expect(throws: TimedOut.self) { _ = try await peer.readFrame(timeout: .milliseconds(200)) }
        try peer.write(seedBytes(type: 0x402, serial: a.serial, payload: a.payload))
        let c = try #require(try await peer.readFrame())
        try peer.write(seedBytes(type: 0x402, serial: b.serial, payload: b.payload))
        let d = try #require(try await peer.readFrame())
        #expect([a, b, c, d].map(\.serial) == [1, 2, 3, 4])
        for frame in [c, d] { try peer.write(seedBytes(type: 0x402, serial: frame.serial, payload: frame.payload)) }
        var answers: Set<[UInt8]> = []
        for call in calls { answers.insert(try await bounded("a response") { try await call.value }.payload) }
        #expect(answers == [[0], [1], [2], [3]])
        await connection.close()
    }

    @Test("send() waits above the outbound high-water mark and resumes, in order, when the peer reads")
    func backpressure() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: reconnecting { $0.limits.outboundHighWaterMark = 64 << 10 })
        let peer = try await listener.accept()
        let frameCount = 400
        let chunk = 16 << 10
        let sent = Lock(0)
        let sender = Task {
            for index in 0..<frameCount {
                try await connection.send(Frame(type: 0x2, serial: UInt32(index), payload: Array(repeating: UInt8(index % 251), count: chunk)))
                sent.withLock { $0 += 1 }
            }
        }
        try await until("a send to wait for the peer", connection) { $0.queuedRequests == 1 && $0.backpressureWaits >= 1 }
        #expect(sent.withLock { $0 } < frameCount)
        var serials: [UInt32] = []
        for _ in 0..<frameCount {
            let frame = try #require(try await peer.readFrame())
            #expect(frame.payload.count == chunk && frame.payload.first == UInt8(frame.serial % 251))
            serials.append(frame.serial)
        }
        try await bounded("the sender to finish") { try await sender.value }
        #expect(serials == (0..<frameCount).map { UInt32($0) })
        #expect(await connection.metrics.queuedRequests == 0)
        await connection.close()
    }

    @Test("suspend() disconnects without reconnecting and fails what is in flight; resume() connects at once and sends what waited")
    func suspendAndResume() async throws {
        let clock = ManualClock()
        let group = EventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: reconnecting { $0.eventLoopGroup = group })
            let watcher = StateWatcher(connection)
            let slow = Task { try await connection.request(Request(type: 0x404, json: ["delay_ms": 5000])) }
            try await until("the slow request to be in flight", connection) { $0.inFlightRequests == 1 }
            await connection.suspend()
            try await watcher.next(.suspended)
            let lost = await #expect(throws: TetherError.self) { try await slow.value }
            #expect(lost?.code == .connectionLost)
            #expect(lost?.message == "request 0x404 serial 1 failed: connection lost: the connection to \(endpoint) was suspended by suspend()")
            let waiting = Task { try await connection.request(Request(type: 0x402, json: ["after": true]), timeout: .seconds(10)) }
            try await until("the request to queue", connection) { $0.queuedRequests == 1 }
            try await bounded("the server to see the client leave") {
                while server.peerCount > 0 { try await Task.sleep(for: .milliseconds(1)) }
            }
            // Well past the 20 ms backoff on the connection's clock, still suspended.
            await clock.advance(by: .milliseconds(200))
            #expect(await connection.currentState.phase == .suspended)
            await connection.resume()
            try await watcher.next(.connected)
            let reply = try await bounded("the waiting request's response") { try await waiting.value }
            #expect(reply.json == ["echo": ["after": true]])
            #expect(await watcher.phases == [.connected, .suspended, .connecting, .connected])
            let metrics = await connection.metrics
            #expect(metrics.connects == 2)
            #expect(metrics.reconnectAttempts == 0)
            await connection.close()
        }
    }

    @Test("reconnectNow() skips a long backoff")
    func reconnectNow() async throws {
        try await withServer(handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x407) { _, peer in
                await peer.close()
                return Response()
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .seconds(30)))
            let watcher = StateWatcher(connection)
            _ = try? await connection.request(Request(type: 0x407), timeout: .seconds(5))
            let waiting = try await watcher.next(.reconnecting)
            #expect(waiting.delay == .seconds(30))
            await connection.reconnectNow()
            try await watcher.next(.connected, within: .seconds(5))
            let reply = try await connection.request(Request(type: 0x402, json: ["n": 2]))
            #expect(reply.json == ["echo": ["n": 2]])
            await connection.close()
        }
    }

    @Test("racing reconnectNow() and resume() calls never open two connections")
    func neverTwoConnects() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .seconds(30)))
        let watcher = StateWatcher(connection)
        let first = try await listener.accept()
        first.close()
        try await watcher.next(.reconnecting)
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<50 {
                group.addTask {
                    if index % 2 == 0 { await connection.reconnectNow() } else { await connection.resume() }
                }
            }
        }
        let second = try await listener.accept()
        try await watcher.next(.connected)
        await #expect(throws: TimedOut.self) { _ = try await listener.accept(timeout: .milliseconds(300)) }
        #expect(await connection.metrics.connects == 2)
        await connection.close()
        second.close()
    }

    @Test("alternate endpoints are tried in turn when the first is down")
    func alternateEndpoints() async throws {
        let (closed, dead) = try RawSocket.bindOnly()
        defer { closed.close() }
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: dead, configuration: reconnecting {
                $0.alternateEndpoints = [endpoint]
                $0.reconnect.appliesToFirstConnect = true
            })
            #expect(await connection.currentEndpoint == endpoint)
            let reply = try await connection.request(Request(type: 0x402, json: ["via": "alternate"]))
            #expect(reply.json == ["echo": ["via": "alternate"]])
            await connection.close()
        }
    }

    @Test("a stalled peer is detected within interval × (misses + 1), then the client reconnects")
    func stallDetected() async throws {
        // On a manual clock: every heartbeat and miss is checked at its exact instant, and
        // 1 ns before it.
        let clock = ManualClock()
        let group = EventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let (listener, endpoint) = try RawSocket.listen()
        let connection = Connection(to: endpoint, configuration: reconnecting {
            $0.heartbeat = .every(.milliseconds(200), timeout: .milliseconds(100), maximumMissed: 2)
            $0.eventLoopGroup = group
        })
        let watcher = StateWatcher(connection)
        let heartbeats = connection.heartbeats
        async let accepted = listener.accept()
        try await connection.connect()
        let stalled = try await accepted
        // The first heartbeat went out as the connection came up, at `start`.
        let start = clock.now
        #expect(await connection.heartbeatsSent == 1)

        // Its miss, a timeout after it went out.
        await clock.advance(by: .milliseconds(100) - .nanoseconds(1))
        #expect(await connection.metrics.heartbeatsMissed == 0)
        await clock.advance(by: .nanoseconds(1))
        #expect(await connection.metrics.heartbeatsMissed == 1)
        // The second, an interval after the first.
        await clock.advance(to: start + 200_000_000 - 1)
        #expect(await connection.heartbeatsSent == 1)
        await clock.advance(by: .nanoseconds(1))
        #expect(await connection.heartbeatsSent == 2)
        // Its miss gives up: interval + timeout after the first, as the second miss in a row.
        await clock.advance(to: start + 300_000_000 - 1)
        #expect(await connection.currentState.phase == .connected)
        await clock.advance(by: .nanoseconds(1))
        let lost = try await watcher.next(.reconnecting)
        #expect(lost.reason?.code == .heartbeatTimeout)
        #expect(lost.reason?.message == "no heartbeat ack from \(endpoint.host):\(endpoint.port) for 2 heartbeats in a row (100 ms each)")
        #expect(try await collect(4, from: heartbeats, "four heartbeat events") == [
            Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .missed),
            Heartbeat(serial: 2, outcome: .sent), Heartbeat(serial: 2, outcome: .missed),
        ])
        #expect(try await stalled.readFrame()?.serial == 1)
        #expect(try await stalled.readFrame()?.serial == 2)

        await clock.advance(by: .milliseconds(20))
        let again = try await listener.accept()
        try await watcher.next(.connected)
        #expect(await connection.metrics.heartbeatsMissed == 2)
        await connection.close()
        stalled.close()
        again.close()
        listener.close()
    }
}

extension Connection {
    /// The deadline of the reconnect backoff's timer, on the loop's clock, and whether a
    /// connect attempt is under way; `nil` when no backoff is pending.
    fileprivate var backoff: (deadline: UInt64, connecting: Bool)? {
        guard let backoffTimer else { return nil }
        return (backoffTimer.deadline, connectTask != nil)
    }
}

extension Connection {
    /// How many heartbeats the current connection has sent.
    fileprivate var heartbeatsSent: UInt32 { (heartbeatMachine?.nextSerial ?? 1) &- 1 }
}
