internal import Tether

// Who is subscribed to each channel on which node: `tether_channel_members`, one row per
// member, written by the member's node and notified to every other node.

extension PostgresChannels {
    /// Records the joins and leaves of this node's members and notifies every node of
    /// those that changed a row, in one transaction.
    func presenceChanged(_ changes: [ChannelPresenceChange]) async throws {
        guard let node = routed.origin, !changes.isEmpty else { return }
        let joins = changes.filter(\.joined)
        let leaves = changes.filter { !$0.joined }
        try await routed.transaction("recording \(changes.count) channel joins and leaves of node \(node)") { session in
            var notices: [String] = []
            if !joins.isEmpty {
                try session.execute("""
                    INSERT INTO tether_channel_members (channel, connection, node, client_id, info)
                    SELECT c, k, $3, nullif(i, ''), nullif(j, '')
                    FROM unnest($1::text[], $2::text[], $4::text[], $5::text[]) AS t(c, k, i, j)
                    ON CONFLICT (channel, connection) DO UPDATE
                    SET node = EXCLUDED.node, client_id = EXCLUDED.client_id, info = EXCLUDED.info
                    """, parameters: [
                        .textArray(joins.map(\.channel)), .textArray(joins.map(\.member.connection)), PostgresParameter(.text(node)),
                        .textArray(joins.map { $0.member.clientID ?? "" }),
                        .textArray(joins.map { $0.member.info.map { String(decoding: $0.encoded, as: UTF8.self) } ?? "" }),
                    ])
                notices += joins.map { PostgresNotice.presence(origin: node, $0).text }
            }
            if !leaves.isEmpty {
                let gone = try session.execute("""
                    DELETE FROM tether_channel_members m USING unnest($1::text[], $2::text[]) AS t(c, k)
                    WHERE m.channel = t.c AND m.connection = t.k RETURNING m.channel, m.connection
                    """, parameters: [.textArray(leaves.map(\.channel)), .textArray(leaves.map(\.member.connection))])
                var deleted = Set<[String]>()
                for row in 0..<gone.count { deleted.insert([gone.text(row, 0) ?? "", gone.text(row, 1) ?? ""]) }
                notices += leaves.filter { deleted.contains([$0.channel, $0.member.connection]) }.map { PostgresNotice.presence(origin: node, $0).text }
            }
            guard !notices.isEmpty else { return }
            try session.execute(
                "SELECT pg_notify($1, n) FROM unnest($2::text[]) AS t(n)",
                parameters: [PostgresParameter(.text(PostgresNotice.channelsChannel)), .textArray(notices)]
            )
        }
    }

    /// Deletes the members node `name` recorded, and tells every node they left: when it
    /// leaves, and when it joins again after a run that could not (a crash).
    static func dropMembers(ofNode name: String, in session: PostgresSession) throws {
        let gone = try session.execute(
            "DELETE FROM tether_channel_members WHERE node = $1 RETURNING channel, connection, client_id",
            [.text(name)]
        )
        guard gone.count > 0 else { return }
        let notices = (0..<gone.count).map { row in
            let member = ChannelMember(connection: gone.text(row, 1) ?? "", clientID: gone.text(row, 2), info: nil)
            return PostgresNotice.presence(origin: name, ChannelPresenceChange(channel: gone.text(row, 0) ?? "", member: member, joined: false)).text
        }
        try session.execute(
            "SELECT pg_notify($1, n) FROM unnest($2::text[]) AS t(n)",
            parameters: [PostgresParameter(.text(PostgresNotice.channelsChannel)), .textArray(notices)]
        )
    }

    /// The members of `channel` on the nodes seen within the node timeout.
    func presence(of channel: String, limit: Int) async throws -> ChannelPresence {
        let timeout = nodeTimeout.postgresMilliseconds
        return try await routed.transaction("reading the presence of channel \(channel)") { session in
            let live = "JOIN tether_nodes n ON n.name = m.node AND n.last_seen > now() - make_interval(secs => $2::bigint / 1000.0)"
            let count = try session.execute(
                "SELECT count(*) FROM tether_channel_members m \(live) WHERE m.channel = $1",
                [.text(channel), .int(timeout)]
            ).int(0, 0) ?? 0
            let rows = try session.execute("""
                SELECT m.connection, m.client_id, m.info FROM tether_channel_members m \(live)
                WHERE m.channel = $1 ORDER BY coalesce(m.client_id, ''), m.connection LIMIT $3
                """, [.text(channel), .int(timeout), .int(Int64(max(0, limit)))])
            var members: [ChannelMember] = []
            for row in 0..<rows.count {
                let info = rows.text(row, 2).flatMap { try? JSONValue(parsing: Array($0.utf8)) }
                members.append(ChannelMember(connection: rows.text(row, 0) ?? "", clientID: rows.text(row, 1), info: info))
            }
            return ChannelPresence(channel: channel, count: Int(count), members: members)
        }
    }
}
