import CSQLite
internal import Tether

/// The store's one connection and its statements. Only used under the store's lock, on its
/// thread (``DatabaseThread``).
final class MailboxDatabase {
    let path: String
    private let handle: OpaquePointer
    private let statements: Statements
    private var prepared: [OpaquePointer]
    private var isClosed = false
    /// How many clients the file holds, counted when it opened and kept since.
    private var mailboxCount: Int
    /// What the held messages count for ``MailboxLimits/maximumStoredBytes``, likewise.
    private var storedBytes: Int

    init(path: String, handle: OpaquePointer, statements: Statements, prepared: [OpaquePointer], mailboxCount: Int, storedBytes: Int) {
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

    static func failure(_ path: String, _ what: String, _ failure: SQLiteFailure) -> TetherError {
        if let bound = failure.bound { return bound }
        return TetherError(code: .storeFailed, message: "mailbox store \(path) \(what): \(failure.message)")
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
                    count: try count(clientID),
                    epoch: row.epoch.isEmpty ? nil : row.epoch
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
                    storedAt: MailboxTime(millisecondsSince1970: statement.int64(3)),
                    expiresAt: statement.isNull(4) ? nil : MailboxTime(millisecondsSince1970: statement.int64(4))
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

    // MARK: Keyed requests

    func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) throws(TetherError) -> RequestRecord {
        do throws(SQLiteFailure) {
            return try transaction { () throws(SQLiteFailure) -> RequestRecord in
                let old = statements.deleteOldRequests
                try old.bind(1, clientID)
                try old.bind(2, now.millisecondsSince1970 - Int64(limits.requestWindow.components.seconds * 1000))
                try old.run()
                let select = statements.selectRequest
                defer { select.reset() }
                try select.bind(1, clientID)
                try select.bind(2, key)
                if try select.step() {
                    guard select.int64(0) != 0 else { return .running }
                    return select.isNull(1) ? .answerNotKept : .answered(select.blob(1))
                }
                let counts = statements.countRequests
                defer { counts.reset() }
                try counts.bind(1, clientID)
                _ = try counts.step()
                if let reason = limits.requestRecordRefusal(clientRecords: Int(counts.int64(0)), total: Int(counts.int64(1)), clientID: clientID) {
                    return .refused(reason)
                }
                let insert = statements.insertRequest
                try insert.bind(1, clientID)
                try insert.bind(2, key)
                try insert.bind(3, now.millisecondsSince1970)
                try insert.run()
                return .started
            }
        } catch {
            throw failure("could not record a request of client \"\(clientID)\"", error)
        }
    }

    func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits) throws(TetherError) {
        do throws(SQLiteFailure) {
            try transaction { () throws(SQLiteFailure) in
                let counts = statements.countRequests
                let bytes: Int
                do {
                    defer { counts.reset() }
                    try counts.bind(1, clientID)
                    _ = try counts.step()
                    bytes = Int(counts.int64(2))
                }
                let finish = statements.finishRequest
                try finish.bind(1, clientID)
                try finish.bind(2, key)
                if bytes + answer.count <= limits.maximumRequestRecordBytesPerClient {
                    try finish.bind(3, answer)
                } else {
                    try finish.bind(3, nil as String?)
                }
                try finish.run()
            }
        } catch {
            throw failure("could not record the answer of a request of client \"\(clientID)\"", error)
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
            lossReason: statement.isNull(3) ? nil : MailboxLossReason(rawValue: statement.text(3)),
            epoch: statement.text(4)
        )
    }

    private func clientOrRegister(_ clientID: String, limits: MailboxLimits, now: MailboxTime) throws(SQLiteFailure) -> ClientRow {
        if let row = try client(clientID) { return row }
        guard mailboxCount < limits.maximumMailboxes else {
            throw SQLiteFailure(bound: limits.tooManyMailboxes(for: clientID))
        }
        let row = ClientRow(epoch: randomEpoch())
        let statement = statements.insertClient
        try statement.bind(1, clientID)
        try statement.bind(2, now.millisecondsSince1970)
        try statement.bind(3, row.epoch)
        try statement.run()
        mailboxCount += 1
        return row
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
        if let expiresAt = draft.expiresAt {
            try statement.bind(6, expiresAt.millisecondsSince1970)
        } else {
            try statement.bind(6, nil as String?)
        }
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


