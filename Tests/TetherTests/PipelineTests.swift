import Testing
import TetherTesting
@testable import Tether

/// `Connection.pipeline(_:timeout:)`: many requests at once, one wake-up for all their
/// outcomes, each ending exactly once.
@Suite("Pipelined requests", .timeLimit(.guarded))
struct PipelineTests {
    /// What one outcome was, for exact comparisons.
    enum Outcome: Hashable {
        case echo(Int)
        case timedOut
        case cancelled
        case connectionLost
        case notConnected
        case tooManyPending
        case other(String)

        init(_ result: Result<Response, any Error>) {
            switch result {
            case .success(let response):
                if case .object(let fields)? = response.json, case .object(let echo)? = fields["echo"], case .int(let index)? = echo["i"] {
                    self = .echo(index)
                } else {
                    self = .other(response.text)
                }
            case .failure(let error as TetherError):
                switch error.code {
                case .timedOut: self = .timedOut
                case .connectionLost: self = .connectionLost
                case .notConnected: self = .notConnected
                case .tooManyPendingRequests: self = .tooManyPending
                default: self = .other("\(error)")
                }
            case .failure(is CancellationError):
                self = .cancelled
            case .failure(let error):
                self = .other("\(error)")
            }
        }
    }

    /// 0x402 echoes; 0x404 is never answered (it reports reaching its handler on
    /// `arrival`); 0x40A closes the connection.
    private static func handlers(_ server: Server, reaching arrival: AsyncStream<Void>.Continuation) {
        server.handle(type: 0x402) { request, _ in Response(json: ["echo": request.json ?? nil]) }
        server.handle(type: 0x404) { _, _ in
            arrival.yield()
            try await untilCancelledByServer()
            return Response()
        }
        server.handle(type: 0x40A) { _, peer in
            await peer.close()
            return Response()
        }
    }

    private static func echo(_ index: Int) -> Request {
        Request(type: 0x402, json: ["i": .int(index)])
    }

    @Test("300 requests over a socket, beyond the in-flight limit of 100: each outcome is its own request's echo, in the order of the requests")
    func manyOverASocket() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.limits.maximumInFlightRequests = 100
            })
            let outcomes = await connection.pipeline((0..<300).map(Self.echo))
            #expect(outcomes.map(Outcome.init) == (0..<300).map(Outcome.echo))
            let metrics = await connection.metrics
            #expect(metrics.requestsSent == 300)
            #expect(metrics.requestsCompleted == 300)
            #expect(await connection.pendingRequestCount == 0)
            // Serials are fresh and distinct, as for requests made one by one.
            let serials = outcomes.compactMap { try? $0.get().serial }
            #expect(Set(serials).count == 300 && !serials.contains(0))
            #expect(await connection.pipeline([]).isEmpty)
            await connection.close()
        }
    }

    @Test("each request keeps its own timeout and the others their responses; cancelling the caller ends only those still waiting; a close fails the rest: one outcome each, the table empty")
    func mixedOutcomes() async throws {
        try await withTestNetwork { network in
            let (reached, arrival) = AsyncStream<Void>.makeStream()
            try await withNetworkServer(on: network, handlers: { Self.handlers($0, reaching: arrival) }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: .testing(on: network))
                // Answered, silent, answered, silent: the silent ones time out at 20 ms.
                let requests = [Self.echo(0), Request(type: 0x404), Self.echo(2), Request(type: 0x404)]
                let timed = Task { await connection.pipeline(requests, timeout: .milliseconds(20)) }
                _ = try await collect(2, from: reached, "the silent requests at their handler")
                await network.advance(by: .milliseconds(20) - .nanoseconds(1))
                #expect(await connection.metrics.requestsTimedOut == 0)
                await network.advance(by: .nanoseconds(1))
                let outcomes = try await withTimeLimit { await timed.value }
                #expect(outcomes.map(Outcome.init) == [.echo(0), .timedOut, .echo(2), .timedOut])

                // Cancelled while two wait: those two end with CancellationError, the
                // answered one keeps its response.
                let cancelled = Task { await connection.pipeline([Request(type: 0x404), Self.echo(1), Request(type: 0x404)], timeout: .seconds(60)) }
                _ = try await collect(2, from: reached, "the silent requests at their handler")
                cancelled.cancel()
                let afterCancel = try await withTimeLimit { await cancelled.value }
                #expect(afterCancel.map(Outcome.init) == [.cancelled, .echo(1), .cancelled])
                #expect(await connection.metrics.requestsCancelled == 2)
                #expect(await connection.pendingRequestCount == 0)

                // A pipeline made on a closed connection fails each place at once.
                await connection.close()
                let closed = await connection.pipeline([Self.echo(0), Self.echo(1)])
                #expect(closed.count == 2)
                for outcome in closed {
                    guard case .failure(let error as TetherError) = outcome else {
                        Issue.record("expected a failure, got \(outcome)")
                        continue
                    }
                    #expect(error.code == .connectionClosed)
                }
            }
        }
    }

    @Test("the connection lost while a pipeline waits: the answered keep their responses, those in flight end with connectionLost, exactly once")
    func lostMidway() async throws {
        try await withTestNetwork { network in
            let (reached, arrival) = AsyncStream<Void>.makeStream()
            try await withNetworkServer(on: network, handlers: { Self.handlers($0, reaching: arrival) }) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.reconnect = .disabled
                let connection = try await Connection.connect(to: endpoint, configuration: configuration)
                let waiting = Task { await connection.pipeline([Self.echo(0), Request(type: 0x404), Request(type: 0x404)], timeout: .seconds(60)) }
                _ = try await collect(2, from: reached, "the silent requests at their handler")
                _ = try? await connection.request(Request(type: 0x40A), timeout: .seconds(5))
                let outcomes = try await withTimeLimit { await waiting.value }
                #expect(outcomes.map(Outcome.init) == [.echo(0), .connectionLost, .connectionLost])
                #expect(await connection.pendingRequestCount == 0)
            }
        }
    }

    @Test("more than the queue takes while disconnected: the first ones wait, the rest fail with tooManyPendingRequests, each in its place")
    func overTheQueueLimit() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: echoHandlers) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.limits.maximumQueuedRequests = 3
                // Not connected yet: every request queues, up to the limit.
                let connection = Connection(to: endpoint, configuration: configuration)
                // On the connection's loop: once the clock's loops are idle, the pipeline has
                // been placed.
                let waiting = Task(executorPreference: connection.loop.taskExecutor) {
                    await connection.pipeline((0..<5).map(Self.echo), timeout: .seconds(60))
                }
                await network.clock.runUntilIdle()
                #expect(await connection.pendingRequestCount == 3)
                try await connection.connect()
                let outcomes = try await withTimeLimit { await waiting.value }
                #expect(outcomes.map(Outcome.init) == [.echo(0), .echo(1), .echo(2), .tooManyPending, .tooManyPending])
                await connection.close()
            }
        }
    }
}
