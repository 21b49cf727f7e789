/// Where a connection is in its life. Observe changes with ``Connection/states``.
///
/// A struct with a ``Phase`` rather than an enum, so new phases (reconnecting, failed)
/// can be added without breaking your `switch` statements; always include `default`.
public struct ConnectionState: Sendable, Hashable, CustomStringConvertible {
    /// The phase of a connection.
    public struct Phase: Hashable, Sendable, CustomStringConvertible {
        enum Value: Hashable, Sendable { case connecting, connected, closed }
        let value: Value

        /// Resolving the host and opening the TCP connection.
        public static let connecting = Phase(value: .connecting)
        /// Open: requests, pushes and heartbeats flow.
        public static let connected = Phase(value: .connected)
        /// Closed for good; ``ConnectionState/closeReason`` says why.
        public static let closed = Phase(value: .closed)

        /// A short textual form, for logs and messages.
        public var description: String { String(describing: value) }
    }

    /// The phase.
    public var phase: Phase
    /// Why the connection closed, for ``Phase/closed``: ``TetherError/Code/connectionClosed``
    /// when ``Connection/close()`` was called, otherwise what ended it.
    public var closeReason: TetherError?

    /// Resolving and connecting.
    public static let connecting = ConnectionState(phase: .connecting, closeReason: nil)
    /// Open.
    public static let connected = ConnectionState(phase: .connected, closeReason: nil)

    /// Closed, for `reason`.
    ///
    /// - Parameter reason: Why the connection closed.
    /// - Returns: The state.
    public static func closed(_ reason: TetherError) -> ConnectionState {
        ConnectionState(phase: .closed, closeReason: reason)
    }

    /// `connected`, or `closed: peer 127.0.0.1:9000 closed the connection`.
    public var description: String {
        if let closeReason { return "\(phase): \(closeReason.message)" }
        return phase.description
    }
}

/// Counters of one connection, for metrics and tests.
public struct ConnectionStatistics: Sendable, Hashable {
    /// Requests written.
    public var requestsSent = 0
    /// Responses matched to a waiting request.
    public var responsesReceived = 0
    /// Responses that arrived after their request had ended (timed out or cancelled), dropped.
    public var lateResponses = 0
    /// Notifications received.
    public var notificationsReceived = 0
    /// Elements dropped because a subscriber's buffer was full.
    public var droppedElements = 0
    /// Requests waiting for a response now.
    public var pendingRequests = 0
}
