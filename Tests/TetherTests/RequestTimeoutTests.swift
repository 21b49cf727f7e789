import Testing
import TetherTesting
@testable import Tether

/// ``RequestTimeout`` over 127.0.0.1: the configured limit, one of a call's own, or none.
@Suite("Request timeouts", .timeLimit(.guarded))
struct RequestTimeoutTests {
    /// 0x461 answers once the test opens `gate`, telling `arrivals` first; 0x462 never
    /// answers.
    static func handlers(gate: HandlerGate, arrivals: AsyncStream<UInt32>.Continuation) -> @Sendable (Server) -> Void {
        { server in
            server.handle(type: 0x461) { request, _ in
                arrivals.yield(request.serial)
                await gate.pass()
                return Response(json: ["answered": .int(Int(request.serial))])
            }
            server.handle(type: 0x462) { request, _ in
                arrivals.yield(request.serial)
                try await untilCancelledByServer()
                return .noReply
            }
        }
    }

    @Test("a request with .unlimited on a connection whose requestTimeout is 100 ms outlives a sibling that times out after 100 ms, and gets its answer once the handler is let go")
    func unlimitedOutlivesConfigured() async throws {
        let gate = HandlerGate(open: false)
        let (arrived, arrivals) = AsyncStream<UInt32>.makeStream()
        try await withServer(handlers: Self.handlers(gate: gate, arrivals: arrivals)) { _, endpoint in
            defer { gate.open() }
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.requestTimeout = .milliseconds(100)
            })
            let patient = Task { try await connection.request(Request(type: 0x461), timeout: .unlimited) }
            #expect(try await firstElement(of: arrived) == 1)
            // Made after the unlimited one reached its handler: once it has timed out, the
            // unlimited one has waited more than 100 ms.
            let error = await #expect(throws: TetherError.self) {
                try await connection.request(Request(type: 0x462))
            }
            #expect(error?.code == .timedOut)
            #expect(error?.message == "request 0x462 serial 2 timed out after 100 ms")
            let waiting = await connection.metrics
            #expect(waiting.requestsTimedOut == 1)
            #expect(waiting.inFlightRequests == 1)
            gate.open()
            let reply = try await bounded("the unlimited request's answer") { try await patient.value }
            #expect(reply.serial == 1)
            #expect(reply.json == ["answered": 1])
            let metrics = await connection.metrics
            #expect(metrics.requestsTimedOut == 1)
            #expect(metrics.requestsCompleted == 1)
            await connection.close()
        }
    }

    @Test("a pipeline with .unlimited outlives the configured 100 ms too")
    func unlimitedPipeline() async throws {
        let gate = HandlerGate(open: false)
        let (arrived, arrivals) = AsyncStream<UInt32>.makeStream()
        try await withServer(handlers: Self.handlers(gate: gate, arrivals: arrivals)) { _, endpoint in
            defer { gate.open() }
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.requestTimeout = .milliseconds(100)
            })
            let batch = Task { await connection.pipeline([Request(type: 0x461), Request(type: 0x461)], timeout: .unlimited) }
            #expect(try await collect(2, from: arrived, "both pipelined requests at their handler").sorted() == [1, 2])
            let error = await #expect(throws: TetherError.self) {
                try await connection.request(Request(type: 0x462))
            }
            #expect(error?.message == "request 0x462 serial 3 timed out after 100 ms")
            gate.open()
            let outcomes = try await bounded("the pipeline's answers") { await batch.value }
            #expect(try outcomes.map { try $0.get().json } == [["answered": 1], ["answered": 2]])
            await connection.close()
        }
    }

    @Test(".after(.milliseconds(50)) sets a limit on a connection whose requestTimeout is nil (none)")
    func afterOverridesNoLimit() async throws {
        let gate = HandlerGate(open: false)
        let (_, arrivals) = AsyncStream<UInt32>.makeStream()
        try await withServer(handlers: Self.handlers(gate: gate, arrivals: arrivals)) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.requestTimeout = nil
            })
            let error = await #expect(throws: TetherError.self) {
                try await connection.request(Request(type: 0x462), timeout: .after(.milliseconds(50)))
            }
            #expect(error?.code == .timedOut)
            #expect(error?.message == "request 0x462 serial 1 timed out after 50 ms")
            #expect(await connection.metrics.requestsTimedOut == 1)
            await connection.close()
        }
    }

    @Test("an .unlimited request still ends: with connectionClosed when the connection is closed, with connectionLost when the server drops it")
    func unlimitedEndsWithTheConnection() async throws {
        let gate = HandlerGate(open: false)
        let (arrived, arrivals) = AsyncStream<UInt32>.makeStream()
        try await withServer(handlers: Self.handlers(gate: gate, arrivals: arrivals)) { server, endpoint in
            let configuration = testConfiguration { $0.requestTimeout = .milliseconds(100) }

            let closed = try await Connection.connect(to: endpoint, configuration: configuration)
            let first = Task { try await closed.request(Request(type: 0x462), timeout: .unlimited) }
            #expect(try await firstElement(of: arrived) == 1)
            await closed.close()
            let closedError = await #expect(throws: TetherError.self) {
                try await bounded("the request on the closed connection") { try await first.value }
            }
            #expect(closedError?.code == .connectionClosed)

            let lost = try await Connection.connect(to: endpoint, configuration: configuration)
            let second = Task { try await lost.request(Request(type: 0x462), timeout: .unlimited) }
            #expect(try await firstElement(of: arrived) == 1)
            for peer in server.peers { await peer.close() }
            let lostError = await #expect(throws: TetherError.self) {
                try await bounded("the request on the lost connection") { try await second.value }
            }
            #expect(lostError?.code == .connectionLost)
            #expect(await lost.metrics.requestsFailed == 1)
            await lost.close()
        }
    }

    @Test("an .unlimited request whose task is cancelled ends with CancellationError")
    func unlimitedCancelled() async throws {
        let gate = HandlerGate(open: false)
        let (arrived, arrivals) = AsyncStream<UInt32>.makeStream()
        try await withServer(handlers: Self.handlers(gate: gate, arrivals: arrivals)) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.requestTimeout = .milliseconds(100)
            })
            let request = Task { try await connection.request(Request(type: 0x462), timeout: .unlimited) }
            #expect(try await firstElement(of: arrived) == 1)
            request.cancel()
            await #expect(throws: CancellationError.self) {
                try await bounded("the cancelled request") { try await request.value }
            }
            let metrics = await connection.metrics
            #expect(metrics.requestsCancelled == 1)
            #expect(metrics.requestsTimedOut == 0)
            #expect(metrics.inFlightRequests == 0)
            await connection.close()
        }
    }

    @Test("RequestTimeout values: literals as for Duration, equality and descriptions")
    func values() {
        #expect(RequestTimeout.seconds(5) == .after(.seconds(5)))
        #expect(RequestTimeout.seconds(0.5) == .after(.milliseconds(500)))
        #expect(RequestTimeout.milliseconds(200) == .after(.milliseconds(200)))
        #expect(RequestTimeout.configured != .unlimited)
        #expect(RequestTimeout.configured.limit(configured: .seconds(30)) == .seconds(30))
        #expect(RequestTimeout.configured.limit(configured: nil) == nil)
        #expect(RequestTimeout.unlimited.limit(configured: .seconds(30)) == nil)
        #expect(RequestTimeout.milliseconds(50).limit(configured: nil) == .milliseconds(50))
        #expect(RequestTimeout.configured.description == "configured")
        #expect(RequestTimeout.unlimited.description == "unlimited")
        #expect(RequestTimeout.seconds(1.5).description == "1.5 s")
        #expect(RequestTimeout.milliseconds(250).description == "250 ms")
    }
}
