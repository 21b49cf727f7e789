public import Tether

/// A ``Tether/MailboxStore`` in a PostgreSQL database: one store that several servers share.
///
/// ```swift
/// let store = try await PostgresMailboxStore(url: "postgresql://tether@db.internal/tether")
/// ```
///
/// The store keeps its mailboxes in the tables `tether_mailboxes`, `tether_messages`,
/// `tether_totals` and `tether_meta`, which it creates when they are absent (servers
/// starting at once take turns, under an advisory lock). Tables of another schema version
/// are refused with ``Tether/TetherError/Code/storeFailed``.
///
/// **Durability.** An append is one transaction, committed before
/// ``append(_:limits:now:)`` returns: it is as durable as the server's `synchronous_commit`
/// makes commits (by default it survives a crash of the database server), and a failure
/// leaves nothing of it stored.
///
/// **Several servers.** Every call works on the rows as they are in the database, so
/// servers sharing it see each other's appends and acknowledgements. An append locks the
/// mailboxes it writes in client id order, and the one row of store-wide totals
/// (``Tether/MailboxLimits/maximumMailboxes`` and
/// ``Tether/MailboxLimits/maximumStoredBytes`` count every server's mailboxes) only
/// from its last statement to its commit.
///
/// **Threads.** Calls run on a pool of connections, each on a thread of its own
/// (``PostgresConfiguration/connections``, 4 by default), and only suspend their callers:
/// no event loop waits for the database. A connection that broke (the database restarted,
/// the network failed) is made again before its next call; the call that found it broken
/// fails with ``Tether/TetherError/Code/storeFailed``, naming the server and the step.
/// Every wait is bounded: ``PostgresConfiguration/connectTimeout`` to connect,
/// ``PostgresConfiguration/queryTimeout`` for a statement.
public final class PostgresMailboxStore: MailboxStore {
    /// The pool the store runs its calls on.
    let database: PostgresDatabase

    /// Opens the store on `database`, creating its tables if they are absent.
    init(database: PostgresDatabase) async throws(TetherError) {
        self.database = database
        try await Self.prepareSchema(in: database)
    }

    /// Connects to the database and creates the store's tables if they are absent.
    ///
    /// - Parameter configuration: Where the database is, the pool's size and timeouts.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when the
    ///   database is unreachable, refuses the connection or the tables, or holds tables of
    ///   another schema version; the message names the server, for example
    ///   `creating the mailbox tables failed: PostgreSQL at 127.0.0.1:5432 is unreachable: …`.
    public convenience init(configuration: PostgresConfiguration) async throws(TetherError) {
        let database = PostgresDatabase(configuration: configuration)
        do {
            try await self.init(database: database)
        } catch {
            await database.close()
            throw error
        }
    }

    /// Connects to the database at `url` with the default configuration, and creates the
    /// store's tables if they are absent.
    ///
    /// - Parameter url: A libpq connection string or a `postgresql://` URL.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed``, as
    ///   ``init(configuration:)`` does.
    public convenience init(url: String) async throws(TetherError) {
        try await self.init(configuration: PostgresConfiguration(url: url))
    }

    /// Lets the calls under way finish, then closes every connection. Calls after it fail
    /// with ``Tether/TetherError/Code/storeFailed``.
    public func close() async {
        await database.close()
    }

    /// Runs `body` in a transaction, or (`transaction: false`, for reads) as a read that
    /// is repeated once on a new connection when the old one turns out lost.
    /// Runs `body` on the pool, in a transaction unless `transaction` is `false`; a failure
    /// comes out as ``Tether/TetherError`` naming `step` and the server.
    @discardableResult
    func run<T: Sendable>(_ step: String, transaction: Bool = true, _ body: @escaping @Sendable (PostgresSession) throws -> T) async throws(TetherError) -> T {
        do {
            if transaction {
                return try await database.transaction(body)
            }
            return try await database.read(body)
        } catch {
            throw Self.failure(database, step, error)
        }
    }

    /// Appends messages in one transaction, each to its client's mailbox with the next
    /// sequence number of that client, then drops what `limits` no longer allow from the
    /// mailboxes it touched.
    ///
    /// - Parameters:
    ///   - messages: The messages, in order.
    ///   - limits: The bounds of each mailbox and of the whole store.
    ///   - now: The time to store with the messages and to judge their age by.
    /// - Returns: The sequence number given to each message, in the same order.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the messages could not be stored (then none of them is), or
    ///   ``Tether/TetherError/Code/mailboxesFull`` when a store-wide bound would be passed.
    public func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> [UInt64] {
        guard !messages.isEmpty else { return [] }
        let count = messages.count
        return try await run("appending \(count) message\(count == 1 ? "" : "s")") { [self] session in
            try append(messages, limits: limits, now: now, in: session).map(\.sequence)
        }
    }

