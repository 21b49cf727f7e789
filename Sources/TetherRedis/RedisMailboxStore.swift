public import Tether
internal import Synchronization

/// A ``Tether/MailboxStore`` on a Redis (or Valkey) server: one store that several servers
/// can share, in memory on the server.
///
/// ```swift
/// let store = try await RedisMailboxStore(url: "redis://cache.internal:6379")
/// ```
///
/// Every call is one Lua script, which Redis runs alone: an append checks the store-wide
/// bounds, writes its messages and trims the mailboxes it touched in one step, so it is
/// stored whole or not at all, and servers sharing the store see each other's appends and
/// acknowledgements at once. The keys start with ``RedisConfiguration/keyPrefix``.
///
/// **Durability** is the server's: with `appendonly yes` and `appendfsync always` an append
/// that returned survives a crash of Redis; with the defaults (snapshots) a crash loses
/// what was written since the last one. A mailbox that was lost comes back with a new
/// ``Tether/MailboxSummary/epoch``, so clients resuming into it are told their history is
/// gone (``Tether/SessionEvent/Kind/reset``) instead of taking new pushes for ones they have.
///
/// **Threads.** The client speaks RESP itself on a Tether event loop, pipelining the
/// commands of every caller on ``RedisConfiguration/connections`` connections; callers
/// only suspend. A connection that broke is made again for the next call; the call that
/// found it broken fails with ``Tether/TetherError/Code/storeFailed``, naming the server
/// and the step.
public final class RedisMailboxStore: MailboxStore {
    let client: RedisClient
    /// In a cluster: pushes whose messages fit in this many bytes go to the node that holds
    /// their client inside the notice; larger ones only wake it.
    let inlineNoticeBytes: Int

    /// Connects to the server and loads the store's scripts.
    ///
    /// - Parameter configuration: Where the server is, and the bounds of the client.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when the
    ///   server is unreachable or refuses the login; the message names it, for example
    ///   `Redis at 127.0.0.1:6379 cannot connect: …`.
    public convenience init(configuration: RedisConfiguration) async throws(TetherError) {
        try await self.init(configuration: configuration, inlineNoticeBytes: 8_192)
    }

    init(configuration: RedisConfiguration, inlineNoticeBytes: Int) async throws(TetherError) {
        self.inlineNoticeBytes = inlineNoticeBytes
        client = RedisClient(configuration: configuration)
        do {
            _ = try await client.command(["PING"], name: "checking the connection")
        } catch {
            await client.close()
            throw error
        }
    }

    /// Connects to the server at `url` with the default configuration.
    ///
    /// - Parameter url: `redis://[[user]:password@]host[:port][/database]`.
    /// - Throws: ``Tether/TetherError``, as ``init(configuration:)``, and
    ///   ``Tether/TetherError/Code/invalidArgument`` for a URL of another form.
    public convenience init(url: String) async throws(TetherError) {
        try await self.init(configuration: try RedisConfiguration(url: url))
    }

    /// Ends the store's connections; calls after it fail.
    public func close() async {
        await client.close()
    }

    var prefix: [UInt8] { Array(client.configuration.keyPrefix.utf8) }

    static func oldest(_ limits: MailboxLimits, _ now: MailboxTime) -> String {
        limits.oldestAllowed(at: now).map { String($0.millisecondsSince1970) } ?? "-1"
    }

    /// Encodes a message for the list: `<storedAt>,<expiresAt>,<type>|<payload>`.
    private static func item(_ draft: MailboxMessage.Draft, now: MailboxTime) -> [UInt8] {
        var item = Array("\(now.millisecondsSince1970),\(draft.expiresAt.map { String($0.millisecondsSince1970) } ?? ""),\(draft.type)|".utf8)
        item.append(contentsOf: draft.payload)
        return item
    }

