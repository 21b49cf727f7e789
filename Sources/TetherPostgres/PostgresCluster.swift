public import Tether

/// How a server joins a cluster on PostgreSQL.
public struct PostgresClusterConfiguration: Sendable {
    /// The database every node shares, and this node's connections to it.
    public var database: PostgresConfiguration
    /// This node's name, unique in the cluster: 1 to 48 letters, digits, `.`, `-` or `_`.
    /// A node that starts under the name of one that stopped takes its place: the clients
    /// the old one still held are released.
    public var node: String
    /// Pushes whose content fits in this many bytes of notice (base64, about 4/3 of the
    /// payload) travel to the node that holds their client inside the notice; larger ones
    /// are read from the mailbox by that node. At most 7,999 bytes, PostgreSQL's bound.
    /// Default 6,000.
    public var inlineNoticeBytes: Int = PostgresNotice.defaultInlineLimit
    /// How long a node that lost its `LISTEN` connection keeps its clients connected while
    /// it reconnects. Past it the node closes their connections, so they come back where
    /// pushes reach them, rather than wait on a node that no longer hears of their pushes.
    /// Default 5 s.
    public var partitionGrace: Duration = .seconds(5)
    /// How often a node records in `tether_nodes` that it is alive. Default 5 s.
    public var heartbeatInterval: Duration = .seconds(5)
    /// A node not seen for this long counts as gone: ``PostgresCluster/holder(ofClient:)``
    /// no longer names it. Default 15 s.
    public var nodeTimeout: Duration = .seconds(15)
    /// How long a broadcast too large for a notice stays in `tether_broadcasts` for the
    /// nodes to read. Default 60 s.
    public var broadcastRetention: Duration = .seconds(60)
    /// How often a node compares the claim each connected client holds with the client's
    /// mailbox row, and repairs what differs: a row that names no holder, or another claim
    /// of this node, is claimed again for the connection here; a row that names another
    /// node closes the connection here, so the client comes back where its pushes go. A
    /// session whose row was cleared behind its back therefore hears of pushes made on
    /// other nodes again within about this long; each check also has the connections write
    /// what a lost notice held back. `nil` checks only when `LISTEN` comes back after a
    /// loss. Default 10 s.
    public var claimCheckInterval: Duration? = .seconds(10)

    /// A node named `node` of the cluster on the database at `url`.
    ///
    /// - Parameters:
    ///   - url: A libpq connection string or a `postgresql://` URL.
    ///   - node: The node's name, unique in the cluster.
    public init(url: String, node: String) {
        database = PostgresConfiguration(url: url)
        self.node = node
    }
}

/// Servers on one PostgreSQL database forming one service: shared mailboxes, presence,
/// routing of pushes and broadcasts, takeover of clients that move between nodes.
///
/// Each server gets its own `PostgresCluster`, with its own node name, and uses it as its
/// mailboxes:
///
/// ```swift
/// import TetherPostgres
///
/// let cluster = try await PostgresCluster(url: "postgresql://tether@db.internal/tether", node: "gw-1")
/// var configuration = ServerConfiguration(port: 9000)
/// configuration.mailboxes = .postgres(cluster)
/// let server = Server(configuration: configuration)
/// ```
///
/// - **Mailboxes** live in the database (``PostgresMailboxStore``): a push stored by any node
///   gets the next number of its client's sequence, once.
/// - **Presence.** A client that identifies on a node is *claimed* by it: its mailbox row
///   names the node and a generation that grows with every claim. The node that held it
///   before hears of it and closes its connection.
/// - **Routing.** An append wakes the node that holds each client with a `NOTIFY` sent in
///   the append's own transaction (so exactly when it commits), carrying the push when it is
///   small (``PostgresClusterConfiguration/inlineNoticeBytes``). Notices are not durable:
///   the mailbox is the truth, and a node writes each client's pushes in sequence order,
///   reading from the mailbox whatever it was not handed, so a lost, late or repeated notice
///   never loses or doubles a push.
/// - **Failures.** A node that loses its `LISTEN` connection reconnects; meanwhile pushes
///   are still stored, and once it listens again it reads what its clients missed and
///   closes those that moved. Past ``PostgresClusterConfiguration/partitionGrace`` without
///   the database it closes its clients' connections so they come back where pushes reach
///   them. A database that is down makes pushes and hellos fail with
///   ``Tether/TetherError/Code/storeFailed``; nothing acknowledged as stored is lost.
public final class PostgresCluster: SessionCluster {
    struct State {
        var node: ClusterNode?
        var listener: PostgresListener?
        var heartbeat: Task<Void, Never>?
        /// When the `LISTEN` connection was lost, if it is down, and the task that closes
        /// the sessions once the grace has passed.
        var partition: Task<Void, Never>?
        var listening = false
        var joinWaiter: CheckedContinuation<Void, any Error>?
        var lastListenError: String?
        /// Claims whose release failed, to release once the database is back.
        var pendingReleases: [String: UInt64] = [:]
        var resyncs = 0
        /// The task that checks the claims every ``PostgresClusterConfiguration/claimCheckInterval``.
        var claimCheck: Task<Void, Never>?
        /// What the checks found and repaired so far.
        var repairs = ClaimCheck()
    }

