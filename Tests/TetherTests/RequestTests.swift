import Testing
@testable import Tether

@Suite("Requests over real sockets", .timeLimit(.minutes(1)))
struct RequestTests {
    @Test("a request gets the response with its serial and content")
    func simple() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let reply = try await connection.request(Request(type: 0x402, json: ["hello": "world"]))
            #expect(reply.type == 0x402)
            #expect(reply.serial == 1)
            #expect(reply.json == ["echo": ["hello": "world"]])
            let second = try await connection.request(Request(type: 0x402, json: [:]))
            #expect(second.serial == 2)
            await connection.close()
        }
    }

    @Test("1,000 concurrent requests answered after random delays each get their own response")
    func thousandConcurrent() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let results = try await bounded("1,000 responses", .seconds(30)) {
                try await withThrowingTaskGroup(of: (Int, Response).self) { group in
                    for id in 0..<1000 {
                        group.addTask {
                            let delay = (id * 7919) % 20
                            let reply = try await connection.request(Request(type: 0x404, json: ["id": .int(id), "delay_ms": .int(delay)]))
                            return (id, reply)
                        }
                    }
                    var results: [Int: Response] = [:]
                    for try await (id, reply) in group {
                        #expect(results[id] == nil, "request \(id) answered twice")
                        results[id] = reply
                    }
                    return results
                }
            }
            #expect(results.count == 1000)
            var serials = Set<UInt32>()
            for (id, reply) in results {
                #expect(reply.json?["echo"]?["id"]?.intValue == id, "request \(id) got someone else's response")
                serials.insert(reply.serial)
            }
            #expect(serials.count == 1000)
            let statistics = await connection.metrics
            #expect(statistics.requestsSent == 1000)
            #expect(statistics.requestsCompleted == 1000)
            #expect(statistics.lateResponses == 0)
            #expect(statistics.inFlightRequests == 0)
            await connection.close()
        }
    }

    @Test("a request with no answer times out with an error naming its type, serial and timeout")
    func timeout() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x405) { _, _ in
                try await Task.sleep(for: .seconds(60))
                return Response()
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let error = await #expect(throws: TetherError.self) {
                _ = try await connection.request(Request(type: 0x405), timeout: .milliseconds(100))
            }
            #expect(error?.code == .timedOut)
            #expect(error?.message == "request 0x405 serial 1 timed out after 100 ms")
            #expect(await connection.pendingRequestCount == 0)
            #expect(await connection.currentState.phase == .connected)
            await connection.close()
        }
    }

    @Test("timeouts of different lengths each fire on time, never early, none waiting for a longer one")
    func mixedTimeouts() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x402) { _, _ in Response() }
            server.handle(type: 0x405) { _, _ in
                try await Task.sleep(for: .seconds(60))
                return Response()
            }
        }) { _, endpoint in
            // The configured timeout is 1 s. An answered request first leaves the shared
            // deadline timer set 5 s ahead with no request waiting; "short" must set it again.
            // "middle" is shorter than the request before it and gets a timer of its own.
            let configured = Duration.seconds(1)
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.requestTimeout = configured })
            _ = try await connection.request(Request(type: 0x402), timeout: .seconds(5))
            let plan: [(name: String, timeout: Duration?)] = [("short", .milliseconds(150)), ("first", nil), ("middle", .milliseconds(300)), ("second", nil), ("long", .seconds(2))]
            // Everything is read on the connection's loop, with the clock of its deadlines.
            let made = Lock<[String: (key: Connection.RequestKey, at: UInt64)]>([:])
            let ended = Lock<[String: (code: TetherError.Code?, at: UInt64)]>([:])
            let (checks, check) = AsyncStream<(name: String, ended: Bool)>.makeStream()
            let firstID = await connection.nextRequestKey().id
            try await bounded("five timeouts") {
                await withTaskGroup(of: Void.self) { group in
                    // Made on the loop in the plan's order, one right after another: each
                    // once the one before it has its serial.
                    for (index, (name, timeout)) in plan.enumerated() {
                        group.addTask(executorPreference: connection.taskExecutor) {
                            _ = await connection.observedRequest(
                                Request(type: 0x405),
                                timeout: timeout,
                                when: { $0.nextRequestKey().id == firstID + UInt64(index) },
                                made: { _, key in made.withLock { $0[name] = (key, MonotonicTime.now()) } },
                                ended: { _, outcome in
                                    var code: TetherError.Code?
                                    if case .failure(let error as TetherError) = outcome { code = error.code }
                                    ended.withLock { [code] in $0[name] = (code, MonotonicTime.now()) }
                                }
                            )
                        }
                    }
                    // Once all five are made, a timer for each just after the latest its
                    // deadline can be. When it fires, the timer of a request that waits for
                    // no longer one has fired before it and ended the request.
                    group.addTask(executorPreference: connection.taskExecutor) {
                        await Self.checkAfterDeadlines(of: plan, configured: configured, on: connection, made: made, report: check)
                    }
                }
            }
            let outcomes = ended.withLock { $0 }
            let starts = made.withLock { $0 }
            for (name, timeout) in plan {
                let limit = timeout ?? configured
                #expect(outcomes[name]?.code == .timedOut, "\(name): \(String(describing: outcomes[name]))")
                // Never early: `made` was read before the request's deadline was set.
                if let start = starts[name]?.at, let end = outcomes[name]?.at {
                    let waited = MonotonicTime.duration(nanoseconds: end - start)
                    #expect(waited >= limit, "\(name) timed out after \(waited), before its \(limit)")
                }
            }
            let checked = try await collect(plan.count, from: checks, "a check after each deadline")
            #expect(Set(checked.map(\.name)) == Set(plan.map(\.name)))
            #expect(checked.filter { !$0.ended }.map(\.name) == [], "still waiting when a timer set just after their deadline fired: they waited for a longer timeout")
            #expect(await connection.metrics.requestsTimedOut == 5)
            #expect(await connection.pendingRequestCount == 0)
            await connection.close()
        }
    }

    /// On the loop, once every request of `plan` is made: for each, a check run by a timer just
    /// after the latest its deadline can be, that reports whether the request has ended.
    private static func checkAfterDeadlines(
        of plan: [(name: String, timeout: Duration?)],
        configured: Duration,
        on connection: isolated Connection,
        made: Lock<[String: (key: Connection.RequestKey, at: UInt64)]>,
        report: AsyncStream<(name: String, ended: Bool)>.Continuation
    ) async {
        // Once all five (and the answered request before them) are written, no deadline is
        // later than `now` plus its timeout.
        while connection.counters.requestsSent < plan.count + 1 { await Task.yield() }
        let now = MonotonicTime.now()
        for (name, timeout) in plan {
            guard let key = made.withLock({ $0[name]?.key }) else { continue }
            connection.afterTimers(dueBefore: justAfter(timeout ?? configured, from: now)) { connection in
                report.yield((name, !connection.isPending(key)))
            }
        }
    }

    @Test("cancelling the caller ends the request with CancellationError at once; the late response is dropped and counted")
    func cancellation() async throws {
        let (arrived, arrival) = AsyncStream<Void>.makeStream()
        let (release, releaser) = AsyncStream<Void>.makeStream()
        try await withServer(handlers: { server in
            server.handle(type: 0x406) { request, _ in
                arrival.yield()
                for await _ in release { break }
                return Response(json: ["late": true])
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let frames = connection.frames
            let caller = Task { try await connection.request(Request(type: 0x406), timeout: .seconds(30)) }
            _ = try await collect(1, from: arrived, "the request to reach the server")
            caller.cancel()
            let result = await caller.result
            #expect(throws: CancellationError.self) { try result.get() }
            #expect(await connection.pendingRequestCount == 0)
            releaser.yield()
            let late = try await collect(1, from: frames, "the late response")
            #expect(late.first?.serial == 1)
            #expect(await connection.metrics.lateResponses == 1)
            // The connection is still usable, and the next request is not confused with the old one.
            releaser.yield()
            let next = try await connection.request(Request(type: 0x406))
            #expect(next.serial == 2)
            await connection.close()
        }
    }

    @Test("a task cancelled before it asks never sends")
    func cancelledBeforeSending() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let caller = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await connection.request(Request(type: 0x402))
            }
            await #expect(throws: CancellationError.self) { try await caller.value }
            #expect(await connection.metrics.requestsSent == 0)
            await connection.close()
        }
    }

    @Test("when the server closes mid-request the request fails with connectionLost caused by peerClosed and the table is empty")
    func serverClosesMidRequest() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x407) { _, peer in
                await peer.close()
                try await Task.sleep(for: .seconds(60))
                return Response()
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let remote = try #require(await connection.remoteAddress)
            let error = await #expect(throws: TetherError.self) {
                _ = try await connection.request(Request(type: 0x407), timeout: .seconds(30))
            }
            #expect(error?.code == .connectionLost)
            #expect((error?.underlying as? TetherError)?.code == .peerClosed)
            #expect(error?.message == "request 0x407 serial 1 failed: connection lost: peer \(remote) closed the connection")
            #expect(await connection.pendingRequestCount == 0)
            let state = try await finalState(of: connection)
            #expect(state.phase == .closed)
            #expect(state.reason?.code == .peerClosed)
        }
    }

    @Test("close() fails pending requests, ends every sequence, and is idempotent")
    func closeFailsPending() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let notifications = connection.notifications
            let pending = Task { try await connection.request(Request(type: 0x404, json: ["delay_ms": 5000])) }
            try await bounded("the request to be pending") {
                while await connection.pendingRequestCount == 0 { await Task.yield() }
            }
            await connection.close()
            await connection.close()
            let error = await #expect(throws: TetherError.self) { try await pending.value }
            #expect(error?.code == .connectionClosed)
            #expect(error?.message.hasPrefix("request 0x404 serial 1 failed: connection to ") == true)
            #expect(try await collect(1, from: notifications).isEmpty)
            let state = try await finalState(of: connection)
            #expect(state.reason?.code == .connectionClosed)
            let after = await #expect(throws: TetherError.self) { _ = try await connection.request(Request(type: 0x402)) }
            #expect(after?.code == .connectionClosed)
            #expect(after?.message == "the connection to \(endpoint) was closed by close()")
        }
    }

    @Test("an unknown request type is answered with an error response, not dropped")
    func unknownType() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let reply = try await connection.request(Request(type: 0x999))
            #expect(reply.type == 0x999)
            #expect(reply.errorMessage == "unknown type 0x999")
            await connection.close()
        }
    }

    @Test("a handler that throws is answered with its error")
    func handlerThrows() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x408) { _, _ in
                throw TetherError(code: .invalidArgument, message: "no such user")
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let reply = try await connection.request(Request(type: 0x408))
            #expect(reply.errorMessage == "no such user")
            await connection.close()
        }
    }

    @Test("Codable and plain dictionaries as content")
    func codable() async throws {
        struct Greeting: Codable, Equatable { var name: String; var count: Int }
        try await withServer(handlers: { server in
            server.handle(type: 0x409) { request, _ in
                var greeting = try request.decode(Greeting.self)
                greeting.count += 1
                return try Response(encoding: greeting)
            }
        }) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: testConfiguration()) { connection in
                let reply = try await connection.request(try Request(type: 0x409, encoding: Greeting(name: "ada", count: 1)))
                #expect(try reply.decode(Greeting.self) == Greeting(name: "ada", count: 2))
                let plain = try await connection.request(try Request(type: 0x409, jsonObject: ["name": "bob", "count": 41]))
                let object = try plain.jsonObject()
                #expect(object["count"] as? Int == 42)
            }
        }
    }

    @Test("withConnection closes the connection when the body returns")
    func scoped() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.withConnection(to: endpoint, configuration: testConfiguration()) { connection in
                _ = try await connection.request(Request(type: 0x402))
                return connection
            }
            #expect(await connection.currentState.phase == .closed)
        }
    }
}
