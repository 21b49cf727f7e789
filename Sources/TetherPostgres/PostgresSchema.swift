internal import Tether

/// The version of the tables this code reads and writes, kept in `tether_meta`.
let postgresSchemaVersion = 1

/// The key of the advisory lock that serialises creating the tables, so servers starting
/// at once do not race ("TMBX").
private let schemaLock: Int64 = 0x544D_4258

/// The tables, created if absent.
///
/// Client ids sort bytewise (`COLLATE "C"`): every statement that locks several mailboxes
/// locks them in that order, the same on every server, so two never deadlock.
///
/// A mailbox holds exactly the sequences above both `acknowledged` and `lost_through`, up
/// to `last_sequence`; `message_count` and `stored_bytes` (payload plus
/// ``Tether/MailboxLimits/messageOverhead`` each) describe them, and `tether_totals` sums
/// them over all mailboxes, for the store-wide bounds. `holder` and `generation` say which
/// server holds the client's connection.
private let schema = """
    CREATE TABLE IF NOT EXISTS tether_meta (
        key text PRIMARY KEY,
        value text NOT NULL
    );
    CREATE TABLE IF NOT EXISTS tether_mailboxes (
        client_id text COLLATE "C" PRIMARY KEY,
        last_sequence bigint NOT NULL DEFAULT 0,
        acknowledged bigint NOT NULL DEFAULT 0,
        lost_through bigint NOT NULL DEFAULT 0,
        loss_reason text,
        active_at bigint NOT NULL DEFAULT 0,
        epoch text NOT NULL,
        message_count integer NOT NULL DEFAULT 0,
        stored_bytes bigint NOT NULL DEFAULT 0,
        holder text NULL,
        generation bigint NOT NULL DEFAULT 0
    );
    CREATE TABLE IF NOT EXISTS tether_messages (
        client_id text COLLATE "C" NOT NULL,
        sequence bigint NOT NULL,
        type bigint NOT NULL,
        payload bytea NOT NULL,
        stored_at bigint NOT NULL,
        PRIMARY KEY (client_id, sequence)
    );
    CREATE TABLE IF NOT EXISTS tether_totals (
        id integer PRIMARY KEY CHECK (id = 1),
        mailboxes bigint NOT NULL,
        stored_bytes bigint NOT NULL
    );
    ALTER TABLE tether_messages ADD COLUMN IF NOT EXISTS expires_at bigint NULL;
    CREATE TABLE IF NOT EXISTS tether_requests (
        client_id text COLLATE "C" NOT NULL,
        key text COLLATE "C" NOT NULL,
        started_at bigint NOT NULL,
        answered boolean NOT NULL,
        answer bytea NULL,
        PRIMARY KEY (client_id, key)
    );
    INSERT INTO tether_totals (id, mailboxes, stored_bytes) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING;
    INSERT INTO tether_meta (key, value) VALUES ('schema_version', '\(postgresSchemaVersion)') ON CONFLICT (key) DO NOTHING;
    """

extension PostgresMailboxStore {
    /// Creates the tables if they are absent, in one transaction under an advisory lock,
    /// and checks the schema version of tables that were there.
    static func prepareSchema(in database: PostgresDatabase) async throws(TetherError) {
        do {
            let version = try await database.transaction { session in
                try session.execute("SELECT pg_advisory_xact_lock(\(schemaLock))")
                try session.execute(schema)
                return try session.execute("SELECT value FROM tether_meta WHERE key = 'schema_version'").text(0, 0)
            }
            guard version == String(postgresSchemaVersion) else {
                throw TetherError(
                    code: .storeFailed,
                    message: "PostgreSQL at \(database.endpoint): the mailbox tables have schema version \(version ?? "none"); this version of Tether reads version \(postgresSchemaVersion)"
                )
            }
        } catch {
            throw failure(database, "creating the mailbox tables", error)
        }
    }

    /// A failure of `step`: mailbox bounds as they are, anything else as
    /// ``Tether/TetherError/Code/storeFailed`` naming the step and the server.
    static func failure(_ database: PostgresDatabase, _ step: String, _ error: any Error) -> TetherError {
        guard let error = error as? TetherError else {
            return TetherError(code: .storeFailed, message: "\(step) failed: PostgreSQL at \(database.endpoint): \(error)", underlying: error)
        }
        guard error.code == .storeFailed else { return error }
        return TetherError(code: .storeFailed, message: "\(step) failed: \(error.message)", underlying: error.underlying)
    }
}
