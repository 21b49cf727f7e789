/// A ``MailboxStore`` in memory: for tests, and for servers whose clients can afford to lose
/// their mailboxes when the server restarts.
///
/// Each mailbox gets a new random ``MailboxSummary/epoch`` when it is made: when its client
/// is first seen, and again after an idle mailbox was removed. So clients that resume
/// against a restarted server with an in-memory store, or after their mailbox was removed,
/// are told that their history is gone (``SessionEvent/Kind/reset``) and take the new one
/// from its start.
public final class InMemoryMailboxStore: MailboxStore {
    private struct Mailbox {
        var summary = MailboxSummary(lastSequence: 0, acknowledged: 0, lostThrough: 0, lossReason: nil, count: 0)
        /// Messages in sequence order; `head` skips the ones removed from the front.
        var messages: [MailboxMessage] = []
        var head = 0
        /// What the held messages count for ``MailboxLimits/maximumStoredBytes``.
        var bytes = 0
        /// When the mailbox was last opened, written or kept: its idle time starts here.
        var activeAt: MailboxTime

        init(activeAt: MailboxTime) {
            self.activeAt = activeAt
            summary.epoch = randomEpoch()
        }

        /// What an append can change, to put back when it fails.
        struct Mark {
            var summary: MailboxSummary
            var head: Int
            var stored: Int
            var bytes: Int
            var activeAt: MailboxTime
        }

        var held: ArraySlice<MailboxMessage> { messages[head...] }

        var mark: Mark {
            Mark(summary: summary, head: head, stored: messages.count, bytes: bytes, activeAt: activeAt)
        }

        /// Puts the mailbox back as it was at `mark`; only valid before ``compact()``.
        mutating func restore(_ mark: Mark) {
            messages.removeLast(messages.count - mark.stored)
            summary = mark.summary
            head = mark.head
            bytes = mark.bytes
            activeAt = mark.activeAt
        }

        mutating func dropFront(_ count: Int) {
            for message in messages[head..<head + count] {
                bytes -= MailboxLimits.storedSize(ofPayload: message.payload.count)
            }
            head += count
            summary.count = messages.count - head
        }

        /// Frees the space of messages dropped from the front, now and then.
        mutating func compact() {
            if head > 64 && head * 2 > messages.count {
                messages.removeFirst(head)
                head = 0
            }
        }

        mutating func append(_ draft: MailboxMessage.Draft, at now: MailboxTime) -> UInt64 {
            summary.lastSequence += 1
            messages.append(MailboxMessage(
                clientID: draft.clientID,
                sequence: summary.lastSequence,
                type: draft.type,
                payload: draft.payload,
                storedAt: now,
                expiresAt: draft.expiresAt
            ))
            bytes += MailboxLimits.storedSize(ofPayload: draft.payload.count)
            summary.count = messages.count - head
            activeAt = max(activeAt, now)
            return summary.lastSequence
        }

        /// Drops what the limits no longer allow, remembering it as lost.
        mutating func enforce(_ limits: MailboxLimits, now: MailboxTime) {
            if let oldest = limits.oldestAllowed(at: now) {
                let expired = held.prefix { $0.storedAt < oldest }.count
                lose(expired, reason: .expired)
            }
            let excess = summary.count - max(0, limits.maximumMessages)
            if excess > 0 { lose(excess, reason: .overflow) }
        }

        private mutating func lose(_ count: Int, reason: MailboxLossReason) {
            guard count > 0 else { return }
            summary.lostThrough = max(summary.lostThrough, messages[head + count - 1].sequence)
            summary.lossReason = reason
            dropFront(count)
        }
    }

    private struct Contents {
        var mailboxes: [String: Mailbox] = [:]
        /// The sum of every mailbox's ``Mailbox/bytes``.
        var bytes = 0
    }

    private let contents = Lock(Contents())
    private let records = Lock(RequestRecordBook())

    /// Creates an empty store.
    public init() {}

