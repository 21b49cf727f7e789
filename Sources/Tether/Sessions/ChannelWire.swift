/// The frame types of channels, the same on both ends.
///
/// In the seed profile the subscription and its end are requests (above `0x400`) and a
/// channel's message a push (`0x2…0x400`); the defaults fit the compact profile's two-byte
/// types too. The types are taken only where channels are on: a server with
/// ``ServerConfiguration/channels`` refuses handlers for them.
public struct ChannelWireTypes: Sendable, Hashable {
    /// The subscription request. Default `0xFF01`.
    public var subscribe: UInt32 = 0xFF01
    /// The request that ends a subscription. Default `0xFF02`.
    public var unsubscribe: UInt32 = 0xFF02
    /// A client's publication to a channel. Default `0xFF03`.
    public var publish: UInt32 = 0xFF03
    /// The request for a channel's members. Default `0xFF04`.
    public var presence: UInt32 = 0xFF04
    /// A channel's message, server to client. Default `0x3FF`.
    public var message: UInt32 = 0x3FF

    /// The defaults.
    public init() {}
}

/// A subscriber of a channel, as presence lists it.
public struct ChannelMember: Sendable, Hashable {
    /// The server's name for the subscriber's connection (`peer#12`): unique among the
    /// members of one server; on a node of a cluster, the node's name comes first
    /// (`gw-1/peer#12`), so it is unique in the cluster.
    public var connection: String
    /// The client id of the subscriber's session, when it identified.
    public var clientID: String?
    /// What the subscriber told about itself when it subscribed.
    public var info: JSONValue?

    /// A member.
    ///
    /// - Parameters:
    ///   - connection: The name of the subscriber's connection.
    ///   - clientID: The client id of its session.
    ///   - info: What it told about itself.
    public init(connection: String, clientID: String?, info: JSONValue?) {
        self.connection = connection
        self.clientID = clientID
        self.info = info
    }

    init(_ member: ChannelWire.Member) {
        connection = member.connection
        clientID = member.clientID
        info = member.info
    }
}

/// Who is subscribed to a channel.
public struct ChannelPresence: Sendable, Hashable {
    /// The channel's name.
    public var channel: String
    /// How many subscribers it has: all of them, however many ``members`` lists.
    public var count: Int
    /// The subscribers, up to ``ChannelConfiguration/maximumPresenceMembers``, ordered by
    /// client id, then connection.
    public var members: [ChannelMember]

    /// A presence.
    ///
    /// - Parameters:
    ///   - channel: The channel's name.
    ///   - count: How many subscribers it has.
    ///   - members: Those listed.
    public init(channel: String, count: Int, members: [ChannelMember]) {
        self.channel = channel
        self.count = count
        self.members = members
    }

    init(_ presence: ChannelWire.Presence) {
        channel = presence.channel
        count = presence.count
        members = presence.members.map(ChannelMember.init)
    }
}

/// The bodies of the channel frames.
///
/// A subscription is a request with a JSON body, `{"channel": …}` plus where to start:
/// `"after"` (an offset) with the `"epoch"` it belongs to, or `"last"` (a count); neither
/// starts from now. Its answer says the channel's epoch, the offset after which messages
/// follow (`"after"`), and whether the start asked for could be kept (`"recovered"`, with a
/// `"reason"` when not). A channel's message is a push whose payload is a flags byte, the
/// channel name's length (one byte), the name, the offset (eight bytes, big-endian), then
/// the content: written once per message and shared by every subscriber. A message whose
/// time to live has passed is written from the history with the expired flag and no
/// content, so the subscriber's offsets stay consecutive.
enum ChannelWire {
    struct Subscribe: Codable, Hashable {
        var channel: String
        var after: UInt64?
        var epoch: String?
        var last: Int?
        /// What the subscriber tells the channel's other members about itself.
        var info: JSONValue?
        /// Whether the subscriber wants the channel's join and leave events.
        var presence: Bool?
    }

    /// A member of a channel, as the presence request's answer and the presence events
    /// carry it.
    struct Member: Codable, Hashable {
        var connection: String
        var clientID: String?
        var info: JSONValue?
    }

    struct PresenceRequest: Codable, Hashable {
        var channel: String
    }

    struct Presence: Codable, Hashable {
        var channel: String
        var count: Int
        var members: [Member]
    }

