/// The one error type Tether throws.
///
/// Every error carries a ``Code`` you can branch on and a human-readable ``message``
/// that names the host, the frame type and serial, or the limit involved, for example
/// `connection refused by 127.0.0.1:9000` or
/// `request 0x402 serial 17 timed out after 5 s`.
///
/// ```swift
/// do {
///     let reply = try await connection.request(request, timeout: .seconds(5))
/// } catch let error as TetherError where error.code == .timedOut {
///     print("slow server:", error.message)
/// }
/// ```
public struct TetherError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure happened.
    ///
    /// A struct rather than an enum, so new codes can be added without breaking
    /// exhaustive `switch` statements in your code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        enum Value: Hashable, Sendable, CaseIterable {
            case connectFailed
            case connectionRefused
            case connectTimedOut
            case resolutionFailed
            case timedOut
            case connectionClosed
            case peerClosed
            case connectionLost
            case idleTimeout
            case handshakeTimeout
            case frameTimeout
            case tooManyConnections
            case connectionReset
            case protocolError
            case frameTooLarge
            case truncatedFrame
            case heartbeatTimeout
            case outboundBufferFull
            case tooManyPendingRequests
            case notConnected
            case remoteError
            case invalidArgument
            case bindFailed
            case systemCall
            case encodingFailed
            case decodingFailed
            case sessionRejected
            case identityUnavailable
            case storeFailed
            case mailboxesFull
            case tlsFailed
            case certificateRejected
            case httpFailed
            case sessionTakenOver
            case serverDraining
            case channelRefused
            case outcomeUnknown
        }

        let value: Value

        init(value: Value) {
            self.value = value
        }

        /// The code whose ``description`` is `name`, as a server's ``CloseNotice`` names it;
        /// `nil` for a name this version does not know.
        init?(named name: String) {
            guard let value = Value.allCases.first(where: { String(describing: $0) == name }) else { return nil }
            self.value = value
        }

        /// Connecting failed for a reason other than a refusal or a timeout.
        public static let connectFailed = Code(value: .connectFailed)
        /// Every address of the endpoint refused the connection; or the peer of a connected
        /// ``TetherUDP/DatagramSocket`` refused a datagram (nothing listens at its port).
        public static let connectionRefused = Code(value: .connectionRefused)
        /// Connecting did not finish within the connect timeout.
        public static let connectTimedOut = Code(value: .connectTimedOut)
        /// The host name could not be resolved to an address.
        public static let resolutionFailed = Code(value: .resolutionFailed)
        /// A request got no response within its timeout.
        public static let timedOut = Code(value: .timedOut)
        /// The connection was closed by this side, with ``Connection/close()`` (or the
        /// ``TetherUDP/DatagramSocket`` with ``TetherUDP/DatagramSocket/close()``).
        public static let connectionClosed = Code(value: .connectionClosed)
        /// The peer closed the connection.
        public static let peerClosed = Code(value: .peerClosed)
        /// A request was in flight when its connection broke (the peer closed, a network
        /// error, a heartbeat timeout, a protocol error, ``Connection/suspend()``). It is
        /// never retried, since the peer may have acted on it; ``TetherError/underlying``
        /// says what broke the connection.
        public static let connectionLost = Code(value: .connectionLost)
        /// A server closed a peer that sent nothing for its idle timeout.
        public static let idleTimeout = Code(value: .idleTimeout)
        /// A server closed a peer that sent no complete first frame within its handshake timeout.
        public static let handshakeTimeout = Code(value: .handshakeTimeout)
        /// A server closed a peer that started a frame and did not finish it within its
        /// frame completion timeout.
        public static let frameTimeout = Code(value: .frameTimeout)
        /// A server refused a connection because it is at its connection limit.
        public static let tooManyConnections = Code(value: .tooManyConnections)
        /// The connection failed with a network error (reset, broken pipe, …).
        public static let connectionReset = Code(value: .connectionReset)
        /// The peer sent bytes that break the wire protocol.
        public static let protocolError = Code(value: .protocolError)
        /// A frame's declared length is above the configured maximum, or a datagram to send
        /// is larger than ``TetherUDP/DatagramConfiguration/maximumDatagramSize``.
        public static let frameTooLarge = Code(value: .frameTooLarge)
        /// The stream ended in the middle of a frame.
        public static let truncatedFrame = Code(value: .truncatedFrame)
        /// The peer stopped answering heartbeats.
        public static let heartbeatTimeout = Code(value: .heartbeatTimeout)
        /// More bytes are waiting to be written than the outbound limit allows, or the
        /// kernel's send buffer of a ``TetherUDP/DatagramSocket`` has no room for a datagram now.
        public static let outboundBufferFull = Code(value: .outboundBufferFull)
        /// A request could not be queued: ``Limits/maximumQueuedRequests`` requests already
        /// wait to be sent (the queue, not the requests in flight, which only
        /// ``Limits/maximumInFlightRequests`` bounds by holding the queue).
        public static let tooManyPendingRequests = Code(value: .tooManyPendingRequests)
        /// The operation needs an open connection and there is none (or a
        /// ``TetherUDP/DatagramSocket`` sends without an address and is not connected).
        public static let notConnected = Code(value: .notConnected)
        /// The peer answered the request with an error response.
        public static let remoteError = Code(value: .remoteError)
        /// An argument or configuration value is not usable.
        public static let invalidArgument = Code(value: .invalidArgument)
        /// A server could not bind or listen on its address.
        public static let bindFailed = Code(value: .bindFailed)
        /// An operating-system call failed unexpectedly.
        public static let systemCall = Code(value: .systemCall)
        /// A value could not be encoded (for example as JSON).
        public static let encodingFailed = Code(value: .encodingFailed)
        /// Content could not be decoded (for example as JSON).
        public static let decodingFailed = Code(value: .decodingFailed)
        /// The server refused the session hello (an unknown client, a bad token); the
        /// connection does not retry it, unless a ``SessionIdentityProvider`` gives it a
        /// fresh identity to try once more.
        public static let sessionRejected = Code(value: .sessionRejected)
        /// A ``SessionIdentityProvider`` threw, or answered with a client id that cannot be
        /// sent: that attempt failed, and the connection tries again by its
        /// ``ReconnectPolicy``. ``TetherError/underlying`` is what the provider threw.
        public static let identityUnavailable = Code(value: .identityUnavailable)
        /// A mailbox store could not be opened, read or written.
        public static let storeFailed = Code(value: .storeFailed)
        /// A mailbox store is at one of its store-wide bounds
        /// (``MailboxLimits/maximumMailboxes``, ``MailboxLimits/maximumStoredBytes``): a new
        /// client gets no mailbox, or pushes are not stored, until acknowledgements and expiry
        /// make room. A passing condition: a client whose hello is refused for it retries.
        public static let mailboxesFull = Code(value: .mailboxesFull)
        /// TLS failed: the handshake (no common protocol, a peer that is not speaking TLS,
        /// a required client certificate missing), a record that does not decrypt, or a
        /// stream that ended without the peer's close_notify, which may be truncated. Also
        /// a TLS configuration whose certificate, key or trust roots cannot be loaded.
        public static let tlsFailed = Code(value: .tlsFailed)
        /// The peer's certificate did not pass: its chain does not verify (expired,
        /// untrusted, self-signed), it is not for the host connected to, or its public key
        /// matches none of the pinned ones.
        public static let certificateRejected = Code(value: .certificateRejected)
        /// A server could not perform an HTTP request sent with ``Connection/http(_:timeout:type:)``:
        /// the host is not on its allow-list, the upstream server timed out or could not be
        /// reached, or its response was too large. ``TetherError/underlying`` is an
        /// ``TetherHTTP/HTTPForwardingError`` with the reason.
        public static let httpFailed = Code(value: .httpFailed)
        /// A newer connection with the same session client id took the session over, and
        /// the server closed this one: another device or process runs as the same client.
        /// The connection does not reconnect (it would take the session back, and the two
        /// would displace each other for as long as both run) unless
        /// ``SessionConfiguration/reconnectsWhenTakenOver`` is set.
        public static let sessionTakenOver = Code(value: .sessionTakenOver)
        /// The server is draining (``Server/drain(deadline:reconnectAfter:)``): it did not
        /// run the request, which arrived after it told the client to leave, or the request
        /// was never sent because the connection left the draining server. Safe to send
        /// again, to another server or after the reconnect.
        public static let serverDraining = Code(value: .serverDraining)
        /// The server refused a channel subscription (``Connection/subscribe(to:from:info:presenceEvents:)``)
        /// or publication (``Connection/publish(_:to:timeToLive:)``): it has no channels, one of its
        /// bounds (``ChannelConfiguration``) is reached, or its
        /// ``ChannelConfiguration/authorize`` or ``ChannelConfiguration/authorizePublish``
        /// refused; the message names the channel and the reason.
        public static let channelRefused = Code(value: .channelRefused)
        /// A request with an idempotency key (``Connection/request(_:idempotencyKey:timeout:)``)
        /// may or may not have run: its connection broke after it was written and it could
        /// not be repeated safely (the server's record of it is gone or was never kept, its
        /// window passed, the session's history began again, or the timeout ran out while
        /// waiting). The message says which. Never a silent second run.
        public static let outcomeUnknown = Code(value: .outcomeUnknown)

        /// A short textual form, for logs and messages.
        public var description: String { String(describing: value) }
    }

    /// What kind of failure happened.
    public var code: Code
    /// A sentence that says what happened and where.
    public var message: String
    /// The error that caused this one, if any.
    public var underlying: (any Error & Sendable)?

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: What kind of failure happened.
    ///   - message: A sentence that says what happened and where.
    ///   - underlying: The error that caused this one, if any.
    public init(code: Code, message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    /// A short textual form, for logs and messages: the message, then each cause in
    /// parentheses, `connection lost: … (stream ended inside a frame …)`. A cause whose
    /// message the text already holds (an error passed on with its message) is left out,
    /// and its own cause comes next: each sentence appears once.
    public var description: String {
        var text = message
        var closing = 0
        var cause = underlying
        while let current = cause {
            let said: String
            if let error = current as? TetherError {
                said = error.message
                cause = error.underlying
            } else {
                said = String(describing: current)
                cause = nil
            }
            if !said.isEmpty, !text.contains(said) {
                text += " (" + said
                closing += 1
            }
        }
        return text + String(repeating: ")", count: closing)
    }
}

