public import Tether

/// How a server joins a cluster on Redis.
public struct RedisClusterConfiguration: Sendable {
    /// The server every node shares, and this node's connections to it.
    public var redis: RedisConfiguration
    /// This node's name, unique in the cluster: 1 to 48 letters, digits, `.`, `-` or `_`.
    /// A node that starts under the name of one that stopped takes its place: the clients
    /// the old one still held are released.
    public var node: String
    /// Pushes whose messages fit in this many bytes travel to the node that holds their
    /// client inside the notice; larger ones are read from the mailbox by that node.
    /// Default 8,192.
    public var inlineNoticeBytes: Int = 8_192
    /// How often a node records that it is alive, and checks its subscription with a
    /// `PING`. Default 2 s.
    public var heartbeatInterval: Duration = .seconds(2)
    /// A node not seen for this long counts as gone: ``RedisCluster/holder(ofClient:)`` no
    /// longer names it, and idle mailboxes it held may expire. Default 15 s.
    public var nodeTimeout: Duration = .seconds(15)
    /// How long a node that lost its subscription keeps its clients connected while it
    /// reconnects. Past it the node closes their connections, so they come back where pushes
    /// reach them. Default 5 s.
    public var partitionGrace: Duration = .seconds(5)
    /// How long a node waits before it subscribes again after a loss; each failed attempt
    /// doubles it, up to 5 s. Default 200 ms.
    public var reconnectDelay: Duration = .milliseconds(200)

    /// A node named `node` of the cluster on the Redis server at `url`.
    ///
    /// - Parameters:
    ///   - url: `redis://[[user]:password@]host[:port][/database]`.
    ///   - node: The node's name, unique in the cluster.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument`` for
    ///   a URL of another form.
    public init(url: String, node: String) throws(TetherError) {
        redis = try RedisConfiguration(url: url)
        self.node = node
    }

    /// A node named `node` of the cluster on the server `redis` describes.
    ///
    /// - Parameters:
    ///   - redis: The server and the client's bounds.
    ///   - node: The node's name, unique in the cluster.
    public init(redis: RedisConfiguration, node: String) {
        self.redis = redis
        self.node = node
    }
}

/// Servers on one Redis (or Valkey) server forming one service: shared mailboxes, presence,
/// routing of pushes and broadcasts, takeover of clients that move between nodes.
///
/// ```swift
/// import TetherRedis
///
/// let cluster = try await RedisCluster(url: "redis://cache.internal:6379", node: "gw-1")
/// var configuration = ServerConfiguration(port: 9000)
/// configuration.mailboxes = .redis(cluster)
/// let server = Server(configuration: configuration)
/// ```
///
/// - **Mailboxes** live on Redis (``RedisMailboxStore``): a push stored by any node gets the
///   next number of its client's sequence, once.
/// - **Presence.** A client that identifies on a node is *claimed* by it: its mailbox hash
///   names the node and a generation that grows with every claim, in the script that opens
///   it. The node that held it before hears of it and closes its connection.
/// - **Routing.** An append's script `PUBLISH`es to the channel of the node that holds each
///   client, as part of the append, with the push when it is small
///   (``RedisClusterConfiguration/inlineNoticeBytes``). Pub/sub is not durable: the mailbox
///   is the truth, and a node writes each client's pushes in sequence order, reading from
///   the mailbox whatever it was not handed, so a lost, late or repeated notice never loses
///   or doubles a push.
/// - **Failures.** A node that loses its subscription subscribes again; meanwhile pushes are
///   still stored, and once it listens again it wakes every client it holds and closes
///   those that moved. Past ``RedisClusterConfiguration/partitionGrace`` without Redis it
///   closes its clients' connections so they come back where pushes reach them.
public final class RedisCluster: SessionCluster {
    struct State {
        var node: ClusterNode?
        var subscription: Task<Void, Never>?
        var heartbeat: Task<Void, Never>?
        var partition: Task<Void, Never>?
        var subscriber: RedisConnection?
        var listening = false
        var joinWaiter: CheckedContinuation<Void, any Error>?
        var lastError: String?
        /// How many times the subscription came back after a loss.
        var resyncs = 0
    }

    /// How this node joins.
    public let configuration: RedisClusterConfiguration
    let mailboxes: RedisMailboxStore
    let channelEngine: RedisChannels
    let state = Lock(State())

    /// The name this node has in the cluster.
    public var nodeName: String { configuration.node }

