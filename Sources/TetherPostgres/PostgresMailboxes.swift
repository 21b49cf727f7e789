internal import Tether

/// A mailbox row, as a statement that locked it returned it.
struct MailboxRow {
    var clientID: String
    var lastSequence: UInt64
    var acknowledged: UInt64
    var lostThrough: UInt64
    var lossReason: MailboxLossReason?
    var epoch: String
    var storedBytes: Int
    var holder: String?
    var generation: UInt64
    var activeAt: Int64
    /// Whether the statement created it.
    var created: Bool

    /// The columns `init(_:_:)` reads, in order.
    static let columns = """
        client_id, last_sequence, acknowledged, lost_through, loss_reason, epoch, stored_bytes, \
        holder, generation, active_at
        """

    init(_ rows: PostgresRows, _ row: Int, created: Bool) {
        clientID = rows.text(row, 0) ?? ""
        lastSequence = UInt64(clamping: rows.int(row, 1) ?? 0)
        acknowledged = UInt64(clamping: rows.int(row, 2) ?? 0)
        lostThrough = UInt64(clamping: rows.int(row, 3) ?? 0)
        lossReason = rows.text(row, 4).map(MailboxLossReason.init(rawValue:))
        epoch = rows.text(row, 5) ?? ""
        storedBytes = Int(rows.int(row, 6) ?? 0)
        holder = rows.text(row, 7)
        generation = UInt64(clamping: rows.int(row, 8) ?? 0)
        activeAt = rows.int(row, 9) ?? 0
        self.created = created
    }

    /// Sequences above this are held.
    var floor: UInt64 { max(acknowledged, lostThrough) }
    /// How many messages the mailbox holds.
    var count: UInt64 { lastSequence > floor ? lastSequence - floor : 0 }

    var summary: MailboxSummary {
        MailboxSummary(lastSequence: lastSequence, acknowledged: acknowledged, lostThrough: lostThrough, lossReason: lossReason, count: Int(count), epoch: epoch)
    }
}

// MARK: - Statements

private enum SQL {
    /// Creates or locks the mailboxes of a batch, in client id order, adding the batch's
    /// counts: $1 client ids, $2 messages each, $3 their bytes, $4 now.
    static let upsertBatch = """
        INSERT INTO tether_mailboxes AS m (client_id, last_sequence, active_at, epoch, message_count, stored_bytes)
        SELECT n.client_id, n.added, $4, gen_random_uuid()::text, n.added, n.bytes
        FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS n(client_id, added, bytes)
        ORDER BY n.client_id COLLATE "C"
        ON CONFLICT (client_id) DO UPDATE SET
            last_sequence = m.last_sequence + EXCLUDED.last_sequence,
            message_count = m.message_count + EXCLUDED.message_count,
            stored_bytes = m.stored_bytes + EXCLUDED.stored_bytes,
            active_at = GREATEST(m.active_at, EXCLUDED.active_at)
        RETURNING \(MailboxRow.columns), (xmax = 0)
        """

    /// Creates or locks one mailbox: $1 client id, $2 now.
    static let upsertOne = """
        INSERT INTO tether_mailboxes AS m (client_id, active_at, epoch) VALUES ($1, $2, gen_random_uuid()::text)
        ON CONFLICT (client_id) DO UPDATE SET active_at = GREATEST(m.active_at, EXCLUDED.active_at)
        RETURNING \(MailboxRow.columns), (xmax = 0)
        """

    /// Inserts messages ($1 client ids, $2 sequences, $3 types, $4 payloads, $5 now, $9
    /// when each expires, 0 for never) and
    /// trims mailboxes ($6 client ids, $7 the sequence each drops through at least, $8
    /// the oldest storage time kept): a mailbox drops the run of messages at its front
    /// stored before $8, and everything through its $7. Returns per trimmed mailbox what
    /// it dropped: count, payload bytes, the highest sequence dropped for its age.
    static let store = """
        WITH bounds AS (
            SELECT t.client_id, t.through, COALESCE((
                SELECT x.sequence FROM tether_messages x
                WHERE x.client_id = t.client_id AND x.stored_at >= $8
                ORDER BY x.sequence LIMIT 1
            ), 9223372036854775807) AS keep_from
            FROM unnest($6::text[], $7::bigint[]) AS t(client_id, through)
        ), dropped AS (
            DELETE FROM tether_messages x USING bounds b
            WHERE x.client_id = b.client_id AND x.sequence <= GREATEST(b.through, b.keep_from - 1)
            RETURNING x.client_id, x.sequence, x.sequence < b.keep_from AS expired, octet_length(x.payload) AS size
        ), added AS (
            INSERT INTO tether_messages (client_id, sequence, type, payload, stored_at, expires_at)
            SELECT n.client_id, n.sequence, n.type, n.payload, $5, NULLIF(n.expires_at, 0)
            FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bytea[], $9::bigint[]) AS n(client_id, sequence, type, payload, expires_at)
        )
        SELECT client_id, count(*)::bigint, COALESCE(sum(size), 0)::bigint, max(sequence) FILTER (WHERE expired)
        FROM dropped GROUP BY client_id
        """

