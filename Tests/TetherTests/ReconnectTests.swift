import Synchronization
import Testing
import TetherTesting
@testable import Tether

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

/// A configuration on `network` that reconnects without jitter, so tests can predict delays.
func reconnecting(
    on network: TestNetwork,
    after initial: Duration = .milliseconds(20),
    attempts: Int? = nil,
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) -> ConnectionConfiguration {
    reconnecting(after: initial, attempts: attempts) {
        $0.use(network)
        change(&$0)
    }
}

@Suite("Reconnect policy")
struct ReconnectPolicyTests {
    @Test("delays start at the initial delay, grow by the multiplier and stop at the maximum")
    func growth() {
        let policy = ReconnectPolicy()
        let seconds = (1...14).map { policy.delay(forAttempt: $0, random: 0) }
        #expect(seconds.prefix(5) == [.seconds(1), .milliseconds(1600), .milliseconds(2560), .milliseconds(4096), .milliseconds(6554)])
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
        // Whole milliseconds, so a state's delay and its description agree.
        #expect(delays.allSatisfy { $0.components.attoseconds % 1_000_000_000_000_000 == 0 })
        let state = ConnectionState.reconnecting(attempt: 2, after: delays[0], reason: TetherError(code: .connectionRefused, message: "refused"))
        #expect(delays[0] == .milliseconds(1755))
        #expect(state.description == "reconnecting (attempt 2 in 1.755 s): refused")
    }
}

/// A small seeded generator, so tests see the same numbers every run: the one the backoff
/// jitter uses.
typealias SplitMix = BackoffRandom

@Suite("Reconnecting", .timeLimit(.guarded))
struct ReconnectTests {
    let endpoint = Endpoint(host: "server", port: 9000)

    @Test("a server restarted on the same endpoint: the client comes back after its backoff, a request made meanwhile goes out, pushes reach the old subscription")
    func serverRestart() async throws {
        try await withTestNetwork { network in
            let first = Server(configuration: .testing(on: network))
            echoHandlers(first)
            let connection = Connection(to: endpoint, configuration: reconnecting(on: network, after: .milliseconds(50)))
            let watcher = StateWatcher(connection)
            let notifications = connection.notifications
            try await whileRunning(first) {
                try await connection.connect()
            }
            let lost = try await watcher.next(.reconnecting)
            #expect(lost.reason?.code == .peerClosed)
            #expect(lost.attempt == 1)
            #expect(lost.delay == .milliseconds(50))
            let pending = await connection.startRequest(Request(type: 0x402, json: ["n": 1]), timeout: .seconds(10), settlingOn: network.clock)
            #expect(await connection.metrics.queuedRequests == 1)

            let second = Server(configuration: .testing(on: network))
            echoHandlers(second)
            try await whileRunning(second) {
                let events = second.events
                await network.advance(by: .milliseconds(50) - .nanoseconds(1))
                #expect(await connection.currentState.phase == .reconnecting)
                await network.advance(by: .nanoseconds(1))
                try await watcher.next(.connected)
                let reply = try await withTimeLimit { try await pending.value }
                #expect(reply.json == ["echo": ["n": 1]])
                _ = try await firstEvent(events, "the server to see the peer") { $0.kind == .peerConnected }
                await second.broadcast(Frame(type: 0x2, serial: 7, payload: [42]))
                let pushes = try await collect(1, from: notifications, "the push after reconnecting")
                #expect(pushes == [Frame(type: 0x2, serial: 7, payload: [42])])
                let metrics = await connection.metrics
                #expect(metrics.connects == 2)
                #expect(metrics.reconnectAttempts == 1)
                #expect(metrics.requestsCompleted == 1)
                #expect(metrics.requestsFailed == 0)
                #expect(metrics.framesOut == 1)
                #expect(metrics.framesIn == 2)
                #expect(metrics.bytesOut == 12 + 7)
                #expect(metrics.bytesIn == 12 + 16 + 12 + 1)
                await connection.close()
                try await watcher.next(.closed)
            }
            #expect(await watcher.phases == [.idle, .connecting, .connected, .reconnecting, .connecting, .connected, .closed])
            #expect(network.clock.elapsed == .milliseconds(50))
        }
    }

