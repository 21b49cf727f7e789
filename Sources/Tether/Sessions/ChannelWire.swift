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
    /// A channel's message, server to client. Default `0x3FF`.
    public var message: UInt32 = 0x3FF

    /// The defaults.
    public init() {}
}

/// The bodies of the channel frames.
///
/// A subscription is a request with a JSON body, `{"channel": …}` plus where to start:
/// `"after"` (an offset) with the `"epoch"` it belongs to, or `"last"` (a count); neither
/// starts from now. Its answer says the channel's epoch, the offset after which messages
/// follow (`"after"`), and whether the start asked for could be kept (`"recovered"`, with a
/// `"reason"` when not). A channel's message is a push whose payload is the channel name's
/// length (one byte), the name, the offset (eight bytes, big-endian), then the content:
/// written once per message and shared by every subscriber.
enum ChannelWire {
    struct Subscribe: Codable, Hashable {
        var channel: String
        var after: UInt64?
        var epoch: String?
        var last: Int?
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

    /// The payload of a publication: the channel name's length (one byte), the name, then
    /// the content.
    static func publication(channel: String, content: [UInt8]) -> [UInt8] {
        let name = Array(channel.utf8)
        return [UInt8(name.count)] + name + content
    }

    /// The channel and content of a publication's payload, or `nil` when it is too short
    /// for what its first byte says.
    static func openPublication(_ payload: [UInt8]) -> (channel: String, content: [UInt8])? {
        guard let first = payload.first, payload.count >= 1 + Int(first) else { return nil }
        let end = 1 + Int(first)
        return (String(decoding: payload[1..<end], as: UTF8.self), Array(payload[end...]))
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

    /// The payload of a message frame.
    static func envelope(channel: String, offset: UInt64, content: [UInt8]) -> [UInt8] {
        let name = Array(channel.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(1 + name.count + 8 + content.count)
        bytes.append(UInt8(name.count))
        bytes += name
        withUnsafeBytes(of: offset.bigEndian) { bytes += $0 }
        bytes += content
        return bytes
    }

    /// The channel, offset and content of a message frame's payload, or `nil` when it is
    /// too short for what its first byte says.
    static func open(_ payload: [UInt8]) -> (channel: String, offset: UInt64, content: [UInt8])? {
        guard let first = payload.first else { return nil }
        let nameEnd = 1 + Int(first)
        guard payload.count >= nameEnd + 8 else { return nil }
        let channel = String(decoding: payload[1..<nameEnd], as: UTF8.self)
        var offset: UInt64 = 0
        for byte in payload[nameEnd..<(nameEnd + 8)] { offset = offset << 8 | UInt64(byte) }
        return (channel, offset, Array(payload[(nameEnd + 8)...]))
    }
}
