import Foundation
internal import Tether

/// The notices nodes send each other with `NOTIFY`: one line of text each, well under
/// PostgreSQL's limit of 8,000 bytes per payload. A notice only wakes a node; what it tells
/// is always in the tables too.
///
/// - `p SEQUENCE TYPE STORED_AT CLIENT PAYLOAD` — a push, content included (client id and
///   payload in base64);
/// - `w SEQUENCE CLIENT` — pushes stored through `SEQUENCE`, to read from the mailbox;
/// - `t GENERATION CLIENT NODE` — `NODE` claimed the client with `GENERATION`;
/// - `b ORIGIN TYPE PAYLOAD` — a broadcast from node `ORIGIN`, on the broadcast channel;
/// - `r ORIGIN ID` — a broadcast too large for a notice, in `tether_broadcasts` row `ID`;
/// - `c EPOCH OFFSET STORED_AT EXPIRES_AT CHANNEL CONTENT` — a channel's message, content
///   included (`EXPIRES_AT` is `-` for none; channel and content in base64), on the channels'
///   channel;
/// - `C EPOCH OFFSET CHANNEL` — a channel's messages stored through `OFFSET`, to read from
///   `tether_channel_messages`;
/// - `j ORIGIN CHANNEL CONNECTION CLIENT INFO` and `l ORIGIN CHANNEL CONNECTION CLIENT INFO`
///   — a member joined or left a channel on node `ORIGIN` (all but `ORIGIN` in base64;
///   `-` for no client id or info).
enum PostgresNotice: Equatable {
    case push(MailboxMessage)
    case wake(clientID: String, through: UInt64)
    case takeover(clientID: String, generation: UInt64, node: String)
    case broadcast(origin: String, type: UInt32, payload: [UInt8])
    case storedBroadcast(origin: String, id: Int64)
    case channelMessage(ChannelRecord)
    case channelStored(channel: String, epoch: String, through: UInt64)
    case presence(origin: String, ChannelPresenceChange)

    /// The most bytes a notice may have: PostgreSQL refuses payloads of 8,000 bytes and more.
    static let maximumLength = 7_999

    /// How many bytes of notice a push may take by default and still travel inside it.
    static let defaultInlineLimit = 6_000

    /// The channel of node `name`.
    static func channel(ofNode name: String) -> String { "tether.node.\(name)" }

    /// The channel every node listens on for broadcasts.
    static let broadcastChannel = "tether.broadcast"

    /// The channel every node listens on for channel messages.
    static let channelsChannel = "tether.channels"