    /// The mailbox store the nodes share, whose appends wake the nodes that hold their
    /// clients.
    public var store: any MailboxStore { mailboxes }

    /// The channels the nodes share: a node's ``Tether/ServerConfiguration/channels`` are
    /// the cluster's, one order of messages per channel on every node, recovered on any node.
    public var channels: (any ChannelEngine)? { channelEngine }

    private var client: RedisClient { mailboxes.client }
    private var prefix: String { configuration.redis.keyPrefix }
    private var nodeChannel: String { prefix + "n:" + nodeName }
    private var broadcastChannel: String { prefix + "b" }
    private var channelsChannel: String { prefix + "c" }

    /// Connects to Redis. The node joins when its server runs.
    ///
    /// - Parameter configuration: The server and the node.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument`` for a
    ///   node name that cannot be used, ``Tether/TetherError/Code/storeFailed`` when Redis is
    ///   unreachable.
    public init(configuration: RedisClusterConfiguration) async throws(TetherError) {
        guard Self.isValidNodeName(configuration.node) else {
            throw TetherError(code: .invalidArgument, message: "\"\(configuration.node)\" cannot name a node: use 1 to 48 letters, digits, '.', '-' or '_'")
        }
        self.configuration = configuration
        mailboxes = try await RedisMailboxStore(configuration: configuration.redis, inlineNoticeBytes: configuration.inlineNoticeBytes)
        channelEngine = RedisChannels(mailboxes: mailboxes, node: configuration.node, inlineLimit: configuration.inlineNoticeBytes, nodeTimeout: configuration.nodeTimeout)
    }

    /// Connects to the Redis server at `url` as node `node`, with the defaults.
    ///
    /// - Parameters:
    ///   - url: `redis://[[user]:password@]host[:port][/database]`.
    ///   - node: The node's name, unique in the cluster.
    /// - Throws: ``Tether/TetherError``, as ``init(configuration:)``.
    public convenience init(url: String, node: String) async throws(TetherError) {
        try await self.init(configuration: try RedisClusterConfiguration(url: url, node: node))
    }