extension TetherError {
    /// What `error` says, for a message that wraps it: a ``TetherError``'s own message,
    /// without its underlying error (kept in ``underlying`` instead), or the error's text.
    package static func reason(of error: any Error) -> String {
        (error as? TetherError)?.message ?? String(describing: error)
    }
}

extension TetherError: Equatable {
    /// Two errors are equal when their codes and messages are; the underlying error is ignored.
    ///
    /// - Parameters:
    ///   - lhs: An error.
    ///   - rhs: Another error.
    /// - Returns: Whether their codes and messages are equal.
    public static func == (lhs: TetherError, rhs: TetherError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }
}

extension TetherError: Hashable {
    /// Hashes the code and the message.
    ///
    /// - Parameter hasher: The hasher to feed.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
    }
}

/// Formats durations the way error messages print them, with their unit and every digit
/// that counts: `5 s`, `1.5 s`, `1.755 s` (to the millisecond from a second up, as a backoff
/// delay is), `250 ms`, `1.2 ms`, `0.39 ms` (to the microsecond below a second), `800 ns`
/// (below a microsecond). Trailing zeros are dropped; a zero duration is `0 s`.
package func describe(_ duration: Duration) -> String {
    let (seconds, attoseconds) = duration.components
    guard seconds >= 0, attoseconds >= 0 else { return "-" + describe(.zero - duration) }
    if seconds == 0 && attoseconds == 0 { return "0 s" }
    /// `whole.fraction` with `digits` fraction digits, trailing zeros dropped.
    func decimal(_ value: Int64, digits: Int, unit: String) -> String {
        var scale: Int64 = 1
        for _ in 0..<digits { scale *= 10 }
        var fraction = String(value % scale)
        fraction = String(repeating: "0", count: digits - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return fraction.isEmpty ? "\(value / scale) \(unit)" : "\(value / scale).\(fraction) \(unit)"
    }
    if seconds >= 1 {
        return decimal(seconds * 1000 + attoseconds / 1_000_000_000_000_000, digits: 3, unit: "s")
    }
    let nanoseconds = attoseconds / 1_000_000_000
    if nanoseconds < 1000 { return "\(nanoseconds) ns" }
    return decimal(nanoseconds / 1000, digits: 3, unit: "ms")
}

extension TetherError {
    /// A frame whose payload is over the limit to send, in the words every encoder uses.
    ///
    /// - Parameters:
    ///   - type: The frame's type.
    ///   - bytes: Its payload's length.
    ///   - limit: The largest payload allowed.
    /// - Returns: The ``TetherError/Code/frameTooLarge`` error.
    static func payloadOverLimit(type: UInt32, bytes: Int, limit: Int) -> TetherError {
        TetherError(code: .frameTooLarge, message: "frame \(hex(type)) payload of \(bytes) bytes exceeds the \(describeBytes(limit)) limit")
    }
}

/// Formats a byte count the way error messages print limits: `16 MiB`, `64 KiB`, `100 bytes`,
/// `1 byte`.
package func describeBytes(_ count: Int) -> String {
    if count >= 1 << 20, count % (1 << 20) == 0 { return "\(count >> 20) MiB" }
    if count >= 1 << 10, count % (1 << 10) == 0 { return "\(count >> 10) KiB" }
    return counted(count, "byte")
}

/// A count and its noun, singular for one: `1 request`, `2 requests`, `1 match`/`3 matches`
/// with `plural`.
///
/// - Parameters:
///   - count: How many.
///   - singular: The noun for one.
///   - plural: The noun for any other count; `singular` + `s` when `nil`.
package func counted(_ count: Int, _ singular: String, _ plural: String? = nil) -> String {
    "\(count) \(count == 1 ? singular : plural ?? singular + "s")"
}

/// Formats a frame type the way messages print it: `0x402`.
func hex(_ value: UInt32) -> String {
    "0x" + String(value, radix: 16)
}

/// Formats a header value the way messages print it: `0x7e`.
func hex(_ value: UInt64) -> String {
    "0x" + String(value, radix: 16)
}
