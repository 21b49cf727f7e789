/// Sees what a connection does as it happens: each request from its start to its outcome,
/// each state change and each session event. For logging and tracing with the packages of
/// your choice; Tether depends on none.
///
/// Set one on ``ConnectionConfiguration/observer``; a server takes a ``ServerObserver``,
/// and one type can be both (``TetherObserver``). Every method has a default that does
/// nothing, so an observer implements only what it needs. Without an observer (the default)
/// nothing is observed and nothing is spent: a request checks for one once and allocates
/// nothing for it.
///
/// A request's start returns a ``RequestSpan`` that its end gets back: a tracing span, a
/// start time, or nothing (`Void`, the default). So a span begins and ends without a table
/// to find it in:
///
/// ```swift
/// struct PrintingObserver: ConnectionObserver {
///     func requestEnded(_ request: ObservedRequest, outcome: RequestOutcome, span: Void) {
///         print(request, outcome)  // request 0x402 serial 1 to 127.0.0.1:9000: response after 1.2 ms
///     }
/// }
/// ```
///
/// Where each method runs:
/// - ``requestStarted(_:)`` and ``requestEnded(_:outcome:span:)`` run in the task that
///   called ``Connection/request(_:timeout:)`` (or ``Connection/pipeline(_:timeout:)``),
///   just before the request is placed and just after its outcome, so task-local values
///   (a tracing context, say) are the caller's.
/// - ``connectionStateChanged(_:of:)`` and ``sessionEvent(_:of:)`` run on the connection's
///   event loop as the change is published, before any subscriber of
///   ``Connection/states`` or ``Connection/sessionEvents`` sees it, and in the same order.
///   They hold up every connection of that loop while they run: keep them short, and
///   never block or wait in them.
public protocol ConnectionObserver: Sendable {
    /// What the observer keeps from the start of a request to its end: a span, a start
    /// time; `Void` (the default) for nothing.
    associatedtype RequestSpan = Void

    /// A client request is about to be placed.
    ///
    /// Its ``ObservedRequest/serial`` is 0 here: the connection gives the request its
    /// serial as it places it, after this call. ``requestEnded(_:outcome:span:)`` has it.
    ///
    /// - Parameter request: The request.
    /// - Returns: What ``requestEnded(_:outcome:span:)`` gets back.
    func requestStarted(_ request: ObservedRequest) -> RequestSpan

    /// A client request ended: with its response (an error answer included), or with the
    /// error its caller gets.
    ///
    /// - Parameters:
    ///   - request: The request, with the serial it was given (0 when it ended before it
    ///     was given one: its caller was cancelled before the call, say).
    ///   - outcome: The response or the error, and the time from the start.
    ///   - span: What ``requestStarted(_:)`` returned.
    func requestEnded(_ request: ObservedRequest, outcome: RequestOutcome, span: RequestSpan)

    /// A client request made with ``Connection/request(_:timeout:)`` was written: its last
    /// byte was handed to the kernel (over TLS, encrypted and handed on), as
    /// ``SendCompletion/written(timeout:)`` means it. A span event, say.
    ///
    /// Runs on the connection's event loop after the write, so it may come after
    /// ``requestEnded(_:outcome:span:)`` of the same request. Not called for a request that
    /// ends before it is written, nor for those of ``Connection/pipeline(_:timeout:)``.
    ///
    /// - Parameters:
    ///   - request: The request, with its serial.
    ///   - span: What ``requestStarted(_:)`` returned.
    func requestWritten(_ request: ObservedRequest, span: RequestSpan)

    /// A connection's state changed: every state ``Connection/states`` yields after
    /// ``ConnectionState/idle``, in order.
    ///
    /// - Parameters:
    ///   - state: The new state.
    ///   - endpoint: The endpoint the state is about: while connecting or reconnecting,
    ///     the one the attempt dials; otherwise the one in use (``Connection/currentEndpoint``).
    ///     After a failover to an alternate endpoint or the fallback, that one, not
    ///     ``Connection/endpoint``.
    func connectionStateChanged(_ state: ConnectionState, of endpoint: Endpoint)

    /// A connection's session reported an event: every event ``Connection/sessionEvents``
    /// yields, in order.
    ///
    /// - Parameters:
    ///   - event: The event.
    ///   - endpoint: The connection's ``Connection/endpoint``.
    func sessionEvent(_ event: SessionEvent, of endpoint: Endpoint)
}

