import CSQLite

/// A ``MailboxStore`` in a SQLite database file: the durable store.
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
/// **Checks.** Opening a file checks it before using it: a file that is not a SQLite database,
/// is damaged (`PRAGMA quick_check`, which reads the whole file), or belongs to another
/// application or to a newer schema is refused with ``TetherError/Code/storeFailed``
/// rather than replaced or started empty. An empty (0-byte) file is initialised.
///
/// **Concurrency.** The store is safe to call from several tasks at once: it holds one
/// connection, and calls take turns on it. Each call blocks its thread while SQLite reads
/// or writes the file (and, with ``Durability/full``, while the file is flushed to disk).
/// Other processes may read the file meanwhile, for example with the `sqlite3` tool; a
/// writer from elsewhere makes calls wait up to 5 seconds for its lock, then fail.
///
/// **Bounds.** The number of mailboxes and the bytes stored, which
/// ``MailboxLimits/maximumMailboxes`` and ``MailboxLimits/maximumStoredBytes`` bound, are
/// counted when the file is opened and kept by this store as it writes; rows another
/// program adds meanwhile are counted the next time the file is opened.
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

        /// Write-ahead logging with `synchronous = NORMAL`: an append that returned survives
        /// a crash or restart of the process, but the last appends before the machine loses
        /// power or the kernel crashes may be lost (the file stays consistent). Appends cost
        /// no flush to disk, only occasional checkpoints do.
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

    private let database: Lock<Database>

    /// Opens the store in a database file, creating the file if there is none.
    ///
    /// Sets the file to write-ahead logging, creates the tables if they are absent, and
    /// checks that the file is sound and holds Tether mailboxes (see the type's description).
    ///
    /// - Parameters:
    ///   - path: The database file. Its directory must exist.
    ///   - synchronous: How durable appends are; ``Durability/normal`` by default.
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the file cannot be
    ///   opened or created, is not a SQLite database, is damaged, or belongs to another
    ///   application or to another version of this store's schema. The message names the
    ///   file and what SQLite reported, for example
    ///   `mailbox store /data/mail.sqlite is not a usable database: file is not a database`.
    public init(path: String, synchronous: Durability = .normal) throws(TetherError) {
        self.path = path
        database = Lock(try Database.open(path: path, durability: synchronous))
    }

    deinit {
        database.withLock { $0.close() }
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
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the messages
    ///   could not be stored; then none of them is, and no sequence number was used.
    public func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> [UInt64] {
        guard !messages.isEmpty else { return [] }
        return try database.withLock { (database: inout Database) throws(TetherError) -> [UInt64] in
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
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the store cannot
    ///   be read or written; then nothing changed.
    public func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> MailboxSummary {
        try database.withLock { (database: inout Database) throws(TetherError) -> MailboxSummary in
            try database.openMailbox(for: clientID, limits: limits, now: now)
        }
    }

    /// The messages of one client after a sequence number, oldest first.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - sequence: Only messages with a higher sequence number are returned.
    ///   - limit: At most this many.
    /// - Returns: The messages, in sequence order; none for a client the store does not know.
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the store cannot
    ///   be read.
    public func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws(TetherError) -> [MailboxMessage] {
        guard limit > 0 else { return [] }
        return try database.withLock { (database: inout Database) throws(TetherError) -> [MailboxMessage] in
            try database.messages(for: clientID, after: sequence, limit: limit)
        }
    }

    /// Records that a client has every message up to `sequence`, and deletes them.
    ///
    /// A sequence above the client's last one counts as its last one; one at or below what
    /// the client acknowledged before changes nothing, as does a client the store does not know.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - sequence: The highest sequence number the client has; lower ones are implied.
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the store cannot
    ///   be written; then nothing changed.
    public func acknowledge(_ clientID: String, through sequence: UInt64) async throws(TetherError) {
        try database.withLock { (database: inout Database) throws(TetherError) in
            try database.acknowledge(clientID, through: sequence)
        }
    }

    /// Every client the store knows, in no particular order: those that ever opened a
    /// mailbox or were sent a message.
    ///
    /// - Returns: The client ids.
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the store cannot
    ///   be read.
    public func clientIDs() async throws(TetherError) -> [String] {
        try database.withLock { (database: inout Database) throws(TetherError) -> [String] in
            try database.clientIDs()
        }
    }
}

extension SQLiteMailboxStore {
    /// Drops what is older than the age bound from every mailbox, and removes the mailboxes
    /// of clients idle for longer than it, in one transaction; see
    /// ``MailboxStore/removeExpired(limits:now:keeping:)``.
    ///
    /// - Parameters:
    ///   - limits: The bounds; only ``MailboxLimits/maximumAge`` matters here.
    ///   - now: The time to judge ages by.
    ///   - connected: The clients connected now, whose mailboxes stay.
    /// - Returns: The ids of the clients whose mailboxes were removed.
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the store cannot
    ///   be read or written; then nothing changed.
    public func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws(TetherError) -> [String] {
        try database.withLock { (database: inout Database) throws(TetherError) -> [String] in
            try database.removeExpired(limits: limits, now: now, keeping: connected)
        }
    }

    /// Runs SQL on the store's own connection, for tests that need a setting only a
    /// connection has (such as `PRAGMA max_page_count`, to make the file full).
    func executeOnConnection(_ sql: String) throws(TetherError) {
        try database.withLock { (database: inout Database) throws(TetherError) in
            try database.execute(sql)
        }
    }
}

// MARK: - The connection

/// SQLite's `SQLITE_TRANSIENT`: bound text and blobs are copied before the bind call returns.
private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// `PRAGMA application_id` of a mailbox store: "TMBX".
private let applicationID: Int64 = 0x544D_4258

/// `PRAGMA user_version`: the schema this code reads and writes.
private let schemaVersion: Int64 = 2

private let schema = """
    BEGIN IMMEDIATE;
    CREATE TABLE IF NOT EXISTS clients (
        id TEXT PRIMARY KEY NOT NULL,
        last_sequence INTEGER NOT NULL DEFAULT 0,
        acknowledged INTEGER NOT NULL DEFAULT 0,
        lost_through INTEGER NOT NULL DEFAULT 0,
        loss_reason TEXT,
        active_at INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS messages (
        client TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        type INTEGER NOT NULL,
        payload BLOB NOT NULL,
        stored_at INTEGER NOT NULL,
        PRIMARY KEY (client, sequence)
    ) WITHOUT ROWID;
    PRAGMA application_id = \(applicationID);
    PRAGMA user_version = \(schemaVersion);
    COMMIT;
    """

/// Brings a version 1 store to version 2: clients get the time they were last active,
/// which starts at the time of the upgrade (`?1` is not available in a script, so the
/// caller puts the time in).
private func upgradeFromVersion1(now: MailboxTime) -> String {
    """
    BEGIN IMMEDIATE;
    ALTER TABLE clients ADD COLUMN active_at INTEGER NOT NULL DEFAULT 0;
    UPDATE clients SET active_at = \(now.millisecondsSince1970);
    PRAGMA user_version = 2;
    COMMIT;
    """
}

/// A failed SQLite call: its result code and SQLite's message, read right after it.
private struct SQLiteFailure: Error {
    var code: Int32
    var message: String
    /// A store-wide bound that would be passed, rather than a failure of SQLite.
    var bound: TetherError?

    init(bound: TetherError) {
        self.code = SQLITE_CONSTRAINT
        self.message = bound.message
        self.bound = bound
    }

    init(_ database: OpaquePointer?, code: Int32) {
        self.code = code
        if let database, let text = sqlite3_errmsg(database) {
            message = String(cString: text)
        } else {
            message = String(cString: sqlite3_errstr(code))
        }
    }

    init(message: String) {
        self.code = SQLITE_ERROR
        self.message = message
    }
}

/// Sequences and types as SQLite integers. Sequences never come near 2⁶³, so the bit
/// pattern keeps their order.
private extension UInt64 {
    var sql: Int64 { Int64(bitPattern: self) }
    init(sql: Int64) { self.init(bitPattern: sql) }
}

/// A prepared statement, reused for every call. Callers reset it when they are done.
private struct Statement {
    let handle: OpaquePointer

    private func check(_ code: Int32) throws(SQLiteFailure) {
        guard code == SQLITE_OK else { throw SQLiteFailure(sqlite3_db_handle(handle), code: code) }
    }

    func bind(_ index: Int32, _ value: Int64) throws(SQLiteFailure) {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    func bind(_ index: Int32, _ value: String) throws(SQLiteFailure) {
        // withCString always yields a pointer, even for "", so the value never binds as NULL.
        let length = sqlite3_uint64(value.utf8.count)
        try check(value.withCString { sqlite3_bind_text64(handle, index, $0, length, transient, UInt8(SQLITE_UTF8)) })
    }

    func bind(_ index: Int32, _ value: String?) throws(SQLiteFailure) {
        if let value { try bind(index, value) } else { try check(sqlite3_bind_null(handle, index)) }
    }

    func bind(_ index: Int32, _ value: [UInt8]) throws(SQLiteFailure) {
        let code = value.withUnsafeBytes { bytes in
            // A null pointer would bind NULL; an empty payload is an empty blob.
            guard let base = bytes.baseAddress, !bytes.isEmpty else { return sqlite3_bind_zeroblob(handle, index, 0) }
            return sqlite3_bind_blob64(handle, index, base, sqlite3_uint64(bytes.count), transient)
        }
        try check(code)
    }

    /// Runs the statement to its next row: `true` with a row to read, `false` when done.
    func step() throws(SQLiteFailure) -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let code: throw SQLiteFailure(sqlite3_db_handle(handle), code: code)
        }
    }

    /// Runs a statement that returns no rows.
    func run() throws(SQLiteFailure) {
        defer { reset() }
        while try step() {}
    }

    func reset() {
        // Repeats the last step's error, which the step already reported.
        _ = sqlite3_reset(handle)
    }

    func isNull(_ column: Int32) -> Bool {
        sqlite3_column_type(handle, column) == SQLITE_NULL
    }

    func int64(_ column: Int32) -> Int64 {
        sqlite3_column_int64(handle, column)
    }

    func text(_ column: Int32) -> String {
        guard let pointer = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    func blob(_ column: Int32) -> [UInt8] {
        // The pointer first, then the length, as SQLite documents.
        let pointer = sqlite3_column_blob(handle, column)
        let count = Int(sqlite3_column_bytes(handle, column))
        guard let pointer, count > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}

/// What the `clients` table holds for one client.
private struct ClientRow {
    var lastSequence: UInt64 = 0
    var acknowledged: UInt64 = 0
    var lostThrough: UInt64 = 0
    var lossReason: MailboxLossReason?
}

/// Every statement the store runs, prepared once when it opens.
private struct Statements {
    let begin: Statement
    let commit: Statement
    let rollback: Statement
    let selectClient: Statement
    let insertClient: Statement
    let updateClient: Statement
    let insertMessage: Statement
    let firstStoredSince: Statement
    let lastBefore: Statement
    let deleteThrough: Statement
    let countMessages: Statement
    let selectMessages: Statement
    let selectClientIDs: Statement
    let touchClient: Statement
    let bytesThrough: Statement
    let expiredClients: Statement
    let idleClients: Statement
    let deleteClient: Statement

    /// Prepares each statement, adding it to `prepared` as soon as it is, so a failure
    /// part-way leaves nothing unfinalised.
    init(_ database: OpaquePointer, prepared: inout [OpaquePointer]) throws(SQLiteFailure) {
        func prepare(_ sql: String) throws(SQLiteFailure) -> Statement {
            var handle: OpaquePointer?
            let code = sqlite3_prepare_v3(database, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &handle, nil)
            guard code == SQLITE_OK, let handle else { throw SQLiteFailure(database, code: code) }
            prepared.append(handle)
            return Statement(handle: handle)
        }
        begin = try prepare("BEGIN IMMEDIATE")
        commit = try prepare("COMMIT")
        rollback = try prepare("ROLLBACK")
        selectClient = try prepare(
            "SELECT last_sequence, acknowledged, lost_through, loss_reason FROM clients WHERE id = ?1"
        )
        insertClient = try prepare("INSERT INTO clients (id, active_at) VALUES (?1, ?2)")
        updateClient = try prepare(
            "UPDATE clients SET last_sequence = ?2, acknowledged = ?3, lost_through = ?4, loss_reason = ?5, active_at = max(active_at, ?6) WHERE id = ?1"
        )
        insertMessage = try prepare(
            "INSERT INTO messages (client, sequence, type, payload, stored_at) VALUES (?1, ?2, ?3, ?4, ?5)"
        )
        firstStoredSince = try prepare(
            "SELECT sequence FROM messages WHERE client = ?1 AND stored_at >= ?2 ORDER BY sequence LIMIT 1"
        )
        lastBefore = try prepare("SELECT max(sequence) FROM messages WHERE client = ?1 AND sequence < ?2")
        deleteThrough = try prepare("DELETE FROM messages WHERE client = ?1 AND sequence <= ?2")
        countMessages = try prepare("SELECT count(*) FROM messages WHERE client = ?1")
        selectMessages = try prepare(
            "SELECT sequence, type, payload, stored_at FROM messages WHERE client = ?1 AND sequence > ?2 ORDER BY sequence LIMIT ?3"
        )
        selectClientIDs = try prepare("SELECT id FROM clients")
        touchClient = try prepare("UPDATE clients SET active_at = max(active_at, ?2) WHERE id = ?1")
        bytesThrough = try prepare(
            "SELECT count(*), total(length(payload)) FROM messages WHERE client = ?1 AND sequence <= ?2"
        )
        expiredClients = try prepare("SELECT DISTINCT client FROM messages WHERE stored_at < ?1")
        idleClients = try prepare("SELECT id FROM clients WHERE active_at < ?1")
        deleteClient = try prepare("DELETE FROM clients WHERE id = ?1")
    }
}

/// The store's one connection and its statements. Only used under the store's lock.
private final class Database {
    let path: String
    private let handle: OpaquePointer
    private let statements: Statements
    private var prepared: [OpaquePointer]
    private var isClosed = false
    /// How many clients the file holds, counted when it opened and kept since.
    private var mailboxCount: Int
    /// What the held messages count for ``MailboxLimits/maximumStoredBytes``, likewise.
    private var storedBytes: Int

    private init(path: String, handle: OpaquePointer, statements: Statements, prepared: [OpaquePointer], mailboxCount: Int, storedBytes: Int) {
        self.path = path
        self.handle = handle
        self.statements = statements
        self.prepared = prepared
        self.mailboxCount = mailboxCount
        self.storedBytes = storedBytes
    }

    /// Finalizes the statements and closes the connection; once.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        for statement in prepared { sqlite3_finalize(statement) }
        prepared = []
        _ = sqlite3_close_v2(handle)
    }

    private func failure(_ what: String, _ failure: SQLiteFailure) -> TetherError {
        Self.failure(path, what, failure)
    }

    private static func failure(_ path: String, _ what: String, _ failure: SQLiteFailure) -> TetherError {
        if let bound = failure.bound { return bound }
        return TetherError(code: .storeFailed, message: "mailbox store \(path) \(what): \(failure.message)")
    }

    // MARK: Opening

    static func open(path: String, durability: SQLiteMailboxStore.Durability) throws(TetherError) -> Database {
        var opened: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &opened, flags, nil)
        guard let handle = opened else {
            throw failure(path, "could not be opened", SQLiteFailure(nil, code: code))
        }
        var prepared: [OpaquePointer] = []
        do throws(TetherError) {
            guard code == SQLITE_OK else { throw failure(path, "could not be opened", SQLiteFailure(handle, code: code)) }
            _ = sqlite3_busy_timeout(handle, 5_000)
            try prepareFile(handle, path: path, durability: durability)
            let statements: Statements
            let mailboxCount: Int64
            let messages: Int64
            let payloadBytes: Int64
            do throws(SQLiteFailure) {
                statements = try Statements(handle, prepared: &prepared)
                mailboxCount = try scalar(handle, "SELECT count(*) FROM clients")
                messages = try scalar(handle, "SELECT count(*) FROM messages")
                payloadBytes = try scalar(handle, "SELECT CAST(total(length(payload)) AS INTEGER) FROM messages")
            } catch {
                throw failure(path, "could not be opened", error)
            }
            return Database(
                path: path,
                handle: handle,
                statements: statements,
                prepared: prepared,
                mailboxCount: Int(mailboxCount),
                storedBytes: Int(payloadBytes) + Int(messages) * MailboxLimits.messageOverhead
            )
        } catch {
            for statement in prepared { sqlite3_finalize(statement) }
            _ = sqlite3_close_v2(handle)
            throw error
        }
    }

    /// Checks that the file is a sound Tether mailbox store or a new database, sets its
    /// journal and durability, and creates the schema in a new one.
    private static func prepareFile(_ handle: OpaquePointer, path: String, durability: SQLiteMailboxStore.Durability) throws(TetherError) {
        // Identify the file before writing anything, so a foreign one is left as it was.
        // Reading its header is what finds a file that is not a database at all.
        let application: Int64
        let version: Int64
        let objects: Int64
        do throws(SQLiteFailure) {
            application = try scalar(handle, "PRAGMA application_id")
            version = try scalar(handle, "PRAGMA user_version")
            objects = try scalar(handle, "SELECT count(*) FROM sqlite_master")
        } catch {
            throw failure(path, "is not a usable database", error)
        }
        let isNew = application == 0 && version == 0 && objects == 0
        if !isNew {
            guard application == applicationID else {
                let owner = application == 0
                    ? "it holds another application's tables"
                    : "it belongs to another application (application_id 0x\(String(UInt32(truncatingIfNeeded: application), radix: 16)))"
                throw TetherError(code: .storeFailed, message: "mailbox store \(path) is not a Tether mailbox store: \(owner)")
            }
            guard version == schemaVersion || version == 1 else {
                throw TetherError(
                    code: .storeFailed,
                    message: "mailbox store \(path) has schema version \(version); this version of Tether reads version \(schemaVersion)"
                )
            }
        }

        if let problems = quickCheck(handle) {
            throw failure(path, "is not a usable database", SQLiteFailure(message: problems))
        }

        do throws(SQLiteFailure) {
            let mode = try rows(handle, "PRAGMA journal_mode = WAL", limit: 1).first?.lowercased()
            // "memory" for a database in memory, which has no file to log to.
            guard mode == "wal" || mode == "memory" else {
                throw SQLiteFailure(message: "journal mode is \(mode ?? "unknown") instead of wal")
            }
            try exec(handle, "PRAGMA synchronous = \(durability.synchronous)")
            if isNew {
                // Idempotent, in case another process initialises the same file at once.
                try exec(handle, schema)
            } else if version == 1 {
                try exec(handle, upgradeFromVersion1(now: .now()))
            }
        } catch {
            if sqlite3_get_autocommit(handle) == 0 { try? exec(handle, "ROLLBACK") }
            throw failure(path, "could not be set up", error)
        }
    }

    /// What `PRAGMA quick_check` finds wrong with the file, or `nil` when it finds nothing.
    ///
    /// It reports damage as rows of text, and often then fails with `SQLITE_CORRUPT`; both
    /// make the answer, the rows first since they say where the damage is.
    private static func quickCheck(_ handle: OpaquePointer) -> String? {
        var findings: [String] = []
        var prepared: OpaquePointer?
        let code = sqlite3_prepare_v2(handle, "PRAGMA quick_check(5)", -1, &prepared, nil)
        if code == SQLITE_OK, let prepared {
            defer { sqlite3_finalize(prepared) }
            let statement = Statement(handle: prepared)
            do throws(SQLiteFailure) {
                while try statement.step() {
                    // Damage in the main database is reported under a "*** in database main ***" line.
                    findings += statement.text(0).split(separator: "\n").map(String.init).filter { !$0.hasPrefix("*** ") }
                }
            } catch {
                findings.append(error.message)
            }
        } else {
            findings.append(SQLiteFailure(handle, code: code).message)
        }
        if findings == ["ok"] { return nil }
        return "quick_check found " + findings.joined(separator: "; ")
    }

    private static func exec(_ handle: OpaquePointer, _ sql: String) throws(SQLiteFailure) {
        let code = sqlite3_exec(handle, sql, nil, nil, nil)
        guard code == SQLITE_OK else { throw SQLiteFailure(handle, code: code) }
    }

    /// The first column of each row of a one-off statement, as text, up to `limit` rows.
    private static func rows(_ handle: OpaquePointer, _ sql: String, limit: Int) throws(SQLiteFailure) -> [String] {
        var prepared: OpaquePointer?
        let code = sqlite3_prepare_v2(handle, sql, -1, &prepared, nil)
        guard code == SQLITE_OK, let prepared else { throw SQLiteFailure(handle, code: code) }
        defer { sqlite3_finalize(prepared) }
        let statement = Statement(handle: prepared)
        var result: [String] = []
        while result.count < limit, try statement.step() {
            result.append(statement.text(0))
        }
        return result
    }

    /// The integer in the first row of a one-off statement.
    private static func scalar(_ handle: OpaquePointer, _ sql: String) throws(SQLiteFailure) -> Int64 {
        var prepared: OpaquePointer?
        let code = sqlite3_prepare_v2(handle, sql, -1, &prepared, nil)
        guard code == SQLITE_OK, let prepared else { throw SQLiteFailure(handle, code: code) }
        defer { sqlite3_finalize(prepared) }
        let statement = Statement(handle: prepared)
        guard try statement.step() else { throw SQLiteFailure(message: "\(sql) returned no row") }
        return statement.int64(0)
    }

    // MARK: Operations

    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) throws(TetherError) -> [UInt64] {
        do throws(SQLiteFailure) {
            return try transaction { () throws(SQLiteFailure) -> [UInt64] in
                // Each touched client's row, in the order first touched.
                var touched: [String] = []
                var rows: [String: ClientRow] = [:]
                var sequences: [UInt64] = []
                sequences.reserveCapacity(messages.count)
                for draft in messages {
                    var row: ClientRow
                    if let known = rows[draft.clientID] {
                        row = known
                    } else {
                        row = try clientOrRegister(draft.clientID, limits: limits, now: now)
                        touched.append(draft.clientID)
                    }
                    row.lastSequence += 1
                    try insert(draft, sequence: row.lastSequence, at: now)
                    rows[draft.clientID] = row
                    sequences.append(row.lastSequence)
                }
                for clientID in touched {
                    var row = rows[clientID]!
                    try enforce(limits, now: now, on: clientID, &row)
                    try update(clientID, row, activeAt: now)
                }
                if storedBytes > limits.maximumStoredBytes {
                    throw SQLiteFailure(bound: limits.tooManyBytes(messages: messages.count, storing: storedBytes))
                }
                return sequences
            }
        } catch {
            throw failure("could not append \(messages.count) messages", error)
        }
    }

    func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) throws(TetherError) -> MailboxSummary {
        do throws(SQLiteFailure) {
            return try transaction { () throws(SQLiteFailure) -> MailboxSummary in
                var row = try clientOrRegister(clientID, limits: limits, now: now)
                let before = row
                try enforce(limits, now: now, on: clientID, &row)
                if row.lostThrough != before.lostThrough || row.lossReason != before.lossReason {
                    try update(clientID, row)
                }
                try touch(clientID, at: now)
                return MailboxSummary(
                    lastSequence: row.lastSequence,
                    acknowledged: row.acknowledged,
                    lostThrough: row.lostThrough,
                    lossReason: row.lossReason,
                    count: try count(clientID)
                )
            }
        } catch {
            throw failure("could not open the mailbox of client \"\(clientID)\"", error)
        }
    }

    func messages(for clientID: String, after sequence: UInt64, limit: Int) throws(TetherError) -> [MailboxMessage] {
        let statement = statements.selectMessages
        defer { statement.reset() }
        do throws(SQLiteFailure) {
            try statement.bind(1, clientID)
            // Clamped: a number beyond every stored one must not wrap to a negative integer.
            try statement.bind(2, Int64(clamping: sequence))
            try statement.bind(3, Int64(limit))
            var result: [MailboxMessage] = []
            result.reserveCapacity(min(limit, 1024))
            while try statement.step() {
                result.append(MailboxMessage(
                    clientID: clientID,
                    sequence: UInt64(sql: statement.int64(0)),
                    type: UInt32(truncatingIfNeeded: statement.int64(1)),
                    payload: statement.blob(2),
                    storedAt: MailboxTime(millisecondsSince1970: statement.int64(3))
                ))
            }
            return result
        } catch {
            throw failure("could not read the mailbox of client \"\(clientID)\"", error)
        }
    }

    func acknowledge(_ clientID: String, through sequence: UInt64) throws(TetherError) {
        do throws(SQLiteFailure) {
            try transaction { () throws(SQLiteFailure) in
                guard var row = try client(clientID) else { return }
                let through = min(sequence, row.lastSequence)
                guard through > row.acknowledged else { return }
                row.acknowledged = through
                try deleteMessages(of: clientID, through: through)
                try update(clientID, row)
            }
        } catch {
            throw failure("could not acknowledge sequence \(sequence) of client \"\(clientID)\"", error)
        }
    }

    func execute(_ sql: String) throws(TetherError) {
        let code = sqlite3_exec(handle, sql, nil, nil, nil)
        guard code == SQLITE_OK else { throw failure("could not run \(sql)", SQLiteFailure(handle, code: code)) }
    }

    func clientIDs() throws(TetherError) -> [String] {
        let statement = statements.selectClientIDs
        defer { statement.reset() }
        do throws(SQLiteFailure) {
            var result: [String] = []
            while try statement.step() { result.append(statement.text(0)) }
            return result
        } catch {
            throw failure("could not list its clients", error)
        }
    }

    func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) throws(TetherError) -> [String] {
        guard let oldest = limits.oldestAllowed(at: now) else { return [] }
        do throws(SQLiteFailure) {
            return try transaction { () throws(SQLiteFailure) -> [String] in
                for clientID in connected { try touch(clientID, at: now) }
                var removed: [String] = []
                for clientID in try column(statements.idleClients, oldest.millisecondsSince1970) where !connected.contains(clientID) {
                    guard let row = try client(clientID) else { continue }
                    try deleteMessages(of: clientID, through: row.lastSequence)
                    let statement = statements.deleteClient
                    try statement.bind(1, clientID)
                    try statement.run()
                    mailboxCount -= 1
                    removed.append(clientID)
                }
                for clientID in try column(statements.expiredClients, oldest.millisecondsSince1970) {
                    guard var row = try client(clientID) else { continue }
                    try enforce(limits, now: now, on: clientID, &row)
                    try update(clientID, row)
                }
                return removed
            }
        } catch {
            throw failure("could not remove expired mailboxes", error)
        }
    }

    // MARK: Steps

    /// The text in the first column of every row of `statement`, bound to `value`.
    private func column(_ statement: Statement, _ value: Int64) throws(SQLiteFailure) -> [String] {
        defer { statement.reset() }
        try statement.bind(1, value)
        var result: [String] = []
        while try statement.step() { result.append(statement.text(0)) }
        return result
    }

    /// Marks a client active at `now`: its idle time starts again.
    private func touch(_ clientID: String, at now: MailboxTime) throws(SQLiteFailure) {
        let statement = statements.touchClient
        try statement.bind(1, clientID)
        try statement.bind(2, now.millisecondsSince1970)
        try statement.run()
    }

    /// Runs `body` in a write transaction, rolled back when anything in it fails.
    private func transaction<Result>(_ body: () throws(SQLiteFailure) -> Result) throws(SQLiteFailure) -> Result {
        try statements.begin.run()
        let counts = (mailboxCount, storedBytes)
        do throws(SQLiteFailure) {
            let result = try body()
            try statements.commit.run()
            return result
        } catch {
            (mailboxCount, storedBytes) = counts
            // Some errors (a full disk, an I/O error) roll back by themselves.
            if sqlite3_get_autocommit(handle) == 0 { try? statements.rollback.run() }
            throw error
        }
    }

    private func client(_ clientID: String) throws(SQLiteFailure) -> ClientRow? {
        let statement = statements.selectClient
        defer { statement.reset() }
        try statement.bind(1, clientID)
        guard try statement.step() else { return nil }
        return ClientRow(
            lastSequence: UInt64(sql: statement.int64(0)),
            acknowledged: UInt64(sql: statement.int64(1)),
            lostThrough: UInt64(sql: statement.int64(2)),
            lossReason: statement.isNull(3) ? nil : MailboxLossReason(rawValue: statement.text(3))
        )
    }

    private func clientOrRegister(_ clientID: String, limits: MailboxLimits, now: MailboxTime) throws(SQLiteFailure) -> ClientRow {
        if let row = try client(clientID) { return row }
        guard mailboxCount < limits.maximumMailboxes else {
            throw SQLiteFailure(bound: limits.tooManyMailboxes(for: clientID))
        }
        let statement = statements.insertClient
        try statement.bind(1, clientID)
        try statement.bind(2, now.millisecondsSince1970)
        try statement.run()
        mailboxCount += 1
        return ClientRow()
    }

    /// Writes a client's row; `activeAt` moves its last active time forward, if given.
    private func update(_ clientID: String, _ row: ClientRow, activeAt: MailboxTime? = nil) throws(SQLiteFailure) {
        let statement = statements.updateClient
        try statement.bind(1, clientID)
        try statement.bind(2, row.lastSequence.sql)
        try statement.bind(3, row.acknowledged.sql)
        try statement.bind(4, row.lostThrough.sql)
        try statement.bind(5, row.lossReason?.rawValue)
        try statement.bind(6, activeAt?.millisecondsSince1970 ?? 0)
        try statement.run()
    }

    private func insert(_ draft: MailboxMessage.Draft, sequence: UInt64, at now: MailboxTime) throws(SQLiteFailure) {
        let statement = statements.insertMessage
        try statement.bind(1, draft.clientID)
        try statement.bind(2, sequence.sql)
        try statement.bind(3, Int64(draft.type))
        try statement.bind(4, draft.payload)
        try statement.bind(5, now.millisecondsSince1970)
        try statement.run()
        storedBytes += MailboxLimits.storedSize(ofPayload: draft.payload.count)
    }

    private func deleteMessages(of clientID: String, through sequence: UInt64) throws(SQLiteFailure) {
        let measure = statements.bytesThrough
        do {
            defer { measure.reset() }
            try measure.bind(1, clientID)
            try measure.bind(2, sequence.sql)
            if try measure.step() {
                storedBytes -= Int(measure.int64(1)) + Int(measure.int64(0)) * MailboxLimits.messageOverhead
            }
        }
        let statement = statements.deleteThrough
        try statement.bind(1, clientID)
        try statement.bind(2, sequence.sql)
        try statement.run()
    }

    private func count(_ clientID: String) throws(SQLiteFailure) -> Int {
        let statement = statements.countMessages
        defer { statement.reset() }
        try statement.bind(1, clientID)
        guard try statement.step() else { return 0 }
        return Int(statement.int64(0))
    }

    /// Drops what `limits` no longer allow from a mailbox, oldest first, remembering the
    /// highest sequence dropped and why: first what is older than the age bound, then what
    /// is beyond the count bound.
    ///
    /// A mailbox always holds exactly the sequences above both `acknowledged` and
    /// `lost_through`, up to `last_sequence`: appends add at the top, and acknowledgements
    /// and both kinds of loss remove from the bottom and raise one of the two. So its count
    /// needs no scan.
    private func enforce(_ limits: MailboxLimits, now: MailboxTime, on clientID: String, _ row: inout ClientRow) throws(SQLiteFailure) {
        if let oldest = limits.oldestAllowed(at: now) {
            // Like the in-memory store, drop the run of old messages at the front.
            let keepFrom = try firstStored(of: clientID, since: oldest) ?? Int64.max
            if let lastExpired = try lastSequence(of: clientID, before: keepFrom) {
                let through = UInt64(sql: lastExpired)
                try deleteMessages(of: clientID, through: through)
                row.lostThrough = max(row.lostThrough, through)
                row.lossReason = .expired
            }
        }
        let floor = max(row.acknowledged, row.lostThrough)
        let held = row.lastSequence > floor ? row.lastSequence - floor : 0
        let allowed = UInt64(max(0, limits.maximumMessages))
        if held > allowed {
            let through = floor + (held - allowed)
            try deleteMessages(of: clientID, through: through)
            row.lostThrough = through
            row.lossReason = .overflow
        }
    }

    private func firstStored(of clientID: String, since time: MailboxTime) throws(SQLiteFailure) -> Int64? {
        let statement = statements.firstStoredSince
        defer { statement.reset() }
        try statement.bind(1, clientID)
        try statement.bind(2, time.millisecondsSince1970)
        guard try statement.step() else { return nil }
        return statement.int64(0)
    }

    private func lastSequence(of clientID: String, before sequence: Int64) throws(SQLiteFailure) -> Int64? {
        let statement = statements.lastBefore
        defer { statement.reset() }
        try statement.bind(1, clientID)
        try statement.bind(2, sequence)
        guard try statement.step(), !statement.isNull(0) else { return nil }
        return statement.int64(0)
    }
}
