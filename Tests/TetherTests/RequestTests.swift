import Testing
import TetherTesting
@testable import Tether

@Suite("Requests", .timeLimit(.guarded))
struct RequestTests {
    @Test("a handler that returns .noReply sends nothing: a frame sent without waiting is handled unanswered, a request waiting for it times out, and the next request gets its own answer")
    func noReply() async throws {
        let (handled, handling) = AsyncStream<String>.makeStream()
        try await withServer(handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x450) { request, _ in
                handling.yield(request.text)
                return .noReply
            }
        }) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            try await connection.send(Frame(type: 0x450, text: "fire and forget"))
            let error = await #expect(throws: TetherError.self) {
                try await connection.request(Request(type: 0x450, text: "waits"), timeout: .milliseconds(200))
            }
            #expect(error?.code == .timedOut)
            let reply = try await connection.request(Request(type: 0x402, text: "\"after\""))
            #expect(reply.json == ["echo": "after"])
            #expect(try await collect(2, from: handled, "both declined requests") == ["fire and forget", "waits"])
            #expect(await server.metrics().requestsHandled == 1)
            #expect(await connection.metrics.framesIn == 1)
            await connection.close()
        }
    }

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

    @Test("1,000 concurrent requests answered in another order than asked each get their own response")
    func thousandConcurrent() async throws {
        try await withTestNetwork { network in
            // Every request waits at its own gate; the test opens them in a scrambled order.
            let gates = (0..<1000).map { _ in HandlerGate(open: false) }
            let (reached, arrival) = AsyncStream<Void>.makeStream()
            // Limits raised so that all 1,000 are at their handlers at once.
            try await withNetworkServer(on: network, configure: { $0.maximumRequestsPerPeer = 1000 }, handlers: { server in
                server.handle(type: 0x404) { request, _ in
                    let id = request.json?["id"]?.intValue ?? 0
                    arrival.yield()
                    await gates[id].pass()
                    return Response(json: ["echo": request.json ?? nil])
                }
            }) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.limits.maximumInFlightRequests = 1000
                let connection = try await Connection.connect(to: endpoint, configuration: configuration)
                let requests = Task {
                    try await withThrowingTaskGroup(of: (Int, Response).self) { group in
                        for id in 0..<1000 {
                            group.addTask {
                                let reply = try await connection.request(Request(type: 0x404, json: ["id": .int(id)]), timeout: .seconds(60))
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
                #expect(try await collect(1000, from: reached, "1,000 requests at their handlers").count == 1000)
                for step in 0..<1000 { gates[(step * 7919) % 1000].open() }
                let results = try await withTimeLimit(.seconds(30), "1,000 responses") { try await requests.value }
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
    }

    @Test("a request with no answer times out at its deadline with an error naming its type, serial and timeout")
    func timeout() async throws {
        try await withTestNetwork { network in
            let (reached, arrival) = AsyncStream<Void>.makeStream()
            try await withNetworkServer(on: network, handlers: { server in
                server.handle(type: 0x405) { _, _ in
                    arrival.yield()
                    try await untilCancelledByServer()
                    return Response()
                }
            }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: .testing(on: network))
                let pending = Task { try await connection.request(Request(type: 0x405), timeout: .milliseconds(100)) }
                _ = try await firstElement(of: reached)
                await network.advance(by: .milliseconds(100) - .nanoseconds(1))
                #expect(await connection.pendingRequestCount == 1)
                await network.advance(by: .nanoseconds(1))
                let outcome = try await withTimeLimit { await pending.result }
                let error = #expect(throws: TetherError.self) { try outcome.get() }
                #expect(error?.code == .timedOut)
                #expect(error?.message == "request 0x405 serial 1 timed out after 100 ms")
                #expect(await connection.pendingRequestCount == 0)
                #expect(await connection.currentState.phase == .connected)
                await connection.close()
            }
        }
    }

    @Test("timeouts of different lengths each fire on time, never early, none waiting for a longer one")
    func mixedTimeouts() async throws {
        // The client on a manual clock, a server that reads and answers only the first
        // request: each timeout is checked at its deadline and 1 ns before it.
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        // The configured timeout is 1 s. An answered request first leaves the shared
        // deadline timer set 5 s ahead with no request waiting; "short" must set it again.
        // "middle" is shorter than the request before it and gets a timer of its own.
        let configured = Duration.seconds(1)
        async let accepted = listener.accept()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
            $0.requestTimeout = configured
            $0.eventLoopGroup = group
        })
        let server = try await accepted
        defer { server.close() }
        let answered = Task { try await connection.request(Request(type: 0x402), timeout: .seconds(5)) }
        let question = try #require(try await server.readFrame())
        try server.write(seedBytes(type: 0x402, serial: question.serial))
        _ = try await bounded("the answer") { try await answered.value }

        let plan: [(name: String, timeout: RequestTimeout)] = [("short", .milliseconds(150)), ("first", .configured), ("middle", .milliseconds(300)), ("second", .configured), ("long", .seconds(2))]
        // Made in the plan's order, each once the one before it is on the wire; the clock
        // does not move meanwhile, so every deadline is `start` plus its timeout.
        let start = clock.now
        var keys: [String: Connection.RequestKey] = [:]
        var callers: [String: Task<Response, any Error>] = [:]
        for (name, timeout) in plan {
            let key = await connection.nextRequestKey()
            keys[name] = key
            callers[name] = Task { try await connection.request(Request(type: 0x405), timeout: timeout) }
            #expect(try await server.readFrame()?.serial == key.serial, "\(name)")
        }
        let deadlines = plan.map { (name: $0.name, at: start + MonotonicTime.nanoseconds(of: $0.timeout.limit(configured: configured) ?? configured)) }
        for at in Set(deadlines.map(\.at)).sorted() {
            await clock.advance(to: at - 1)
            for (name, deadline) in deadlines {
                let key = try #require(keys[name])
                #expect(await connection.isPending(key) == (deadline >= at), "\(name) 1 ns before \(at - start) ns")
            }
            await clock.advance(to: at)
            for (name, deadline) in deadlines {
                let key = try #require(keys[name])
                #expect(await connection.isPending(key) == (deadline > at), "\(name) at \(at - start) ns")
            }
        }
        for (name, _) in plan {
            let caller = try #require(callers[name])
            let outcome = try await bounded("\(name) to end") { await caller.result }
            if case .failure(let error as TetherError) = outcome {
                #expect(error.code == .timedOut, "\(name): \(error)")
            } else {
                Issue.record("\(name) ended with \(outcome)")
            }
        }
        #expect(await connection.metrics.requestsTimedOut == 5)
        #expect(await connection.pendingRequestCount == 0)
        await connection.close()
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
                try await untilCancelledByServer()
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
        let (reached, arrival) = AsyncStream<Void>.makeStream()
        try await withServer(handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x40B) { _, _ in
                arrival.yield()
                try await untilCancelledByServer()
                return Response()
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let notifications = connection.notifications
            let pending = Task { try await connection.request(Request(type: 0x40B)) }
            _ = try await collect(1, from: reached, "the request to reach the server")
            await connection.close()
            await connection.close()
            let error = await #expect(throws: TetherError.self) { try await pending.value }
            #expect(error?.code == .connectionClosed)
            #expect(error?.message.hasPrefix("request 0x40b serial 1 failed: connection to ") == true)
            #expect(try await collect(1, from: notifications, "the end of the notifications").isEmpty)
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
