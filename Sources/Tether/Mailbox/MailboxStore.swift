/// Where a server keeps the pushes of identified clients until they have them.
///
/// Each client (by its client id) has a mailbox: an ordered list of pushes, each with the
/// next number of that client's sequence (1, 2, 3, …, never reused). A push is appended
/// whether or not the client is connected, and stays until the client acknowledges it or
/// the mailbox's limits drop it. A client that reconnects says the last sequence it has and
/// gets everything after it replayed in order.
///
/// Tether ships two stores: ``SQLiteMailboxStore`` (durable, the default) and
/// ``InMemoryMailboxStore``. A deployment that runs several servers can keep mailboxes in
/// its own database by implementing this protocol. The rules an implementation must keep:
///
/// - **Sequences.** ``append(_:limits:now:)`` gives each message the next number of its
///   client's sequence, in the order of the array, and a number is never given twice, even
///   after the messages holding it were acknowledged or dropped (keep the last number per
///   client, not just the messages).
/// - **Atomic appends.** Either every message of one call is stored (and durable, for a
///   durable store) before it returns, or the call throws and none is.
/// - **Losses are remembered.** A message dropped by the limits before it was acknowledged
///   raises the client's ``MailboxSummary/lostThrough`` and sets its
///   ``MailboxSummary/lossReason``, so the client can be told what it missed.
/// - **Concurrency.** Calls may come from several tasks at once; reads must see every
///   append that has returned.
///
/// A server calls the store from one task for appends and acknowledgements, in order, and
/// from each resuming peer's task for reads.
public protocol MailboxStore: Sendable {
    /// Appends messages, each to its client's mailbox with the next sequence number of that
    /// client, then drops what `limits` no longer allow from the mailboxes it touched.
    ///
    /// - Parameters:
    ///   - messages: The messages, in order.
    ///   - limits: The count and age bounds of each mailbox.
    ///   - now: The time to store with the messages and to judge their age by.
    /// - Returns: The sequence number given to each message, in the same order.
    /// - Throws: When the messages could not be stored; then none of them is.
    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws -> [UInt64]

    /// Prepares a client's mailbox for a resume: registers the client if it is new, drops
    /// what `limits` no longer allow, and describes what is left.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - limits: The count and age bounds of the mailbox.
    ///   - now: The time to judge ages by.
    /// - Returns: The client's sequence and what its mailbox holds.
    /// - Throws: When the store cannot be read or written.
    func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> MailboxSummary

    /// The messages of one client after a sequence number, oldest first.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - sequence: Only messages with a higher sequence number are returned.
    ///   - limit: At most this many.
    /// - Returns: The messages, in sequence order.
    /// - Throws: When the store cannot be read.
    func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage]

    /// Records that a client has every message up to `sequence`, and deletes them.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - sequence: The highest sequence number the client has; lower ones are implied.
    /// - Throws: When the store cannot be written.
    func acknowledge(_ clientID: String, through sequence: UInt64) async throws

    /// Every client the store knows, in no particular order: those that ever opened a
    /// mailbox or were sent a message.
    ///
    /// - Returns: The client ids.
    /// - Throws: When the store cannot be read.
    func clientIDs() async throws -> [String]
}

/// One push in a client's mailbox.
public struct MailboxMessage: Sendable, Hashable {
    /// A push to store: who it is for and what it is. The store gives it its sequence.
    public struct Draft: Sendable, Hashable {
        /// The client it is for.
        public var clientID: String
        /// The notification type.
        public var type: UInt32
        /// The content.
        public var payload: [UInt8]

        /// Creates a push to store.
        ///
        /// - Parameters:
        ///   - clientID: The client it is for.
        ///   - type: The notification type.
        ///   - payload: The content.
        public init(clientID: String, type: UInt32, payload: [UInt8]) {
            self.clientID = clientID
            self.type = type
            self.payload = payload
        }
    }

    /// The client it is for.
    public var clientID: String
    /// Its number in the client's sequence, from 1.
    public var sequence: UInt64
    /// The notification type.
    public var type: UInt32
    /// The content.
    public var payload: [UInt8]
    /// When it was stored.
    public var storedAt: MailboxTime

    /// Creates a stored message.
    ///
    /// - Parameters:
    ///   - clientID: The client it is for.
    ///   - sequence: Its number in the client's sequence.
    ///   - type: The notification type.
    ///   - payload: The content.
    ///   - storedAt: When it was stored.
    public init(clientID: String, sequence: UInt64, type: UInt32, payload: [UInt8], storedAt: MailboxTime) {
        self.clientID = clientID
        self.sequence = sequence
        self.type = type
        self.payload = payload
        self.storedAt = storedAt
    }
}

