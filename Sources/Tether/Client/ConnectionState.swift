/// Where a connection is in its life. Observe every change with ``Connection/states``.
///
/// ```
/// idle → connecting → connected → reconnecting(attempt 1, after 1 s) → connecting → connected → …
///                                          ↘ failed (attempts spent)         ↘ closed (close())
///                                          ↘ waitingForNetwork (no path) → connecting (a path appeared)
/// ```
///
/// Each change is published once. A connection made with ``Connection/init(to:configuration:)``
/// is ``Phase/idle`` until ``Connection/connect()``; one made with
/// ``Connection/connect(to:configuration:)`` is already past it when you get it.
///
/// A struct with a ``Phase`` rather than an enum, so new phases can be added without
/// breaking your `switch` statements; always include `default`.
public struct ConnectionState: Sendable, Hashable, CustomStringConvertible {
    /// The phase of a connection.
    public struct Phase: Hashable, Sendable, CustomStringConvertible {
        enum Value: Hashable, Sendable { case idle, connecting, connected, reconnecting, waitingForNetwork, suspended, failed, closed }
        let value: Value

        /// Made with ``Connection/init(to:configuration:)`` and not asked to connect yet:
        /// nothing happens until ``Connection/connect()``.
        public static let idle = Phase(value: .idle)
        /// Resolving the host and opening the TCP connection.
        public static let connecting = Phase(value: .connecting)
        /// Open: requests, pushes and heartbeats flow.
        public static let connected = Phase(value: .connected)
        /// The connection was lost (``ConnectionState/reason`` says why) and attempt
        /// ``ConnectionState/attempt`` starts after ``ConnectionState/delay``.
        public static let reconnecting = Phase(value: .reconnecting)
        /// The connection was lost, or an attempt failed (``ConnectionState/reason`` says
        /// why), while the ``ConnectionConfiguration/pathMonitor`` says no usable network
        /// path exists: no attempt is made, and none of the ``ReconnectPolicy``'s is spent,
        /// until a path appears (then it connects at once) or ``Connection/reconnectNow()``.
        public static let waitingForNetwork = Phase(value: .waitingForNetwork)
        /// Disconnected on purpose by ``Connection/suspend()``; ``Connection/resume()`` connects again.
        public static let suspended = Phase(value: .suspended)
        /// Every attempt the ``ReconnectPolicy`` allows has failed; final.
        /// ``ConnectionState/reason`` holds the last failure.
        public static let failed = Phase(value: .failed)
        /// Closed for good, by ``Connection/close()``, by a newer connection with the same
        /// session client id (``TetherError/Code/sessionTakenOver``, see
        /// ``SessionConfiguration/reconnectsWhenTakenOver``) or, with reconnecting switched
        /// off, by what ended the connection; ``ConnectionState/reason`` says which. Final.
        public static let closed = Phase(value: .closed)

        /// A short textual form, for logs and messages.
        public var description: String { String(describing: value) }
    }

    /// The phase.
    public var phase: Phase
    /// Why the connection is not connected: for ``Phase/reconnecting`` and
    /// ``Phase/waitingForNetwork`` what broke it (or what made the last attempt fail), for ``Phase/failed`` the last failure, for
    /// ``Phase/closed`` ``TetherError/Code/connectionClosed`` when ``Connection/close()`` was
    /// called, otherwise what ended it.
    public var reason: TetherError?
    /// For ``Phase/reconnecting``: the number of the next attempt, from 1.
    public var attempt: Int?
    /// For ``Phase/reconnecting``: how long until that attempt starts.
    public var delay: Duration?
    /// For ``Phase/connected``: the endpoint the connection is on, ``Connection/endpoint``,
    /// one of the ``ConnectionConfiguration/alternateEndpoints`` or the
    /// ``FallbackPolicy/endpoint`` of the ``ConnectionConfiguration/fallback``; `nil` in the
    /// other phases. Every connected state a connection publishes has it, so test ``phase``
    /// (`state.phase == .connected`) to know whether a connection is connected.
    public var endpoint: Endpoint?

    /// Creates a state.
    ///
    /// - Parameters:
    ///   - phase: The phase.
    ///   - reason: Why the connection is not connected.
    ///   - attempt: The next attempt, when reconnecting.
    ///   - delay: The time until it, when reconnecting.
    ///   - endpoint: The endpoint in use, when connected.
    public init(phase: Phase, reason: TetherError? = nil, attempt: Int? = nil, delay: Duration? = nil, endpoint: Endpoint? = nil) {
        self.phase = phase
        self.reason = reason
        self.attempt = attempt
        self.delay = delay
        self.endpoint = endpoint
    }

    /// Not asked to connect yet.
    public static let idle = ConnectionState(phase: .idle)
    /// Resolving and connecting.
    public static let connecting = ConnectionState(phase: .connecting)
    /// Open, on `endpoint`: what a connection publishes once it is connected.
    ///
    /// - Parameter endpoint: The endpoint the connection is on.
    /// - Returns: The state.
    public static func connected(to endpoint: Endpoint) -> ConnectionState {
        ConnectionState(phase: .connected, endpoint: endpoint)
    }
    /// Suspended by ``Connection/suspend()``.
    public static let suspended = ConnectionState(phase: .suspended)