    /// Prepares a client's mailbox for a resume: registers the client if it is new, drops
    /// what `limits` no longer allow, and describes what is left, with the mailbox's epoch.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - limits: The bounds of the mailbox and of the whole store.
    ///   - now: The time to judge ages by.
    /// - Returns: The client's sequence and what its mailbox holds.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be read or written, or ``Tether/TetherError/Code/mailboxesFull``
    ///   when the client is new and the store holds its maximum of mailboxes.
    public func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> MailboxSummary {
        try await run("opening the mailbox of client \"\(clientID)\"") { [self] session in
            try open(clientID, limits: limits, now: now, in: session)
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
        return try await run("reading the mailbox of client \"\(clientID)\"", transaction: false) { [self] session in
            try messages(for: clientID, after: sequence, limit: limit, in: session)
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
        try await run("acknowledging sequence \(sequence) of client \"\(clientID)\"") { [self] session in
            try acknowledge(clientID, through: sequence, in: session)
        }
    }

    /// Records the acknowledgements of several clients in one transaction: one commit for
    /// all of them.
    ///
    /// - Parameter positions: The highest sequence each client has.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be written; then none was recorded.
    public func acknowledge(_ positions: [String: UInt64]) async throws(TetherError) {
        guard !positions.isEmpty else { return }
        try await run("acknowledging the pushes of \(positions.count) client\(positions.count == 1 ? "" : "s")") { [self] session in
            try acknowledge(positions, in: session)
        }
    }

    /// Every client the store knows, in no particular order.
    ///
    /// - Returns: The client ids.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be read.
    public func clientIDs() async throws(TetherError) -> [String] {
        try await run("listing the clients", transaction: false) { session in
            let rows = try session.execute("SELECT client_id FROM tether_mailboxes")
            return (0..<rows.count).map { rows.text($0, 0) ?? "" }
        }
    }

    /// Drops what is older than the age bound from every mailbox, and removes the mailboxes
    /// of clients idle for longer than it, in one transaction; see
    /// ``Tether/MailboxStore/removeExpired(limits:now:keeping:)``.
    ///
    /// - Parameters:
    ///   - limits: The bounds; ``Tether/MailboxLimits/maximumAge`` decides what expires.
    ///   - now: The time to judge ages by.
    ///   - connected: The clients connected now, whose mailboxes stay.
    /// - Returns: The ids of the clients whose mailboxes were removed.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the store cannot be read or written; then nothing changed.
    public func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws(TetherError) -> [String] {
        guard limits.maximumAge != nil else { return [] }
        return try await run("removing expired mailboxes") { [self] session in
            try removeExpired(limits: limits, now: now, keeping: connected, in: session)
        }
    }
}

/// Every call runs on the store's own threads: the server calls it from anywhere, event
/// loops included, without a hop to the threads it keeps for stores that block.
extension PostgresMailboxStore: SelfThreadedMailboxStore {}

extension PostgresMailboxStore {
    /// Records that a keyed request runs, in one transaction, as
    /// ``Tether/MailboxStore/beginRequest(_:of:limits:now:)`` says. Two nodes beginning one
    /// key at once: the row's key makes one of them wait for the other's commit, and that
    /// one finds the request running.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - limits: The bounds of the records.
    ///   - now: The time to record and to judge the window by.
    /// - Returns: What is known of the request.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the database cannot be read or written.
    public func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> RequestRecord {
        let oldest = now.millisecondsSince1970 - limits.requestWindow.postgresMilliseconds
        return try await run("recording a request of client \"\(clientID)\"") { session in
            try session.execute("DELETE FROM tether_requests WHERE client_id = $1 AND started_at < $2", [.text(clientID), .int(oldest)])
            let found = try session.execute("SELECT answered::int, answer FROM tether_requests WHERE client_id = $1 AND key = $2", [.text(clientID), .text(key)])
            if found.count > 0 {
                guard found.int(0, 0) == 1 else { return .running }
                return found.bytes(0, 1).map(RequestRecord.answered) ?? .answerNotKept
            }
            let counts = try session.execute(
                "SELECT (SELECT count(*) FROM tether_requests WHERE client_id = $1), (SELECT count(*) FROM tether_requests)",
                [.text(clientID)]
            )
            if let reason = limits.requestRecordRefusal(clientRecords: Int(counts.int(0, 0) ?? 0), total: Int(counts.int(0, 1) ?? 0), clientID: clientID) {
                return .refused(reason)
            }
            let inserted = try session.execute("""
                INSERT INTO tether_requests (client_id, key, started_at, answered) VALUES ($1, $2, $3, false)
                ON CONFLICT (client_id, key) DO NOTHING RETURNING 1
                """, [.text(clientID), .text(key), .int(now.millisecondsSince1970)])
            return inserted.count == 1 ? .started : .running
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
    ///   the database cannot be written.
    public func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) {
        try await run("recording the answer of a request of client \"\(clientID)\"") { session in
            try session.execute("""
                UPDATE tether_requests SET answered = true, answer = CASE
                    WHEN (SELECT coalesce(sum(octet_length(answer)), 0) FROM tether_requests WHERE client_id = $1) + $4 <= $5 THEN $3
                    ELSE NULL END
                WHERE client_id = $1 AND key = $2 AND NOT answered
                """, [.text(clientID), .text(key), .bytes(answer), .int(Int64(answer.count)), .int(Int64(limits.maximumRequestRecordBytesPerClient))])
        }
    }
}