extension ConnectionObserver {
    /// Does nothing.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - outcome: Its outcome.
    ///   - span: What the start returned.
    public func requestEnded(_ request: ObservedRequest, outcome: RequestOutcome, span: RequestSpan) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - span: What the start returned.
    public func requestWritten(_ request: ObservedRequest, span: RequestSpan) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - state: The new state.
    ///   - endpoint: The connection's endpoint.
    public func connectionStateChanged(_ state: ConnectionState, of endpoint: Endpoint) {}

    /// Does nothing.
    ///
    /// - Parameters:
    ///   - event: The event.
    ///   - endpoint: The connection's endpoint.
    public func sessionEvent(_ event: SessionEvent, of endpoint: Endpoint) {}
}

extension ConnectionObserver where RequestSpan == Void {
    /// Does nothing.
    ///
    /// - Parameter request: The request.
    public func requestStarted(_ request: ObservedRequest) {}
}

/// A request as a ``ConnectionObserver`` or ``ServerObserver`` sees it: enough to name a
/// span and give it attributes.
public struct ObservedRequest: Sendable, Hashable, CustomStringConvertible {
    /// The request type.
    public var type: UInt32
    /// The serial it travelled with; 0 at the start of a client request, which has none yet.
    public var serial: UInt32
    /// The length of its content, in bytes.
    public var payloadSize: Int
    /// On a client, the connection's ``Connection/endpoint``; `nil` on a server.
    public var endpoint: Endpoint?
    /// On a server, the address the peer connects from; `nil` on a client.
    public var remoteAddress: TetherSocketAddress?

    /// Creates a description of a request, for tests of observers.
    ///
    /// - Parameters:
    ///   - type: The request type.
    ///   - serial: Its serial.
    ///   - payloadSize: The length of its content.
    ///   - endpoint: On a client, the connection's endpoint.
    ///   - remoteAddress: On a server, the peer's address.
    init(type: UInt32, serial: UInt32, payloadSize: Int, endpoint: Endpoint? = nil, remoteAddress: TetherSocketAddress? = nil) {
        self.type = type
        self.serial = serial
        self.payloadSize = payloadSize
        self.endpoint = endpoint
        self.remoteAddress = remoteAddress
    }

    /// `request 0x402 serial 1 to 127.0.0.1:9000`, or `request 0x402 serial 1 from 127.0.0.1:50112`.
    public var description: String {
        var text = "request \(hex(type)) serial \(serial)"
        if let endpoint { text += " to \(endpoint)" }
        if let remoteAddress { text += " from \(remoteAddress)" }
        return text
    }
}

/// How a request or a handler ended, as a ``ConnectionObserver`` or ``ServerObserver`` sees it.
public struct RequestOutcome: Sendable, CustomStringConvertible {
    /// The response: received by a client (an error answer included), or sent by a server
    /// (the error answer of a handler that threw included). `nil` when there is none.
    public var response: Response?
    /// On a client, what the request threw (``TetherError`` or `CancellationError`); on a
    /// server, what the handler threw. `nil` when it did not throw.
    public var error: (any Error)?
    /// The time from the start to the end, on the loop's clock.
    public var duration: Duration

    /// Creates an outcome, for tests of observers.
    ///
    /// - Parameters:
    ///   - response: The response, if any.
    ///   - error: The error, if any.
    ///   - duration: The time it took.
    init(response: Response? = nil, error: (any Error)? = nil, duration: Duration = .zero) {
        self.response = response
        self.error = error
        self.duration = duration
    }

    /// Whether the request failed: it threw, or its response is an error answer
    /// (``Response/errorMessage``). What a span's error status is made of.
    public var failed: Bool { error != nil || response?.errorMessage != nil }

    /// `response after 1.2 ms`, `error response "no such user" after 0.3 ms`, or
    /// `timedOut: request 0x404 serial 2 timed out after 100 ms, after 100.2 ms`.
    public var description: String {
        let after = "after \(describe(duration))"
        if let error {
            if let error = error as? TetherError { return "\(error.code): \(error.message), \(after)" }
            return "\(error), \(after)"
        }
        if let message = response?.errorMessage { return "error response \"\(message)\" \(after)" }
        return "response \(after)"
    }
}
