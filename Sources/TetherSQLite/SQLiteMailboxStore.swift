public import Tether

/// A ``Tether/MailboxStore`` in a SQLite database file: the durable store.
///
/// Every mailbox lives in one file, which the store creates on first use (with its `-wal`
/// and `-shm` companions next to it). Reopening the file after a restart gives back every
/// client's sequence, acknowledgement, losses and held messages.
///
/// ```swift
/// let store = try SQLiteMailboxStore(path: "/var/lib/myserver/mailboxes.sqlite")
/// ```
///
/// **Durability.** An append is one SQLite transaction, committed before
/// ``append(_:limits:now:)`` returns. With ``Durability/normal`` (the default) a returned
/// append survives the process crashing or being killed and restarted; with
/// ``Durability/full`` it also survives the machine losing power. Either way a crash never
/// leaves part of an append stored.
///
/// **Checks.** Opening a file checks it before using it: a file that is not a SQLite
/// database, is damaged (`PRAGMA quick_check`, which reads the whole file), or belongs to
/// another application or to a newer schema is refused with
/// ``Tether/TetherError/Code/storeFailed`` rather than replaced or started empty. An empty
/// (0-byte) file is initialised.
///
/// **Threads.** The store holds one connection and runs every call on a thread of its own,
/// one call after another, in the order they came. An `async` method suspends its caller
/// until its turn is done, and blocks no thread of the caller's: not an event loop's, not
/// one of the Swift concurrency pool's, however long SQLite takes to read or write the
/// file (with ``Durability/full``, to flush it to disk) or waits for a lock. So the store
/// is safe to call from several tasks at once, and from anywhere. The thread ends when the
/// store is released, once the calls queued before have run and the file is closed. Opening
/// the file (``init(path:synchronous:)``), which checks the whole file, runs on the
/// caller's thread. Other processes may read the file meanwhile, for example with the
/// `sqlite3` tool; a writer from elsewhere makes calls wait up to 5 seconds for its lock,
/// then fail.
///
/// **Bounds.** The number of mailboxes and the bytes stored, which
/// ``Tether/MailboxLimits/maximumMailboxes`` and
/// ``Tether/MailboxLimits/maximumStoredBytes`` bound, are counted when the file is opened
/// and kept by this store as it writes; rows another program adds meanwhile are counted the
/// next time the file is opened.
///
/// **Versions.** A file written by an earlier version of this store (schema 1) is upgraded
/// in place when it is opened: its clients count as active from then on.
///
/// Sequence numbers are kept as SQLite's 64-bit signed integers, so they are exact up to
/// 2⁶³ − 1.
public final class SQLiteMailboxStore: MailboxStore {
    /// How much of an append survives once ``SQLiteMailboxStore/append(_:limits:now:)``
    /// has returned.
    public struct Durability: Sendable, Hashable, CustomStringConvertible {
        /// The value of SQLite's `PRAGMA synchronous`.
        let synchronous: String

        /// Write-ahead logging with `synchronous = NORMAL`: an append that returned
        /// survives a crash or restart of the process, but the last appends before the
        /// machine loses power or the kernel crashes may be lost (the file stays
        /// consistent). Appends cost no flush to disk, only occasional checkpoints do.
        public static let normal = Durability(synchronous: "NORMAL")

        /// Write-ahead logging with `synchronous = FULL`: an append that returned also
        /// survives power loss or a kernel crash, at the cost of a flush to disk (`fsync`)
        /// per append.
        public static let full = Durability(synchronous: "FULL")

        /// `normal` or `full`.
        public var description: String { synchronous.lowercased() }
    }

    /// The database file's path, as given to ``init(path:synchronous:)``.
    public let path: String

    /// The connection; used on `thread` only, apart from opening and tests.
    private let database: Lock<MailboxDatabase>
    /// Where every call runs.
    private let thread = DatabaseThread()

    /// Opens the store in a database file, creating the file if there is none.
    ///
    /// Sets the file to write-ahead logging, creates the tables if they are absent, and
    /// checks that the file is sound and holds Tether mailboxes (see the type's
    /// description).
    ///
    /// - Parameters:
    ///   - path: The database file. Its directory must exist.
    ///   - synchronous: How durable appends are; ``Durability/normal`` by default.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the file cannot be opened or created, is not a SQLite database, is damaged, or
    ///   belongs to another application or to another version of this store's schema. The
    ///   message names the file and what SQLite reported, for example
    ///   `mailbox store /data/mail.sqlite is not a usable database: file is not a database`.
    public init(path: String, synchronous: Durability = .normal) throws(TetherError) {
        self.path = path
        database = Lock(try MailboxDatabase.open(path: path, durability: synchronous))
    }

    deinit {
        thread.finish { [database] in database.withLock { $0.close() } }
    }

    /// Runs `body` with the connection on the store's thread, suspending the caller until
    /// it is done.
    private func run<Value: Sendable>(_ body: @escaping @Sendable (MailboxDatabase) throws(TetherError) -> Value) async throws(TetherError) -> Value {
        try await thread.run { [database] () throws(TetherError) -> Value in
            try database.withLock { (database: inout MailboxDatabase) throws(TetherError) -> Value in
                try body(database)
            }
        }
    }

