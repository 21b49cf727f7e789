/// What a cluster engine does for channels (``ServerConfiguration/channels``): one order of
/// messages per channel for every node, and the history nodes recover from.
///
/// A server alone numbers a channel's messages itself. A node of a cluster whose engine has
/// channels (``SessionCluster/channels``) leaves that to the engine instead:
///
/// - ``publish(_:to:expiresAt:now:retention:)`` gives the message the channel's next offset,
///   once, whichever node or backend publishes, keeps it in the channel's history, and
///   tells every node (``ClusterNode/published(_:)`` with the message, or
///   ``ClusterNode/published(channel:epoch:through:)`` to read it);
/// - ``history(of:after:limit:)`` reads the channel's epoch, latest offset and kept
///   messages: a node reads it when a channel it did not keep gets a subscriber here, and
///   when the offsets it was told of have a gap.
///
/// - ``presenceChanged(_:)`` records who joined and left channels on this node, and tells
///   the other nodes (``ClusterNode/presenceChanged(_:)``); ``presence(of:limit:)`` lists
///   the members on every live node.
///
/// As with pushes, the engine's history is the truth and a notice is a hint: a node writes a
/// channel's messages in offset order, reads what it was not handed, and writes none twice.
/// An engine that may have missed notices (it lost its connection to its broker) calls
/// ``ClusterNode/channelsMayHaveMissed()``.
public protocol ChannelEngine: Sendable {
    /// Stores `content` as the next message of `channel`, made with a new epoch if it is
    /// new, keeps the channel's history within `retention`, and tells every node.
    ///
    /// - Parameters:
    ///   - content: The message.
    ///   - channel: The channel's name, already checked.
    ///   - expiresAt: When the message's time to live ends; `nil` for none.
    ///   - now: The time the message is stored at.
    ///   - retention: What the channel's history keeps.
    /// - Returns: The message as stored: its epoch and offset.
    /// - Throws: When it could not be stored; then no node hears of it.
    func publish(_ content: [UInt8], to channel: String, expiresAt: MailboxTime?, now: MailboxTime, retention: ChannelRetention) async throws -> ChannelRecord

    /// The channel's epoch and latest offset, and up to `limit` of its kept messages after
    /// `offset`, oldest first; the channel is made, with a new epoch, if it is new.
    ///
    /// - Parameters:
    ///   - channel: The channel's name.
    ///   - offset: Messages after this offset; 0 for all that are kept.
    ///   - limit: The most messages returned.
    /// - Returns: The channel and its messages.
    /// - Throws: When the engine cannot be read.
    func history(of channel: String, after offset: UInt64, limit: Int) async throws -> ChannelHistory

    /// Records that members joined or left channels on this node, and tells every other
    /// node. Changes of one member of one channel come in the order they happened; a node
    /// may leave out a join that a leave of the same member followed before it called.
    ///
    /// - Parameter changes: The changes.
    /// - Throws: When they could not be recorded; the node calls again with them.
    func presenceChanged(_ changes: [ChannelPresenceChange]) async throws

    /// Who is subscribed to `channel` on every node that is alive: how many, and the first
    /// `limit` ordered by client id, then connection.
    ///
    /// - Parameters:
    ///   - channel: The channel's name.
    ///   - limit: The most members listed.
    /// - Returns: The channel's presence.
    /// - Throws: When the engine cannot be read.
    func presence(of channel: String, limit: Int) async throws -> ChannelPresence
}

/// A member that joined or left a channel.
public struct ChannelPresenceChange: Sendable, Hashable {
    /// The channel.
    public var channel: String
    /// The member, with the info it gave when it joined.
    public var member: ChannelMember
    /// Whether it joined; `false` when it left.
    public var joined: Bool

    /// A change.
    ///
    /// - Parameters:
    ///   - channel: The channel.
    ///   - member: The member.
    ///   - joined: Whether it joined.
    public init(channel: String, member: ChannelMember, joined: Bool) {
        self.channel = channel
        self.member = member
        self.joined = joined
    }
}

/// A message of a channel as an engine stores it.
public struct ChannelRecord: Sendable, Hashable {
    /// The channel.
    public var channel: String
    /// The channel's epoch: a new one whenever its offsets began again.
    public var epoch: String
    /// The message's offset in the epoch: 1, 2, 3, …
    public var offset: UInt64
    /// When it was stored.
    public var storedAt: MailboxTime
    /// When its time to live ends; `nil` for none.
    public var expiresAt: MailboxTime?
    /// The message.
    public var content: [UInt8]

    /// Creates a record.
    ///
    /// - Parameters:
    ///   - channel: The channel.
    ///   - epoch: The channel's epoch.
    ///   - offset: The message's offset.
    ///   - storedAt: When it was stored.
    ///   - expiresAt: When its time to live ends.
    ///   - content: The message.
    public init(channel: String, epoch: String, offset: UInt64, storedAt: MailboxTime, expiresAt: MailboxTime?, content: [UInt8]) {
        self.channel = channel
        self.epoch = epoch
        self.offset = offset
        self.storedAt = storedAt
        self.expiresAt = expiresAt
        self.content = content
    }
}

/// What an engine keeps of a channel: its epoch, its latest offset, and kept messages.
public struct ChannelHistory: Sendable, Hashable {
    /// The channel's epoch.
    public var epoch: String
    /// The offset of its latest message; 0 when it has none.
    public var latest: UInt64
    /// Kept messages, oldest first, with consecutive offsets.
    public var messages: [ChannelRecord]

    /// Creates a history.
    ///
    /// - Parameters:
    ///   - epoch: The channel's epoch.
    ///   - latest: The offset of its latest message.
    ///   - messages: Kept messages, oldest first.
    public init(epoch: String, latest: UInt64, messages: [ChannelRecord]) {
        self.epoch = epoch
        self.latest = latest
        self.messages = messages
    }
}

/// How much of a channel's history an engine keeps: the servers' own
/// ``ChannelConfiguration/historySize`` and ``ChannelConfiguration/historyAge``.
public struct ChannelRetention: Sendable, Hashable {
    /// The most messages kept; the oldest go first. Default 256.
    public var count: Int
    /// How long a message is kept; `nil` for as long as ``count`` allows. Default 5 minutes.
    public var age: Duration?

    /// A retention.
    ///
    /// - Parameters:
    ///   - count: The most messages kept.
    ///   - age: How long a message is kept.
    public init(count: Int = 256, age: Duration? = .seconds(300)) {
        self.count = count
        self.age = age
    }
}