    /// Rewrites what trimming changed in mailboxes already locked: $1 client ids, $2
    /// lost_through, $3 loss_reason ('' for none), $4 message_count, $5 stored_bytes.
    static let fixup = """
        UPDATE tether_mailboxes m SET lost_through = f.lost_through, loss_reason = NULLIF(f.loss_reason, ''),
            message_count = f.message_count, stored_bytes = f.stored_bytes
        FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[])
            AS f(client_id, lost_through, loss_reason, message_count, stored_bytes)
        WHERE m.client_id = f.client_id
        """

    /// ``fixup`` ($1…$5), then the store-wide totals ($6 mailboxes added, $7 bytes added),
    /// as they stand after.
    static let fixupAndTotals = """
        WITH fixed AS (\(fixup))
        UPDATE tether_totals SET mailboxes = mailboxes + $6, stored_bytes = stored_bytes + $7
        WHERE id = 1 RETURNING mailboxes, stored_bytes
        """

    static let messages = """
        SELECT sequence, type, payload, stored_at, expires_at FROM tether_messages
        WHERE client_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3
        """

    /// Acknowledges through $2 (at most the last sequence) if that moves forward.
    static let acknowledge = """
        UPDATE tether_mailboxes SET acknowledged = LEAST($2, last_sequence),
            message_count = GREATEST(last_sequence - GREATEST(LEAST($2, last_sequence), lost_through), 0)
        WHERE client_id = $1 AND LEAST($2, last_sequence) > acknowledged
        RETURNING acknowledged
        """

    /// Deletes a mailbox's messages through $2 and takes their bytes ($3 counted for each
    /// beyond its payload) off the mailbox and the totals.
    static let deleteThrough = """
        WITH dropped AS (
            DELETE FROM tether_messages WHERE client_id = $1 AND sequence <= $2 RETURNING octet_length(payload) AS size
        ), freed AS (
            SELECT (count(*) * $3 + COALESCE(sum(size), 0))::bigint AS bytes FROM dropped
        ), mailbox AS (
            UPDATE tether_mailboxes SET stored_bytes = stored_bytes - (SELECT bytes FROM freed) WHERE client_id = $1
        )
        UPDATE tether_totals SET stored_bytes = stored_bytes - (SELECT bytes FROM freed) WHERE id = 1
        """

    /// ``deleteThrough`` without the totals: returns the bytes freed, for one update of the
    /// totals after every mailbox of a batch.
    static let deleteThroughKeepingTotals = """
        WITH dropped AS (
            DELETE FROM tether_messages WHERE client_id = $1 AND sequence <= $2 RETURNING octet_length(payload) AS size
        ), freed AS (
            SELECT (count(*) * $3 + COALESCE(sum(size), 0))::bigint AS bytes FROM dropped
        )
        UPDATE tether_mailboxes SET stored_bytes = stored_bytes - (SELECT bytes FROM freed) WHERE client_id = $1
        RETURNING (SELECT bytes FROM freed)
        """

    /// Takes bytes freed by a batch of acknowledgements off the totals.
    static let releaseBytes = "UPDATE tether_totals SET stored_bytes = stored_bytes - $1 WHERE id = 1"

    /// Locks, in client id order, the mailboxes expiry looks at: the connected ones ($2),
    /// the idle ones and those whose first message is older than $1. The last column says
    /// whether the first message is older than $1.
    static let expiryCandidates = """
        SELECT \(MailboxRow.columns), (m.message_count > 0 AND (
            SELECT x.stored_at FROM tether_messages x WHERE x.client_id = m.client_id ORDER BY x.sequence LIMIT 1
        ) < $1)
        FROM tether_mailboxes m
        WHERE m.client_id = ANY($2::text[]) OR m.active_at < $1 OR (m.message_count > 0 AND (
            SELECT x.stored_at FROM tether_messages x WHERE x.client_id = m.client_id ORDER BY x.sequence LIMIT 1
        ) < $1)
        ORDER BY m.client_id FOR UPDATE
        """

