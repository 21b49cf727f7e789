/// Sees what a server does as it happens: each request's handler from its start to its
/// outcome, and each server event. For logging and tracing with the packages of your
/// choice; Tether depends on none.
///
/// Set one on ``ServerConfiguration/observer``. Every method has a default that does
/// nothing. Without an observer (the default) nothing is observed and nothing is spent.
///
/// Every method runs on the event loop of the peer or server, just before and after the
/// handler (in the handler's task for one that suspends, in the peer's read for a
/// ``Server/ImmediateHandler``) and as each event is published, before any subscriber of
/// ``Server/events`` sees it, in the same order. They hold up every connection of that loop
/// while they run: keep them short, and never block or wait in them.
public protocol ServerObserver: Sendable {
    /// What the observer keeps from the start of a handler to its end: a span, a start
    /// time; `Void` (the default) for nothing. A type that is also a
    /// ``ConnectionObserver`` has one for both.
    associatedtype RequestSpan = Void

    /// A server is about to run the handler of a request.
    ///
    /// - Parameters:
    ///   - request: The request, with its serial and the peer's address.
    ///   - peer: The peer that sent it.
    /// - Returns: What ``handlerEnded(_:peer:outcome:span:)`` gets back.
    func handlerStarted(_ request: ObservedRequest, peer: PeerID) -> RequestSpan

    /// A server handler returned or threw.
    ///
    /// A handler that throws answers with an error response: the outcome has both the
    /// error and that response. A handler cancelled as its peer or server shuts down answers
    /// nothing: the outcome has `CancellationError` and no response.
    ///
    /// - Parameters:
    ///   - request: The request, with its serial and the peer's address.
    ///   - peer: The peer that sent it.
    ///   - outcome: The response sent (its type and serial filled in) and the error thrown,
    ///     if any, and the time the handler took.
    ///   - span: What ``handlerStarted(_:peer:)`` returned.
    func handlerEnded(_ request: ObservedRequest, peer: PeerID, outcome: RequestOutcome, span: RequestSpan)

    /// A server reported an event: every event ``Server/events`` yields, in order.
    ///
    /// - Parameter event: The event.
    func serverEvent(_ event: ServerEvent)
}

extension ServerObserver {
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - peer: The peer.
    ///   - outcome: Its outcome.
    ///   - span: What the start returned.
    public func handlerEnded(_ request: ObservedRequest, peer: PeerID, outcome: RequestOutcome, span: RequestSpan) {}

    /// Does nothing.
    ///
    /// - Parameter event: The event.
    public func serverEvent(_ event: ServerEvent) {}
}

extension ServerObserver where RequestSpan == Void {
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - peer: The peer.
    public func handlerStarted(_ request: ObservedRequest, peer: PeerID) {}
}

/// An observer of both sides: one type that a ``ConnectionConfiguration`` and a
/// ``ServerConfiguration`` can both take, with one ``ConnectionObserver/RequestSpan``.
public typealias TetherObserver = ConnectionObserver & ServerObserver

extension Server {
    /// What tells `observer` of each event, as it is published; `nil` without one.
    static func eventTap(_ observer: (any ServerObserver)?) -> (@Sendable (ServerEvent) -> Void)? {
        guard let observer else { return nil }
        return { event in observer.serverEvent(event) }
    }
}