    /// Appends messages, each to its client's mailbox with the next sequence number of that
    /// client, then drops what `limits` no longer allow from the mailboxes it touched.
    ///
    /// - Parameters:
    ///   - messages: The messages, in order.
    ///   - limits: The bounds of each mailbox and of the whole store.
    ///   - now: The time to store with the messages and to judge their age by.
    /// - Returns: The sequence number given to each message, in the same order.
    /// - Throws: ``TetherError`` with ``TetherError/Code/mailboxesFull`` when a message is for
    ///   a new client and the store holds ``MailboxLimits/maximumMailboxes`` already, or when
    ///   the store would hold more than ``MailboxLimits/maximumStoredBytes``; then nothing
    ///   changed. Memory does not fail otherwise.
    public func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> [UInt64] {
        try contents.withLock { (contents: inout Contents) throws(TetherError) -> [UInt64] in
            // Each touched mailbox as it was, to put back if the append fails; nil for a new one.
            var marks: [String: Mailbox.Mark?] = [:]
            func undo() {
                for (clientID, mark) in marks {
                    if let mark { contents.mailboxes[clientID]?.restore(mark) } else { contents.mailboxes[clientID] = nil }
                }
            }
            var sequences: [UInt64] = []
            sequences.reserveCapacity(messages.count)
            for draft in messages {
                if marks[draft.clientID] == nil {
                    if let mailbox = contents.mailboxes[draft.clientID] {
                        marks[draft.clientID] = .some(mailbox.mark)
                    } else {
                        guard contents.mailboxes.count < limits.maximumMailboxes else {
                            undo()
                            throw limits.tooManyMailboxes(for: draft.clientID)
                        }
                        marks[draft.clientID] = .some(nil)
                        contents.mailboxes[draft.clientID] = Mailbox(activeAt: now)
                    }
                }
                sequences.append(contents.mailboxes[draft.clientID]!.append(draft, at: now))
            }
            var change = 0
            for (clientID, mark) in marks {
                contents.mailboxes[clientID]!.enforce(limits, now: now)
                change += contents.mailboxes[clientID]!.bytes - (mark?.bytes ?? 0)
            }
            if change > 0, contents.bytes + change > limits.maximumStoredBytes {
                undo()
                throw limits.tooManyBytes(messages: messages.count, storing: contents.bytes + change)
            }
            contents.bytes += change
            for clientID in marks.keys { contents.mailboxes[clientID]!.compact() }
            return sequences
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
    /// - Throws: ``TetherError`` with ``TetherError/Code/mailboxesFull`` when the client is
    ///   new and the store holds ``MailboxLimits/maximumMailboxes`` already. Memory does not
    ///   fail otherwise.
    public func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws(TetherError) -> MailboxSummary {
        try contents.withLock { (contents: inout Contents) throws(TetherError) -> MailboxSummary in
            var mailbox: Mailbox
            if let known = contents.mailboxes[clientID] {
                mailbox = known
            } else {
                guard contents.mailboxes.count < limits.maximumMailboxes else { throw limits.tooManyMailboxes(for: clientID) }
                mailbox = Mailbox(activeAt: now)
            }
            let before = mailbox.bytes
            mailbox.enforce(limits, now: now)
            mailbox.compact()
            mailbox.activeAt = max(mailbox.activeAt, now)
            contents.bytes += mailbox.bytes - before
            contents.mailboxes[clientID] = mailbox
            return mailbox.summary
        }
    }

    /// The messages of one client after a sequence number, oldest first.
    ///
    /// - Parameters:
    ///   - clientID: The client; one the store does not know has none.
    ///   - sequence: Only messages with a higher sequence number are returned.
    ///   - limit: At most this many.
    /// - Returns: The messages, in sequence order.
    /// - Throws: Never: memory does not fail. The protocol allows it for other stores.
    public func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage] {
        contents.withLock { contents in
            guard let held = contents.mailboxes[clientID]?.held else { return [] }
            // Sequences are consecutive except where a loss cut them, so search rather than index.
            let start = held.partitioningIndex { $0.sequence > sequence }
            return Array(held[start...].prefix(max(0, limit)))
        }
    }

    /// Records that a client has every message up to `sequence`, and deletes them. A
    /// sequence beyond the last one given counts as the last one.
    ///
    /// - Parameters:
    ///   - clientID: The client; one the store does not know is ignored.
    ///   - sequence: The highest sequence number the client has; lower ones are implied.
    /// - Throws: Never: memory does not fail. The protocol allows it for other stores.
    public func acknowledge(_ clientID: String, through sequence: UInt64) async throws {
        contents.withLock { contents in
            guard var mailbox = contents.mailboxes[clientID] else { return }
            let through = min(sequence, mailbox.summary.lastSequence)
            guard through > mailbox.summary.acknowledged else { return }
            let before = mailbox.bytes
            mailbox.summary.acknowledged = through
            mailbox.dropFront(mailbox.held.prefix { $0.sequence <= through }.count)
            mailbox.compact()
            contents.bytes += mailbox.bytes - before
            contents.mailboxes[clientID] = mailbox
        }
    }

    /// Every client the store knows, in no particular order: those that ever opened a
    /// mailbox or were sent a message since the store was created, and whose mailbox was
    /// not removed as idle since.
    ///
    /// - Returns: The client ids.
    /// - Throws: Never: memory does not fail. The protocol allows it for other stores.
    public func clientIDs() async throws -> [String] {
        contents.withLock { Array($0.mailboxes.keys) }
    }

    /// Records that a keyed request runs, as ``MailboxStore/beginRequest(_:of:limits:now:)`` says.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - limits: The bounds of the records.
    ///   - now: The time to record and to judge the window by.
    /// - Returns: What is known of the request.
    /// - Throws: Never: memory does not fail.
    public func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> RequestRecord {
        records.withLock { $0.begin(key, of: clientID, limits: limits, now: now) }
    }

    /// Records a keyed request's answer, as ``MailboxStore/finishRequest(_:of:answer:limits:now:)`` says.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - answer: The response's payload.
    ///   - limits: The bounds of the records.
    ///   - now: The time it finished.
    /// - Throws: Never: memory does not fail.
    public func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) async throws {
        records.withLock { $0.finish(key, of: clientID, answer: answer, limits: limits, now: now) }
    }

