import CSQLite
internal import Tether

/// `PRAGMA application_id` of a mailbox store: "TMBX".
private let applicationID: Int64 = 0x544D_4258

/// `PRAGMA user_version`: the schema this code reads and writes.
private let schemaVersion: Int64 = 4

private let schema = """
    BEGIN IMMEDIATE;
    CREATE TABLE IF NOT EXISTS clients (
        id TEXT PRIMARY KEY NOT NULL,
        last_sequence INTEGER NOT NULL DEFAULT 0,
        acknowledged INTEGER NOT NULL DEFAULT 0,
        lost_through INTEGER NOT NULL DEFAULT 0,
        loss_reason TEXT,
        active_at INTEGER NOT NULL DEFAULT 0,
        epoch TEXT NOT NULL DEFAULT ''
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS messages (
        client TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        type INTEGER NOT NULL,
        payload BLOB NOT NULL,
        stored_at INTEGER NOT NULL,
        expires_at INTEGER,
        PRIMARY KEY (client, sequence)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS requests (
        client TEXT NOT NULL,
        key TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        answered INTEGER NOT NULL,
        answer BLOB,
        PRIMARY KEY (client, key)
    ) WITHOUT ROWID;
    PRAGMA application_id = \(applicationID);
    PRAGMA user_version = \(schemaVersion);
    COMMIT;
    """

/// Brings an older store to the current version, in one transaction that reads the version
/// again, so two processes opening the same old file do not both upgrade it.
///
/// - Version 1 to 2: clients get the time they were last active, which starts at the time
///   of the upgrade.
/// - Version 2 to 3: clients get an epoch, a new random one each. Their clients saved none
///   yet, so they resume as before and learn it from the welcome.
/// - Version 3 to 4: messages get a time to live, none for those stored before, and the
///   records of keyed requests get their table.
private func upgrade(_ handle: OpaquePointer, now: MailboxTime) throws(SQLiteFailure) {
    try MailboxDatabase.exec(handle, "BEGIN IMMEDIATE")
    let version = try MailboxDatabase.scalar(handle, "PRAGMA user_version")
    if version < 2 {
        try MailboxDatabase.exec(handle, """
            ALTER TABLE clients ADD COLUMN active_at INTEGER NOT NULL DEFAULT 0;
            UPDATE clients SET active_at = \(now.millisecondsSince1970);
            """)
    }
    if version < 3 {
        try MailboxDatabase.exec(handle, """
            ALTER TABLE clients ADD COLUMN epoch TEXT NOT NULL DEFAULT '';
            UPDATE clients SET epoch = lower(hex(randomblob(16)));
            """)
    }
    if version < 4 {
        try MailboxDatabase.exec(handle, """
            ALTER TABLE messages ADD COLUMN expires_at INTEGER;
            CREATE TABLE IF NOT EXISTS requests (
                client TEXT NOT NULL,
                key TEXT NOT NULL,
                started_at INTEGER NOT NULL,
                answered INTEGER NOT NULL,
                answer BLOB,
                PRIMARY KEY (client, key)
            ) WITHOUT ROWID;
            """)
    }
    try MailboxDatabase.exec(handle, "PRAGMA user_version = \(schemaVersion); COMMIT;")
}

extension MailboxDatabase {
    // MARK: Opening

    static func open(path: String, durability: SQLiteMailboxStore.Durability) throws(TetherError) -> MailboxDatabase {
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
            return MailboxDatabase(
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
            guard (1...schemaVersion).contains(version) else {
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
            } else if version < schemaVersion {
                try upgrade(handle, now: .now())
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

    static func exec(_ handle: OpaquePointer, _ sql: String) throws(SQLiteFailure) {
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
    static func scalar(_ handle: OpaquePointer, _ sql: String) throws(SQLiteFailure) -> Int64 {
        var prepared: OpaquePointer?
        let code = sqlite3_prepare_v2(handle, sql, -1, &prepared, nil)
        guard code == SQLITE_OK, let prepared else { throw SQLiteFailure(handle, code: code) }
        defer { sqlite3_finalize(prepared) }
        let statement = Statement(handle: prepared)
        guard try statement.step() else { throw SQLiteFailure(message: "\(sql) returned no row") }
        return statement.int64(0)
    }

}
