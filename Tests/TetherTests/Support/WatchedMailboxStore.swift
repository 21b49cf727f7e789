import Synchronization
import Testing
@testable import Tether

/// A mailbox store that tells when a client's acknowledgement reaches it, so tests await
/// the acknowledgement instead of polling the store: by client and sequence
/// (``acknowledged(_:by:)``), or each one in order (``acknowledgements``).
final class WatchedMailboxStore: MailboxStore {
    private struct Waiter {
        var clientID: String
        var sequence: UInt64
        var continuation: AsyncStream<Void>.Continuation
    }

    /// The store every call goes to.
    let base: any MailboxStore
    private let state = Mutex<(through: [String: UInt64], waiters: [Waiter])>(([:], []))
    private let feed = Broadcaster<String>(bufferSize: 64)
    /// "client sequence" for each acknowledgement taken, in order; copies share one
    /// position, so each wait goes on where the last one stopped.
    let acknowledgements: Subscription<String>

    private let requestFeed = Broadcaster<String>(bufferSize: 1_024)
    /// "client key" for each keyed request whose answer reached the store, in order.
    let finishedRequests: Subscription<String>

    init(_ base: any MailboxStore) {
        self.base = base
        acknowledgements = feed.subscribe()
        finishedRequests = requestFeed.subscribe()
    }

    func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> RequestRecord {
        try await base.beginRequest(key, of: clientID, limits: limits, now: now)
    }

    func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) async throws {
        try await base.finishRequest(key, of: clientID, answer: answer, limits: limits, now: now)
        requestFeed.publish("\(clientID) \(key)")
    }

    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws -> [UInt64] {
        try await base.append(messages, limits: limits, now: now)
    }

    func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> MailboxSummary {
        try await base.openMailbox(for: clientID, limits: limits, now: now)
    }

    func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage] {
        try await base.messages(for: clientID, after: sequence, limit: limit)
    }

    func acknowledge(_ clientID: String, through sequence: UInt64) async throws {
        try await base.acknowledge(clientID, through: sequence)
        let ready = state.withLock { state -> [Waiter] in
            state.through[clientID] = max(state.through[clientID] ?? 0, sequence)
            let through = state.through[clientID] ?? 0
            let ready = state.waiters.filter { $0.clientID == clientID && $0.sequence <= through }
            state.waiters.removeAll { $0.clientID == clientID && $0.sequence <= through }
            return ready
        }
        for waiter in ready { waiter.continuation.finish() }
        feed.publish("\(clientID) \(sequence)")
    }

    func clientIDs() async throws -> [String] {
        try await base.clientIDs()
    }

    func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws -> [String] {
        try await base.removeExpired(limits: limits, now: now, keeping: connected)
    }

    /// Returns once the store has `clientID`'s acknowledgement through `sequence`, or the
    /// task is cancelled.
    func acknowledged(_ sequence: UInt64, by clientID: String) async {
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        let waits = state.withLock { state -> Bool in
            guard (state.through[clientID] ?? 0) < sequence else { return false }
            state.waiters.append(Waiter(clientID: clientID, sequence: sequence, continuation: continuation))
            return true
        }
        guard waits else { return }
        for await _ in stream {}
    }
}

/// Waits, within the bound, until `clientID`'s acknowledgement through `sequence` reaches
/// the store, and checks the store has it.
func awaitAcknowledged(_ sequence: UInt64, by clientID: String, in store: WatchedMailboxStore) async throws {
    try await bounded("\(clientID)'s acknowledgement through \(sequence) to reach the store") {
        await store.acknowledged(sequence, by: clientID)
    }
    let summary = try await store.base.openMailbox(for: clientID, limits: MailboxLimits(), now: MailboxTime(millisecondsSince1970: 0))
    #expect(summary.acknowledged >= sequence)
}