    func decodeItem(_ bytes: [UInt8], clientID: String, sequence: UInt64) throws(TetherError) -> MailboxMessage {
        guard let bar = bytes.firstIndex(of: UInt8(ascii: "|")) else { throw malformed(clientID, sequence) }
        let fields = String(decoding: bytes[..<bar], as: UTF8.self).split(separator: ",", omittingEmptySubsequences: false)
        guard fields.count == 3, let stored = Int64(fields[0]), let type = UInt32(fields[2]) else { throw malformed(clientID, sequence) }
        let expires: MailboxTime?
        if fields[1].isEmpty {
            expires = nil
        } else {
            guard let milliseconds = Int64(fields[1]) else { throw malformed(clientID, sequence) }
            expires = MailboxTime(millisecondsSince1970: milliseconds)
        }
        return MailboxMessage(
            clientID: clientID,
            sequence: sequence,
            type: type,
            payload: Array(bytes[(bar + 1)...]),
            storedAt: MailboxTime(millisecondsSince1970: stored),
            expiresAt: expires
        )
    }

    private func malformed(_ clientID: String, _ sequence: UInt64) -> TetherError {
        TetherError(code: .storeFailed, message: "Redis at \(client.configuration.endpointName) holds message \(sequence) of client \"\(clientID)\" in a form this store does not write (key \(client.configuration.keyPrefix)q:\(clientID))")
    }

    func unexpected(_ reply: RESPValue, _ step: String) -> TetherError {
        TetherError(code: .storeFailed, message: "Redis at \(client.configuration.endpointName) answered \(step) with \(reply)")
    }

    // MARK: MailboxStore

    /// Appends messages, each to its client's mailbox with the next sequence number of that
    /// client, then drops what `limits` no longer allow from the mailboxes it touched: one
    /// script, so all or nothing.
    ///
    /// - Parameters:
    ///   - messages: The messages, in order.
    ///   - limits: The bounds of each mailbox and of the whole store.
    ///   - now: The time to store with the messages and to judge their age by.
    /// - Returns: The sequence number given to each message, in the same order.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/mailboxesFull`` past
    ///   the store-wide bounds, ``Tether/TetherError/Code/storeFailed`` when Redis cannot be
    ///   reached; then nothing was stored.
    public func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> [UInt64] {
        guard !messages.isEmpty else { return [] }
        var arguments: [[UInt8]] = [
            prefix, Array(String(now.millisecondsSince1970).utf8), Array(Self.oldest(limits, now).utf8),
            Array(String(limits.maximumMessages).utf8), Array(String(limits.maximumMailboxes).utf8),
            Array(String(limits.maximumStoredBytes).utf8), Array(String(MailboxLimits.messageOverhead).utf8),
            Array(randomEpoch().utf8), Array(String(inlineNoticeBytes).utf8), Array(String(messages.count).utf8),
        ]
        arguments.reserveCapacity(arguments.count + messages.count * 3)
        for draft in messages {
            arguments.append(Array(draft.clientID.utf8))
            arguments.append(Self.item(draft, now: now))
            arguments.append(Array(String(draft.payload.count).utf8))
        }
        let reply = try await client.evaluate(.append, arguments, name: "appending \(messages.count) message\(messages.count == 1 ? "" : "s")")
        guard let elements = reply.elements, let status = elements.first?.text else { throw unexpected(reply, "an append") }
        switch status {
        case "ok":
            let sequences = elements.dropFirst().compactMap { $0.integer.map(UInt64.init) }
            guard sequences.count == messages.count else { throw unexpected(reply, "an append") }
            return sequences
        case "mailboxes":
            throw limits.tooManyMailboxes(for: elements.dropFirst().first?.text ?? "")
        case "bytes":
            throw limits.tooManyBytes(messages: messages.count, storing: Int(elements.dropFirst().first?.integer ?? 0))
        default:
            throw unexpected(reply, "an append")
        }
    }