    static let touch = "UPDATE tether_mailboxes SET active_at = GREATEST(active_at, $2) WHERE client_id = ANY($1::text[])"

    /// Removes mailboxes ($1) with their messages, and takes them off the totals.
    static let remove = """
        WITH gone AS (
            DELETE FROM tether_mailboxes WHERE client_id = ANY($1::text[]) RETURNING stored_bytes
        ), messages AS (
            DELETE FROM tether_messages WHERE client_id = ANY($1::text[])
        )
        UPDATE tether_totals SET mailboxes = mailboxes - (SELECT count(*) FROM gone),
            stored_bytes = stored_bytes - (SELECT COALESCE(sum(stored_bytes), 0) FROM gone)::bigint
        WHERE id = 1
        """
}

// MARK: - Operations on a session

/// What one mailbox lost to a trim.
private struct Dropped {
    var count = 0
    var bytes = 0
    var expiredThrough: UInt64?
}

/// What trimming changed in a mailbox, to write back.
private struct Fixups {
    var clientIDs: [String] = []
    var lostThrough: [Int64] = []
    var lossReasons: [String] = []
    var counts: [Int64] = []
    var storedBytes: [Int64] = []

    var isEmpty: Bool { clientIDs.isEmpty }

    mutating func add(_ row: MailboxRow) {
        clientIDs.append(row.clientID)
        lostThrough.append(Int64(clamping: row.lostThrough))
        lossReasons.append(row.lossReason?.rawValue ?? "")
        counts.append(Int64(clamping: row.count))
        storedBytes.append(Int64(row.storedBytes))
    }

    var parameters: [PostgresParameter] {
        [.textArray(clientIDs), .intArray(lostThrough), .textArray(lossReasons), .intArray(counts), .intArray(storedBytes)]
    }
}

