internal import Tether

// Channels on the cluster's Redis (``Tether/ChannelEngine``). Keys, after the prefix P:
//   P chepoch        the epoch every channel is made with: a Redis that lost its data has
//                    another, so the channels made again say their history began again
//   P ch:<name>      a hash: epoch, latest
//   P chm:<name>     a list of the kept messages, oldest first, their offsets running
//                    consecutively to latest: "<storedAt>,<expiresAt or empty>|<content>"
//   P chp:<name>     a hash of the members: connection → "<node>\n<client id>\n<info JSON>"
//   P chn:<node>     a set of what a node recorded: "<channel>\n<connection>"
//   P c              the pub/sub channel of channel notices:
//                    "m<epoch>*<offset>:<stored>:<expires>:<name>*<content>" with the message,
//                    "M<epoch>*<offset>:<name>*" to read it, "j"/"l"<origin>*<channel>*
//                    <connection>*<client id>*<info> for a member who joined or left, where
//                    x* is a counted string, `<length>:<bytes>`

enum RedisChannelScripts {
    /// ARGV: P, name, now, expires ("" for none), content, count kept, oldest kept (-1 for
    /// no age bound), inline bytes, epoch seed. Returns {offset, epoch}.
    static let publish = #"""
    local P = ARGV[1]
    local name = ARGV[2]
    local ck = P .. 'ch:' .. name
    local mk = P .. 'chm:' .. name
    local epoch = redis.call('HGET', ck, 'epoch')
    if not epoch then
      redis.call('SETNX', P .. 'chepoch', ARGV[9])
      epoch = redis.call('GET', P .. 'chepoch')
      redis.call('HSET', ck, 'epoch', epoch, 'latest', 0)
    end
    local latest = redis.call('HINCRBY', ck, 'latest', 1)
    redis.call('RPUSH', mk, ARGV[3] .. ',' .. ARGV[4] .. '|' .. ARGV[5])
    local length = redis.call('LLEN', mk)
    local keep = math.max(1, tonumber(ARGV[6]))
    if length > keep then
      redis.call('LTRIM', mk, length - keep, -1)
      length = keep
    end
    local oldest = tonumber(ARGV[7])
    if oldest >= 0 then
      local n = 0
      while n < length do
        local item = redis.call('LINDEX', mk, n)
        if tonumber(string.match(item, '^(%d+)')) >= oldest then break end
        n = n + 1
      end
      if n > 0 then redis.call('LTRIM', mk, n, -1) end
    end
    if #ARGV[5] + #name + 100 <= tonumber(ARGV[8]) then
      redis.call('PUBLISH', P .. 'c', 'm' .. #epoch .. ':' .. epoch .. latest .. ':' .. ARGV[3] .. ':' .. ARGV[4] .. ':' .. #name .. ':' .. name .. ARGV[5])
    else
      redis.call('PUBLISH', P .. 'c', 'M' .. #epoch .. ':' .. epoch .. latest .. ':' .. #name .. ':' .. name)
    end
    return {latest, epoch}
    """#

    /// ARGV: P, name, after, limit, epoch seed. Returns {epoch, latest, first offset,
    /// items…}; a channel never published to is not made.
    static let history = #"""
    local P = ARGV[1]
    local ck = P .. 'ch:' .. ARGV[2]
    local mk = P .. 'chm:' .. ARGV[2]
    local epoch = redis.call('HGET', ck, 'epoch')
    if not epoch then
      redis.call('SETNX', P .. 'chepoch', ARGV[5])
      epoch = redis.call('GET', P .. 'chepoch')
    end
    local latest = tonumber(redis.call('HGET', ck, 'latest') or '0')
    local length = redis.call('LLEN', mk)
    local first = latest - length + 1
    local start = math.max(tonumber(ARGV[3]) + 1, first)
    local reply = {epoch, latest, start}
    local limit = tonumber(ARGV[4])
    if start <= latest and limit > 0 then
      local items = redis.call('LRANGE', mk, start - first, start - first + math.min(limit, length) - 1)
      for _, item in ipairs(items) do reply[#reply + 1] = item end
    end
    return reply
    """#

    /// ARGV: P, node, then 5 × (j or l, channel, connection, client id, info). Records the
    /// changes and tells every node of those that changed something.
    static let presence = #"""
    local P = ARGV[1]
    local node = ARGV[2]
    local function counted(text) return #text .. ':' .. text end
    local i = 3
    while i < #ARGV do
      local kind, channel, connection, client, info = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
      i = i + 5
      local changed
      if kind == 'j' then
        redis.call('HSET', P .. 'chp:' .. channel, connection, node .. '\n' .. client .. '\n' .. info)
        redis.call('SADD', P .. 'chn:' .. node, channel .. '\n' .. connection)
        changed = true
      else
        changed = redis.call('HDEL', P .. 'chp:' .. channel, connection) == 1
        redis.call('SREM', P .. 'chn:' .. node, channel .. '\n' .. connection)
      end
      if changed then
        redis.call('PUBLISH', P .. 'c', kind .. counted(node) .. counted(channel) .. counted(connection) .. counted(client) .. info)
      end
    end
    return 'ok'
    """#

    /// ARGV: P, node: deletes the members the node recorded and tells every node they left.
    static let dropMembers = #"""
    local P = ARGV[1]
    local node = ARGV[2]
    local function counted(text) return #text .. ':' .. text end
    local set = P .. 'chn:' .. node
    for _, entry in ipairs(redis.call('SMEMBERS', set)) do
      local cut = string.find(entry, '\n', 1, true)
      local channel = string.sub(entry, 1, cut - 1)
      local connection = string.sub(entry, cut + 1)
      local value = redis.call('HGET', P .. 'chp:' .. channel, connection)
      if value then
        local first = string.find(value, '\n', 1, true)
        local second = string.find(value, '\n', first + 1, true)
        local client = string.sub(value, first + 1, second - 1)
        redis.call('HDEL', P .. 'chp:' .. channel, connection)
        redis.call('PUBLISH', P .. 'c', 'l' .. counted(node) .. counted(channel) .. counted(connection) .. counted(client))
      end
    end
    redis.call('DEL', set)
    return 'ok'
    """#
}

/// The channels of a cluster on Redis: each publish is one script that takes the channel's
/// next offset, keeps the message in the channel's list, trims it, and publishes the notice,
/// so the publishes of a channel are numbered and announced in one order, whichever node or
/// backend makes them.
final class RedisChannels: ChannelEngine {
    let mailboxes: RedisMailboxStore
    /// This node's name; `nil` for a publisher, which records no members.
    let node: String?
    let inlineLimit: Int
    /// A node not seen for this long counts as gone: its members are not listed.
    let nodeTimeout: Duration

    init(mailboxes: RedisMailboxStore, node: String?, inlineLimit: Int, nodeTimeout: Duration) {
        self.mailboxes = mailboxes
        self.node = node
        self.inlineLimit = inlineLimit
        self.nodeTimeout = nodeTimeout
    }

    private var client: RedisClient { mailboxes.client }
    private var prefix: [UInt8] { mailboxes.prefix }

    func publish(_ content: [UInt8], to channel: String, expiresAt: MailboxTime?, now: MailboxTime, retention: ChannelRetention) async throws -> ChannelRecord {
        if let problem = ChannelConfiguration.problem(withName: channel, maximumLength: 255) {
            throw TetherError(code: .invalidArgument, message: problem)
        }
        let oldest = retention.age.map { String(now.millisecondsSince1970 - $0.redisMilliseconds) } ?? "-1"
        let reply = try await client.evaluate(.channelPublish, [
            prefix, Array(channel.utf8), Array(String(now.millisecondsSince1970).utf8),
            Array((expiresAt.map { String($0.millisecondsSince1970) } ?? "").utf8), content,
            Array(String(retention.count).utf8), Array(oldest.utf8), Array(String(inlineLimit).utf8), Array(randomEpoch().utf8),
        ], name: "publishing \(content.count) bytes to channel \(channel)")
        guard let elements = reply.elements, elements.count == 2, let offset = elements[0].integer, let epoch = elements[1].text else {
            throw mailboxes.unexpected(reply, "a publish")
        }
        return ChannelRecord(channel: channel, epoch: epoch, offset: UInt64(offset), storedAt: now, expiresAt: expiresAt, content: content)
    }

    func history(of channel: String, after offset: UInt64, limit: Int) async throws -> ChannelHistory {
        let reply = try await client.evaluate(.channelHistory, [
            prefix, Array(channel.utf8), Array(String(min(offset, UInt64(Int64.max))).utf8),
            Array(String(max(0, limit)).utf8), Array(randomEpoch().utf8),
        ], name: "reading the history of channel \(channel)")
        guard let elements = reply.elements, elements.count >= 3, let epoch = elements[0].text,
            let latest = elements[1].integer, let first = elements[2].integer
        else { throw mailboxes.unexpected(reply, "reading a channel") }
        var messages: [ChannelRecord] = []
        for (index, element) in elements.dropFirst(3).enumerated() {
            guard let item = element.bytes, let record = Self.record(item, channel: channel, epoch: epoch, offset: UInt64(first) + UInt64(index)) else {
                throw mailboxes.unexpected(reply, "reading a channel")
            }
            messages.append(record)
        }
        return ChannelHistory(epoch: epoch, latest: UInt64(latest), messages: messages)
    }

    /// A kept message: `<storedAt>,<expiresAt>|<content>`.
    static func record(_ item: [UInt8], channel: String, epoch: String, offset: UInt64) -> ChannelRecord? {
        guard let bar = item.firstIndex(of: UInt8(ascii: "|")) else { return nil }
        let fields = String(decoding: item[..<bar], as: UTF8.self).split(separator: ",", omittingEmptySubsequences: false)
        guard fields.count == 2, let stored = Int64(fields[0]) else { return nil }
        let expires = fields[1].isEmpty ? nil : Int64(fields[1]).map { MailboxTime(millisecondsSince1970: $0) }
        if !fields[1].isEmpty, expires == nil { return nil }
        return ChannelRecord(channel: channel, epoch: epoch, offset: offset, storedAt: MailboxTime(millisecondsSince1970: stored), expiresAt: expires, content: Array(item[(bar + 1)...]))
    }

    func presenceChanged(_ changes: [ChannelPresenceChange]) async throws {
        guard let node, !changes.isEmpty else { return }
        var arguments: [[UInt8]] = [prefix, Array(node.utf8)]
        for change in changes {
            arguments.append(change.joined ? [UInt8(ascii: "j")] : [UInt8(ascii: "l")])
            arguments.append(Array(change.channel.utf8))
            arguments.append(Array(change.member.connection.utf8))
            arguments.append(Array((change.member.clientID ?? "").utf8))
            arguments.append(change.member.info?.encoded ?? [])
        }
        _ = try await client.evaluate(.channelPresence, arguments, name: "recording \(changes.count) channel joins and leaves of node \(node)")
    }

    /// Deletes the members `node` recorded, telling every node they left.
    func dropMembers(ofNode node: String) async throws(TetherError) {
        _ = try await client.evaluate(.channelDropMembers, [prefix, Array(node.utf8)], name: "dropping the channel members of node \(node)")
    }

    func presence(of channel: String, limit: Int) async throws -> ChannelPresence {
        let key = client.configuration.keyPrefix + "chp:" + channel
        let reply = try await client.command(["HGETALL", key], name: "reading the presence of channel \(channel)")
        guard let fields = reply.elements else { throw mailboxes.unexpected(reply, "reading a presence") }
        var entries: [(node: String, member: ChannelMember)] = []
        var index = 0
        while index + 1 < fields.count {
            defer { index += 2 }
            guard let connection = fields[index].text, let value = fields[index + 1].bytes else { continue }
            let parts = value.split(separator: UInt8(ascii: "\n"), maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            let clientID = parts[1].isEmpty ? nil : String(decoding: parts[1], as: UTF8.self)
            let info = parts[2].isEmpty ? nil : try? JSONValue(parsing: Array(parts[2]))
            entries.append((String(decoding: parts[0], as: UTF8.self), ChannelMember(connection: connection, clientID: clientID, info: info)))
        }
        var alive: [String: Bool] = [:]
        for node in Set(entries.map(\.node)) {
            alive[node] = try await client.command(["EXISTS", client.configuration.keyPrefix + "node:" + node], name: "checking node \(node)").integer == 1
        }
        let members = entries.filter { alive[$0.node] == true }.map(\.member)
            .sorted { ($0.clientID ?? "", $0.connection) < ($1.clientID ?? "", $1.connection) }
        return ChannelPresence(channel: channel, count: members.count, members: Array(members.prefix(max(0, limit))))
    }
}