    /// Prepares a client's mailbox for a resume: registers the client if it is new, drops
    /// what `limits` no longer allow, and describes what is left.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - limits: The bounds of the mailbox and of the whole store.
    ///   - now: The time to judge ages by.
    /// - Returns: The client's sequence and what its mailbox holds.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/mailboxesFull`` when the
    ///   client is new and the store is full, ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be reached.
    public func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> MailboxSummary {
        let reply = try await client.evaluate(.open, [
            prefix, Array(clientID.utf8), Array(String(now.millisecondsSince1970).utf8), Array(Self.oldest(limits, now).utf8),
            Array(String(limits.maximumMessages).utf8), Array(String(limits.maximumMailboxes).utf8),
            Array(String(MailboxLimits.messageOverhead).utf8), Array(randomEpoch().utf8),
        ], name: "opening the mailbox of \"\(clientID)\"")
        guard let elements = reply.elements, let status = elements.first?.text else { throw unexpected(reply, "opening a mailbox") }
        if status == "mailboxes" { throw limits.tooManyMailboxes(for: clientID) }
        return try summary(elements, reply)
    }

    func summary(_ elements: [RESPValue], _ reply: RESPValue) throws(TetherError) -> MailboxSummary {
        guard elements.count >= 7, let last = elements[1].integer, let acknowledged = elements[2].integer,
            let lost = elements[3].integer, let count = elements[5].integer
        else { throw unexpected(reply, "opening a mailbox") }
        let reason: MailboxLossReason? = switch elements[4].text {
        case "overflow": .overflow
        case "expired": .expired
        default: nil
        }
        return MailboxSummary(
            lastSequence: UInt64(last), acknowledged: UInt64(acknowledged), lostThrough: UInt64(lost),
            lossReason: reason, count: Int(count), epoch: elements[6].text
        )
    }

