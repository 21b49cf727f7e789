/// Where a server keeps the pushes of identified clients until they have them.
///
/// Each client (by its client id) has a mailbox: an ordered list of pushes, each with the
/// next number of that client's sequence (1, 2, 3, …, never reused). A push is appended
/// whether or not the client is connected, and stays until the client acknowledges it or
/// the mailbox's limits drop it. A client that reconnects says the last sequence it has and
/// gets everything after it replayed in order.
///
/// Tether ships four stores: ``InMemoryMailboxStore``, the durable
/// ``TetherSQLite/SQLiteMailboxStore`` in the module `TetherSQLite`,
/// ``TetherRedis/RedisMailboxStore`` in `TetherRedis`, and
/// ``TetherPostgres/PostgresMailboxStore`` in `TetherPostgres`, which several servers can
/// share (with ``TetherPostgres/PostgresCluster`` they also route pushes between them; see
/// ``SessionCluster``). Mailboxes can live in any other database by implementing this
/// protocol. The rules an implementation must keep:
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
/// - **Store-wide bounds.** An append or open that would give a new client a mailbox
///   beyond ``MailboxLimits/maximumMailboxes``, or an append that would leave more than
///   ``MailboxLimits/maximumStoredBytes`` stored (after the mailboxes it touched were
///   trimmed), throws ``TetherError`` with ``TetherError/Code/mailboxesFull`` and changes
///   nothing.
/// - **Expiry.** ``removeExpired(limits:now:keeping:)`` drops expired messages from every
///   mailbox, and removes the mailboxes of clients idle for longer than the age bound.
/// - **Concurrency.** Calls may come from several tasks at once; reads must see every
///   append that has returned.
/// - **Epochs.** Each mailbox gets a new random ``MailboxSummary/epoch`` when it is made
///   (the first time, and again after it was removed), kept for as long as the mailbox,
///   and returned by ``openMailbox(for:limits:now:)``; a store that returns `nil` opts
///   out, and clients resuming into a history it lost are not told.
///
/// **Threads.** A server never calls a store on an event loop thread. It calls it from one
/// task for appends, acknowledgements and expiry, in order; from each resuming peer's task
/// for the pages of its replay; and from the caller of ``Server/clientIDs()``. Whatever the
/// task, every call runs on threads Tether keeps for stores: four, shared by every server in
/// the process, neither an event loop's nor one of the Swift concurrency pool's. A peer's
/// task goes back to its event loop once the page is read. So a store may block the thread
/// it is called on (a disk, a lock, a database client without async I/O) without delaying
/// any connection's heartbeats or requests: it holds up only the clients waiting for it, and,
/// while four calls block at once, the store calls queued behind them. A store that blocks
/// for long does better to run its work on threads of its own and suspend its callers, as
/// ``TetherSQLite/SQLiteMailboxStore`` does (the server calls that one directly: its work
/// already runs on its own thread).
public protocol MailboxStore: Sendable {
    /// Appends messages, each to its client's mailbox with the next sequence number of that
    /// client, then drops what `limits` no longer allow from the mailboxes it touched.
    ///
    /// - Parameters:
    ///   - messages: The messages, in order.
    ///   - limits: The bounds of each mailbox and of the whole store.
    ///   - now: The time to store with the messages and to judge their age by.
    /// - Returns: The sequence number given to each message, in the same order.
    /// - Throws: When the messages could not be stored; then none of them is.
    ///   ``TetherError/Code/mailboxesFull`` when a store-wide bound would be passed.
    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws -> [UInt64]

    /// Prepares a client's mailbox for a resume: registers the client if it is new, drops
    /// what `limits` no longer allow, and describes what is left.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - limits: The bounds of the mailbox and of the whole store.
    ///   - now: The time to judge ages by.
    /// - Returns: The client's sequence and what its mailbox holds.
    /// - Throws: When the store cannot be read or written; ``TetherError/Code/mailboxesFull``
    ///   when the client is new and the store holds ``MailboxLimits/maximumMailboxes`` already.
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