    static func isValidNodeName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 48 && name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
    }

    /// Leaves the cluster and closes the connections to Redis. Call it once the server using
    /// the cluster has stopped.
    public func close() async {
        await leave()
        await mailboxes.close()
    }

    // MARK: Presence

    /// The node that holds `clientID`'s connection now, if any: the node of its latest
    /// claim, while that node is alive (seen within
    /// ``RedisClusterConfiguration/nodeTimeout``).
    ///
    /// - Parameter clientID: The client.
    /// - Returns: The node's name, or `nil` when no live node holds the client.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be read.
    public func holder(ofClient clientID: String) async throws(TetherError) -> String? {
        let reply = try await client.command(["HGET", prefix + "m:" + clientID, "holder"], name: "reading where client \"\(clientID)\" is")
        guard let holder = reply.text, !holder.isEmpty else { return nil }
        let alive = try await client.command(["EXISTS", prefix + "node:" + holder], name: "checking node \(holder)")
        return alive.integer == 1 ? holder : nil
    }

    // MARK: SessionCluster

    /// Joins as `node`: releases the clients an earlier run of the same node left held,
    /// records that the node is alive, and subscribes to its notices; returns once it is
    /// subscribed.
    ///
    /// - Parameter node: How the cluster reaches the server.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis is unreachable or the subscription does not start within twice
    ///   ``RedisConfiguration/connectTimeout``.
    public func join(_ node: ClusterNode) async throws {
        _ = try await client.evaluate(.releaseNode, [Array(prefix.utf8), Array(nodeName.utf8)], name: "registering node \(nodeName)")
        try await channelEngine.dropMembers(ofNode: nodeName)
        try await beat()
        state.withLock { $0.node = node }
        let bound = configuration.redis.connectTimeout * 2
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
                let reason = state.withLock { $0.lastError } ?? "no answer"
                let failure = TetherError(code: .storeFailed, message: "node \(nodeName) could not subscribe on Redis at \(configuration.redis.endpointName) within \(bound): \(reason)")
                waiter.resume(throwing: failure)
                throw failure
            }
            let subscription = Task { [self] in await subscribe() }
            state.withLock { $0.subscription = subscription }
            defer { group.cancelAll() }
            do {
                try await group.next()
            } catch {
                await leave()
                throw error
            }
        }
        let heartbeat = Task { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: configuration.heartbeatInterval)
                try? await beat()
            }
        }
        state.withLock { $0.heartbeat = heartbeat }
    }

    private func beat() async throws(TetherError) {
        _ = try await client.command(
            ["SET", prefix + "node:" + nodeName, "1", "PX", String(configuration.nodeTimeout.redisMilliseconds)],
            name: "recording that node \(nodeName) is alive"
        )
    }

    /// Leaves: stops listening and beating, and releases every client this node holds.
    public func leave() async {
        let (subscription, heartbeat, partition, subscriber, joined) = state.withLock { state in
            defer {
                state.subscription = nil
                state.heartbeat = nil
                state.partition = nil
                state.subscriber = nil
                state.node = nil
                state.listening = false
            }
            return (state.subscription, state.heartbeat, state.partition, state.subscriber, state.node != nil)
        }
        subscription?.cancel()
        heartbeat?.cancel()
        partition?.cancel()
        await subscriber?.close()
        _ = await subscription?.value
        guard joined else { return }
        _ = try? await client.evaluate(.releaseNode, [Array(prefix.utf8), Array(nodeName.utf8)], name: "node \(nodeName) leaving")
        try? await channelEngine.dropMembers(ofNode: nodeName)
        _ = try? await client.command(["DEL", prefix + "node:" + nodeName], name: "node \(nodeName) leaving")
    }

    /// Claims `clientID` for this node in one script: opens its mailbox, records this node
    /// with the next generation, and tells the node that held it before.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - limits: The bounds of the mailbox and of the whole store.
    ///   - now: The time to judge ages by.
    /// - Returns: The mailbox's summary and the claim's generation.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` or
    ///   ``Tether/TetherError/Code/mailboxesFull``.
    public func claim(_ clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> ClusterClaim {
        let reply = try await client.evaluate(.claim, [
            Array(prefix.utf8), Array(clientID.utf8), Array(String(now.millisecondsSince1970).utf8),
            Array(RedisMailboxStore.oldest(limits, now).utf8), Array(String(limits.maximumMessages).utf8),
            Array(String(limits.maximumMailboxes).utf8), Array(String(MailboxLimits.messageOverhead).utf8),
            Array(randomEpoch().utf8), Array(nodeName.utf8),
        ], name: "claiming client \"\(clientID)\" for node \(nodeName)")
        guard let elements = reply.elements, let status = elements.first?.text else { throw mailboxes.unexpected(reply, "a claim") }
        if status == "mailboxes" { throw limits.tooManyMailboxes(for: clientID) }
        guard elements.count == 8, let generation = elements[7].integer else { throw mailboxes.unexpected(reply, "a claim") }
        return ClusterClaim(summary: try mailboxes.summary(elements, reply), generation: UInt64(generation))
    }

    /// Releases the claim `generation` of `clientID`, unless a later claim replaced it.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - generation: The generation of the claim that ended.
    public func release(_ clientID: String, generation: UInt64) async {
        _ = try? await client.evaluate(.release, [
            Array(prefix.utf8), Array(nodeName.utf8), Array(clientID.utf8), Array(String(generation).utf8),
        ], name: "releasing client \"\(clientID)\" of node \(nodeName)")
    }

    /// Nothing: the store's appends wake the nodes in their own scripts.
    ///
    /// - Parameter pushes: The pushes stored.
    public func stored(_ pushes: [MailboxMessage]) async {}

    /// Sends `frame` to the peers of every other node.
    ///
    /// - Parameter frame: The frame.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot take it.
    public func broadcast(_ frame: Frame) async throws {
        try await Self.publishBroadcast(frame, from: nodeName, through: mailboxes)
    }

    /// Publishes `frame` on the broadcast channel; nodes other than `origin` write it.
    static func publishBroadcast(_ frame: Frame, from origin: String, through mailboxes: RedisMailboxStore) async throws(TetherError) {
        let configuration = mailboxes.client.configuration
        var message = Array("\(origin.utf8.count):\(origin)\(frame.type)|".utf8)
        message.append(contentsOf: frame.payload)
        let reply = try await mailboxes.client.run([Array("PUBLISH".utf8), Array((configuration.keyPrefix + "b").utf8), message], name: "broadcasting from \(origin)")
        if case .error(let text) = reply {
            throw TetherError(code: .storeFailed, message: "Redis at \(configuration.endpointName) refused a broadcast of \(origin): \(text)")
        }
    }

    /// Checks that Redis answers: one `PING`.
    ///
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when it
    ///   does not, within ``RedisConfiguration/commandTimeout``.
    public func check() async throws(TetherError) {
        _ = try await client.command(["PING"], name: "checking the connection")
    }

    // MARK: The subscription

    /// Subscribes to this node's notices and the broadcasts, and again after every loss,
    /// until the node leaves.
    private func subscribe() async {
        var delay = configuration.reconnectDelay
        var lost = false
        while !Task.isCancelled {
            let connection = RedisConnection(configuration: configuration.redis, loop: TetherEventLoopGroup.shared.next())
            let (drops, dropped) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
            await connection.subscribing(
                message: { [weak self] channel, payload in self?.received(payload, on: channel) },
                drop: { _ in dropped.yield() }
            )
            state.withLock { $0.subscriber = connection }
            do {
                let replies = try await connection.runAll([
                    [Array("SUBSCRIBE".utf8), Array(nodeChannel.utf8)],
                    [Array("SUBSCRIBE".utf8), Array(broadcastChannel.utf8)],
                    [Array("SUBSCRIBE".utf8), Array(channelsChannel.utf8)],
                ], name: "subscribing to the notices of node \(nodeName)")
                for reply in replies where reply.elements?.first?.text != "subscribe" {
                    throw TetherError(code: .storeFailed, message: "Redis at \(configuration.redis.endpointName) refused the subscription of node \(nodeName): \(reply)")
                }
            } catch {
                state.withLock { $0.lastError = TetherError.reason(of: error) }
                await connection.close()
                if lost { startPartition() }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
                continue
            }
            delay = configuration.reconnectDelay
            let (waiter, node) = state.withLock { state -> (CheckedContinuation<Void, any Error>?, ClusterNode?) in
                state.listening = true
                state.partition?.cancel()
                state.partition = nil
                if lost { state.resyncs += 1 }
                defer { state.joinWaiter = nil }
                return (state.joinWaiter, state.node)
            }
            waiter?.resume()
            if lost, let node {
                node.channelsMayHaveMissed()
                await resync(node)
            }
            // Until the connection drops (a PING that is not answered in time drops it too).
            let pinger = Task { [configuration] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: configuration.heartbeatInterval)
                    if Task.isCancelled { return }
                    _ = try? await connection.run([Array("PING".utf8)], name: "checking the subscription")
                }
            }
            for await _ in drops { break }
            pinger.cancel()
            await connection.close()
            state.withLock { $0.listening = false }
            lost = true
            if Task.isCancelled { return }
            startPartition()
        }
    }

    /// The subscription is down: past the grace, the clients here are sent away.
    private func startPartition() {
        let task = Task { [self] in
            try? await Task.sleep(for: configuration.partitionGrace)
            if Task.isCancelled { return }
            let node = state.withLock { $0.listening ? nil : $0.node }
            node?.closeSessions(reason: "node \(nodeName) lost its subscription on Redis at \(configuration.redis.endpointName) for more than \(configuration.partitionGrace)")
        }
        let previous = state.withLock { state -> Task<Void, Never>? in
            if state.partition != nil { return task }
            state.partition = task
            return nil
        }
        previous?.cancel()
    }

    /// After a loss: every client held here is woken through its last stored push, and one
    /// whose claim moved on is closed.
    private func resync(_ node: ClusterNode) async {
        for session in node.sessions {
            let key = prefix + "m:" + session.clientID
            guard let reply = try? await client.command(["HMGET", key, "holder", "gen", "last"], name: "checking client \"\(session.clientID)\""),
                let fields = reply.elements, fields.count == 3
            else { continue }
            let holder = fields[0].text ?? ""
            let generation = UInt64(fields[1].integer ?? 0)
            if holder != nodeName || generation != session.generation {
                node.takenOver(clientID: session.clientID, generation: max(generation, session.generation + 1), by: holder.isEmpty ? "nobody" : holder)
                continue
            }
            node.wake(clientID: session.clientID, through: UInt64(fields[2].integer ?? 0))
        }
    }

    // MARK: Notices

    private func received(_ payload: [UInt8], on channel: [UInt8]) {
        guard let node = state.withLock({ $0.node }) else { return }
        if channel.elementsEqual(channelsChannel.utf8) {
            receivedChannelNotice(payload, node: node)
            return
        }
        if channel.elementsEqual(broadcastChannel.utf8) {
            guard var reader = NoticeReader(payload), let origin = reader.counted(), origin != nodeName,
                let type = reader.number(until: UInt8(ascii: "|")).flatMap(UInt32.init(exactly:))
            else { return }
            node.broadcastLocally(Frame(type: type, serial: 0, payload: reader.rest))
            return
        }
        guard let kind = payload.first, var reader = NoticeReader(Array(payload.dropFirst())),
            let number = reader.number(until: UInt8(ascii: ":")), let clientID = reader.counted()
        else { return }
        switch kind {
        case UInt8(ascii: "p"):
            guard let message = try? mailboxes.decodeItem(reader.rest, clientID: clientID, sequence: number) else { return }
            node.deliver(message)
        case UInt8(ascii: "w"):
            node.wake(clientID: clientID, through: number)
        case UInt8(ascii: "t"):
            node.takenOver(clientID: clientID, generation: number, by: String(decoding: reader.rest, as: UTF8.self))
        default:
            return
        }
    }
}

