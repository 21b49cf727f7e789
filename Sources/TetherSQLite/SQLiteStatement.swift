import CSQLite
internal import Tether

/// SQLite's `SQLITE_TRANSIENT`: bound text and blobs are copied before the bind call returns.
private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// A failed SQLite call: its result code and SQLite's message, read right after it.
struct SQLiteFailure: Error {
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
extension UInt64 {
    var sql: Int64 { Int64(bitPattern: self) }
    init(sql: Int64) { self.init(bitPattern: sql) }
}

/// A prepared statement, reused for every call. Callers reset it when they are done.
struct Statement {
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
struct ClientRow {
    var lastSequence: UInt64 = 0
    var acknowledged: UInt64 = 0
    var lostThrough: UInt64 = 0
    var lossReason: MailboxLossReason?
    /// The history of the client's sequence: a new random one each time the row is made.
    var epoch = ""
}

/// Every statement the store runs, prepared once when it opens.
struct Statements {
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
    let deleteOldRequests: Statement
    let selectRequest: Statement
    let countRequests: Statement
    let insertRequest: Statement
    let finishRequest: Statement

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
            "SELECT last_sequence, acknowledged, lost_through, loss_reason, epoch FROM clients WHERE id = ?1"
        )
        insertClient = try prepare("INSERT INTO clients (id, active_at, epoch) VALUES (?1, ?2, ?3)")
        updateClient = try prepare(
            "UPDATE clients SET last_sequence = ?2, acknowledged = ?3, lost_through = ?4, loss_reason = ?5, active_at = max(active_at, ?6) WHERE id = ?1"
        )
        insertMessage = try prepare(
            "INSERT INTO messages (client, sequence, type, payload, stored_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
        )
        firstStoredSince = try prepare(
            "SELECT sequence FROM messages WHERE client = ?1 AND stored_at >= ?2 ORDER BY sequence LIMIT 1"
        )
        lastBefore = try prepare("SELECT max(sequence) FROM messages WHERE client = ?1 AND sequence < ?2")
        deleteThrough = try prepare("DELETE FROM messages WHERE client = ?1 AND sequence <= ?2")
        countMessages = try prepare("SELECT count(*) FROM messages WHERE client = ?1")
        selectMessages = try prepare(
            "SELECT sequence, type, payload, stored_at, expires_at FROM messages WHERE client = ?1 AND sequence > ?2 ORDER BY sequence LIMIT ?3"
        )
        selectClientIDs = try prepare("SELECT id FROM clients")
        touchClient = try prepare("UPDATE clients SET active_at = max(active_at, ?2) WHERE id = ?1")
        bytesThrough = try prepare(
            "SELECT count(*), total(length(payload)) FROM messages WHERE client = ?1 AND sequence <= ?2"
        )
        expiredClients = try prepare("SELECT DISTINCT client FROM messages WHERE stored_at < ?1")
        idleClients = try prepare("SELECT id FROM clients WHERE active_at < ?1")
        deleteClient = try prepare("DELETE FROM clients WHERE id = ?1")
        deleteOldRequests = try prepare("DELETE FROM requests WHERE client = ?1 AND started_at < ?2")
        selectRequest = try prepare("SELECT answered, answer FROM requests WHERE client = ?1 AND key = ?2")
        countRequests = try prepare(
            "SELECT (SELECT count(*) FROM requests WHERE client = ?1), (SELECT count(*) FROM requests), (SELECT total(length(answer)) FROM requests WHERE client = ?1)"
        )
        insertRequest = try prepare("INSERT INTO requests (client, key, started_at, answered) VALUES (?1, ?2, ?3, 0)")
        finishRequest = try prepare("UPDATE requests SET answered = 1, answer = ?3 WHERE client = ?1 AND key = ?2 AND answered = 0")
    }
}