extension PostgresMailboxStore {
    /// Appends inside the caller's transaction. Returns per message: its sequence, and the
    /// holder/generation of its client's mailbox row as they stand after the row lock.
    ///
    /// Must run inside a transaction (``PostgresDatabase/transaction(_:)``): its statements
    /// are only atomic together, and a store-wide bound it finds passed is thrown after the
    /// rows were written, for the rollback to undo. It locks the mailbox rows of the batch
    /// in client id order (bytewise, `COLLATE "C"`), then the row of `tether_totals`, in
    /// its last statement; a transaction that locks more rows should take them in the same
    /// order (mailboxes by client id, totals last), or PostgreSQL may end one of two
    /// transactions with a deadlock error.
    func append(_ drafts: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime, in session: PostgresSession) throws -> [(sequence: UInt64, holder: String?, generation: UInt64)] {
        guard !drafts.isEmpty else { return [] }
        // Per client, in the order first touched: how many messages and their bytes.
        var order: [String] = []
        var added: [String: (count: Int, bytes: Int)] = [:]
        for draft in drafts {
            let size = MailboxLimits.storedSize(ofPayload: draft.payload.count)
            if let known = added[draft.clientID] {
                added[draft.clientID] = (known.count + 1, known.bytes + size)
            } else {
                order.append(draft.clientID)
                added[draft.clientID] = (1, size)
            }
        }
        let locked = try session.execute(SQL.upsertBatch, parameters: [
            .textArray(order),
            .intArray(order.map { Int64(added[$0]!.count) }),
            .intArray(order.map { Int64(added[$0]!.bytes) }),
            PostgresParameter(.int(now.millisecondsSince1970)),
        ])
        var rows: [String: MailboxRow] = [:]
        for index in 0..<locked.count {
            let row = MailboxRow(locked, index, created: locked.int(index, MailboxRow.columnCount) == 1)
            rows[row.clientID] = row
        }

        // Sequences, and what the count bound drops: a mailbox keeps its newest
        // `maximumMessages`, so messages of this batch below them are never written.
        let allowed = UInt64(max(0, limits.maximumMessages))
        var overflowThrough: [String: UInt64] = [:]
        var next: [String: UInt64] = [:]
        for clientID in order {
            guard let row = rows[clientID] else { throw missingRow(clientID) }
            let count = UInt64(added[clientID]!.count)
            next[clientID] = row.lastSequence - count + 1
            if row.lastSequence > row.floor, row.lastSequence - row.floor > allowed {
                overflowThrough[clientID] = row.lastSequence - allowed
            }
        }
        var result: [(sequence: UInt64, holder: String?, generation: UInt64)] = []
        result.reserveCapacity(drafts.count)
        var insert = (clients: [String](), sequences: [Int64](), types: [Int64](), payloads: [[UInt8]](), expiries: [Int64]())
        var skippedBytes: [String: Int] = [:]
        for draft in drafts {
            let row = rows[draft.clientID]!
            let sequence = next[draft.clientID]!
            next[draft.clientID] = sequence + 1
            result.append((sequence, row.holder, row.generation))
            if let through = overflowThrough[draft.clientID], sequence <= through {
                skippedBytes[draft.clientID, default: 0] += MailboxLimits.storedSize(ofPayload: draft.payload.count)
                continue
            }
            insert.clients.append(draft.clientID)
            insert.sequences.append(Int64(clamping: sequence))
            insert.types.append(Int64(draft.type))
            insert.payloads.append(draft.payload)
            insert.expiries.append(draft.expiresAt?.millisecondsSince1970 ?? 0)
        }

        // Mailboxes that held messages before may drop some for their age or count.
        var trim = (clients: [String](), through: [Int64]())
        for clientID in order {
            let row = rows[clientID]!
            let before = row.lastSequence - UInt64(added[clientID]!.count)
            guard before > row.floor else { continue }
            let through = overflowThrough[clientID].map { min($0, before) }
            guard limits.maximumAge != nil || through != nil else { continue }
            trim.clients.append(clientID)
            trim.through.append(Int64(clamping: through ?? 0))
        }
        let dropped = try store(
            insert: insert,
            trim: trim,
            oldest: limits.oldestAllowed(at: now),
            now: now,
            in: session
        )

        var fixups = Fixups()
        var bytesAdded = 0
        var created: [String] = []
        for clientID in order {
            var row = rows[clientID]!
            bytesAdded += added[clientID]!.bytes
            if row.created { created.append(clientID) }
            let skipped = skippedBytes[clientID] ?? 0
            let lost = dropped[clientID] ?? Dropped()
            let before = (row.lostThrough, row.lossReason)
            apply(lost, limits: limits, to: &row)
            row.storedBytes -= skipped + lost.bytes
            bytesAdded -= skipped + lost.bytes
            if skipped > 0 || lost.count > 0 || before.0 != row.lostThrough || before.1 != row.lossReason {
                fixups.add(row)
            }
        }
        try updateTotals(fixups: fixups, mailboxes: created, bytes: bytesAdded, limits: limits, checkBytes: true, messages: drafts.count, in: session)
        return result
    }

    /// openMailbox inside the caller's transaction, row locked.
    ///
    /// Like ``append(_:limits:now:in:)``, it must run inside a transaction; it locks the
    /// client's mailbox row, and the row of `tether_totals` when it creates the mailbox or
    /// drops messages.
    func open(_ clientID: String, limits: MailboxLimits, now: MailboxTime, in session: PostgresSession) throws -> MailboxSummary {
        let locked = try session.execute(SQL.upsertOne, parameters: [
            PostgresParameter(.text(clientID)),
            PostgresParameter(.int(now.millisecondsSince1970)),
        ])
        guard locked.count == 1 else { throw missingRow(clientID) }
        var row = MailboxRow(locked, 0, created: locked.int(0, MailboxRow.columnCount) == 1)
        var fixups = Fixups()
        var bytes = 0
        if row.count > 0 {
            let allowed = UInt64(max(0, limits.maximumMessages))
            let through: UInt64? = row.count > allowed ? row.lastSequence - allowed : nil
            if limits.maximumAge != nil || through != nil {
                let dropped = try store(
                    insert: ([], [], [], [], []),
                    trim: ([clientID], [Int64(clamping: through ?? 0)]),
                    oldest: limits.oldestAllowed(at: now),
                    now: now,
                    in: session
                )
                let lost = dropped[clientID] ?? Dropped()
                let before = (row.lostThrough, row.lossReason)
                apply(lost, limits: limits, to: &row)
                row.storedBytes -= lost.bytes
                bytes -= lost.bytes
                if lost.count > 0 || before.0 != row.lostThrough || before.1 != row.lossReason {
                    fixups.add(row)
                }
            }
        }
        try updateTotals(fixups: fixups, mailboxes: row.created ? [clientID] : [], bytes: bytes, limits: limits, checkBytes: false, messages: 0, in: session)
        return row.summary
    }

