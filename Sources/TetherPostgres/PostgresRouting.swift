import CPostgres
internal import Tether

/// The tables the nodes of a cluster share beyond the mailboxes: who is a node, the
/// broadcasts too large for a notice, the channels with their kept messages, and who is
/// subscribed to each channel on which node. Every
/// channel made in the database takes the database's channel epoch (`tether_meta`), which
/// changes only with a new database: a channel's offsets never begin again otherwise.
private let clusterSchema = """
    CREATE TABLE IF NOT EXISTS tether_nodes (
        name text PRIMARY KEY,
        joined_at timestamptz NOT NULL DEFAULT now(),
        last_seen timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE IF NOT EXISTS tether_broadcasts (
        id bigserial PRIMARY KEY,
        origin text NOT NULL,
        type bigint NOT NULL,
        payload bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX IF NOT EXISTS tether_mailboxes_holder ON tether_mailboxes (holder) WHERE holder IS NOT NULL;
    CREATE TABLE IF NOT EXISTS tether_channels (
        name text COLLATE "C" PRIMARY KEY,
        epoch text NOT NULL,
        latest bigint NOT NULL
    );
    CREATE TABLE IF NOT EXISTS tether_channel_messages (
        channel text COLLATE "C" NOT NULL,
        "offset" bigint NOT NULL,
        stored_at bigint NOT NULL,
        expires_at bigint NULL,
        content bytea NOT NULL,
        PRIMARY KEY (channel, "offset")
    );
    CREATE TABLE IF NOT EXISTS tether_channel_members (
        channel text COLLATE "C" NOT NULL,
        connection text COLLATE "C" NOT NULL,
        node text NOT NULL,
        client_id text COLLATE "C" NULL,
        info text NULL,
        PRIMARY KEY (channel, connection)
    );
    CREATE INDEX IF NOT EXISTS tether_channel_members_node ON tether_channel_members (node);
    INSERT INTO tether_meta (key, value) VALUES ('channel_epoch', md5(random()::text || clock_timestamp()::text)) ON CONFLICT (key) DO NOTHING;
    """

/// The advisory lock that serialises creating the cluster's tables ("TCLU").
private let clusterSchemaLock: Int64 = 0x5443_4C55

/// A mailbox store whose appends wake the nodes that hold their clients, in the append's
/// transaction: a node of the cluster (`origin`, whose own clients its server writes to
/// itself) or a publisher (`origin` nil).
final class PostgresRoutedStore: MailboxStore, SelfThreadedMailboxStore {
    let mailboxes: PostgresMailboxStore
    /// The node that appends, if any: its own clients get no notice.
    let origin: String?
    /// Pushes whose wake-up would pass this many bytes are read from the store instead.
    let inlineLimit: Int

    init(mailboxes: PostgresMailboxStore, origin: String?, inlineLimit: Int) {
        self.mailboxes = mailboxes
        self.origin = origin
        self.inlineLimit = inlineLimit
    }

    var database: PostgresDatabase { mailboxes.database }

    /// Releases every client node $1 holds. Like every statement that writes several
    /// mailboxes, it locks them in client id order first, the order appends lock them in,
    /// so the two never deadlock.
    static let releaseAllOfNode = """
        UPDATE tether_mailboxes SET holder = NULL WHERE client_id IN (
            SELECT client_id FROM tether_mailboxes WHERE holder = $1 ORDER BY client_id FOR UPDATE
        )
        """

    /// Creates the cluster's tables if they are absent.
    static func prepareSchema(in database: PostgresDatabase) async throws(TetherError) {
        do {
            try await database.transaction { session in
                try session.execute("SELECT pg_advisory_xact_lock(\(clusterSchemaLock))")
                try session.execute(clusterSchema)
            }
        } catch {
            throw PostgresMailboxStore.failure(database, "creating the cluster tables", error)
        }
    }