extension RedisCluster {
    /// A notice of the channels' pub/sub channel (see ``RedisChannelScripts``).
    func receivedChannelNotice(_ payload: [UInt8], node: ClusterNode) {
        guard let kind = payload.first, var reader = NoticeReader(Array(payload.dropFirst())) else { return }
        switch kind {
        case UInt8(ascii: "m"):
            guard let epoch = reader.counted(), let offset = reader.number(until: UInt8(ascii: ":")),
                let stored = reader.number(until: UInt8(ascii: ":")), let expires = reader.optionalNumber(until: UInt8(ascii: ":")),
                let name = reader.counted()
            else { return }
            node.published(ChannelRecord(
                channel: name, epoch: epoch, offset: offset,
                storedAt: MailboxTime(millisecondsSince1970: Int64(clamping: stored)),
                expiresAt: expires.map { MailboxTime(millisecondsSince1970: Int64(clamping: $0)) },
                content: reader.rest
            ))
        case UInt8(ascii: "M"):
            guard let epoch = reader.counted(), let offset = reader.number(until: UInt8(ascii: ":")), let name = reader.counted() else { return }
            node.published(channel: name, epoch: epoch, through: offset)
        case UInt8(ascii: "j"), UInt8(ascii: "l"):
            guard let origin = reader.counted(), origin != nodeName, let channel = reader.counted(),
                let connection = reader.counted(), let client = reader.counted()
            else { return }
            let info = reader.rest.isEmpty ? nil : try? JSONValue(parsing: reader.rest)
            let member = ChannelMember(connection: connection, clientID: client.isEmpty ? nil : client, info: info)
            node.presenceChanged(ChannelPresenceChange(channel: channel, member: member, joined: kind == UInt8(ascii: "j")))
        default:
            return
        }
    }
}