    /// Records in `row` what a trim dropped, the way the count and age bounds say: first
    /// what was too old, then what is beyond the count bound; the later reason is kept.
    private func apply(_ lost: Dropped, limits: MailboxLimits, to row: inout MailboxRow) {
        if let expired = lost.expiredThrough {
            row.lostThrough = max(row.lostThrough, expired)
            row.lossReason = .expired
        }
        let allowed = UInt64(max(0, limits.maximumMessages))
        if row.count > allowed {
            row.lostThrough = row.lastSequence - allowed
            row.lossReason = .overflow
        }
    }

    /// Runs ``SQL/store``, when there is anything to insert or trim.
    private func store(
        insert: (clients: [String], sequences: [Int64], types: [Int64], payloads: [[UInt8]], expiries: [Int64]),
        trim: (clients: [String], through: [Int64]),
        oldest: MailboxTime?,
        now: MailboxTime,
        in session: PostgresSession
    ) throws -> [String: Dropped] {
        guard !insert.clients.isEmpty || !trim.clients.isEmpty else { return [:] }
        let rows = try session.execute(SQL.store, parameters: [
            .textArray(insert.clients),
            .intArray(insert.sequences),
            .intArray(insert.types),
            .bytesArray(insert.payloads),
            PostgresParameter(.int(now.millisecondsSince1970)),
            .textArray(trim.clients),
            .intArray(trim.through),
            PostgresParameter(.int(oldest?.millisecondsSince1970 ?? .min)),
            .intArray(insert.expiries),
        ])
        var dropped: [String: Dropped] = [:]
        for index in 0..<rows.count {
            let count = Int(rows.int(index, 1) ?? 0)
            dropped[rows.text(index, 0) ?? ""] = Dropped(
                count: count,
                bytes: Int(rows.int(index, 2) ?? 0) + count * MailboxLimits.messageOverhead,
                expiredThrough: rows.int(index, 3).map { UInt64(clamping: $0) }
            )
        }
        return dropped
    }

    /// Writes the fixups and moves the totals, last (the totals row is every server's, so
    /// it stays locked only from here to the commit), then checks the store-wide bounds.
    private func updateTotals(
        fixups: Fixups,
        mailboxes created: [String],
        bytes: Int,
        limits: MailboxLimits,
        checkBytes: Bool,
        messages: Int,
        in session: PostgresSession
    ) throws {
        guard !created.isEmpty || bytes != 0 else {
            if !fixups.isEmpty { try session.execute(SQL.fixup, parameters: fixups.parameters) }
            return
        }
        let totals = try session.execute(SQL.fixupAndTotals, parameters: fixups.parameters + [
            PostgresParameter(.int(Int64(created.count))),
            PostgresParameter(.int(Int64(bytes))),
        ])
        guard totals.count == 1, let mailboxes = totals.int(0, 0), let stored = totals.int(0, 1) else {
            throw TetherError(code: .storeFailed, message: "PostgreSQL at \(database.endpoint): the row of tether_totals is missing")
        }
        if !created.isEmpty, mailboxes > Int64(limits.maximumMailboxes) {
            let before = Int(mailboxes) - created.count
            let first = min(max(0, limits.maximumMailboxes - before), created.count - 1)
            throw limits.tooManyMailboxes(for: created[first])
        }
        if checkBytes, stored > Int64(limits.maximumStoredBytes) {
            throw limits.tooManyBytes(messages: messages, storing: Int(stored))
        }
    }

    private func missingRow(_ clientID: String) -> TetherError {
        TetherError(code: .storeFailed, message: "PostgreSQL at \(database.endpoint): the mailbox row of client \"\(clientID)\" was not returned")
    }

    // MARK: Reads, acknowledgements, expiry

    func messages(for clientID: String, after sequence: UInt64, limit: Int, in session: PostgresSession) throws -> [MailboxMessage] {
        let rows = try session.execute(SQL.messages, parameters: [
            PostgresParameter(.text(clientID)),
            PostgresParameter(.int(Int64(clamping: sequence))),
            PostgresParameter(.int(Int64(limit))),
        ])
        var messages: [MailboxMessage] = []
        messages.reserveCapacity(rows.count)
        for index in 0..<rows.count {
            messages.append(MailboxMessage(
                clientID: clientID,
                sequence: UInt64(clamping: rows.int(index, 0) ?? 0),
                type: UInt32(truncatingIfNeeded: rows.int(index, 1) ?? 0),
                payload: rows.bytes(index, 2) ?? [],
                storedAt: MailboxTime(millisecondsSince1970: rows.int(index, 3) ?? 0),
                expiresAt: rows.int(index, 4).map { MailboxTime(millisecondsSince1970: $0) }
            ))
        }
        return messages
    }