    @Test("a server shutting down mid-request answers nothing made up: the request fails with connectionLost")
    func shutdownMidRequest() async throws {
        try await withTestNetwork { network in
            let (reached, arrival) = AsyncStream<Void>.makeStream()
            let server = Server(configuration: .testing(on: network))
            server.handle(type: 0x404) { _, _ in
                arrival.yield()
                try await untilCancelledByServer()
                return Response()
            }
            let connection = Connection(to: endpoint, configuration: testConfiguration { $0.use(network) })
            let slow = try await whileRunning(server) {
                try await connection.connect()
                let slow = Task { try await connection.request(Request(type: 0x404), timeout: .seconds(10)) }
                _ = try await firstElement(of: reached)
                return slow
            }
            // Not the handler's cancellation dressed up as an error response.
            let error = await #expect(throws: TetherError.self) { try await withTimeLimit { try await slow.value } }
            #expect(error?.code == .connectionLost)
            #expect((error?.underlying as? TetherError)?.code == .peerClosed)
            await connection.close()
        }
    }

    @Test("close() during the reconnect backoff ends everything at once, with no further attempt")
    func closeDuringBackoff() async throws {
        try await withTestNetwork { network in
            let connection = Connection(to: endpoint, configuration: reconnecting(on: network, after: .seconds(1)))
            let watcher = StateWatcher(connection)
            let first = Server(configuration: .testing(on: network))
            try await whileRunning(first) { try await connection.connect() }
            let lost = try await watcher.next(.reconnecting)
            let deadline = network.clock.manual.now &+ 1_000_000_000
            #expect(lost.reason?.code == .peerClosed)
            #expect(lost.attempt == 1)
            #expect(lost.delay == .seconds(1))
            let queued = await connection.startRequest(Request(type: 0x402), timeout: .seconds(10), settlingOn: network.clock)
            #expect(await connection.metrics.queuedRequests == 1)
            await network.advance(by: .seconds(1) - .nanoseconds(1))
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
            let error = await #expect(throws: TetherError.self) { try await withTimeLimit { try await queued.value } }
            #expect(error?.code == .connectionClosed)
            let closed = try await watcher.next(.closed)
            #expect(closed.reason?.code == .connectionClosed)
            #expect(await watcher.phases == [.idle, .connecting, .connected, .reconnecting, .closed])

            // Past the backoff's deadline, and far past any later one: no attempt, ever, and
            // nothing reaches a server listening again.
            let second = Server(configuration: .testing(on: network))
            try await whileRunning(second) {
                await network.advance(by: .nanoseconds(1))
                await network.advance(by: .seconds(600))
                #expect(second.peerCount == 0)
            }
            #expect(await connection.currentState.phase == .closed)
            #expect(await connection.metrics.reconnectAttempts == 0)
            #expect(await connection.metrics.connects == 1)
            #expect(await connection.backoff == nil)
        }
    }

