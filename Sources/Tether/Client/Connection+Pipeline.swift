/// Who waits for a request's outcome.
///
/// Unsafe continuations rather than checked ones (which allocate a box per request): the
/// request table hands each entry out exactly once, and the tests prove every request ends
/// exactly once.
enum RequestWaiter {
    /// The caller of ``Connection/request(_:timeout:)``.
    case single(UnsafeContinuation<Response, any Error>)
    /// Place `index` of a pipeline, whose caller is resumed once every place has its outcome.
    case pipelined(PipelineBatch, index: Int)

    func resume(returning response: Response) {
        switch self {
        case .single(let continuation): continuation.resume(returning: response)
        case .pipelined(let batch, let index): batch.settle(index, .success(response))
        }
    }

    func resume(throwing error: any Error) {
        switch self {
        case .single(let continuation): continuation.resume(throwing: error)
        case .pipelined(let batch, let index): batch.settle(index, .failure(error))
        }
    }
}

/// The outcomes of one pipeline, gathered until the last arrives; then its caller is resumed,
/// once, with all of them.
///
/// For a caller off the loop, the batch is also the job that places the requests.
///
/// `@unchecked Sendable`: it is made, filled and read on its connection's event loop only
/// (the cancellation handler hands it back to the loop before touching it), but for what
/// a caller off the loop sets before enqueueing it as a job (the queue orders those writes
/// before the job runs).
final class PipelineBatch: LoopJob, @unchecked Sendable {
    private var outcomes: [Result<Response, any Error>?]
    private var remaining: Int
    /// The serial and id each place was given, for cancellation; `nil` for a place that
    /// ended before it was recorded in the request table.
    var members: [(serial: UInt32, id: UInt64)?]
    var continuation: UnsafeContinuation<[Result<Response, any Error>], Never>?
    /// For the job: the connection, the requests and their timeout; dropped once placed.
    var placing: (connection: Connection, requests: [Request], timeout: RequestTimeout)?
    /// Whether the requests have been placed (their serials are in ``members``).
    var placed = false
    /// Whether the caller was cancelled before the job placed the requests.
    var cancelRequested = false
    /// Whether the caller is the connection's preparation: its requests go at once.
    var first = false

    init(count: Int) {
        outcomes = Array(repeating: nil, count: count)
        members = Array(repeating: nil, count: count)
        remaining = count
    }

    func run() {
        guard let (connection, requests, timeout) = placing else { return }
        placing = nil
        onLoop(connection.loop, connection, self) { connection, batch in
            connection.place(batch, requests: requests, timeout: timeout, cancelled: batch.cancelRequested)
        }
    }

    /// Place `index` ended with `outcome`; the last one resumes the caller.
    func settle(_ index: Int, _ outcome: Result<Response, any Error>) {
        precondition(outcomes[index] == nil, "pipelined request \(index) ended twice")
        outcomes[index] = outcome
        remaining -= 1
        guard remaining == 0, let continuation else { return }
        self.continuation = nil
        continuation.resume(returning: outcomes.map { $0! })
    }
}

extension Connection {
    /// Sends many requests at once and waits for all their outcomes, with one wake-up of the
    /// caller instead of one per response.
    ///
    /// For a caller that has many requests ready at the same time (a page of items to
    /// fetch, a batch of writes to confirm), the way a Redis pipeline works: every request is
    /// written in this one step on the connection, so they leave together in as few system
    /// calls as the outbound buffer allows, and their responses are gathered as they arrive,
    /// in any order, and handed back together, each in the place of its request.
    ///
    /// ```swift
    /// let outcomes = await connection.pipeline(ids.map { Request(type: 0x410, json: ["id": $0]) })
    /// for case .success(let response) in outcomes { … }
    /// ```
    ///
    /// Each request behaves as if made with ``request(_:timeout:)``, one after the other:
    /// its own serial, its own timeout (`timeout` counts from this call), written at once or
    /// queued by the same limits (``Limits/maximumInFlightRequests``,
    /// ``Limits/outboundHighWaterMark``, ``Limits/maximumQueuedRequests``: those over the
    /// queue's limit fail with ``TetherError/Code/tooManyPendingRequests``), and it ends
    /// exactly once, with its response or its error, which takes its place in the result.
    /// Cancelling the calling task ends every request still waiting with
    /// `CancellationError`; those answered keep their response.
    ///
    /// - Parameters:
    ///   - requests: The requests, written in this order.
    ///   - timeout: How long each may take: ``RequestTimeout/configured`` (the default) for
    ///     ``ConnectionConfiguration/requestTimeout``, a duration of its own, or
    ///     ``RequestTimeout/unlimited``.
    /// - Returns: One outcome per request, in the order of `requests`: the response, or the
    ///   error ``request(_:timeout:)`` would have thrown.
    public nonisolated func pipeline(_ requests: [Request], timeout: RequestTimeout = .configured) async -> [Result<Response, any Error>] {
        guard !requests.isEmpty else { return [] }
        if let observer = configuration.observer {
            return await observedPipeline(requests, timeout: timeout, observer: observer)
        }
        return await placePipeline(requests, timeout: timeout, batch: PipelineBatch(count: requests.count))
    }