/// Reads the fields of a notice: decimal numbers ended by a byte, and counted strings
/// (`<length>:<bytes>`).
struct NoticeReader {
    private let bytes: [UInt8]
    private var index = 0

    init?(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    mutating func number(until end: UInt8) -> UInt64? {
        var value: UInt64 = 0
        var digits = 0
        while index < bytes.count, bytes[index] != end {
            let byte = bytes[index]
            guard byte >= 0x30, byte <= 0x39, digits < 19 else { return nil }
            value = value * 10 + UInt64(byte - 0x30)
            digits += 1
            index += 1
        }
        guard index < bytes.count, digits > 0 else { return nil }
        index += 1
        return value
    }

    /// A number, or nothing (no digits before `end`): `.some(nil)`; `nil` when malformed.
    mutating func optionalNumber(until end: UInt8) -> UInt64?? {
        if index < bytes.count, bytes[index] == end {
            index += 1
            return .some(nil)
        }
        return number(until: end).map { .some($0) }
    }

    mutating func counted() -> String? {
        guard let count = number(until: UInt8(ascii: ":")), count <= UInt64(bytes.count - index) else { return nil }
        let text = String(decoding: bytes[index..<(index + Int(count))], as: UTF8.self)
        index += Int(count)
        return text
    }

    var rest: [UInt8] { Array(bytes[index...]) }
}

extension MailboxConfiguration {
    /// Mailboxes shared by the nodes of `cluster`: the server becomes one of its nodes when
    /// it runs.
    ///
    /// The same as `MailboxConfiguration(cluster: cluster)`.
    ///
    /// - Parameter cluster: The cluster, as this node.
    /// - Returns: The configuration, with the default limits.
    public static func redis(_ cluster: RedisCluster) -> MailboxConfiguration {
        MailboxConfiguration(cluster: cluster)
    }
}