    /// Records the acknowledgements of several clients at once, each as
    /// ``acknowledge(_:through:)`` does.
    ///
    /// The server gathers the acknowledgements that arrive while it is busy and hands them
    /// over in one call, so a store that commits each write (a database) can make them one
    /// commit instead of one per client. The default implementation calls
    /// ``acknowledge(_:through:)`` for each client.
    ///
    /// - Parameter positions: The highest sequence each client has.
    /// - Throws: When the store cannot be written; some of the acknowledgements may have
    ///   been recorded, which only leaves the others' messages to be replayed again.
    func acknowledge(_ positions: [String: UInt64]) async throws

    /// Every client the store knows, in no particular order: those that ever opened a
    /// mailbox or were sent a message.
    ///
    /// - Returns: The client ids.
    /// - Throws: When the store cannot be read.
    func clientIDs() async throws -> [String]

    /// Drops what is older than the age bound from every mailbox, remembering the loss as
    /// ``MailboxLossReason/expired``, and removes the mailboxes of clients that have been
    /// idle for longer than the age bound.
    ///
    /// A mailbox is idle from the last time it was opened, written or kept; a client in
    /// `connected` counts as active now. Removing a mailbox forgets the client's sequence:
    /// if it ever comes back it starts again from 1 and is told its server's sequence went
    /// back (``SessionEvent/Kind/reset``). Without an age bound nothing is dropped or removed.
    ///
    /// The default implementation, for stores written before this requirement, opens the
    /// mailbox of every client not in `connected` with `limits` (which drops its expired
    /// messages) and removes none.
    ///
    /// - Parameters:
    ///   - limits: The bounds; only ``MailboxLimits/maximumAge`` matters here.
    ///   - now: The time to judge ages by.
    ///   - connected: The clients connected now, whose mailboxes stay.
    /// - Returns: The ids of the clients whose mailboxes were removed.
    /// - Throws: When the store cannot be read or written.
    func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws -> [String]

    /// Records that the keyed request `key` of `clientID` runs now, unless it ran or runs
    /// already: then says what is known of it. Records older than
    /// ``MailboxLimits/requestWindow`` are forgotten first; a new record past
    /// ``MailboxLimits/maximumRequestRecordsPerClient`` or
    /// ``MailboxLimits/maximumRequestRecords`` is refused. Two calls at once for one key get
    /// ``RequestRecord/started`` once. A store without records refuses every one (the
    /// default).
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - limits: The bounds of the records.
    ///   - now: The time to record and to judge the window by.
    /// - Returns: What the store knows.
    /// - Throws: When the store cannot be read or written.
    func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> RequestRecord

    /// Records the answer of the keyed request `key` of `clientID`, begun with
    /// ``beginRequest(_:of:limits:now:)``: kept unless it would pass
    /// ``MailboxLimits/maximumRequestRecordBytesPerClient``, in which case the record says
    /// only that it ran.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - answer: The response's payload.
    ///   - limits: The bounds of the records.
    ///   - now: The time it finished.
    /// - Throws: When the store cannot be written.
    func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) async throws
}

extension MailboxStore {
    /// Records each client's acknowledgement with ``acknowledge(_:through:)``, one after
    /// the other.
    ///
    /// - Parameter positions: The highest sequence each client has.
    /// - Throws: The first failure; the clients after it are not acknowledged.
    public func acknowledge(_ positions: [String: UInt64]) async throws {
        for (clientID, sequence) in positions {
            try await acknowledge(clientID, through: sequence)
        }
    }

