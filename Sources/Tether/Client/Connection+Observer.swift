extension Connection {
    /// ``request(_:timeout:)`` with ``ConnectionConfiguration/observer`` set: the observer
    /// hears of the start in the caller's task, then of the outcome, with the serial the
    /// request was given and the time it took on the loop's clock.
    ///
    /// Generic over the observer, so that its ``ConnectionObserver/RequestSpan`` goes from
    /// the start to the end as it is.
    nonisolated func observedRequest<Observer: ConnectionObserver>(
        _ request: Request,
        timeout: RequestTimeout,
        observer: Observer
    ) async throws -> Response {
        var observed = ObservedRequest(type: request.type, serial: 0, payloadSize: request.payload.count, endpoint: endpoint)
        let trace = RequestTrace()
        let span = observer.requestStarted(observed)
        let started = observed
        trace.written = { serial in
            var written = started
            written.serial = serial
            observer.requestWritten(written, span: span)
        }
        let start = loop.now
        do {
            let response = try await placeRequest(request, timeout: timeout, trace: trace)
            observed.serial = trace.serial
            observer.requestEnded(observed, outcome: RequestOutcome(response: response, duration: elapsed(since: start)), span: span)
            return response
        } catch {
            observed.serial = trace.serial
            observer.requestEnded(observed, outcome: RequestOutcome(error: error, duration: elapsed(since: start)), span: span)
            throw error
        }
    }

    /// ``pipeline(_:timeout:)`` with ``ConnectionConfiguration/observer`` set: the observer
    /// hears of every start, in order, before the first request is placed, and of every
    /// outcome, in order, once the last is in; each duration is the time to then.
    nonisolated func observedPipeline<Observer: ConnectionObserver>(
        _ requests: [Request],
        timeout: RequestTimeout,
        observer: Observer
    ) async -> [Result<Response, any Error>] {
        var observed = requests.map { ObservedRequest(type: $0.type, serial: 0, payloadSize: $0.payload.count, endpoint: endpoint) }
        let spans = observed.map { observer.requestStarted($0) }
        let start = loop.now
        let batch = PipelineBatch(count: requests.count)
        let outcomes = await placePipeline(requests, timeout: timeout, batch: batch)
        let duration = elapsed(since: start)
        // The batch was filled in on the loop before the outcomes resumed this task.
        for index in outcomes.indices {
            observed[index].serial = batch.members[index]?.serial ?? 0
            let outcome: RequestOutcome
            switch outcomes[index] {
            case .success(let response): outcome = RequestOutcome(response: response, duration: duration)
            case .failure(let error): outcome = RequestOutcome(error: error, duration: duration)
            }
            observer.requestEnded(observed[index], outcome: outcome, span: spans[index])
        }
        return outcomes
    }

    /// The time since `start`, on the loop's clock (a manual one, in tests that have it).
    private nonisolated func elapsed(since start: UInt64) -> Duration {
        let now = loop.now
        return .nanoseconds(now >= start ? now - start : 0)
    }

    /// Tells `trace` once the request written as `serial` is all in the kernel.
    func watchWrite(of trace: RequestTrace, serial: UInt32, on channel: Channel) {
        guard trace.written != nil else { return }
        nextSendID += 1
        let loop = loop
        channel.whenWritten(id: nextSendID) { written in
            guard written else { return }
            // Outside the flush that decided it.
            loop.execute { trace.written?(serial) }
        }
    }

    /// Tells the observer of a state change, as it is published.
    func observe(_ state: ConnectionState) {
        // The endpoint the state is about, not the configured one: the one dialed next
        // while connecting or reconnecting, the one in use otherwise.
        configuration.observer?.connectionStateChanged(state, of: endpoint(of: state))
    }

    /// The endpoint `state` is about: while connecting or reconnecting, the one the attempt
    /// dials (an alternate or the fallback after a failover); otherwise the one in use.
    func endpoint(of state: ConnectionState) -> Endpoint {
        guard state.phase == .connecting || state.phase == .reconnecting else { return currentEndpoint }
        if lifecycle.onFallback, let fallback = configuration.fallback { return fallback.endpoint }
        let endpoints = [endpoint] + configuration.alternateEndpoints
        return endpoints[lifecycle.endpointIndex % endpoints.count]
    }

    /// What tells the observer of each session event, as it is published; `nil` without one.
    static func sessionTap(_ configuration: ConnectionConfiguration, endpoint: Endpoint) -> (@Sendable (SessionEvent) -> Void)? {
        guard let observer = configuration.observer else { return nil }
        return { event in observer.sessionEvent(event, of: endpoint) }
    }
}

/// Where the loop leaves the serial of an observed request for its caller.
///
/// `@unchecked Sendable`: the loop writes ``serial`` as it places the request, before the
/// request's outcome resumes the caller, which reads it only after that.
final class RequestTrace: @unchecked Sendable {
    var serial: UInt32 = 0
    /// Tells the observer that the request was written, with its serial; set before the
    /// request is placed, called on the loop.
    var written: ((UInt32) -> Void)?
}