    /// The messages of one client after a sequence number, oldest first.
    ///
    /// - Parameters:
    ///   - clientID: The client; one the store does not know has none.
    ///   - sequence: Only messages with a higher sequence number are returned.
    ///   - limit: At most this many.
    /// - Returns: The messages, in sequence order.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be reached.
    public func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage] {
        guard limit > 0 else { return [] }
        let after = min(sequence, UInt64(Int64.max))
        let reply = try await client.evaluate(.messages, [
            prefix, Array(clientID.utf8), Array(String(after).utf8), Array(String(limit).utf8),
        ], name: "reading the mailbox of \"\(clientID)\"")
        guard let elements = reply.elements else { throw unexpected(reply, "reading a mailbox") }
        guard let first = elements.first?.integer else { return [] }
        var messages: [MailboxMessage] = []
        messages.reserveCapacity(elements.count - 1)
        for (offset, element) in elements.dropFirst().enumerated() {
            guard let bytes = element.bytes else { throw unexpected(reply, "reading a mailbox") }
            messages.append(try decodeItem(bytes, clientID: clientID, sequence: UInt64(first) + UInt64(offset)))
        }
        return messages
    }

    /// Records that a client has every message up to `sequence`, and deletes them.
    ///
    /// - Parameters:
    ///   - clientID: The client; one the store does not know is ignored.
    ///   - sequence: The highest sequence number the client has.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be reached.
    public func acknowledge(_ clientID: String, through sequence: UInt64) async throws {
        try await acknowledge([clientID: sequence])
    }

    /// Records several acknowledgements in one script.
    ///
    /// - Parameter positions: The highest sequence each client has.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be reached.
    public func acknowledge(_ positions: [String: UInt64]) async throws {
        guard !positions.isEmpty else { return }
        var arguments: [[UInt8]] = [prefix, Array(String(MailboxLimits.messageOverhead).utf8)]
        for (clientID, sequence) in positions {
            arguments.append(Array(clientID.utf8))
            arguments.append(Array(String(min(sequence, UInt64(Int64.max))).utf8))
        }
        _ = try await client.evaluate(.acknowledge, arguments, name: "acknowledging for \(positions.count) client\(positions.count == 1 ? "" : "s")")
    }

    /// Every client the store knows.
    ///
    /// - Returns: The client ids.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be reached.
    public func clientIDs() async throws -> [String] {
        let reply = try await client.command(["SMEMBERS", client.configuration.keyPrefix + "clients"], name: "listing the clients")
        guard let elements = reply.elements else { throw unexpected(reply, "listing the clients") }
        return elements.compactMap(\.text)
    }

    /// Drops what is older than the age bound from every mailbox, and removes the mailboxes
    /// of clients idle for longer than it, a few hundred mailboxes per script so that Redis
    /// is never held for long.
    ///
    /// - Parameters:
    ///   - limits: The bounds.
    ///   - now: The time to judge ages by.
    ///   - connected: The clients connected now, whose mailboxes stay.
    /// - Returns: The ids of the clients whose mailboxes were removed.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be reached.
    public func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws -> [String] {
        let key = client.configuration.keyPrefix + "clients"
        var cursor = "0"
        var removed: [String] = []
        repeat {
            let reply = try await client.command(["SSCAN", key, cursor, "COUNT", "500"], name: "listing the clients to expire")
            guard let page = reply.elements, page.count == 2, let next = page[0].text, let ids = page[1].elements else {
                throw unexpected(reply, "SSCAN")
            }
            cursor = next
            let clientIDs = ids.compactMap(\.text)
            guard !clientIDs.isEmpty else { continue }
            var arguments: [[UInt8]] = [
                prefix, Array(String(now.millisecondsSince1970).utf8), Array(Self.oldest(limits, now).utf8),
                Array(String(limits.maximumMessages).utf8), Array(String(MailboxLimits.messageOverhead).utf8),
            ]
            for clientID in clientIDs {
                arguments.append(Array(clientID.utf8))
                arguments.append(connected.contains(clientID) ? [UInt8(ascii: "1")] : [UInt8(ascii: "0")])
            }
            let result = try await client.evaluate(.expire, arguments, name: "expiring \(clientIDs.count) mailboxes")
            removed += result.elements?.compactMap(\.text) ?? []
        } while cursor != "0"
        return removed
    }

    /// Records that a keyed request runs, as ``Tether/MailboxStore/beginRequest(_:of:limits:now:)`` says.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - limits: The bounds of the records.
    ///   - now: The time to record and to judge the window by.
    /// - Returns: What is known of the request.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be reached.
    public func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> RequestRecord {
        let windowStart = now.millisecondsSince1970 - limits.requestWindow.redisMilliseconds
        let reply = try await client.evaluate(.beginRequest, [
            prefix, Array(clientID.utf8), Array(key.utf8), Array(String(now.millisecondsSince1970).utf8),
            Array(String(windowStart).utf8), Array(String(limits.maximumRequestRecordsPerClient).utf8),
            Array(String(limits.maximumRequestRecords).utf8),
        ], name: "recording a keyed request of \"\(clientID)\"")
        guard let elements = reply.elements, let status = elements.first?.text else { throw unexpected(reply, "recording a keyed request") }
        let count = Int(elements.dropFirst().first?.integer ?? 0)
        switch status {
        case "started": return .started
        case "running": return .running
        case "answered": return .answered(elements.dropFirst().first?.bytes ?? [])
        case "notKept": return .answerNotKept
        case "client": return .refused(limits.requestRecordRefusal(clientRecords: count, total: 0, clientID: clientID) ?? "")
        case "total": return .refused(limits.requestRecordRefusal(clientRecords: 0, total: count, clientID: clientID) ?? "")
        default: throw unexpected(reply, "recording a keyed request")
        }
    }

    /// Records a keyed request's answer, as ``Tether/MailboxStore/finishRequest(_:of:answer:limits:now:)`` says.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - answer: The response's payload.
    ///   - limits: The bounds of the records.
    ///   - now: The time it finished.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed`` when
    ///   Redis cannot be reached.
    public func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) async throws {
        _ = try await client.evaluate(.finishRequest, [
            prefix, Array(clientID.utf8), Array(key.utf8), answer, Array(String(limits.maximumRequestRecordBytesPerClient).utf8),
        ], name: "recording the answer of a keyed request of \"\(clientID)\"")
    }
}

extension Duration {
    /// Whole milliseconds, rounded down.
    var redisMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
