/// Channels: named topics a server publishes to and its clients subscribe to, each with a
/// bounded history that a subscriber coming back recovers what it missed from.
///
/// A channel's name is 1 to ``maximumNameLength`` bytes of ASCII letters, digits and
/// `- _ . : / @`. A channel exists from its first subscription or publication; each message
/// published to it gets the next offset (1, 2, 3, …) of the channel's epoch, is stored once
/// in the channel's history, and is written to every subscriber in offset order.
///
/// ```swift
/// var configuration = ServerConfiguration(port: 9000)
/// configuration.channels = ChannelConfiguration()
/// let server = Server(configuration: configuration)
/// try await server.publish(Array("hello, room 42".utf8), to: "room-42")
/// ```
///
/// Every bound has a default and is checked before anything is allocated: a subscription
/// past one is refused with a response that names the channel and the bound, and a
/// publication past one throws.
public struct ChannelConfiguration: Sendable {
    /// The most channels the server keeps at once. A channel with no subscriber and no
    /// message left in its history is let go first to make room. Default 10,000.
    public var maximumChannels = 10_000
    /// The most subscribers one channel has at once. Default 100,000.
    public var maximumSubscribersPerChannel = 100_000
    /// The most channels one peer subscribes to at once. Default 128.
    public var maximumChannelsPerPeer = 128
    /// The most messages a channel's history keeps; the oldest go first. Default 256.
    public var historySize = 256
    /// How long a message stays in a channel's history; `nil` keeps it until
    /// ``historySize`` or the byte bounds push it out. Default 5 minutes.
    public var historyAge: Duration? = .seconds(300)
    /// The most payload bytes one channel's history keeps. Default 1 MiB.
    public var maximumHistoryBytesPerChannel = 1 << 20
    /// The most payload bytes the histories of all channels keep together. A message that
    /// does not fit once its own channel's oldest messages are gone is still written to the
    /// subscribers, but not kept: a subscriber that misses it is told its recovery failed.
    /// Default 64 MiB.
    public var maximumHistoryBytes = 64 << 20
    /// The most members one presence answer lists (``Server/presence(of:)``,
    /// ``Connection/presence(of:)``); the count is always whole. Default 1,000.
    public var maximumPresenceMembers = 1_000
    /// The most bytes of the info a subscriber gives about itself (as JSON). Default 1,024.
    public var maximumPresenceInfoBytes = 1_024
    /// The longest channel name, in bytes. Default 200.
    public var maximumNameLength = 200
    /// The frame types of the channel frames; must match the clients'.
    public var wireTypes = ChannelWireTypes()
    /// Decides whether a peer may subscribe to a channel; `nil`, the default, lets every
    /// peer subscribe to every channel. An error it throws refuses the subscription, and
    /// its message reaches the client in the ``TetherError/Code/channelRefused``
    /// error that ``Connection/subscribe(to:from:info:presenceEvents:)`` throws.
    public var authorize: (@Sendable (ChannelAccess) async throws -> Void)?
    /// Decides whether a peer may publish to a channel (``Connection/publish(_:to:timeToLive:)``);
    /// `nil`, the default, lets no client publish: only the server does
    /// (``Server/publish(_:to:timeToLive:)``). `{ _ in }` lets every client publish everywhere. An error
    /// it throws refuses the publication, and its message reaches the client.
    public var authorizePublish: (@Sendable (ChannelAccess) async throws -> Void)?
    /// The wall clock that ages the histories. Default the system's; tests may set their own.
    public var clock: @Sendable () -> MailboxTime = { MailboxTime.now() }

    /// The defaults.
    public init() {}

    /// What is wrong with `name` as a channel's name, if anything: empty, longer than
    /// `maximumLength` bytes (and never more than 255), or a byte other than ASCII letters,
    /// digits and `- _ . : / @`.
    ///
    /// - Parameters:
    ///   - name: The name.
    ///   - maximumLength: The longest name allowed; default 200, as ``maximumNameLength``.
    /// - Returns: A sentence that says what is wrong, or `nil` for a good name.
    public static func problem(withName name: String, maximumLength: Int = 200) -> String? {
        ChannelWire.nameProblem(name, limit: maximumLength)
    }
}

/// A subscription or a publication a server's ``ChannelConfiguration/authorize`` or
/// ``ChannelConfiguration/authorizePublish`` decides on.
public struct ChannelAccess: Sendable {
    /// The channel asked for.
    public var channel: String
    /// The peer that asks.
    public var peer: PeerID
    /// The peer's address.
    public var address: TetherSocketAddress
    /// The client id of the peer's session, when it identified (``ServerConfiguration/mailboxes``).
    public var clientID: String?
}