    @Test("when every allowed attempt fails the connection ends failed, with the last error and each step at its instant")
    func attemptsExhausted() async throws {
        try await withTestNetwork { network in
            let connection = Connection(to: endpoint, configuration: reconnecting(on: network, after: .milliseconds(10), attempts: 2))
            let watcher = StateWatcher(connection)
            let server = Server(configuration: .testing(on: network))
            // The server goes away; nothing listens on its endpoint after.
            try await whileRunning(server) { try await connection.connect() }
            try await watcher.next(.reconnecting)
            await network.advance(by: .milliseconds(10))
            let second = try await watcher.next("attempt 2") { $0.attempt == 2 }
            #expect(second.delay == .milliseconds(20))
            await network.advance(by: .milliseconds(20) - .nanoseconds(1))
            #expect(await connection.currentState.phase == .reconnecting)
            await network.advance(by: .nanoseconds(1))
            let failed = try await watcher.next(.failed)
            #expect(network.clock.elapsed == .milliseconds(30))
            #expect(failed.reason?.code == .connectionRefused)
            #expect(failed.reason?.message == "gave up on \(endpoint) after 2 reconnect attempts: connection to \(endpoint) refused: nothing listens there on the in-memory network")
            let seen = await watcher.seen
            #expect(seen.map(\.phase) == [.idle, .connecting, .connected, .reconnecting, .connecting, .reconnecting, .connecting, .failed])
            #expect(seen.compactMap(\.attempt) == [1, 2])
            #expect(seen.compactMap(\.delay) == [.milliseconds(10), .milliseconds(20)])
            #expect(seen[3].reason?.code == .peerClosed)
            #expect(seen[5].reason?.code == .connectionRefused)
            #expect(try await finalState(of: connection) == failed)
            let after = await #expect(throws: TetherError.self) { _ = try await connection.request(Request(type: 0x402)) }
            #expect(after?.code == .notConnected)
            #expect(await connection.metrics.reconnectAttempts == 2)
        }
    }

    @Test("requests made while reconnecting fail at once when they may not wait, and beyond the queue limit")
    func failFastAndQueueLimit() async throws {
        try await withTestNetwork { network in
            let impatient = Connection(to: endpoint, configuration: reconnecting(on: network, after: .seconds(30)) { $0.requestsWaitForConnection = false })
            let patient = Connection(to: endpoint, configuration: reconnecting(on: network, after: .seconds(30)) { $0.limits.maximumQueuedRequests = 2 })
            let impatientStates = StateWatcher(impatient)
            let patientStates = StateWatcher(patient)
            let server = Server(configuration: .testing(on: network))
            try await whileRunning(server) {
                try await impatient.connect()
                try await patient.connect()
            }
            try await impatientStates.next(.reconnecting)
            try await patientStates.next(.reconnecting)
            let refused = await #expect(throws: TetherError.self) { _ = try await impatient.request(Request(type: 0x402)) }
            #expect(refused?.code == .notConnected)
            #expect(refused?.message == "not connected to \(endpoint) (reconnecting), and requests do not wait for the connection")
            var waiting: [Task<Response, any Error>] = []
            for _ in 0..<2 {
                waiting.append(await patient.startRequest(Request(type: 0x402), timeout: .seconds(10), settlingOn: network.clock))
            }
            #expect(await patient.metrics.queuedRequests == 2)
            let over = await #expect(throws: TetherError.self) { _ = try await patient.request(Request(type: 0x402)) }
            #expect(over?.code == .tooManyPendingRequests)
            #expect(over?.message == "2 requests already wait to be sent to \(endpoint), the limit")
            #expect(await patient.metrics.requestsRefused == 1)
            await patient.close()
            for task in waiting {
                let error = await #expect(throws: TetherError.self) { try await task.value }
                #expect(error?.code == .connectionClosed)
            }
            await impatient.close()
        }
    }