    /// Waiting `delay` before attempt `attempt`, after `reason`.
    ///
    /// - Parameters:
    ///   - attempt: The next attempt, from 1.
    ///   - delay: The time until it starts.
    ///   - reason: What broke the connection or failed the last attempt.
    /// - Returns: The state.
    public static func reconnecting(attempt: Int, after delay: Duration, reason: TetherError) -> ConnectionState {
        ConnectionState(phase: .reconnecting, reason: reason, attempt: attempt, delay: delay)
    }

    /// Waiting for a usable network path, after `reason`.
    ///
    /// - Parameter reason: What broke the connection or failed the last attempt.
    /// - Returns: The state.
    public static func waitingForNetwork(reason: TetherError) -> ConnectionState {
        ConnectionState(phase: .waitingForNetwork, reason: reason)
    }

    /// Given up, after `reason`.
    ///
    /// - Parameter reason: The last failure.
    /// - Returns: The state.
    public static func failed(_ reason: TetherError) -> ConnectionState {
        ConnectionState(phase: .failed, reason: reason)
    }

    /// Closed, for `reason`.
    ///
    /// - Parameter reason: Why the connection closed.
    /// - Returns: The state.
    public static func closed(_ reason: TetherError) -> ConnectionState {
        ConnectionState(phase: .closed, reason: reason)
    }

    /// Whether the phase is final: ``Phase/failed`` or ``Phase/closed``.
    public var isFinal: Bool { phase == .failed || phase == .closed }

    /// `connected to 127.0.0.1:9000`, `connected to ws://127.0.0.1:8080/tether` (over the
    /// fallback, say), `reconnecting (attempt 2 in 1.6 s): peer 127.0.0.1:9000 closed the
    /// connection`, or `closed: connection to 127.0.0.1:9000 closed by close()`.
    public var description: String {
        var text = phase.description
        if let endpoint { text += " to \(endpoint)" }
        if let attempt, let delay { text += " (attempt \(attempt) in \(describe(delay)))" }
        if let reason { text += ": \(reason.message)" }
        return text
    }
}

/// Counters of one connection, across every reconnect: what ``Connection/metrics`` returns.
public struct ConnectionMetrics: Sendable, Hashable {
    /// Bytes read from the socket.
    public var bytesIn = 0
    /// Bytes written to the socket.
    public var bytesOut = 0
    /// Frames decoded.
    public var framesIn = 0
    /// Frames queued for writing.
    public var framesOut = 0
    /// Requests written.
    public var requestsSent = 0
    /// Requests answered: a response was matched to them.
    public var requestsCompleted = 0
    /// Requests that timed out.
    public var requestsTimedOut = 0
    /// Requests whose task was cancelled.
    public var requestsCancelled = 0
    /// Requests that failed otherwise: the connection was lost or closed while they waited,
    /// or a bound refused them.
    public var requestsFailed = 0
    /// Requests refused because ``Limits/maximumQueuedRequests`` was reached.
    public var requestsRefused = 0
    /// Responses that arrived after their request had ended (timed out or cancelled), dropped.
    public var lateResponses = 0
    /// Notifications received.
    public var notificationsReceived = 0
    /// Sequenced notifications dropped because they had been delivered before (a session's
    /// replay overlapping what arrived before a disconnect).
    public var duplicateNotifications = 0
    /// Sequenced notifications held now, with a session, for a subscriber whose filter takes
    /// them: none has yet, so they are neither counted as delivered nor acknowledged.
    public var heldNotifications = 0
    /// Sequenced notifications turned away, with a session, because
    /// ``SessionConfiguration/maximumHeldPushes`` were held: neither delivered nor
    /// acknowledged, they stay in the server's mailbox and the next connection's replay
    /// sends them again.
    public var notificationsTurnedAway = 0
    /// Elements dropped because a subscription's buffer was full (a slow consumer): the sum of
    /// ``Subscription/dropped`` over every subscription the connection has given out (to
    /// frames, notifications, heartbeats, states and session events), ended ones included.
    /// Heartbeats kept for a first subscriber who has not come yet and let go are not counted:
    /// no subscription lost them.
    public var droppedElements = 0
    /// Heartbeats that got no ack in time.
    public var heartbeatsMissed = 0
    /// The round-trip time of the last acked heartbeat.
    public var lastHeartbeatRoundTrip: Duration?
    /// Times an adaptive heartbeat lengthened its interval (``AdaptiveHeartbeat``).
    public var heartbeatIntervalIncreases = 0
    /// Times an adaptive heartbeat shortened its interval after a silent death.
    public var heartbeatIntervalDecreases = 0
    /// Times the connection was established, the first included.
    public var connects = 0
    /// Reconnect attempts started.
    public var reconnectAttempts = 0
    /// Times a write had to wait because the outbound buffer was above its high-water mark.
    public var backpressureWaits = 0
    /// Times the connection stopped reading its socket because a subscription to
    /// notifications had more than twice ``SessionConfiguration/maximumPendingPushes``
    /// waiting: pushes kept coming after the server was asked to hold them.
    public var readPauses = 0
    /// Times the connection asked the server to hold its pushes in the mailbox because a
    /// subscription to notifications had more than
    /// ``SessionConfiguration/maximumPendingPushes`` waiting.
    public var pushHolds = 0
    /// Requests written and waiting for their response now.
    public var inFlightRequests = 0
    /// Requests and frames waiting to be written now.
    public var queuedRequests = 0

    /// All zero.
    public init() {}
}
