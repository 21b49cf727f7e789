import Foundation
internal import Tether

/// Channels on the cluster's database (``Tether/ChannelEngine``): `tether_channels` holds each
/// channel's latest offset, `tether_channel_messages` its kept messages, and every publish
/// notifies all nodes on one channel in its own transaction.
///
/// A publish takes the next offset by updating the channel's row, which locks it until the
/// transaction commits: the publishes of one channel commit in offset order, whichever
/// node or backend makes them, and PostgreSQL delivers notices in commit order. A node
/// reads from the table whatever a notice did not carry (a message larger than a notice)
/// or never brought.
final class PostgresChannels: ChannelEngine {
    let routed: PostgresRoutedStore
    /// Messages whose notice would pass this many bytes are read from the table instead.
    let inlineLimit: Int
    /// A node not seen for this long counts as gone: its members are not listed.
    let nodeTimeout: Duration

    init(routed: PostgresRoutedStore, inlineLimit: Int, nodeTimeout: Duration = .seconds(15)) {
        self.routed = routed
        self.inlineLimit = inlineLimit
        self.nodeTimeout = nodeTimeout
    }

    /// Gives the message the channel's next offset, stores it, drops what `retention` no
    /// longer keeps, and notifies every node: one statement, one transaction.
    func publish(_ content: [UInt8], to channel: String, expiresAt: MailboxTime?, now: MailboxTime, retention: ChannelRetention) async throws -> ChannelRecord {
        if let problem = ChannelConfiguration.problem(withName: channel, maximumLength: 255) {
            throw TetherError(code: .invalidArgument, message: problem)
        }
        let name = PostgresNotice.encode(Array(channel.utf8))
        // Base64 makes 4 bytes of 3; the rest of the line is under 100 bytes.
        let inline = (content.count + 2) / 3 * 4 + name.utf8.count + 100 <= min(inlineLimit, PostgresNotice.maximumLength)
        let notice = inline
            ? "'c ' || c.epoch || ' ' || c.latest || ' ' || $3::bigint || ' ' || coalesce($4::bigint::text, '-') || ' ' || $8 || ' ' || translate(encode($5, 'base64'), E'\\n', '')"
            : "'C ' || c.epoch || ' ' || c.latest || ' ' || $8"
        let oldest = retention.age.map { now.millisecondsSince1970 - $0.postgresMilliseconds } ?? Int64.min
        let rows = try await routed.transaction("publishing \(content.count) bytes to channel \(channel)") { session in
            try session.execute("""
                WITH c AS (
                    INSERT INTO tether_channels AS t (name, epoch, latest)
                    VALUES ($1, (SELECT value FROM tether_meta WHERE key = 'channel_epoch'), 1)
                    ON CONFLICT (name) DO UPDATE SET latest = t.latest + 1
                    RETURNING t.latest, t.epoch
                ), m AS (
                    INSERT INTO tether_channel_messages (channel, "offset", stored_at, expires_at, content)
                    SELECT $1, c.latest, $3, $4, $5 FROM c
                ), d AS (
                    DELETE FROM tether_channel_messages
                    WHERE channel = $1 AND ("offset" <= (SELECT latest FROM c) - $6 OR stored_at < $7)
                )
                SELECT c.latest, c.epoch, pg_notify($2, \(notice)) FROM c
                """, [
                    .text(channel), .text(PostgresNotice.channelsChannel), .int(now.millisecondsSince1970),
                    expiresAt.map { .int($0.millisecondsSince1970) } ?? .null, .bytes(content),
                    .int(Int64(max(1, retention.count))), .int(oldest), .text(name),
                ])
        }
        guard let offset = rows.int(0, 0), let epoch = rows.text(0, 1) else {
            throw TetherError(code: .storeFailed, message: "publishing to channel \(channel): PostgreSQL at \(routed.database.endpoint) returned no offset")
        }
        return ChannelRecord(channel: channel, epoch: epoch, offset: UInt64(offset), storedAt: now, expiresAt: expiresAt, content: content)
    }

    /// The channel's epoch, latest offset, and up to `limit` kept messages after `offset`;
    /// a channel never published to has the database's epoch and offset 0, and makes no row.
    func history(of channel: String, after offset: UInt64, limit: Int) async throws -> ChannelHistory {
        try await routed.transaction("reading the history of channel \(channel)") { session in
            let head = try session.execute("""
                SELECT coalesce(c.epoch, (SELECT value FROM tether_meta WHERE key = 'channel_epoch')), coalesce(c.latest, 0)
                FROM (SELECT 1) AS one LEFT JOIN tether_channels c ON c.name = $1
                """, [.text(channel)])
            guard let epoch = head.text(0, 0) else {
                throw TetherError(code: .storeFailed, message: "the channel tables have no epoch: were they made by this version?")
            }
            let rows = try session.execute("""
                SELECT "offset", stored_at, expires_at, content FROM tether_channel_messages
                WHERE channel = $1 AND "offset" > $2 ORDER BY "offset" LIMIT $3
                """, [.text(channel), .int(Int64(clamping: offset)), .int(Int64(max(1, limit)))])
            var messages: [ChannelRecord] = []
            messages.reserveCapacity(rows.count)
            for row in 0..<rows.count {
                messages.append(ChannelRecord(
                    channel: channel,
                    epoch: epoch,
                    offset: UInt64(rows.int(row, 0) ?? 0),
                    storedAt: MailboxTime(millisecondsSince1970: rows.int(row, 1) ?? 0),
                    expiresAt: rows.isNull(row, 2) ? nil : rows.int(row, 2).map { MailboxTime(millisecondsSince1970: $0) },
                    content: rows.bytes(row, 3) ?? []
                ))
            }
            // Read after the head: a message stored between the two reads is in the
            // messages and past `latest`, which the node reads as the latest then.
            let latest = max(UInt64(head.int(0, 1) ?? 0), messages.last?.offset ?? 0)
            return ChannelHistory(epoch: epoch, latest: latest, messages: messages)
        }
    }
}