    /// Runs `body` in a transaction; failures as ``Tether/TetherError`` naming `step`.
    @discardableResult
    func transaction<T: Sendable>(_ step: String, _ body: @escaping @Sendable (PostgresSession) throws -> T) async throws(TetherError) -> T {
        try await mailboxes.run(step, body)
    }

    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> [UInt64] {
        guard !messages.isEmpty else { return [] }
        let count = messages.count
        return try await transaction("appending \(count) message\(count == 1 ? "" : "s")") { [self] session in
            let stored = try mailboxes.append(messages, limits: limits, now: now, in: session)
            var channels: [String] = []
            var notices: [String] = []
            for (draft, outcome) in zip(messages, stored) {
                guard let holder = outcome.holder, holder != origin else { continue }
                let push = MailboxMessage(clientID: draft.clientID, sequence: outcome.sequence, type: draft.type, payload: draft.payload, storedAt: now)
                channels.append(PostgresNotice.channel(ofNode: holder))
                notices.append(PostgresNotice.wakeUp(for: push, inlineLimit: inlineLimit).text)
            }
            if !channels.isEmpty {
                // Sent when the transaction commits, and only then.
                try session.execute(
                    "SELECT pg_notify(c, n) FROM unnest($1::text[], $2::text[]) AS t(c, n)",
                    parameters: [.textArray(channels), .textArray(notices)]
                )
            }
            return stored.map(\.sequence)
        }
    }

    func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> MailboxSummary {
        try await mailboxes.openMailbox(for: clientID, limits: limits, now: now)
    }

    func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws(TetherError) -> [MailboxMessage] {
        try await mailboxes.messages(for: clientID, after: sequence, limit: limit)
    }

    func acknowledge(_ clientID: String, through sequence: UInt64) async throws(TetherError) {
        try await mailboxes.acknowledge(clientID, through: sequence)
    }

    func acknowledge(_ positions: [String: UInt64]) async throws(TetherError) {
        try await mailboxes.acknowledge(positions)
    }

    func clientIDs() async throws(TetherError) -> [String] {
        try await mailboxes.clientIDs()
    }

    func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> RequestRecord {
        try await mailboxes.beginRequest(key, of: clientID, limits: limits, now: now)
    }

    func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) {
        try await mailboxes.finishRequest(key, of: clientID, answer: answer, limits: limits, now: now)
    }

    /// Expires as the plain store does, counting every client some node holds as active
    /// now, not only those of the node that runs the pass.
    func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws(TetherError) -> [String] {
        guard limits.maximumAge != nil else { return [] }
        try await transaction("keeping the mailboxes of connected clients") { session in
            try session.execute(
                """
                UPDATE tether_mailboxes SET active_at = $1 WHERE client_id IN (
                    SELECT client_id FROM tether_mailboxes WHERE holder IS NOT NULL AND active_at < $1
                    ORDER BY client_id FOR UPDATE
                )
                """,
                [.int(now.millisecondsSince1970)]
            )
        }
        return try await mailboxes.removeExpired(limits: limits, now: now, keeping: connected)
    }

    /// Sends a broadcast to every node but `origin`: in a notice when it fits, otherwise
    /// through `tether_broadcasts` (rows older than `retention` are deleted on the way).
    func broadcast(_ frame: Frame, from origin: String, retention: Duration) async throws(TetherError) {
        let notice = PostgresNotice.broadcast(origin: origin, type: frame.type, payload: frame.payload).text
        if notice.utf8.count <= PostgresNotice.maximumLength {
            try await transaction("broadcasting \(frame.payload.count) bytes") { session in
                try session.execute("SELECT pg_notify($1, $2)", [.text(PostgresNotice.broadcastChannel), .text(notice)])
            }
            return
        }
        try await transaction("broadcasting \(frame.payload.count) bytes") { session in
            try session.execute(
                "DELETE FROM tether_broadcasts WHERE created_at < now() - make_interval(secs => $1::bigint / 1000.0)",
                [.int(retention.postgresMilliseconds)]
            )
            let rows = try session.execute(
                "INSERT INTO tether_broadcasts (origin, type, payload) VALUES ($1, $2, $3) RETURNING id",
                [.text(origin), .int(Int64(frame.type)), .bytes(frame.payload)]
            )
            guard let id = rows.int(0, 0) else {
                throw TetherError(code: .storeFailed, message: "the broadcast row got no id")
            }
            let stored = PostgresNotice.storedBroadcast(origin: origin, id: id).text
            try session.execute("SELECT pg_notify($1, $2)", [.text(PostgresNotice.broadcastChannel), .text(stored)])
        }
    }

    /// A broadcast kept in `tether_broadcasts`, if it is still there.
    func storedBroadcast(_ id: Int64) async throws(TetherError) -> Frame? {
        try await mailboxes.run("reading broadcast \(id)", transaction: false) { session in
            let rows = try session.execute("SELECT type, payload FROM tether_broadcasts WHERE id = $1", [.int(id)])
            guard rows.count == 1, let type = rows.int(0, 0), let payload = rows.bytes(0, 1) else { return nil }
            return Frame(type: UInt32(truncatingIfNeeded: type), serial: 0, payload: payload)
        }
    }
}
