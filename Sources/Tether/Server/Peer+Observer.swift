extension Peer {
    /// Runs an immediate handler with ``ServerConfiguration/observer`` set, and writes its
    /// answer: the observer hears of the start and of the outcome around the handler.
    func answerObserved<Observer: ServerObserver>(_ frame: Frame, with handler: Server.ImmediateHandler, observer: Observer) {
        let request = Request(frame: frame)
        let observed = observation(of: request)
        let span = observer.handlerStarted(observed, peer: id)
        let start = loop.now
        let response: Response
        var thrown: (any Error)?
        do {
            response = try handler(request, self)
        } catch {
            thrown = error
            response = Self.errorResponse(for: error)
        }
        let outcome = RequestOutcome(response: answer(response, to: request), error: thrown, duration: elapsed(since: start))
        observer.handlerEnded(observed, peer: id, outcome: outcome, span: span)
        respond(response, to: frame)
    }

    /// Runs a suspending handler with ``ServerConfiguration/observer`` set, as `invoke`
    /// does: a thrown error becomes an error response, and a handler cancelled as the peer
    /// or server shuts down answers nothing. The observer hears of the start and of the
    /// outcome around the handler, in its task.
    static func invokeObserved<Observer: ServerObserver>(
        _ handler: Server.Handler,
        _ request: Request,
        _ peer: isolated Peer,
        observer: Observer
    ) async -> Response? {
        let observed = peer.observation(of: request)
        let span = observer.handlerStarted(observed, peer: peer.id)
        let start = peer.loop.now
        let response: Response?
        var thrown: (any Error)?
        do {
            response = try await handler(request, peer)
        } catch is CancellationError where Task.isCancelled {
            thrown = CancellationError()
            response = nil
        } catch {
            thrown = error
            response = errorResponse(for: error)
        }
        let outcome = RequestOutcome(response: response.map { peer.answer($0, to: request) }, error: thrown, duration: peer.elapsed(since: start))
        observer.handlerEnded(observed, peer: peer.id, outcome: outcome, span: span)
        return response
    }

    private func observation(of request: Request) -> ObservedRequest {
        ObservedRequest(type: request.type, serial: request.serial, payloadSize: request.payload.count, remoteAddress: remoteAddress)
    }

    /// `response` as it goes out: the request's type and serial where it leaves them at 0.
    private func answer(_ response: Response, to request: Request) -> Response {
        var sent = response
        if sent.type == 0 { sent.type = request.type }
        if sent.serial == 0 { sent.serial = request.serial }
        return sent
    }

    /// The time since `start`, on the loop's clock.
    private func elapsed(since start: UInt64) -> Duration {
        let now = loop.now
        return .nanoseconds(now >= start ? now - start : 0)
    }
}
