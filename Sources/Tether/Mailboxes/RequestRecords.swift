// What a mailbox store keeps of the keyed requests of its clients
// (``Connection/request(_:idempotencyKey:timeout:)``): that each ran, and what it answered,
// so that a repeat is answered without running its handler again.

/// What a store knows of a keyed request when it is asked to run it
/// (``MailboxStore/beginRequest(_:of:limits:now:)``).
public enum RequestRecord: Sendable, Hashable {
    /// Nothing: the store recorded it as running now, and the caller runs it.
    case started
    /// It is running already (on this server or another), or ran without its answer being
    /// recorded (its server stopped): the caller cannot know whether it ran to its end.
    case running
    /// It ran and answered this.
    case answered([UInt8])
    /// It ran, but its answer was larger than the record may hold.
    case answerNotKept
    /// A bound of the records was reached: it was not recorded, and must not run.
    case refused(String)
}

extension MailboxStore {
    /// Keeps no records: every keyed request is refused, saying so.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - limits: The bounds of the records.
    ///   - now: The time.
    /// - Returns: ``RequestRecord/refused(_:)``.
    /// - Throws: Never.
    public func beginRequest(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> RequestRecord {
        .refused("the mailbox store (\(type(of: self))) keeps no request records, so requests with an idempotency key cannot run once")
    }

    /// Keeps no records: nothing to do.
    ///
    /// - Parameters:
    ///   - key: The request's idempotency key.
    ///   - clientID: The client.
    ///   - answer: The response's payload.
    ///   - limits: The bounds of the records.
    ///   - now: The time.
    /// - Throws: Never.
    public func finishRequest(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) async throws {}
}

/// The records of one store in memory: the same rules every store keeps.
///
/// Each client's records are also kept in the order they began, so forgetting those older
/// than the window costs only what is forgotten, however many are kept.
package struct RequestRecordBook: Sendable {
    package struct Entry: Sendable {
        var startedAt: MailboxTime
        var answer: [UInt8]?
        var answered: Bool
    }

    /// One client's records, and the order they began in.
    struct ClientRecords: Sendable {
        var entries: [String: Entry] = [:]
        /// Keys by when they began; those before `head` are forgotten.
        var order: [(key: String, startedAt: MailboxTime)] = []
        var head = 0
        /// The bytes of the answers kept.
        var bytes = 0
    }

    private var clients: [String: ClientRecords] = [:]
    private var total = 0

    package init() {}

    package mutating func begin(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) -> RequestRecord {
        dropOld(of: clientID, limits: limits, now: now)
        if let entry = clients[clientID]?.entries[key] {
            guard entry.answered else { return .running }
            return entry.answer.map(RequestRecord.answered) ?? .answerNotKept
        }
        if let reason = limits.requestRecordRefusal(clientRecords: clients[clientID]?.entries.count ?? 0, total: total, clientID: clientID) {
            return .refused(reason)
        }
        clients[clientID, default: ClientRecords()].entries[key] = Entry(startedAt: now, answer: nil, answered: false)
        clients[clientID]!.order.append((key, now))
        total += 1
        return .started
    }

    package mutating func finish(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) {
        guard var records = clients[clientID], var entry = records.entries[key], !entry.answered else { return }
        // Taken out while changed, so the dictionary is not copied.
        clients[clientID] = nil
        entry.answered = true
        if records.bytes + answer.count <= limits.maximumRequestRecordBytesPerClient {
            entry.answer = answer
            records.bytes += answer.count
        }
        records.entries[key] = entry
        clients[clientID] = records
    }

    /// Forgets what is older than the window.
    package mutating func dropOld(of clientID: String, limits: MailboxLimits, now: MailboxTime) {
        guard var records = clients[clientID] else { return }
        guard records.head < records.order.count, records.order[records.head].startedAt.adding(limits.requestWindow) < now else { return }
        clients[clientID] = nil
        while records.head < records.order.count {
            let (key, startedAt) = records.order[records.head]
            guard startedAt.adding(limits.requestWindow) < now else { break }
            records.head += 1
            // A key recorded again after it was forgotten has a later place of its own.
            guard let entry = records.entries[key], entry.startedAt == startedAt else { continue }
            records.entries[key] = nil
            records.bytes -= entry.answer?.count ?? 0
            total -= 1
        }
        if records.head > 64, records.head * 2 > records.order.count {
            records.order.removeFirst(records.head)
            records.head = 0
        }
        if !records.entries.isEmpty { clients[clientID] = records }
    }

    /// Forgets what is older than the window, for every client.
    package mutating func dropOld(limits: MailboxLimits, now: MailboxTime) {
        for clientID in Array(clients.keys) { dropOld(of: clientID, limits: limits, now: now) }
    }

    /// Forgets a client's records (its mailbox was removed).
    package mutating func remove(_ clientID: String) {
        total -= clients.removeValue(forKey: clientID)?.entries.count ?? 0
    }
}

extension MailboxLimits {
    /// Why a new record cannot be made, if it cannot.
    package func requestRecordRefusal(clientRecords: Int, total: Int, clientID: String) -> String? {
        if clientRecords >= maximumRequestRecordsPerClient {
            return "client \"\(clientID)\" has \(clientRecords) requests with an idempotency key recorded in the last \(requestWindow), the most it may (MailboxLimits.maximumRequestRecordsPerClient): not run"
        }
        if total >= maximumRequestRecords {
            return "the mailbox store holds \(total) request records, the most it keeps (MailboxLimits.maximumRequestRecords): not run"
        }
        return nil
    }
}
