public import Tether

/// Pushes to identified clients from a process that holds no connection: a backend service,
/// a job, a script. The push is stored in the client's mailbox in the cluster's database and
/// wakes the node that holds the client, if any, exactly as a push made on a node does.
///
/// ```swift
/// import TetherPostgres
///
/// let publisher = try await PostgresPublisher(url: "postgresql://tether@db.internal/tether")
/// let sequence = try await publisher.push(Frame(type: 0x10, payload: body), toClient: "alice")
/// ```
///
/// A client that is offline gets the push when it comes back, on whichever node. The
/// publisher uses the mailbox limits it is given: give it the servers' own.
///
/// It publishes to the cluster's channels too, as a node does
/// (``publish(_:to:timeToLive:)``): the message gets the channel's next offset and reaches
/// its subscribers on every node.
public final class PostgresPublisher: Sendable {
    let routed: PostgresRoutedStore
    /// The bounds pushes are stored under.
    public let limits: MailboxLimits
    /// What the channels' histories keep: the servers' own
    /// ``Tether/ChannelConfiguration/historySize`` and ``Tether/ChannelConfiguration/historyAge``.
    public let channelRetention: ChannelRetention
    private let clock: @Sendable () -> MailboxTime
    private let channels: PostgresChannels

    /// Connects to the cluster's database and creates the tables if they are absent.
    ///
    /// - Parameters:
    ///   - configuration: The database, and the publisher's connections to it.
    ///   - limits: The mailbox bounds to store under: the servers' own. Default the defaults.
    ///   - channelRetention: What the channels' histories keep: the servers' own. Default
    ///     the defaults of ``Tether/ChannelConfiguration``.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when the
    ///   database is unreachable or refuses the tables.
    public init(configuration: PostgresConfiguration, limits: MailboxLimits = MailboxLimits(), channelRetention: ChannelRetention = ChannelRetention()) async throws(TetherError) {
        let mailboxes = try await PostgresMailboxStore(configuration: configuration)
        do {
            try await PostgresRoutedStore.prepareSchema(in: mailboxes.database)
        } catch {
            await mailboxes.close()
            throw error
        }
        routed = PostgresRoutedStore(mailboxes: mailboxes, origin: nil, inlineLimit: PostgresNotice.defaultInlineLimit)
        self.limits = limits
        self.channelRetention = channelRetention
        clock = { MailboxTime.now() }
        channels = PostgresChannels(routed: routed, inlineLimit: PostgresNotice.defaultInlineLimit)
    }

    /// Connects to the cluster's database at `url` with the defaults.
    ///
    /// - Parameter url: A libpq connection string or a `postgresql://` URL.
    /// - Throws: ``Tether/TetherError``, as ``init(configuration:limits:channelRetention:)``.
    public convenience init(url: String) async throws(TetherError) {
        try await self.init(configuration: PostgresConfiguration(url: url))
    }

    /// Stores a push for `clientID` and wakes the node that holds it.
    ///
    /// - Parameters:
    ///   - frame: The notification; its type and payload are kept, its serial is replaced.
    ///   - clientID: The client.
    /// - Returns: The push's sequence number in the client's mailbox.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   it could not be stored, ``Tether/TetherError/Code/mailboxesFull`` when a bound of
    ///   the store would be passed; then nothing was stored.
    @discardableResult
    public func push(_ frame: Frame, toClient clientID: String) async throws(TetherError) -> UInt64 {
        try await push(frame, toClients: [clientID])[0]
    }

    /// Stores a push for each of `clientIDs`, in one transaction, and wakes the nodes that
    /// hold them.
    ///
    /// - Parameters:
    ///   - frame: The notification.
    ///   - clientIDs: The clients.
    /// - Returns: The sequence number given to each client, in the same order.
    /// - Throws: ``Tether/TetherError``, as ``push(_:toClient:)``; then none was stored.
    @discardableResult
    public func push(_ frame: Frame, toClients clientIDs: [String]) async throws(TetherError) -> [UInt64] {
        try await push(frame, toClients: clientIDs, timeToLive: nil)
    }

    /// Stores a push for each of `clientIDs` for a time, as
    /// ``Tether/Server/push(_:toClient:timeToLive:)`` does: a client that resumes after
    /// `timeToLive` has passed skips it.
    ///
    /// - Parameters:
    ///   - frame: The notification.
    ///   - clientIDs: The clients.
    ///   - timeToLive: How long the push may be delivered; `nil` for as long as the
    ///     mailbox keeps it.
    /// - Returns: The sequence number given to each client, in the same order.
    /// - Throws: ``Tether/TetherError``, as ``push(_:toClient:)``; then none was stored.
    @discardableResult
    public func push(_ frame: Frame, toClients clientIDs: [String], timeToLive: Duration?) async throws(TetherError) -> [UInt64] {
        let now = clock()
        let expiresAt = timeToLive.map { now.adding($0) }
        let drafts = clientIDs.map { MailboxMessage.Draft(clientID: $0, type: frame.type, payload: frame.payload, expiresAt: expiresAt) }
        return try await routed.append(drafts, limits: limits, now: now)
    }

    /// Sends `frame` to the peers of every node of the cluster.
    ///
    /// - Parameter frame: The frame.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   the database cannot take it.
    public func broadcast(_ frame: Frame) async throws(TetherError) {
        try await routed.broadcast(frame, from: "*", retention: .seconds(60))
    }

    /// Publishes `content` to `channel`: the message gets the channel's next offset, is kept
    /// in its history, and reaches the channel's subscribers on every node, in offset
    /// order with the messages published by the nodes.
    ///
    /// - Parameters:
    ///   - content: The message.
    ///   - channel: The channel's name (``Tether/ChannelConfiguration/problem(withName:maximumLength:)``).
    ///   - timeToLive: How long the message may be delivered; `nil`, the default, for as
    ///     long as the history keeps it.
    /// - Returns: The message's offset in the channel.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument``
    ///   for a name that is not a channel's, ``Tether/TetherError/Code/storeFailed`` when it
    ///   could not be stored; then no subscriber gets it.
    @discardableResult
    public func publish(_ content: [UInt8], to channel: String, timeToLive: Duration? = nil) async throws(TetherError) -> UInt64 {
        let now = clock()
        do {
            return try await channels.publish(content, to: channel, expiresAt: timeToLive.map { now.adding($0) }, now: now, retention: channelRetention).offset
        } catch let error as TetherError {
            throw error
        } catch {
            throw TetherError(code: .storeFailed, message: "publishing to channel \(channel): \(error)")
        }
    }

    /// Closes the connections to the database.
    public func close() async {
        await routed.mailboxes.close()
    }
}
