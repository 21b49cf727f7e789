/// A ``MailboxStore`` in memory: for tests, and for servers whose clients can afford to lose
/// their mailboxes when the server restarts.
///
/// Clients that resume against a restarted server with an in-memory store are told that
/// the server's sequence went back (``SessionEvent/Kind/reset``).
public final class InMemoryMailboxStore: MailboxStore {
    private struct Mailbox {
        var summary = MailboxSummary(lastSequence: 0, acknowledged: 0, lostThrough: 0, lossReason: nil, count: 0)
        /// Messages in sequence order; `head` skips the ones removed from the front.
        var messages: [MailboxMessage] = []
        var head = 0

        var held: ArraySlice<MailboxMessage> { messages[head...] }

        mutating func dropFront(_ count: Int) {
            head += count
            if head > 64 && head * 2 > messages.count {
                messages.removeFirst(head)
                head = 0
            }
            summary.count = messages.count - head
        }

        mutating func append(_ draft: MailboxMessage.Draft, at now: MailboxTime) -> UInt64 {
            summary.lastSequence += 1
            messages.append(MailboxMessage(
                clientID: draft.clientID,
                sequence: summary.lastSequence,
                type: draft.type,
                payload: draft.payload,
                storedAt: now
            ))
            summary.count = messages.count - head
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

    private let mailboxes = Lock<[String: Mailbox]>([:])

    /// Creates an empty store.
    public init() {}

    /// Appends messages, each to its client's mailbox with the next sequence number of that
    /// client, then drops what `limits` no longer allow from the mailboxes it touched.
    ///
    /// - Parameters:
    ///   - messages: The messages, in order.
    ///   - limits: The count and age bounds of each mailbox.
    ///   - now: The time to store with the messages and to judge their age by.
    /// - Returns: The sequence number given to each message, in the same order.
    /// - Throws: Never: memory does not fail. The protocol allows it for other stores.
    public func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws -> [UInt64] {
        mailboxes.withLock { mailboxes in
            var touched: Set<String> = []
            let sequences = messages.map { draft -> UInt64 in
                touched.insert(draft.clientID)
                return mailboxes[draft.clientID, default: Mailbox()].append(draft, at: now)
            }
            for clientID in touched {
                mailboxes[clientID]?.enforce(limits, now: now)
            }
            return sequences
        }
    }

    /// Prepares a client's mailbox for a resume: registers the client if it is new, drops
    /// what `limits` no longer allow, and describes what is left.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - limits: The count and age bounds of the mailbox.
    ///   - now: The time to judge ages by.
    /// - Returns: The client's sequence and what its mailbox holds.
    /// - Throws: Never: memory does not fail. The protocol allows it for other stores.
    public func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> MailboxSummary {
        mailboxes.withLock { mailboxes in
            mailboxes[clientID, default: Mailbox()].enforce(limits, now: now)
            return mailboxes[clientID]!.summary
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
        mailboxes.withLock { mailboxes in
            guard let held = mailboxes[clientID]?.held else { return [] }
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
        mailboxes.withLock { mailboxes in
            guard var mailbox = mailboxes[clientID] else { return }
            let through = min(sequence, mailbox.summary.lastSequence)
            guard through > mailbox.summary.acknowledged else { return }
            mailbox.summary.acknowledged = through
            mailbox.dropFront(mailbox.held.prefix { $0.sequence <= through }.count)
            mailboxes[clientID] = mailbox
        }
    }

    /// Every client the store knows, in no particular order: those that ever opened a
    /// mailbox or were sent a message since the store was created.
    ///
    /// - Returns: The client ids.
    /// - Throws: Never: memory does not fail. The protocol allows it for other stores.
    public func clientIDs() async throws -> [String] {
        mailboxes.withLock { Array($0.keys) }
    }
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