    /// Whether `name` can name a node: 1 to 48 letters, digits, `.`, `-` or `_`, so its
    /// channel name stays within PostgreSQL's 63 bytes and needs no quoting inside notices.
    static func isValidNodeName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 48 && name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2E || byte == 0x2D || byte == 0x5F
        }
    }

    var text: String {
        switch self {
        case .push(let push):
            return "p \(push.sequence) \(push.type) \(push.storedAt.millisecondsSince1970) \(Self.encode(Array(push.clientID.utf8))) \(Self.encode(push.payload))"
        case .wake(let clientID, let through):
            return "w \(through) \(Self.encode(Array(clientID.utf8)))"
        case .takeover(let clientID, let generation, let node):
            return "t \(generation) \(Self.encode(Array(clientID.utf8))) \(node)"
        case .broadcast(let origin, let type, let payload):
            return "b \(origin) \(type) \(Self.encode(payload))"
        case .storedBroadcast(let origin, let id):
            return "r \(origin) \(id)"
        case .channelMessage(let record):
            let expires = record.expiresAt.map { String($0.millisecondsSince1970) } ?? "-"
            return "c \(record.epoch) \(record.offset) \(record.storedAt.millisecondsSince1970) \(expires) \(Self.encode(Array(record.channel.utf8))) \(Self.encode(record.content))"
        case .channelStored(let channel, let epoch, let through):
            return "C \(epoch) \(through) \(Self.encode(Array(channel.utf8)))"
        case .presence(let origin, let change):
            let member = change.member
            let client = member.clientID.map { Self.encode(Array($0.utf8)) } ?? "-"
            let info = member.info.map { Self.encode($0.encoded) } ?? "-"
            return "\(change.joined ? "j" : "l") \(origin) \(Self.encode(Array(change.channel.utf8))) \(Self.encode(Array(member.connection.utf8))) \(client) \(info)"
        }
    }

    /// The wake-up for a stored push: with its content when the notice stays within
    /// `inlineLimit` bytes and PostgreSQL's bound, otherwise without.
    static func wakeUp(for push: MailboxMessage, inlineLimit: Int) -> PostgresNotice {
        // Base64 makes 4 bytes of 3; the rest of the line is under 100 bytes.
        let estimate = (push.payload.count + 2) / 3 * 4 + (push.clientID.utf8.count + 2) / 3 * 4 + 100
        if estimate <= min(inlineLimit, maximumLength) { return .push(push) }
        return .wake(clientID: push.clientID, through: push.sequence)
    }

    /// Reads a notice; `nil` for anything malformed, which a node ignores.
    init?(_ text: String) {
        let fields = text.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        guard let kind = fields.first else { return nil }
        switch (kind, fields.count) {
        case ("p", 6):
            guard let sequence = UInt64(fields[1]), let type = UInt32(fields[2]), let storedAt = Int64(fields[3]),
                  let client = Self.decode(fields[4]), let payload = Self.decode(fields[5]) else { return nil }
            self = .push(MailboxMessage(
                clientID: String(decoding: client, as: UTF8.self),
                sequence: sequence,
                type: type,
                payload: payload,
                storedAt: MailboxTime(millisecondsSince1970: storedAt)
            ))
        case ("w", 3):
            guard let through = UInt64(fields[1]), let client = Self.decode(fields[2]) else { return nil }
            self = .wake(clientID: String(decoding: client, as: UTF8.self), through: through)
        case ("t", 4):
            guard let generation = UInt64(fields[1]), let client = Self.decode(fields[2]) else { return nil }
            self = .takeover(clientID: String(decoding: client, as: UTF8.self), generation: generation, node: fields[3])
        case ("b", 4):
            guard let type = UInt32(fields[2]), let payload = Self.decode(fields[3]) else { return nil }
            self = .broadcast(origin: fields[1], type: type, payload: payload)
        case ("r", 3):
            guard let id = Int64(fields[2]) else { return nil }
            self = .storedBroadcast(origin: fields[1], id: id)
        case ("c", 7):
            guard let offset = UInt64(fields[2]), let storedAt = Int64(fields[3]), let name = Self.decode(fields[5]),
                  let content = Self.decode(fields[6]) else { return nil }
            let expiresAt: MailboxTime?
            if fields[4] == "-" {
                expiresAt = nil
            } else if let milliseconds = Int64(fields[4]) {
                expiresAt = MailboxTime(millisecondsSince1970: milliseconds)
            } else {
                return nil
            }
            self = .channelMessage(ChannelRecord(
                channel: String(decoding: name, as: UTF8.self),
                epoch: fields[1],
                offset: offset,
                storedAt: MailboxTime(millisecondsSince1970: storedAt),
                expiresAt: expiresAt,
                content: content
            ))
        case ("j", 6), ("l", 6):
            guard let channel = Self.decode(fields[2]), let connection = Self.decode(fields[3]) else { return nil }
            var clientID: String?
            if fields[4] != "-" {
                guard let client = Self.decode(fields[4]) else { return nil }
                clientID = String(decoding: client, as: UTF8.self)
            }
            var info: JSONValue?
            if fields[5] != "-" {
                guard let bytes = Self.decode(fields[5]), let json = try? JSONValue(parsing: bytes) else { return nil }
                info = json
            }
            let member = ChannelMember(connection: String(decoding: connection, as: UTF8.self), clientID: clientID, info: info)
            self = .presence(origin: fields[1], ChannelPresenceChange(channel: String(decoding: channel, as: UTF8.self), member: member, joined: kind == "j"))
        case ("C", 4):
            guard let through = UInt64(fields[2]), let name = Self.decode(fields[3]) else { return nil }
            self = .channelStored(channel: String(decoding: name, as: UTF8.self), epoch: fields[1], through: through)
        default:
            return nil
        }
    }

    static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
    }

    private static func decode(_ text: String) -> [UInt8]? {
        Data(base64Encoded: text).map(Array.init)
    }
}