    /// What ``pipeline(_:timeout:)`` does once the observer is taken care of, with `batch`
    /// to gather the outcomes (and the serials, in its ``PipelineBatch/members``).
    @inline(__always)
    nonisolated func placePipeline(_ requests: [Request], timeout: RequestTimeout, batch: PipelineBatch) async -> [Result<Response, any Error>] {
        // As for request(_:timeout:): a caller off the loop hands the loop a job (the batch
        // itself) and waits outside the actor, so the outcomes resume it on its own
        // executor directly.
        batch.first = configuration.prepare != nil && callerPrepares
        if loop.inLoop {
            return await pipelineOnLoop(requests, timeout: timeout, batch: batch)
        }
        batch.placing = (self, requests, timeout)
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<[Result<Response, any Error>], Never>) in
                batch.continuation = continuation
                loop.enqueue(.object(batch))
            }
        } onCancel: {
            loop.execute { [self] in
                assumeIsolated { $0.cancelPipeline(batch) }
            }
        }
    }

    /// ``pipeline(_:timeout:)`` for a caller already on the loop.
    private func pipelineOnLoop(_ requests: [Request], timeout: RequestTimeout, batch: PipelineBatch) async -> [Result<Response, any Error>] {
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<[Result<Response, any Error>], Never>) in
                batch.continuation = continuation
                // Read once: a cancellation that comes while the requests are placed runs
                // the handler below after this step, which ends those placed by then.
                place(batch, requests: requests, timeout: timeout, cancelled: Task.isCancelled)
            }
        } onCancel: {
            loop.execute { [self] in
                assumeIsolated { $0.cancelPipeline(batch) }
            }
        }
    }

    /// Places every request of a pipeline; `cancelled` when its caller already is.
    func place(_ batch: PipelineBatch, requests: [Request], timeout: RequestTimeout, cancelled: Bool) {
        let limit = timeout.limit(configured: configuration.requestTimeout)
        batch.placed = true
        // One reading of the clock: every timeout counts from this call.
        let start = loop.now
        for (index, request) in requests.enumerated() {
            if lifecycle.hasEnded {
                counters.requestsFailed += 1
                batch.settle(index, .failure(notConnected()))
                continue
            }
            if cancelled {
                counters.requestsCancelled += 1
                batch.settle(index, .failure(CancellationError()))
                continue
            }
            let (serial, id) = table.allocate()
            batch.members[index] = (serial, id)
            if let error = place(request, serial: serial, id: id, limit: limit, from: start, waiter: .pipelined(batch, index: index), first: batch.first) {
                batch.members[index] = nil
                batch.settle(index, .failure(error))
            }
        }
    }

    /// The caller of a pipeline was cancelled: every request of it still waiting ends with
    /// `CancellationError`.
    func cancelPipeline(_ batch: PipelineBatch) {
        guard batch.placed else {
            // The cancellation overtook the job that places the requests: they end as
            // they are placed.
            batch.cancelRequested = true
            return
        }
        var wroteAny = false
        for member in batch.members {
            guard let (serial, id) = member, let entry = table.remove(serial: serial, id: id) else { continue }
            if let timer = entry.timer { loop.cancel(timer) }
            counters.requestsCancelled += 1
            if !entry.isQueued { wroteAny = true }
            entry.waiter.resume(throwing: CancellationError())
        }
        dropEndedDeadlines()
        if wroteAny { pump() }
        requestEnded()
    }
}