    /// A join or leave event, the content of a message frame with the presence flag.
    struct PresenceChange: Codable, Hashable {
        var joined: Member?
        var left: Member?
    }

    struct Subscribed: Codable, Hashable {
        var channel: String
        var epoch: String
        var after: UInt64
        var recovered: Bool
        var reason: String?
    }

    struct Unsubscribe: Codable, Hashable {
        var channel: String
    }

    struct Published: Codable, Hashable {
        var channel: String
        var offset: UInt64
    }

    /// The payload of a publication: the channel name's length (one byte), the name, the
    /// time to live in milliseconds (eight bytes, big-endian; 0 for none), then the content.
    static func publication(channel: String, content: [UInt8], timeToLive: Duration? = nil) -> [UInt8] {
        let name = Array(channel.utf8)
        var milliseconds: UInt64 = 0
        if let timeToLive {
            let (seconds, attoseconds) = timeToLive.components
            milliseconds = UInt64(max(1, seconds * 1_000 + attoseconds / 1_000_000_000_000_000))
        }
        var bytes = [UInt8(name.count)] + name
        withUnsafeBytes(of: milliseconds.bigEndian) { bytes += $0 }
        return bytes + content
    }

    /// The channel, content and time to live of a publication's payload, or `nil` when it
    /// is too short for what its bytes say.
    static func openPublication(_ payload: [UInt8]) -> (channel: String, content: [UInt8], timeToLive: Duration?)? {
        guard let first = payload.first, payload.count >= 1 + Int(first) + 8 else { return nil }
        let end = 1 + Int(first)
        var milliseconds: UInt64 = 0
        for byte in payload[end..<(end + 8)] { milliseconds = milliseconds << 8 | UInt64(byte) }
        let timeToLive: Duration? = milliseconds == 0 ? nil : .milliseconds(Int64(clamping: milliseconds))
        return (String(decoding: payload[1..<end], as: UTF8.self), Array(payload[(end + 8)...]), timeToLive)
    }

    /// The longest name the message envelope can carry.
    static let nameLimit = 255

    /// Whether `name` is a channel name: 1 to `limit` bytes of ASCII letters, digits and
    /// `- _ . : / @`; the reason when not.
    static func nameProblem(_ name: String, limit: Int) -> String? {
        let bytes = name.utf8
        if bytes.isEmpty { return "a channel name cannot be empty" }
        let bound = min(limit, nameLimit)
        if bytes.count > bound { return "channel name of \(bytes.count) bytes is longer than \(bound)" }
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "/"), UInt8(ascii: "@"):
                continue
            default:
                return "channel name '\(name)' has a character other than ASCII letters, digits and - _ . : / @"
            }
        }
        return nil
    }

    /// The payload of a message frame: a flags byte (bit 0: the message expired, and
    /// carries no content; bit 1: a presence event, outside the offsets, whose content is
    /// a ``PresenceChange``), the name's length, the name, the offset, the content.
    static func envelope(channel: String, offset: UInt64, content: [UInt8], expired: Bool = false, presence: Bool = false) -> [UInt8] {
        let name = Array(channel.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(2 + name.count + 8 + content.count)
        bytes.append((expired ? 1 : 0) | (presence ? 2 : 0))
        bytes.append(UInt8(name.count))
        bytes += name
        withUnsafeBytes(of: offset.bigEndian) { bytes += $0 }
        bytes += content
        return bytes
    }

    /// The channel, offset, content and expiry of a message frame's payload, or `nil` when
    /// it is too short for what its bytes say.
    static func open(_ payload: [UInt8]) -> (channel: String, offset: UInt64, content: [UInt8], expired: Bool, presence: Bool)? {
        guard payload.count >= 2 else { return nil }
        let nameEnd = 2 + Int(payload[1])
        guard payload.count >= nameEnd + 8 else { return nil }
        let channel = String(decoding: payload[2..<nameEnd], as: UTF8.self)
        var offset: UInt64 = 0
        for byte in payload[nameEnd..<(nameEnd + 8)] { offset = offset << 8 | UInt64(byte) }
        return (channel, offset, Array(payload[(nameEnd + 8)...]), payload[0] & 1 != 0, payload[0] & 2 != 0)
    }
}