    /// How this node joins.
    public let configuration: PostgresClusterConfiguration
    let routed: PostgresRoutedStore
    let channelEngine: PostgresChannels
    let state = Lock(State())

    /// The name this node has in the cluster.
    public var nodeName: String { configuration.node }

    /// What the claim checks found and repaired since the node joined.
    var repairs: ClaimCheck { state.withLock { $0.repairs } }

    /// The mailbox store the nodes share, whose appends wake the nodes that hold their
    /// clients.
    public var store: any MailboxStore { routed }

    /// The channels the nodes share (``PostgresChannels``): a node's
    /// ``Tether/ServerConfiguration/channels`` are the cluster's, one order of messages per
    /// channel on every node, recovered on any node.
    public var channels: (any ChannelEngine)? { channelEngine }

    /// Connects to the database and creates the tables if they are absent. The node
    /// joins when its server runs.
    ///
    /// - Parameter configuration: The database and the node.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument``
    ///   for a node name that cannot be used, ``Tether/TetherError/Code/storeFailed`` when
    ///   the database is unreachable or refuses the tables.
    public init(configuration: PostgresClusterConfiguration) async throws(TetherError) {
        guard PostgresNotice.isValidNodeName(configuration.node) else {
            throw TetherError(code: .invalidArgument, message: "\"\(configuration.node)\" cannot name a node: use 1 to 48 letters, digits, '.', '-' or '_'")
        }
        self.configuration = configuration
        let mailboxes = try await PostgresMailboxStore(configuration: configuration.database)
        do {
            try await PostgresRoutedStore.prepareSchema(in: mailboxes.database)
        } catch {
            await mailboxes.close()
            throw error
        }
        routed = PostgresRoutedStore(mailboxes: mailboxes, origin: configuration.node, inlineLimit: configuration.inlineNoticeBytes)
        channelEngine = PostgresChannels(routed: routed, inlineLimit: configuration.inlineNoticeBytes, nodeTimeout: configuration.nodeTimeout)
    }

    /// Connects to the database at `url` as node `node`, with the defaults.
    ///
    /// - Parameters:
    ///   - url: A libpq connection string or a `postgresql://` URL.
    ///   - node: The node's name, unique in the cluster.
    /// - Throws: ``Tether/TetherError``, as ``init(configuration:)``.
    public convenience init(url: String, node: String) async throws(TetherError) {
        try await self.init(configuration: PostgresClusterConfiguration(url: url, node: node))
    }

    /// Closes the connections to the database. Call it once the server using the cluster
    /// has stopped.
    public func close() async {
        await leave()
        await routed.mailboxes.close()
    }

    // MARK: Presence

    /// The node that holds `clientID`'s connection now, if any: the node of its latest
    /// claim, while that node is alive (seen within
    /// ``PostgresClusterConfiguration/nodeTimeout``).
    ///
    /// - Parameter clientID: The client.
    /// - Returns: The node's name, or `nil` when no live node holds the client.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the database cannot be read.
    public func holder(ofClient clientID: String) async throws(TetherError) -> String? {
        let timeout = configuration.nodeTimeout.postgresMilliseconds
        return try await routed.transaction("reading where client \"\(clientID)\" is") { session in
            try session.execute("""
                SELECT m.holder FROM tether_mailboxes m JOIN tether_nodes n ON n.name = m.holder
                WHERE m.client_id = $1 AND n.last_seen > now() - make_interval(secs => $2::bigint / 1000.0)
                """, [.text(clientID), .int(timeout)]).text(0, 0)
        }
    }