    func acknowledge(_ clientID: String, through sequence: UInt64, in session: PostgresSession) throws {
        let moved = try session.execute(SQL.acknowledge, parameters: [
            PostgresParameter(.text(clientID)),
            PostgresParameter(.int(Int64(clamping: sequence))),
        ])
        guard moved.count == 1, let acknowledged = moved.int(0, 0) else { return }
        try session.execute(SQL.deleteThrough, parameters: [
            PostgresParameter(.text(clientID)),
            PostgresParameter(.int(acknowledged)),
            PostgresParameter(.int(Int64(MailboxLimits.messageOverhead))),
        ])
    }

    /// Acknowledgements of several clients inside the caller's transaction, in the order
    /// every writer keeps: the mailbox rows in client id order, then the totals once, last.
    /// (Taking the totals after the first client, and a mailbox after that, would deadlock
    /// with an append that holds that mailbox and waits for the totals.)
    func acknowledge(_ positions: [String: UInt64], in session: PostgresSession) throws {
        let ordered = positions.sorted { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }
        var freed: Int64 = 0
        for (clientID, sequence) in ordered {
            let moved = try session.execute(SQL.acknowledge, parameters: [
                PostgresParameter(.text(clientID)),
                PostgresParameter(.int(Int64(clamping: sequence))),
            ])
            guard moved.count == 1, let acknowledged = moved.int(0, 0) else { continue }
            let rows = try session.execute(SQL.deleteThroughKeepingTotals, parameters: [
                PostgresParameter(.text(clientID)),
                PostgresParameter(.int(acknowledged)),
                PostgresParameter(.int(Int64(MailboxLimits.messageOverhead))),
            ])
            freed += rows.int(0, 0) ?? 0
        }
        if freed != 0 {
            try session.execute(SQL.releaseBytes, parameters: [PostgresParameter(.int(freed))])
        }
    }

    func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>, in session: PostgresSession) throws -> [String] {
        guard let oldest = limits.oldestAllowed(at: now) else { return [] }
        let candidates = try session.execute(SQL.expiryCandidates, parameters: [
            PostgresParameter(.int(oldest.millisecondsSince1970)),
            .textArray(connected.sorted()),
        ])
        if !connected.isEmpty {
            try session.execute(SQL.touch, parameters: [.textArray(connected.sorted()), PostgresParameter(.int(now.millisecondsSince1970))])
        }
        var removed: [String] = []
        var expiring: [MailboxRow] = []
        for index in 0..<candidates.count {
            let row = MailboxRow(candidates, index, created: false)
            if !connected.contains(row.clientID), row.activeAt < oldest.millisecondsSince1970 {
                removed.append(row.clientID)
            } else if candidates.int(index, MailboxRow.columnCount) == 1 {
                expiring.append(row)
            }
        }
        if !removed.isEmpty {
            try session.execute(SQL.remove, parameters: [.textArray(removed)])
        }
        guard !expiring.isEmpty else { return removed }
        let allowed = UInt64(max(0, limits.maximumMessages))
        let dropped = try store(
            insert: ([], [], [], [], []),
            trim: (expiring.map(\.clientID), expiring.map { Int64(clamping: $0.count > allowed ? $0.lastSequence - allowed : 0) }),
            oldest: oldest,
            now: now,
            in: session
        )
        var fixups = Fixups()
        var bytes = 0
        for var row in expiring {
            let lost = dropped[row.clientID] ?? Dropped()
            let before = (row.lostThrough, row.lossReason)
            apply(lost, limits: limits, to: &row)
            row.storedBytes -= lost.bytes
            bytes -= lost.bytes
            if lost.count > 0 || before.0 != row.lostThrough || before.1 != row.lossReason {
                fixups.add(row)
            }
        }
        try updateTotals(fixups: fixups, mailboxes: [], bytes: bytes, limits: limits, checkBytes: false, messages: 0, in: session)
        return removed
    }
}

extension MailboxRow {
    /// The number of columns in ``columns``: the column after them is the statement's own.
    static let columnCount = 10
}