    /// Drops what is older than the age bound from every mailbox, and removes the mailboxes
    /// of clients idle for longer than it; see ``MailboxStore/removeExpired(limits:now:keeping:)``.
    ///
    /// - Parameters:
    ///   - limits: The bounds; only ``MailboxLimits/maximumAge`` matters here.
    ///   - now: The time to judge ages by.
    ///   - connected: The clients connected now, whose mailboxes stay.
    /// - Returns: The ids of the clients whose mailboxes were removed.
    /// - Throws: Never: memory does not fail. The protocol allows it for other stores.
    public func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws -> [String] {
        records.withLock { $0.dropOld(limits: limits, now: now) }
        guard let oldest = limits.oldestAllowed(at: now) else { return [] }
        return contents.withLock { contents in
            var removed: [String] = []
            var bytes = 0
            for clientID in Array(contents.mailboxes.keys) {
                var mailbox = contents.mailboxes[clientID]!
                if connected.contains(clientID) {
                    mailbox.activeAt = max(mailbox.activeAt, now)
                } else if mailbox.activeAt < oldest {
                    removed.append(clientID)
                    contents.mailboxes[clientID] = nil
                    continue
                }
                if let first = mailbox.held.first, first.storedAt < oldest {
                    mailbox.enforce(limits, now: now)
                    mailbox.compact()
                }
                bytes += mailbox.bytes
                contents.mailboxes[clientID] = mailbox
            }
            contents.bytes = bytes
            return removed
        }
    }
}

/// A new epoch: 128 random bits as 32 lowercase hexadecimal digits. Stores that make their
/// epochs themselves (the SQLite store) use it too.
package func randomEpoch() -> String {
    var generator = SystemRandomNumberGenerator()
    return (0..<2).map { _ in
        let digits = String(generator.next() as UInt64, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }.joined()
}

extension Collection {
    /// The first index whose element satisfies `belongs`, given that every element that
    /// does comes after every element that does not (binary search).
    func partitioningIndex(where belongs: (Element) -> Bool) -> Index {
        var low = startIndex
        var count = self.count
        while count > 0 {
            let half = count / 2
            let middle = index(low, offsetBy: half)
            if belongs(self[middle]) {
                count = half
            } else {
                low = index(after: middle)
                count -= half + 1
            }
        }
        return low
    }
}