    /// The nodes alive now (seen within ``PostgresClusterConfiguration/nodeTimeout``), and
    /// how many clients each holds.
    ///
    /// - Returns: Node names and client counts, sorted by name.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the database cannot be read.
    public func liveNodes() async throws(TetherError) -> [(name: String, clients: Int)] {
        let timeout = configuration.nodeTimeout.postgresMilliseconds
        let rows = try await routed.transaction("listing the nodes") { session -> [NodeRow] in
            let rows = try session.execute("""
                SELECT n.name, (SELECT count(*) FROM tether_mailboxes m WHERE m.holder = n.name)
                FROM tether_nodes n WHERE n.last_seen > now() - make_interval(secs => $1::bigint / 1000.0)
                ORDER BY n.name
                """, [.int(timeout)])
            return (0..<rows.count).map { NodeRow(name: rows.text($0, 0) ?? "", clients: Int(rows.int($0, 1) ?? 0)) }
        }
        return rows.map { ($0.name, $0.clients) }
    }

    struct NodeRow: Sendable {
        var name: String
        var clients: Int
    }

    // MARK: SessionCluster

    /// Joins as `node`: registers the node, releases the clients an earlier run of the same
    /// node left held, and listens for notices; returns once it listens.
    ///
    /// - Parameter node: How the cluster reaches the server.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the database is unreachable or `LISTEN` does not start within twice
    ///   ``PostgresConfiguration/connectTimeout``.
    public func join(_ node: ClusterNode) async throws {
        let name = nodeName
        try await routed.transaction("registering node \(name)") { session in
            try session.execute("""
                INSERT INTO tether_nodes (name) VALUES ($1)
                ON CONFLICT (name) DO UPDATE SET joined_at = now(), last_seen = now()
                """, [.text(name)])
            try session.execute(PostgresRoutedStore.releaseAllOfNode, [.text(name)])
            try PostgresChannels.dropMembers(ofNode: name, in: session)
        }
        let listener = PostgresListener(
            configuration: configuration.database,
            channels: [PostgresNotice.channel(ofNode: name), PostgresNotice.broadcastChannel, PostgresNotice.channelsChannel],
            onNotification: { [weak self] channel, payload in self?.received(payload, on: channel) },
            onConnection: { [weak self] up, error in self?.connectionChanged(up: up, error: error) }
        )
        state.withLock {
            $0.node = node
            $0.listener = listener
        }
        let bound = configuration.database.connectTimeout * 2
        do {
            try await listen(listener, within: bound)
        } catch {
            await leave()
            throw error
        }
        startHeartbeat()
        startClaimCheck()
    }