/// What a client's mailbox holds and what it has lost, as ``MailboxStore/openMailbox(for:limits:now:)``
/// reports it.
public struct MailboxSummary: Sendable, Hashable {
    /// The highest sequence number given to the client so far; 0 when none.
    public var lastSequence: UInt64
    /// The highest sequence number the client has acknowledged; 0 when none.
    public var acknowledged: UInt64
    /// The highest sequence number dropped by the limits before the client acknowledged
    /// it; 0 when none was.
    public var lostThrough: UInt64
    /// Why the last message lost was dropped.
    public var lossReason: MailboxLossReason?
    /// How many messages the mailbox holds.
    public var count: Int

    /// Creates a summary.
    ///
    /// - Parameters:
    ///   - lastSequence: The highest sequence number given so far.
    ///   - acknowledged: The highest sequence number acknowledged.
    ///   - lostThrough: The highest sequence number dropped unacknowledged.
    ///   - lossReason: Why the last one lost was dropped.
    ///   - count: How many messages the mailbox holds.
    public init(lastSequence: UInt64, acknowledged: UInt64, lostThrough: UInt64, lossReason: MailboxLossReason?, count: Int) {
        self.lastSequence = lastSequence
        self.acknowledged = acknowledged
        self.lostThrough = lostThrough
        self.lossReason = lossReason
        self.count = count
    }

    /// The lowest sequence number the mailbox can still replay.
    public var firstAvailable: UInt64 { max(acknowledged, lostThrough) + 1 }
}

/// Why messages left a mailbox before a client had them.
public struct MailboxLossReason: Hashable, Sendable, CustomStringConvertible {
    /// The stable name stored and sent on the wire: `overflow`, `expired`, `acknowledged`.
    public let rawValue: String

    /// Wraps a stored name.
    ///
    /// - Parameter rawValue: The name.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The mailbox held more than ``MailboxLimits/maximumMessages``; the oldest went.
    public static let overflow = MailboxLossReason(rawValue: "overflow")
    /// The messages were older than ``MailboxLimits/maximumAge``.
    public static let expired = MailboxLossReason(rawValue: "expired")
    /// The messages had been acknowledged by this client id before (by an earlier install
    /// or a client that lost its saved sequence), and were deleted then.
    public static let acknowledged = MailboxLossReason(rawValue: "acknowledged")

    /// The stable name.
    public var description: String { rawValue }
}

/// The bounds of each client's mailbox.
public struct MailboxLimits: Sendable, Hashable {
    /// The most messages one mailbox holds; beyond it the oldest are dropped, and the client
    /// is told when it resumes. Default 10,000.
    public var maximumMessages: Int = 10_000
    /// How long a message stays; older ones are dropped when the mailbox is next written
    /// or opened, and the client is told. `nil` keeps them until the count bound. Default 7 days.
    public var maximumAge: Duration? = .seconds(7 * 24 * 3600)

    /// The defaults: 10,000 messages, 7 days.
    public init() {}

    /// Bounds by count and age.
    ///
    /// - Parameters:
    ///   - maximumMessages: The most messages one mailbox holds.
    ///   - maximumAge: How long a message stays; `nil` for no age bound.
    public init(maximumMessages: Int, maximumAge: Duration?) {
        self.maximumMessages = maximumMessages
        self.maximumAge = maximumAge
    }

    /// The oldest storage time still allowed at `now`, if there is an age bound.
    func oldestAllowed(at now: MailboxTime) -> MailboxTime? {
        guard let maximumAge else { return nil }
        let (seconds, attoseconds) = maximumAge.components
        let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return MailboxTime(millisecondsSince1970: now.millisecondsSince1970 - milliseconds)
    }
}

/// A wall-clock time in milliseconds since 1970, as mailboxes store it. Wall-clock rather
/// than monotonic because it must mean the same after a server restart.
public struct MailboxTime: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01 00:00 UTC.
    public var millisecondsSince1970: Int64

    /// Wraps a number of milliseconds since 1970.
    ///
    /// - Parameter millisecondsSince1970: Milliseconds since 1970-01-01 00:00 UTC.
    public init(millisecondsSince1970: Int64) {
        self.millisecondsSince1970 = millisecondsSince1970
    }

    /// The system's wall-clock time now.
    ///
    /// - Returns: The current time, to the millisecond.
    public static func now() -> MailboxTime {
        MailboxTime(millisecondsSince1970: WallClock.millisecondsSince1970())
    }

    /// Orders times.
    ///
    /// - Parameters:
    ///   - lhs: A time.
    ///   - rhs: Another time.
    /// - Returns: Whether `lhs` is earlier than `rhs`.
    public static func < (lhs: MailboxTime, rhs: MailboxTime) -> Bool {
        lhs.millisecondsSince1970 < rhs.millisecondsSince1970
    }

    /// The number of milliseconds.
    public var description: String { "\(millisecondsSince1970) ms" }

    /// This time plus `duration`.
    ///
    /// - Parameter duration: How much later.
    /// - Returns: The later time.
    public func adding(_ duration: Duration) -> MailboxTime {
        let (seconds, attoseconds) = duration.components
        return MailboxTime(millisecondsSince1970: millisecondsSince1970 + seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }
}