    /// Appends messages in one transaction, each to its client's mailbox with the next
    /// sequence number of that client, then drops what `limits` no longer allow from the
    /// mailboxes it touched.
    ///
    /// - Parameters:
    ///   - messages: The messages, in order.
    ///   - limits: The count and age bounds of each mailbox.
    ///   - now: The time to store with the messages and to judge their age by.
    /// - Returns: The sequence number given to each message, in the same order.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the messages could not be stored; then none of them is, and no sequence number was
    ///   used.
    public func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> [UInt64] {
        guard !messages.isEmpty else { return [] }
        return try await run { database throws(TetherError) -> [UInt64] in
            try database.append(messages, limits: limits, now: now)
        }
    }

    /// Prepares a client's mailbox for a resume: registers the client if it is new, drops
    /// what `limits` no longer allow, and describes what is left.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - limits: The count and age bounds of the mailbox.
    ///   - now: The time to judge ages by.
    /// - Returns: The client's sequence and what its mailbox holds.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be read or written; then nothing changed.
    public func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> MailboxSummary {
        try await run { database throws(TetherError) -> MailboxSummary in
            try database.openMailbox(for: clientID, limits: limits, now: now)
        }
    }

    /// The messages of one client after a sequence number, oldest first.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - sequence: Only messages with a higher sequence number are returned.
    ///   - limit: At most this many.
    /// - Returns: The messages, in sequence order; none for a client the store does not
    ///   know.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be read.
    public func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws(TetherError) -> [MailboxMessage] {
        guard limit > 0 else { return [] }
        return try await run { database throws(TetherError) -> [MailboxMessage] in
            try database.messages(for: clientID, after: sequence, limit: limit)
        }
    }

    /// Records that a client has every message up to `sequence`, and deletes them.
    ///
    /// A sequence above the client's last one counts as its last one; one at or below what
    /// the client acknowledged before changes nothing, as does a client the store does not
    /// know.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - sequence: The highest sequence number the client has; lower ones are implied.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be written; then nothing changed.
    public func acknowledge(_ clientID: String, through sequence: UInt64) async throws(TetherError) {
        try await run { database throws(TetherError) in
            try database.acknowledge(clientID, through: sequence)
        }
    }

    /// Every client the store knows, in no particular order: those that ever opened a
    /// mailbox or were sent a message.
    ///
    /// - Returns: The client ids.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be read.
    public func clientIDs() async throws(TetherError) -> [String] {
        try await run { database throws(TetherError) -> [String] in
            try database.clientIDs()
        }
    }
}

extension SQLiteMailboxStore {
    /// Records that a keyed request runs, in one transaction, as
    /// ``Tether/MailboxStore/beginRequest(_:of:limits:now:)`` says.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - limits: The bounds of the records.
    ///   - now: The time to record and to judge the window by.
    /// - Returns: What is known of the request.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be read or written.
    public func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> RequestRecord {
        try await run { database throws(TetherError) -> RequestRecord in
            try database.beginRequest(key, of: clientID, limits: limits, now: now)
        }
    }

    /// Records a keyed request's answer, as
    /// ``Tether/MailboxStore/finishRequest(_:of:answer:limits:now:)`` says.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - answer: The response's payload.
    ///   - limits: The bounds of the records.
    ///   - now: The time it finished.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be written.
    public func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) {
        try await run { database throws(TetherError) in
            try database.finishRequest(key, of: clientID, answer: answer, limits: limits)
        }
    }
}

/// Every call runs on the store's thread: the server calls it from anywhere, event loops
/// included, without a hop to the threads it keeps for stores that block.
extension SQLiteMailboxStore: SelfThreadedMailboxStore {}

extension SQLiteMailboxStore {
    /// Drops what is older than the age bound from every mailbox, and removes the mailboxes
    /// of clients idle for longer than it, in one transaction; see
    /// ``Tether/MailboxStore/removeExpired(limits:now:keeping:)``.
    ///
    /// - Parameters:
    ///   - limits: The bounds; only ``Tether/MailboxLimits/maximumAge`` matters here.
    ///   - now: The time to judge ages by.
    ///   - connected: The clients connected now, whose mailboxes stay.
    /// - Returns: The ids of the clients whose mailboxes were removed.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be read or written; then nothing changed.
    public func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws(TetherError) -> [String] {
        try await run { database throws(TetherError) -> [String] in
            try database.removeExpired(limits: limits, now: now, keeping: connected)
        }
    }

    /// Runs SQL on the store's own connection, for tests that need a setting only a
    /// connection has (such as `PRAGMA max_page_count`, to make the file full).
    func executeOnConnection(_ sql: String) throws(TetherError) {
        try database.withLock { (database: inout MailboxDatabase) throws(TetherError) in
            try database.execute(sql)
        }
    }
}