    /// Starts `listener` and waits until it listens, for at most `bound`.
    private func listen(_ listener: PostgresListener, within bound: Duration) async throws {
        let name = nodeName
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                try await withCheckedThrowingContinuation { continuation in
                    let ready = state.withLock { state -> Bool in
                        if state.listening { return true }
                        state.joinWaiter = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            }
            group.addTask { [self] in
                try await Task.sleep(for: bound)
                let waiter = state.withLock { state in
                    defer { state.joinWaiter = nil }
                    return state.joinWaiter
                }
                guard let waiter else { return }
                let reason = state.withLock { $0.lastListenError } ?? "no answer"
                let failure = TetherError(code: .storeFailed, message: "node \(name) could not LISTEN on PostgreSQL at \(routed.database.endpoint) within \(bound): \(reason)")
                waiter.resume(throwing: failure)
                throw failure
            }
            listener.start()
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// Leaves: stops listening and beating, and releases every client this node holds.
    public func leave() async {
        let (listener, heartbeat, partition, claimCheck) = state.withLock { state in
            defer {
                state.listener = nil
                state.heartbeat = nil
                state.partition = nil
                state.claimCheck = nil
                state.node = nil
                state.listening = false
            }
            return (state.listener, state.heartbeat, state.partition, state.claimCheck)
        }
        heartbeat?.cancel()
        partition?.cancel()
        claimCheck?.cancel()
        guard let listener else { return }
        await listener.stop()
        let name = nodeName
        try? await routed.transaction("node \(name) leaving") { session in
            try session.execute(PostgresRoutedStore.releaseAllOfNode, [.text(name)])
            try PostgresChannels.dropMembers(ofNode: name, in: session)
            try session.execute("DELETE FROM tether_nodes WHERE name = $1", [.text(name)])
        }
    }

    /// Claims `clientID` for this node in one transaction: opens its mailbox (which locks
    /// its row, so appends wait for the claim), records this node with the next generation,
    /// and tells the node that held it before.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - limits: The bounds of the mailbox and of the whole store.
    ///   - now: The time to judge ages by.
    /// - Returns: The mailbox's summary and the claim's generation.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` or
    ///   ``Tether/TetherError/Code/mailboxesFull``.
    public func claim(_ clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> ClusterClaim {
        let (name, mailboxes) = (nodeName, routed.mailboxes)
        return try await routed.transaction("claiming client \"\(clientID)\" for node \(name)") { session in
            let summary = try mailboxes.open(clientID, limits: limits, now: now, in: session)
            let before = try session.execute("SELECT holder FROM tether_mailboxes WHERE client_id = $1", [.text(clientID)]).text(0, 0)
            let rows = try session.execute(
                "UPDATE tether_mailboxes SET holder = $2, generation = generation + 1 WHERE client_id = $1 RETURNING generation",
                [.text(clientID), .text(name)]
            )
            guard let generation = rows.int(0, 0) else {
                throw TetherError(code: .storeFailed, message: "the mailbox row of client \"\(clientID)\" vanished")
            }
            if let before, before != name {
                let notice = PostgresNotice.takeover(clientID: clientID, generation: UInt64(generation), node: name)
                try session.execute("SELECT pg_notify($1, $2)", [.text(PostgresNotice.channel(ofNode: before)), .text(notice.text)])
            }
            return ClusterClaim(summary: summary, generation: UInt64(generation))
        }
    }

    /// Releases the claim `generation` of `clientID`, unless a later claim replaced it. One
    /// that cannot be written now is tried again once the database is back.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - generation: The generation of the claim that ended.
    public func release(_ clientID: String, generation: UInt64) async {
        do {
            try await releaseNow([clientID: generation])
        } catch {
            state.withLock { $0.pendingReleases[clientID] = generation }
        }
    }

    private func releaseNow(_ claims: [String: UInt64]) async throws(TetherError) {
        let name = nodeName
        let (clients, generations) = (Array(claims.keys), claims.values.map { Int64(clamping: $0) })
        try await routed.transaction("releasing \(clients.count) client\(clients.count == 1 ? "" : "s") of node \(name)") { session in
            try session.execute("""
                UPDATE tether_mailboxes m SET holder = NULL
                FROM (
                    SELECT x.client_id, r.generation
                    FROM tether_mailboxes x JOIN unnest($1::text[], $2::bigint[]) AS r(client_id, generation) ON x.client_id = r.client_id
                    ORDER BY x.client_id FOR UPDATE OF x
                ) AS l
                WHERE m.client_id = l.client_id AND m.holder = $3 AND m.generation = l.generation
                """, parameters: [.textArray(clients), .intArray(generations), PostgresParameter(.text(name))])
        }
    }

    /// Nothing: the store's appends wake the nodes in their own transactions.
    ///
    /// - Parameter pushes: The pushes stored.
    public func stored(_ pushes: [MailboxMessage]) async {}

    /// Sends `frame` to the peers of every other node.
    ///
    /// - Parameter frame: The frame.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the database cannot take it.
    public func broadcast(_ frame: Frame) async throws {
        try await routed.broadcast(frame, from: nodeName, retention: configuration.broadcastRetention)
    }

    // MARK: Notices and the connection

    private func received(_ payload: String, on channel: String) {
        guard let node = state.withLock({ $0.node }), let notice = PostgresNotice(payload) else { return }
        switch notice {
        case .push(let push):
            node.deliver(push)
        case .wake(let clientID, let through):
            node.wake(clientID: clientID, through: through)
        case .takeover(let clientID, let generation, let by):
            node.takenOver(clientID: clientID, generation: generation, by: by)
        case .broadcast(let origin, let type, let payload):
            guard origin != nodeName else { return }
            node.broadcastLocally(Frame(type: type, serial: 0, payload: payload))
        case .storedBroadcast(let origin, let id):
            guard origin != nodeName else { return }
            Task { [routed] in
                if let frame = try? await routed.storedBroadcast(id) { node.broadcastLocally(frame) }
            }
        case .channelMessage(let record):
            node.published(record)
        case .channelStored(let channel, let epoch, let through):
            node.published(channel: channel, epoch: epoch, through: through)
        case .presence(let origin, let change):
            guard origin != nodeName else { return }
            node.presenceChanged(change)
        }
    }

    private func connectionChanged(up: Bool, error: String?) {
        if up {
            let (waiter, wasLost) = state.withLock { state -> (CheckedContinuation<Void, any Error>?, Bool) in
                let wasLost = !state.listening && state.node != nil && state.joinWaiter == nil
                state.listening = true
                state.partition?.cancel()
                state.partition = nil
                defer { state.joinWaiter = nil }
                return (state.joinWaiter, wasLost)
            }
            waiter?.resume()
            if wasLost {
                state.withLock { $0.node }?.channelsMayHaveMissed()
                Task { await resync() }
            }
            return
        }
        let grace = configuration.partitionGrace
        let name = nodeName
        let endpoint = routed.database.endpoint
        state.withLock { state in
            state.listening = false
            state.lastListenError = error
            guard state.node != nil, state.partition == nil else { return }
            state.partition = Task { [weak self] in
                guard (try? await Task.sleep(for: grace)) != nil, let self else { return }
                let node = self.state.withLock { $0.listening ? nil : $0.node }
                node?.closeSessions(reason: "node \(name) lost its connection to PostgreSQL at \(endpoint) for \(grace): \(error ?? "no answer")")
            }
        }
    }

    /// After `LISTEN` is back: releases what could not be released, then checks every
    /// client held here (``checkClaims()``): closes it if another node claimed it meanwhile,
    /// claims it again if its row was released, and writes what it missed.
    func resync() async {
        for _ in 0..<5 {
            do throws(TetherError) {
                try await resyncOnce()
                state.withLock { $0.resyncs += 1 }
                return
            } catch {
                // A pooled connection that broke with the database fails once, then
                // reconnects: try again a few times.
                try? await Task.sleep(for: configuration.database.reconnectDelay)
            }
        }
    }

    private func resyncOnce() async throws(TetherError) {
        let pending = state.withLock { $0.pendingReleases }
        if !pending.isEmpty {
            try await releaseNow(pending)
            state.withLock { state in
                for (client, generation) in pending where state.pendingReleases[client] == generation {
                    state.pendingReleases.removeValue(forKey: client)
                }
            }
        }
        try await checkClaims()
    }

    /// Compares the claim of every client connected here with its mailbox row, and
    /// repairs what differs (``ClaimRepair``): once after `LISTEN` comes back, and every
    /// ``PostgresClusterConfiguration/claimCheckInterval``.
    ///
    /// - Returns: What it found and repaired.
    @discardableResult
    func checkClaims() async throws(TetherError) -> ClaimCheck {
        guard let node = state.withLock({ $0.node }) else { return ClaimCheck() }
        let sessions = node.sessions
        guard !sessions.isEmpty else { return ClaimCheck() }
        let clients = sessions.map(\.clientID)
        let name = nodeName
        let rows = try await routed.transaction("reading the clients of node \(name)") { session -> [HeldRow] in
            let rows = try session.execute(
                "SELECT client_id, holder, generation, last_sequence FROM tether_mailboxes WHERE client_id = ANY($1::text[])",
                parameters: [.textArray(clients)]
            )
            return (0..<rows.count).map { row in
                HeldRow(
                    clientID: rows.text(row, 0) ?? "",
                    holder: rows.text(row, 1),
                    generation: UInt64(rows.int(row, 2) ?? 0),
                    lastSequence: UInt64(rows.int(row, 3) ?? 0)
                )
            }
        }
        let byClient = Dictionary(rows.map { ($0.clientID, $0) }, uniquingKeysWith: { first, _ in first })
        var check = ClaimCheck()
        // Each repair is counted in ``repairs`` before the node hears of it: whoever sees its
        // effect (a push delivered) sees it counted.
        func count(_ change: (inout ClaimCheck) -> Void) {
            change(&check)
            state.withLock { change(&$0.repairs) }
        }
        for held in sessions {
            count { $0.checked += 1 }
            switch ClaimRepair(held: held, row: byClient[held.clientID], node: name) {
            case .intact(let sequence):
                node.wake(clientID: held.clientID, through: sequence)
            case .adopt(let generation, let sequence):
                count { $0.adopted += 1 }
                if !node.reclaimed(clientID: held.clientID, generation: generation, through: sequence) {
                    await release(held.clientID, generation: generation)
                }
            case .reclaim(let seen):
                guard let claim = try await reclaim(held.clientID, seen: seen) else { continue }
                count { $0.reclaimed += 1 }
                if !node.reclaimed(clientID: held.clientID, generation: claim.generation, through: claim.lastSequence) {
                    await release(held.clientID, generation: claim.generation)
                }
            case .close(let generation, let holder):
                count { $0.closed += 1 }
                node.takenOver(clientID: held.clientID, generation: generation, by: holder)
            }
        }
        return check
    }

    /// Claims `clientID` for this node again if its row still stands as a check saw it: no
    /// holder or this node, with generation `seen`. Sends no notice: no other node held it.
    ///
    /// - Returns: The new generation and the client's last sequence, or `nil` when the row
    ///   changed meanwhile (the next check looks again).
    private func reclaim(_ clientID: String, seen: UInt64) async throws(TetherError) -> Reclaimed? {
        let name = nodeName
        return try await routed.transaction("claiming client \"\(clientID)\" again for node \(name)") { session in
            let rows = try session.execute("""
                UPDATE tether_mailboxes SET holder = $2, generation = generation + 1
                WHERE client_id = $1 AND generation = $3 AND (holder IS NULL OR holder = $2)
                RETURNING generation, last_sequence
                """, [.text(clientID), .text(name), .int(Int64(clamping: seen))])
            guard let generation = rows.int(0, 0) else { return nil }
            return Reclaimed(generation: UInt64(generation), lastSequence: UInt64(rows.int(0, 1) ?? 0))
        }
    }

    struct Reclaimed: Sendable {
        var generation: UInt64
        var lastSequence: UInt64
    }

    struct HeldRow: Sendable {
        var clientID: String
        var holder: String?
        var generation: UInt64
        var lastSequence: UInt64
    }

    private func startClaimCheck() {
        guard let interval = configuration.claimCheckInterval, interval > .zero else { return }
        let task = Task { [weak self] in
            while (try? await Task.sleep(for: interval)) != nil {
                guard let self else { return }
                // A failed check (the database away) leaves the work to the next one, or to
                // the resync once `LISTEN` is back.
                _ = try? await self.checkClaims()
            }
        }
        state.withLock { $0.claimCheck = task }
    }

    private func startHeartbeat() {
        let interval = configuration.heartbeatInterval
        let name = nodeName
        let task = Task { [weak self] in
            while (try? await Task.sleep(for: interval)) != nil {
                guard let self else { return }
                _ = try? await self.routed.transaction("node \(name) beating") { session in
                    try session.execute("UPDATE tether_nodes SET last_seen = now() WHERE name = $1", [.text(name)])
                }
            }
        }
        state.withLock { $0.heartbeat = task }
    }
}

extension MailboxConfiguration {
    /// Mailboxes shared by the nodes of `cluster`: the server becomes one of its nodes when
    /// it runs.
    ///
    /// The same as `MailboxConfiguration(cluster: cluster)`.
    ///
    /// - Parameter cluster: The cluster, as this node.
    /// - Returns: The configuration, with the default limits.
    public static func postgres(_ cluster: PostgresCluster) -> MailboxConfiguration {
        MailboxConfiguration(cluster: cluster)
    }
}
