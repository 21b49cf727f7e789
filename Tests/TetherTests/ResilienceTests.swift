import Testing
import TetherTesting
@testable import Tether
import TetherTesting

/// Broken connections made on purpose, through the fault proxy: every request ends exactly
/// once, the client comes back by itself, and subscriptions keep running.
@Suite("Resilience through the fault proxy", .timeLimit(.guarded))
struct ResilienceTests {
    /// The standard handlers, plus two that tell `arrivals` of each request's `id` as it
    /// reaches them: 0x405 then holds the request until the server cancels it (its peer
    /// ends), 0x406 echoes it at once.
    static func handlers(_ arrivals: Broadcaster<Int>) -> @Sendable (Server) -> Void {
        { server in
            echoHandlers(server)
            server.handle(type: 0x405) { request, _ in
                arrivals.publish(request.json?["id"]?.intValue ?? -1)
                await untilCancelled()
                return Response()
            }
            server.handle(type: 0x406) { request, _ in
                arrivals.publish(request.json?["id"]?.intValue ?? -1)
                return Response(json: ["echo": request.json ?? nil])
            }
        }
    }

    /// The standard handlers, for tests that need nothing more.
    static func handlers(_ server: Server) {
        echoHandlers(server)
    }

    @Test("a cut mid-frame: requests in flight fail with connectionLost, the client reconnects within the backoff, requests and pushes flow again")
    func cutMidFrame() async throws {
        let arrivals = Broadcaster<Int>(bufferSize: 16)
        let arrived = arrivals.subscribe()
        try await withServer(handlers: Self.handlers(arrivals)) { server, endpoint in
            let serverEvents = server.events
            try await withFaultProxy(to: endpoint) { proxy in
                let backoff = Duration.milliseconds(50)
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: reconnecting(after: backoff))
                let watcher = StateWatcher(connection)
                let notifications = connection.notifications
                try await watcher.next(.connected)
                // The slow request's caller learns of the loss on the loop, after the connection
                // set the backoff timer; a timer set from there just after the backoff fires
                // after it, however late the loop runs. By then the attempt must have started.
                let (attempts, attempt) = AsyncStream<(phase: ConnectionState.Phase, started: Int)>.makeStream()
                let slow = Task {
                    try await connection.observedRequest(Request(type: 0x405, json: ["id": 1]), timeout: .after(eventBound)) { connection, _ in
                        connection.afterTimers(dueBefore: justAfter(backoff, from: MonotonicTime.now())) { connection in
                            attempt.yield((connection.state.phase, connection.counters.reconnectAttempts))
                        }
                    }.get()
                }
                #expect(try await collect(1, from: arrived, "the slow request to reach the server") == [1])
                // The next request is cut 5 bytes into its header.
                proxy.setMode(.cut(after: 5, counting: .upstream), for: .currentConnections)
                let cut = Task { try await connection.request(Request(type: 0x402, json: ["n": 1]), timeout: .after(eventBound)) }
                let lost = try await watcher.next(.reconnecting)
                #expect(lost.reason?.code == .peerClosed)
                #expect(lost.attempt == 1)
                #expect(lost.delay == backoff)
                for task in [slow, cut] {
                    let error = await #expect(throws: TetherError.self) { try await bounded("a request to fail") { try await task.value } }
                    #expect(error?.code == .connectionLost)
                    #expect((error?.underlying as? TetherError)?.code == .peerClosed)
                }
                let started = try await collect(1, from: attempts, "the check just after the backoff").first
                #expect(started?.started == 1 && started?.phase != .reconnecting, "the reconnect attempt had not started when a timer set just after its backoff fired: \(String(describing: started))")
                try await watcher.next(.connected)
                // The first attempt, made after the backoff, is the one that reconnected.
                #expect(await watcher.phases == [.connected, .reconnecting, .connecting, .connected])
                let metrics = await connection.metrics
                #expect(metrics.reconnectAttempts == 1)
                #expect(metrics.connects == 2)
                let reply = try await connection.request(Request(type: 0x402, json: ["n": 2]))
                #expect(reply.json == ["echo": ["n": 2]])
                // The new peer answered; the old one is gone once the server says so.
                _ = try await firstEvent(serverEvents, "the cut peer to be gone on the server") { $0.kind == .peerDisconnected }
                #expect(server.peerCount == 1)
                await server.broadcast(Frame(type: 0x2, serial: 3, payload: [3]))
                #expect(try await collect(1, from: notifications, "the push after reconnecting") == [Frame(type: 0x2, serial: 3, payload: [3])])
                #expect(await connection.pendingRequestCount == 0)
                #expect(proxy.counters.accepted == 2)
                await connection.close()
            }
        }
    }

    @Test("a stall (the socket open, nothing flowing) is detected at interval × (misses + 1) after the last ack, not 1 ns before, then the client reconnects")
    func stall() async throws {
        // Both sides on one loop of a test clock, over real sockets through the proxy: the
        // heartbeats and their timeouts wait for the test's advances.
        let clock = TestClock()
        let group = clock.makeEventLoopGroup()
        defer { clock.shutdown() }
        let interval = Duration.milliseconds(400)
        try await withServer(configure: { $0.eventLoopGroup = group }, handlers: Self.handlers) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = Connection(to: proxy.endpoint, configuration: reconnecting {
                    $0.eventLoopGroup = group
                    $0.heartbeat = .every(interval, timeout: interval, maximumMissed: 3)
                })
                let watcher = StateWatcher(connection)
                let acked = connection.heartbeats.filter { $0.outcome == .acked }
                try await connection.connect()
                // A heartbeat goes out as the connection opens and one at each interval
                // after its ack; the acks cross the proxy, which the clock does not see, so
                // each is awaited before time moves on. Then nothing is outstanding, and
                // the stall is in place before the next heartbeat goes out.
                #expect(try await collect(1, from: acked, "the first heartbeat's ack").map(\.serial) == [1])
                await clock.advance(by: interval)
                #expect(try await collect(1, from: acked, "the second heartbeat's ack").map(\.serial) == [2])
                proxy.setMode(.stalled, for: .currentConnections)
                #expect(clock.elapsed == interval)
                await clock.advance(by: interval * 4 - .nanoseconds(1))
                // Two misses so far, and still on the first connection: a loss would have
                // reconnected by now, through the proxy, on the same clock.
                let before = await connection.metrics
                #expect(before.heartbeatsMissed == 2 && before.connects == 1 && before.reconnectAttempts == 0, "lost before interval × (misses + 1): \(before)")
                #expect(await connection.currentState.phase == .connected)
                await clock.advance(by: .nanoseconds(1))
                #expect(await connection.currentState.phase == .reconnecting)
                let lost = try await watcher.next(.reconnecting)
                #expect(await watcher.phases == [.idle, .connecting, .connected, .reconnecting])
                #expect(lost.reason?.code == .heartbeatTimeout)
                await clock.advance(by: lost.delay ?? .zero)
                try await watcher.next(.connected)
                let reply = try await connection.request(Request(type: 0x402, json: ["after": "stall"]))
                #expect(reply.json == ["echo": ["after": "stall"]])
                await connection.close()
            }
        }
    }

    @Test("garbage from the network: a protocol error, then a reconnect, and the process goes on")
    func garbage() async throws {
        try await withServer(handlers: Self.handlers) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: reconnecting())
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                // A first frame at once: a peer that sends nothing is closed by the server's
                // handshake timeout (10 s), which a busy machine can reach before the garbage.
                _ = try await connection.request(Request(type: 0x402, json: [:]))
                // The client's connect returns once the kernel has the connection; the proxy
                // takes it from its queue a moment later.
                try await proxy.waitForAccepted(1)
                #expect(proxy.inject(Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8), toward: .downstream) == 1)
                let lost = try await watcher.next(.reconnecting)
                #expect([.protocolError, .frameTooLarge].contains(lost.reason?.code))
                try await watcher.next(.connected)
                let reply = try await connection.request(Request(type: 0x402, json: ["ok": true]))
                #expect(reply.json == ["echo": ["ok": true]])
                await connection.close()
            }
        }
    }

    @Test("1,000 requests over 10 forced disconnects: each ends exactly once, none past its timeout, nothing left behind")
    func thousandOverTenDisconnects() async throws {
        let arrivals = Broadcaster<Int>(bufferSize: 4096)
        let arrived = arrivals.subscribe()
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: Self.handlers(arrivals)) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(on: network, after: .milliseconds(5)))
                let watcher = StateWatcher(connection)
                let timeout = Duration.seconds(2)
                // A request the server holds until its peer ends, in flight before the first
                // disconnect: that disconnect must fail it.
                let held = Task {
                    try await connection.request(Request(type: 0x405, json: ["id": .int(-1)]), timeout: .seconds(300))
                }
                #expect(try await collect(1, from: arrived, "the held request to reach the server") == [-1])
                let outcomes = try await bounded("1,000 requests and 10 disconnects", .seconds(45)) {
                    try await withThrowingTaskGroup(of: Outcome.self) { group in
                        // Ten waves of 100 requests, one per connection: each connection is
                        // cut (or reset) once half its wave has reached the server, with the
                        // rest on the way, queued or answered.
                        for round in 1...10 {
                            try await watcher.next(.connected)
                            let wave = (round - 1) * 100 ..< round * 100
                            for id in wave {
                                group.addTask {
                                    // Time on the network's clock: it moves only by the backoffs.
                                    let start = network.clock.elapsed
                                    do {
                                        let reply = try await connection.request(Request(type: 0x406, json: ["id": .int(id)]), timeout: .after(timeout))
                                        return Outcome(id: id, reply: reply.json?["echo"]?["id"]?.intValue, error: nil, took: network.clock.elapsed - start)
                                    } catch let error as TetherError {
                                        return Outcome(id: id, reply: nil, error: error.code, took: network.clock.elapsed - start)
                                    }
                                }
                            }
                            _ = try await collect(50, from: arrived.filter { wave.contains($0) }, "half of wave \(round) at the server")
                            if round % 2 == 0 { network.links.last?.reset() } else { network.links.last?.cut() }
                            // The connection is back after its 5 ms backoff.
                            try await watcher.next(.reconnecting)
                            await network.advance(by: .milliseconds(5))
                        }
                        try await watcher.next(.connected)
                        var outcomes: [Int: Outcome] = [:]
                        for try await outcome in group {
                            #expect(outcomes[outcome.id] == nil, "request \(outcome.id) ended twice")
                            outcomes[outcome.id] = outcome
                        }
                        return outcomes
                    }
                }
                #expect(outcomes.count == 1000)
                let answered = outcomes.values.filter { $0.reply != nil }
                let failed = outcomes.values.filter { $0.error != nil }
                #expect(answered.count + failed.count == 1000)
                #expect(answered.allSatisfy { $0.reply == $0.id }, "a request got someone else's response")
                #expect(Set(failed.compactMap(\.error)).isSubset(of: [.connectionLost, .timedOut]))
                #expect(outcomes.values.allSatisfy { $0.took <= timeout }, "a request outlived its timeout")
                #expect(network.links.count == 11)
                let heldOutcome = try await bounded("the held request to end") { await held.result }
                let lost = #expect(throws: TetherError.self, "a disconnect did not fail the request in flight") { try heldOutcome.get() }
                #expect(lost?.code == .connectionLost)
                let metrics = await connection.metrics
                #expect(metrics.connects == 11)
                #expect(metrics.requestsCompleted == answered.count)
                #expect(metrics.requestsFailed + metrics.requestsTimedOut == failed.count + 1)
                #expect(metrics.inFlightRequests == 0 && metrics.queuedRequests == 0)
                #expect(await connection.pendingRequestCount == 0)
                Attachment.record("answered \(answered.count), failed \(failed.count)", named: "thousand-over-ten.txt")
                await connection.close()
            }
        }
    }
}

struct Outcome: Sendable {
    var id: Int
    var reply: Int?
    var error: TetherError.Code?
    var took: Duration
}
