public import Tether

/// Pushes from a process that holds no connection (a backend, a job) to the clients of a
/// cluster on Redis: each push is stored in its client's mailbox, and the node that holds
/// the client, if any, is woken by the append's own script and writes it at once.
///
/// ```swift
/// let publisher = try await RedisPublisher(url: "redis://cache.internal:6379")
/// try await publisher.push(Frame(type: 0x10, payload: message), toClient: "alice")
/// ```
///
/// Give it the nodes' ``Tether/MailboxLimits``: the bounds are checked by whoever appends.
public final class RedisPublisher: Sendable {
    let mailboxes: RedisMailboxStore
    let channels: RedisChannels
    /// The bounds it appends with.
    public let limits: MailboxLimits
    /// What the channels' histories keep when it publishes: the servers' own.
    public let channelRetention: ChannelRetention

    /// Connects to the cluster's Redis server.
    ///
    /// - Parameters:
    ///   - configuration: The server, with the nodes' ``RedisConfiguration/keyPrefix``.
    ///   - limits: The bounds of the mailboxes, as the nodes have them.
    ///   - channelRetention: What the channels' histories keep, as the nodes have it
    ///     (``Tether/ChannelConfiguration/historySize`` and
    ///     ``Tether/ChannelConfiguration/historyAge``). Default 256 messages and 5 minutes.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis is unreachable.
    public init(configuration: RedisConfiguration, limits: MailboxLimits = MailboxLimits(), channelRetention: ChannelRetention = ChannelRetention()) async throws(TetherError) {
        mailboxes = try await RedisMailboxStore(configuration: configuration, inlineNoticeBytes: 8_192)
        channels = RedisChannels(mailboxes: mailboxes, node: nil, inlineLimit: 8_192, nodeTimeout: .seconds(15))
        self.limits = limits
        self.channelRetention = channelRetention
    }

    /// Connects to the cluster's Redis server at `url`.
    ///
    /// - Parameters:
    ///   - url: `redis://[[user]:password@]host[:port][/database]`.
    ///   - limits: The bounds of the mailboxes, as the nodes have them.
    /// - Throws: ``Tether/TetherError``, as ``init(configuration:limits:channelRetention:)``, and
    ///   ``Tether/TetherError/Code/invalidArgument`` for a URL of another form.
    public convenience init(url: String, limits: MailboxLimits = MailboxLimits()) async throws(TetherError) {
        try await self.init(configuration: try RedisConfiguration(url: url), limits: limits)
    }

    /// Stores a push for `clientID` and wakes the node that holds it.
    ///
    /// - Parameters:
    ///   - frame: The notification; its type and payload are kept, its serial is replaced.
    ///   - clientID: The client.
    /// - Returns: The push's sequence number in the client's mailbox.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when it
    ///   could not be stored, ``Tether/TetherError/Code/mailboxesFull`` past a bound; then
    ///   nothing was stored.
    @discardableResult
    public func push(_ frame: Frame, toClient clientID: String) async throws(TetherError) -> UInt64 {
        try await push(frame, toClients: [clientID], timeToLive: nil)[0]
    }

    /// Stores a push for each of `clientIDs` in one script, and wakes the nodes that hold
    /// them; with `timeToLive`, a client that resumes after it has passed skips the push.
    ///
    /// - Parameters:
    ///   - frame: The notification.
    ///   - clientIDs: The clients.
    ///   - timeToLive: How long the push may be delivered; `nil` for as long as the
    ///     mailbox keeps it.
    /// - Returns: The sequence number given to each client, in the same order.
    /// - Throws: ``Tether/TetherError``, as ``push(_:toClient:)``; then none was stored.
    @discardableResult
    public func push(_ frame: Frame, toClients clientIDs: [String], timeToLive: Duration? = nil) async throws(TetherError) -> [UInt64] {
        let now = MailboxTime.now()
        let expiresAt = timeToLive.map { now.adding($0) }
        let drafts = clientIDs.map { MailboxMessage.Draft(clientID: $0, type: frame.type, payload: frame.payload, expiresAt: expiresAt) }
        return try await mailboxes.append(drafts, limits: limits, now: now)
    }

    /// Sends `frame` to the peers of every node of the cluster.
    ///
    /// - Parameter frame: The frame.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot take it.
    public func broadcast(_ frame: Frame) async throws(TetherError) {
        try await RedisCluster.publishBroadcast(frame, from: "publisher", through: mailboxes)
    }

    /// Publishes `content` to `channel`: the message gets the channel's next offset, is kept
    /// in its history, and reaches the channel's subscribers on every node, in offset order
    /// with the messages the nodes publish.
    ///
    /// - Parameters:
    ///   - content: The message.
    ///   - channel: The channel's name (``Tether/ChannelConfiguration/problem(withName:maximumLength:)``).
    ///   - timeToLive: How long the message may be delivered; `nil`, the default, for as
    ///     long as the history keeps it.
    /// - Returns: The message's offset in the channel.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument`` for a
    ///   name that is not a channel's, ``Tether/TetherError/Code/storeFailed`` when it could
    ///   not be stored; then no subscriber gets it.
    @discardableResult
    public func publish(_ content: [UInt8], to channel: String, timeToLive: Duration? = nil) async throws(TetherError) -> UInt64 {
        let now = MailboxTime.now()
        do {
            return try await channels.publish(content, to: channel, expiresAt: timeToLive.map { now.adding($0) }, now: now, retention: channelRetention).offset
        } catch let error as TetherError {
            throw error
        } catch {
            throw TetherError(code: .storeFailed, message: "publishing to channel \(channel): \(error)")
        }
    }

    /// Closes the connections to Redis.
    public func close() async {
        await mailboxes.close()
    }
}