    @Test("at the in-flight limit further requests wait, and go out in order as responses free places")
    func inFlightLimit() async throws {
        try await withTestNetwork { network in
            // Each request waits at its own gate, so the test says which is answered when.
            let gates = (0..<4).map { _ in HandlerGate(open: false) }
            let (reached, arrival) = AsyncStream<(serial: UInt32, index: Int)>.makeStream()
            try await withNetworkServer(on: network, handlers: { server in
                server.handle(type: 0x402) { request, _ in
                    let index = Int(request.payload[0])
                    arrival.yield((request.serial, index))
                    await gates[index].pass()
                    return Response(payload: request.payload)
                }
            }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(on: network) { $0.limits.maximumInFlightRequests = 2 })
                var calls: [Task<Response, any Error>] = []
                for index in 0..<4 {
                    calls.append(await connection.startRequest(Request(type: 0x402, payload: [UInt8(index)]), timeout: .seconds(10), settlingOn: network.clock))
                }
                #expect(await connection.metrics.inFlightRequests == 2)
                #expect(await connection.metrics.queuedRequests == 2)
                var arrivals = reached.makeAsyncIterator()
                var order: [(serial: UInt32, index: Int)] = []
                for _ in 0..<2 { order.append(try #require(await arrivals.next())) }
                for index in 0..<2 {
                    // An answer frees a place: the next queued request goes out.
                    gates[index].open()
                    let call = calls[index]
                    _ = try await withTimeLimit { try await call.value }
                    await network.runUntilIdle()
                    order.append(try #require(await arrivals.next()))
                }
                #expect(order.map(\.serial) == [1, 2, 3, 4])
                #expect(order.map(\.index) == [0, 1, 2, 3])
                for index in 2..<4 { gates[index].open() }
                var answers: Set<[UInt8]> = []
                for call in calls { answers.insert(try await withTimeLimit { try await call.value }.payload) }
                #expect(answers == [[0], [1], [2], [3]])
                await connection.close()
            }
        }
    }

    @Test("send() waits above the outbound high-water mark and resumes, in order, when the peer reads")
    func backpressure() async throws {
        // Over a socket, whose kernel buffers fill; on a manual clock, so that a settled loop
        // shows the sender waiting, with nothing timed in real time.
        try await withManualLoop { clock, group in
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        async let accepted = listener.accept()
        let connection = try await Connection.connect(to: endpoint, configuration: reconnecting {
            $0.limits.outboundHighWaterMark = 64 << 10
            $0.eventLoopGroup = group
        })
        let peer = try await accepted
        defer { peer.close() }
        let frameCount = 400
        let chunk = 16 << 10
        let sent = Lock(0)
        // The sender runs on the connection's loop, so the loop is idle only once it waits.
        let sender = Task(executorPreference: connection.taskExecutor) {
            for index in 0..<frameCount {
                try await connection.send(Frame(type: 0x2, serial: UInt32(index), payload: Array(repeating: UInt8(index % 251), count: chunk)))
                sent.withLock { $0 += 1 }
            }
        }
        await clock.settle()
        #expect(await connection.metrics.queuedRequests == 1)
        #expect(await connection.metrics.backpressureWaits >= 1)
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
    }

    @Test("suspend() disconnects without reconnecting and fails what is in flight; resume() connects at once and sends what waited")
    func suspendAndResume() async throws {
        try await withTestNetwork { network in
            let (reached, arrival) = AsyncStream<Void>.makeStream()
            try await withNetworkServer(on: network, handlers: { server in
                echoHandlers(server)
                server.handle(type: 0x404) { _, _ in
                    arrival.yield()
                    try await untilCancelledByServer()
                    return Response()
                }
            }) { server, endpoint in
                let events = server.events
                let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(on: network))
                let watcher = StateWatcher(connection)
                let slow = Task { try await connection.request(Request(type: 0x404)) }
                _ = try await firstElement(of: reached)
                await connection.suspend()
                try await watcher.next(.suspended)
                let lost = await #expect(throws: TetherError.self) { try await slow.value }
                #expect(lost?.code == .connectionLost)
                #expect(lost?.message == "request 0x404 serial 1 failed: connection lost: the connection to \(endpoint) was suspended by suspend()")
                let waiting = await connection.startRequest(Request(type: 0x402, json: ["after": true]), timeout: .seconds(10), settlingOn: network.clock)
                #expect(await connection.metrics.queuedRequests == 1)
                _ = try await firstEvent(events, "the server to see the client leave") { $0.kind == .peerDisconnected }
                // Well past the 20 ms backoff, still suspended.
                await network.advance(by: .milliseconds(200))
                #expect(await connection.currentState.phase == .suspended)
                await connection.resume()
                try await watcher.next(.connected)
                let reply = try await withTimeLimit { try await waiting.value }
                #expect(reply.json == ["echo": ["after": true]])
                #expect(await watcher.phases == [.connected, .suspended, .connecting, .connected])
                let metrics = await connection.metrics
                #expect(metrics.connects == 2)
                #expect(metrics.reconnectAttempts == 0)
                #expect(network.clock.elapsed == .milliseconds(200))
                await connection.close()
            }
        }
    }

    @Test("reconnectNow() skips a long backoff")
    func reconnectNow() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: { server in
                echoHandlers(server)
                server.handle(type: 0x407) { _, peer in
                    await peer.close()
                    return Response()
                }
            }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(on: network, after: .seconds(30)))
                let watcher = StateWatcher(connection)
                _ = try? await connection.request(Request(type: 0x407), timeout: .seconds(5))
                let waiting = try await watcher.next(.reconnecting)
                #expect(waiting.delay == .seconds(30))
                await connection.reconnectNow()
                try await watcher.next(.connected)
                let reply = try await connection.request(Request(type: 0x402, json: ["n": 2]))
                #expect(reply.json == ["echo": ["n": 2]])
                #expect(network.clock.elapsed == .zero)
                await connection.close()
            }
        }
    }

    @Test("racing reconnectNow() and resume() calls never open two connections")
    func neverTwoConnects() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: { server in
                server.handle(type: 0x407) { _, peer in
                    await peer.close()
                    return Response()
                }
            }) { server, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(on: network, after: .seconds(30)))
                let watcher = StateWatcher(connection)
                _ = try? await connection.request(Request(type: 0x407), timeout: .seconds(5))
                try await watcher.next(.reconnecting)
                await withTaskGroup(of: Void.self) { group in
                    for index in 0..<50 {
                        group.addTask {
                            if index % 2 == 0 { await connection.reconnectNow() } else { await connection.resume() }
                        }
                    }
                }
                try await watcher.next(.connected)
                // Every dial the calls started has run by now.
                await network.runUntilIdle()
                #expect(await connection.metrics.connects == 2)
                #expect(server.peerCount == 1)
                await connection.close()
            }
        }
    }

    @Test("alternate endpoints are tried in turn when the first is down")
    func alternateEndpoints() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: echoHandlers) { _, endpoint in
                let dead = Endpoint(host: "nothing", port: 9000)
                let connection = Connection(to: dead, configuration: reconnecting(on: network) {
                    $0.alternateEndpoints = [endpoint]
                    $0.reconnect.appliesToFirstConnect = true
                })
                let watcher = StateWatcher(connection)
                let connecting = Task { try await connection.connect() }
                let refused = try await watcher.next(.reconnecting)
                #expect(refused.reason?.code == .connectionRefused)
                await network.advance(by: refused.delay ?? .zero)
                try await withTimeLimit { try await connecting.value }
                #expect(await connection.currentEndpoint == endpoint)
                let reply = try await connection.request(Request(type: 0x402, json: ["via": "alternate"]))
                #expect(reply.json == ["echo": ["via": "alternate"]])
                await connection.close()
            }
        }
    }

    @Test("after the node it is on dies, the first attempt goes to the next endpoint after one backoff delay, and every connected state and observed change names the endpoint it is about")
    func failoverToNextEndpoint() async throws {
        final class Endpoints: ConnectionObserver {
            let seen = Mutex<[String]>([])
            func connectionStateChanged(_ state: ConnectionState, of endpoint: Endpoint) {
                seen.withLock { $0.append("\(state.phase) of \(endpoint)") }
            }
        }
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, port: 9001, handlers: echoHandlers) { _, second in
                let first = Server(configuration: .testing(on: network, port: 9000))
                echoHandlers(first)
                let running = Task { try await first.run() }
                _ = try await first.listeningAddress()
                let observer = Endpoints()
                let connection = Connection(to: Endpoint(host: "server", port: 9000), configuration: reconnecting(on: network, after: .seconds(1)) {
                    $0.alternateEndpoints = [second]
                    $0.observer = observer
                })
                let watcher = StateWatcher(connection)
                try await connection.connect()
                // A response proves the connection healthy: its loss is a break, not a failed attempt.
                _ = try await connection.request(Request(type: 0x402, json: [:]))
                #expect(await connection.currentState == .connected(to: connection.endpoint))
                running.cancel()
                _ = try? await running.value
                let lost = try await watcher.next(.reconnecting)
                #expect(lost.attempt == 1)
                #expect(lost.delay == .seconds(1))
                await network.advance(by: .seconds(1))
                let back = try await watcher.next(.connected)
                #expect(back == .connected(to: second))
                #expect(await connection.currentEndpoint == second)
                #expect(await connection.metrics.reconnectAttempts == 1)
                #expect(observer.seen.withLock { $0 }.suffix(3) == ["reconnecting of server:9001", "connecting of server:9001", "connected of server:9001"])
                await connection.close()
            }
        }
    }

    @Test("a stalled peer is detected within interval × (misses + 1), then the client reconnects")
    func stallDetected() async throws {
        // Every heartbeat and miss is checked at its exact instant, and 1 ns before it,
        // against a server whose heartbeat handler never answers.
        try await withTestNetwork { network in
            try await withSilentHeartbeatServer(on: network) { reached, endpoint in
                let connection = Connection(to: endpoint, configuration: reconnecting(on: network) {
                    $0.heartbeat = .every(.milliseconds(200), timeout: .milliseconds(100), maximumMissed: 2)
                })
                let watcher = StateWatcher(connection)
                let heartbeats = connection.heartbeats
                try await connection.connect()
                // The first heartbeat went out as the connection came up, at 0.
                #expect(await connection.heartbeatsSent == 1)

                // Its miss, a timeout after it went out.
                await network.advance(by: .milliseconds(100) - .nanoseconds(1))
                #expect(await connection.metrics.heartbeatsMissed == 0)
                await network.advance(by: .nanoseconds(1))
                #expect(await connection.metrics.heartbeatsMissed == 1)
                // The second, an interval after the first.
                await network.advance(by: .milliseconds(100) - .nanoseconds(1))
                #expect(await connection.heartbeatsSent == 1)
                await network.advance(by: .nanoseconds(1))
                #expect(await connection.heartbeatsSent == 2)
                // Its miss gives up: interval + timeout after the first, as the second miss in a row.
                await network.advance(by: .milliseconds(100) - .nanoseconds(1))
                #expect(await connection.currentState.phase == .connected)
                await network.advance(by: .nanoseconds(1))
                let lost = try await watcher.next(.reconnecting)
                #expect(network.clock.elapsed == .milliseconds(300))
                #expect(lost.reason?.code == .heartbeatTimeout)
                #expect(lost.reason?.message == "no heartbeat ack from 127.0.10.1:9000 for 2 heartbeats in a row (100 ms each)")
                #expect(try await collect(4, from: heartbeats, "four heartbeat events") == [
                    Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .missed),
                    Heartbeat(serial: 2, outcome: .sent), Heartbeat(serial: 2, outcome: .missed),
                ])
                // The server really received both heartbeats.
                #expect(try await collect(2, from: reached, "the heartbeats at the server") == [1, 2])

                await network.advance(by: .milliseconds(20))
                try await watcher.next(.connected)
                #expect(await connection.metrics.heartbeatsMissed == 2)
                #expect(await connection.metrics.connects == 2)
                await connection.close()
            }
        }
    }
}

extension Connection {
    /// The deadline of the reconnect backoff's timer, on the loop's clock, and whether a
    /// connect attempt is under way; `nil` when no backoff is pending.
    fileprivate var backoff: (deadline: UInt64, connecting: Bool)? {
        guard let backoffTimer = reconnectHandles.backoffTimer else { return nil }
        return (backoffTimer.deadline, attemptHandles.connectTask != nil)
    }
}

extension Connection {
    /// How many heartbeats the current connection has sent.
    var heartbeatsSent: UInt32 { (heartbeatMachine?.nextSerial ?? 1) &- 1 }
}