    /// Drops expired messages from the mailbox of every client not in `connected`, by
    /// opening it; removes no mailbox.
    ///
    /// - Parameters:
    ///   - limits: The bounds to open each mailbox with.
    ///   - now: The time to judge ages by.
    ///   - connected: The clients connected now, left alone.
    /// - Returns: No client ids: this implementation removes no mailbox.
    /// - Throws: When the store cannot be read or written.
    public func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws -> [String] {
        guard limits.maximumAge != nil else { return [] }
        for clientID in try await clientIDs() where !connected.contains(clientID) {
            _ = try await openMailbox(for: clientID, limits: limits, now: now)
        }
        return []
    }
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
        /// When its time to live ends: a replay after it skips the push. `nil`, the default,
        /// for none (the store's ``MailboxLimits/maximumAge`` still applies).
        public var expiresAt: MailboxTime?

        /// Creates a push to store.
        ///
        /// - Parameters:
        ///   - clientID: The client it is for.
        ///   - type: The notification type.
        ///   - payload: The content.
        ///   - expiresAt: When its time to live ends; `nil` for none.
        public init(clientID: String, type: UInt32, payload: [UInt8], expiresAt: MailboxTime? = nil) {
            self.clientID = clientID
            self.type = type
            self.payload = payload
            self.expiresAt = expiresAt
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
    /// When its time to live ends (``Draft/expiresAt``); `nil` for none. A store keeps it
    /// with the push and returns it from ``MailboxStore/messages(for:after:limit:)``.
    public var expiresAt: MailboxTime?

    /// Creates a stored message.
    ///
    /// - Parameters:
    ///   - clientID: The client it is for.
    ///   - sequence: Its number in the client's sequence.
    ///   - type: The notification type.
    ///   - payload: The content.
    ///   - storedAt: When it was stored.
    ///   - expiresAt: When its time to live ends; `nil` for none.
    public init(clientID: String, sequence: UInt64, type: UInt32, payload: [UInt8], storedAt: MailboxTime, expiresAt: MailboxTime? = nil) {
        self.clientID = clientID
        self.sequence = sequence
        self.type = type
        self.payload = payload
        self.storedAt = storedAt
        self.expiresAt = expiresAt
    }

    /// Whether its time to live has ended at `now`.
    ///
    /// - Parameter now: The time to judge by.
    /// - Returns: `true` from ``expiresAt`` on.
    public func hasExpired(at now: MailboxTime) -> Bool {
        guard let expiresAt else { return false }
        return !(now < expiresAt)
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
    /// Which history of the client's sequence this is: the same for as long as the store
    /// keeps the client's sequence, different once the mailbox is made anew (the first time,
    /// after it was removed for being idle, after the store was wiped or replaced). A client
    /// that resumes with another epoch than the one it last saw is told its history is gone
    /// rather than resumed into the wrong sequence. `nil` when the store does not tell.
    public var epoch: String?

    /// Creates a summary.
    ///
    /// - Parameters:
    ///   - lastSequence: The highest sequence number given so far.
    ///   - acknowledged: The highest sequence number acknowledged.
    ///   - lostThrough: The highest sequence number dropped unacknowledged.
    ///   - lossReason: Why the last one lost was dropped.
    ///   - count: How many messages the mailbox holds.
    ///   - epoch: Which history of the client's sequence this is; `nil` when the store does
    ///     not tell.
    public init(lastSequence: UInt64, acknowledged: UInt64, lostThrough: UInt64, lossReason: MailboxLossReason?, count: Int, epoch: String? = nil) {
        self.lastSequence = lastSequence
        self.acknowledged = acknowledged
        self.lostThrough = lostThrough
        self.lossReason = lossReason
        self.count = count
        self.epoch = epoch
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

/// The bounds of each client's mailbox, and of all mailboxes together.
///
/// A server reachable by strangers gives a mailbox to every client id it accepts, so the
/// store-wide bounds are what keep a flood of made-up client ids from using up its memory
/// or disk; an authenticator (``Server/authenticate(_:)``) keeps them out in the first place.
public struct MailboxLimits: Sendable, Hashable {
    /// What each message counts for ``maximumStoredBytes`` beyond its payload: 64 bytes,
    /// about what a store keeps per message besides the payload.
    public static let messageOverhead = 64

    /// The most messages one mailbox holds; beyond it the oldest are dropped, and the client
    /// is told when it resumes. Default 10,000.
    public var maximumMessages: Int = 10_000
    /// How long a message stays, and how long a mailbox whose client neither connects nor is
    /// written to stays. Older messages are dropped when the mailbox is opened or written,
    /// and by the server's periodic expiry (``MailboxConfiguration/expiryInterval``), and the
    /// client is told; idle mailboxes are removed by that expiry. `nil` keeps messages until
    /// the count bound and mailboxes for ever. Default 7 days.
    public var maximumAge: Duration? = .seconds(7 * 24 * 3600)
    /// The most mailboxes the store holds, across all clients. Beyond it a hello from a new
    /// client id is refused for now (its client retries later) and a push to a new client id
    /// fails with ``TetherError/Code/mailboxesFull``; idle mailboxes expiring make room.
    /// Default 100,000.
    public var maximumMailboxes: Int = 100_000
    /// The most bytes stored across all mailboxes, each message counting its payload plus
    /// ``messageOverhead``. An append that would pass it fails with
    /// ``TetherError/Code/mailboxesFull`` and stores nothing; acknowledgements and expiry
    /// make room. Default 64 MiB.
    public var maximumStoredBytes: Int = 64 * 1024 * 1024
    /// How long a keyed request's record is kept (``Connection/request(_:idempotencyKey:timeout:)``):
    /// a repeat within it is answered from the record, one after it could run again, so
    /// clients give up repeating past their ``SessionConfiguration/requestWindow``, which
    /// must not be longer. Default 10 minutes.
    public var requestWindow: Duration = .seconds(600)
    /// The most keyed requests one client has recorded within ``requestWindow``; past it a
    /// new one is refused, not run. Default 1,000.
    public var maximumRequestRecordsPerClient = 1_000
    /// The most bytes of answers one client's records keep; a larger answer is not kept,
    /// and a repeat of its request is told it ran. Default 1 MiB.
    public var maximumRequestRecordBytesPerClient = 1 << 20
    /// The most request records the store keeps, across all clients. Default 100,000.
    public var maximumRequestRecords = 100_000

    /// The defaults: 10,000 messages and 7 days per mailbox, 100,000 mailboxes, 64 MiB.
    public init() {}

    /// Bounds by count and age, with the default store-wide bounds.
    ///
    /// - Parameters:
    ///   - maximumMessages: The most messages one mailbox holds.
    ///   - maximumAge: How long a message and an idle mailbox stay; `nil` for no age bound.
    public init(maximumMessages: Int, maximumAge: Duration?) {
        self.maximumMessages = maximumMessages
        self.maximumAge = maximumAge
    }

    /// What one message counts for ``maximumStoredBytes``.
    package static func storedSize(ofPayload count: Int) -> Int {
        count + messageOverhead
    }

    /// The error for a new client past ``maximumMailboxes``.
    package func tooManyMailboxes(for clientID: String) -> TetherError {
        TetherError(
            code: .mailboxesFull,
            message: "the mailbox store holds its maximum of \(maximumMailboxes) mailbox\(maximumMailboxes == 1 ? "" : "es"): none for new client \"\(clientID)\" until idle ones expire"
        )
    }

    /// The error for an append that would pass ``maximumStoredBytes``.
    package func tooManyBytes(messages: Int, storing total: Int) -> TetherError {
        TetherError(
            code: .mailboxesFull,
            message: "the mailbox store is full: \(messages) message\(messages == 1 ? "" : "s") would bring it to \(total) bytes, beyond its maximum of \(maximumStoredBytes); nothing was stored"
        )
    }

    /// The oldest storage time still allowed at `now`, if there is an age bound.
    package func oldestAllowed(at now: MailboxTime) -> MailboxTime? {
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
