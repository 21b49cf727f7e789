import Testing
import TetherTesting
@testable import Tether

/// The two ways a request reaches its connection: a caller on the connection's loop places
/// it within the actor; any other caller hands the loop a job and waits outside the actor.
/// Both end exactly once, whatever order cancellation and placement come in.
@Suite("Request paths", .timeLimit(.guarded))
struct RequestPathTests {
    private static func echo(_ index: Int) -> Request {
        Request(type: 0x402, json: ["i": .int(index)])
    }

    private static func index(of response: Response) -> Int? {
        guard case .object(let fields)? = response.json, case .object(let echo)? = fields["echo"], case .int(let index)? = echo["i"] else { return nil }
        return index
    }

    @Test("callers on the loop and callers off it, 200 each at once: every one gets its own echo, and the table ends empty")
    func bothPaths() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let indexes = await withTaskGroup(of: (Int, Int?).self) { group in
                for index in 0..<400 {
                    let executor: (any TaskExecutor)? = index.isMultiple(of: 2) ? connection.taskExecutor : nil
                    group.addTask(executorPreference: executor) {
                        let response = try? await connection.request(Self.echo(index))
                        return (index, response.flatMap(Self.index))
                    }
                }
                var results: [Int: Int?] = [:]
                for await (index, echoed) in group { results[index] = echoed }
                return results
            }
            #expect(indexes.count == 400 && indexes.allSatisfy { $0.key == $0.value })
            let metrics = await connection.metrics
            #expect(metrics.requestsSent == 400 && metrics.requestsCompleted == 400)
            #expect(await connection.pendingRequestCount == 0)
            await connection.close()
        }
    }

    @Test("a task cancelled before it calls request, off the loop and on it: CancellationError, nothing written, and requestsCancelled counts each")
    func cancelledBeforeTheCall() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            for executor in [nil, connection.taskExecutor] as [(any TaskExecutor)?] {
                let task = Task(executorPreference: executor) {
                    await suspendUntilCancelledQuietly()
                    return try await connection.request(Self.echo(1))
                }
                task.cancel()
                await #expect(throws: CancellationError.self) { try await task.value }
            }
            let metrics = await connection.metrics
            #expect(metrics.requestsCancelled == 2 && metrics.requestsSent == 0 && metrics.framesOut == 0)
            await connection.close()
        }
    }

    @Test("a cancellation that reaches the loop before the request's job: the request is never written and ends once with CancellationError")
    func cancelledBeforePlaced() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let placement = RequestPlacement(connection: connection, request: Self.echo(1), timeout: .configured)
            let outcome: Result<Response, any Error> = await withUnsafeContinuation { (done: UnsafeContinuation<Result<Response, any Error>, Never>) in
                Task {
                    do {
                        let response = try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Response, any Error>) in
                            placement.continuation = continuation
                            // The order a cancellation can overtake the job in.
                            connection.loop.execute {
                                placement.cancel()
                                placement.run()
                            }
                        }
                        done.resume(returning: .success(response))
                    } catch {
                        done.resume(returning: .failure(error))
                    }
                }
            }
            #expect(throws: CancellationError.self) { try outcome.get() }
            let metrics = await connection.metrics
            #expect(metrics.requestsCancelled == 1 && metrics.requestsSent == 0 && metrics.framesOut == 0)
            #expect(await connection.pendingRequestCount == 0)
            // The connection is unharmed.
            #expect(try await connection.request(Self.echo(2)).json != nil)
            await connection.close()
        }
    }

    @Test("a pipeline whose cancellation reaches the loop before its job: no request is written, each ends once with CancellationError")
    func pipelineCancelledBeforePlaced() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let batch = PipelineBatch(count: 3)
            batch.placing = (connection, [Self.echo(1), Self.echo(2), Self.echo(3)], .configured)
            let outcomes = await withUnsafeContinuation { (continuation: UnsafeContinuation<[Result<Response, any Error>], Never>) in
                batch.continuation = continuation
                connection.loop.execute {
                    connection.assumeIsolated { $0.cancelPipeline(batch) }
                    batch.run()
                }
            }
            #expect(outcomes.count == 3)
            for outcome in outcomes { #expect(throws: CancellationError.self) { try outcome.get() } }
            let metrics = await connection.metrics
            #expect(metrics.requestsCancelled == 3 && metrics.requestsSent == 0 && metrics.framesOut == 0)
            #expect(await connection.pendingRequestCount == 0)
            // Pipelines from a task off the loop and from one on it still work.
            let off = await Task.detached { await connection.pipeline([Self.echo(4), Self.echo(5)]) }.value
            #expect(off.map { (try? $0.get()).flatMap(Self.index) } == [4, 5])
            let on = await Task(executorPreference: connection.taskExecutor) { await connection.pipeline([Self.echo(6)]) }.value
            #expect(on.map { (try? $0.get()).flatMap(Self.index) } == [6])
            await connection.close()
        }
    }

    @Test("a caller off the loop, then one on it, cancelled while its request is in flight ends once with CancellationError; a late cancellation after the response changes nothing")
    func cancelledInFlight() async throws {
        let (reached, arrival) = AsyncStream<Void>.makeStream()
        try await withServer(handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x405) { _, _ in
                arrival.yield()
                try await suspendUntilCancelled()
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let silent = Task.detached { try await connection.request(Request(type: 0x405)) }
            _ = try await collect(1, from: reached, "the request at its handler")
            silent.cancel()
            await #expect(throws: CancellationError.self) { try await silent.value }
            #expect(await connection.metrics.requestsCancelled == 1)
            #expect(await connection.pendingRequestCount == 0)

            // The same from a caller on the connection's loop.
            let onLoop = Task(executorPreference: connection.taskExecutor) { try await connection.request(Request(type: 0x405)) }
            _ = try await collect(1, from: reached, "the request from the loop at its handler")
            onLoop.cancel()
            await #expect(throws: CancellationError.self) { try await onLoop.value }
            #expect(await connection.metrics.requestsCancelled == 2)
            #expect(await connection.pendingRequestCount == 0)

            let answered = Task.detached { try await connection.request(Self.echo(3)) }
            let response = try await answered.value
            answered.cancel()
            #expect(Self.index(of: response) == 3)
            let metrics = await connection.metrics
            #expect(metrics.requestsCancelled == 2 && metrics.requestsCompleted == 1)
            await connection.close()
        }
    }
}

/// Returns once the calling task is cancelled, without throwing.
private func suspendUntilCancelledQuietly() async {
    _ = try? await suspendUntilCancelled()
}
