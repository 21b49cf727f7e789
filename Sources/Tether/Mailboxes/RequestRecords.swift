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
package struct RequestRecordBook: Sendable {
    package struct Entry: Sendable {
        var startedAt: MailboxTime
        var answer: [UInt8]?
        var answered: Bool
    }

    private var clients: [String: [String: Entry]] = [:]
    private var bytes: [String: Int] = [:]
    private var total = 0

    package init() {}

    package mutating func begin(_ key: String, of clientID: String, limits: MailboxLimits, now: MailboxTime) -> RequestRecord {
        dropOld(of: clientID, limits: limits, now: now)
        if let entry = clients[clientID]?[key] {
            guard entry.answered else { return .running }
            return entry.answer.map(RequestRecord.answered) ?? .answerNotKept
        }
        if let reason = limits.requestRecordRefusal(clientRecords: clients[clientID]?.count ?? 0, total: total, clientID: clientID) {
            return .refused(reason)
        }
        clients[clientID, default: [:]][key] = Entry(startedAt: now, answer: nil, answered: false)
        total += 1
        return .started
    }

    package mutating func finish(_ key: String, of clientID: String, answer: [UInt8], limits: MailboxLimits, now: MailboxTime) {
        guard var entry = clients[clientID]?[key], !entry.answered else { return }
        entry.answered = true
        if (bytes[clientID] ?? 0) + answer.count <= limits.maximumRequestRecordBytesPerClient {
            entry.answer = answer
            bytes[clientID, default: 0] += answer.count
        }
        clients[clientID]?[key] = entry
    }

    /// Forgets what is older than the window.
    package mutating func dropOld(of clientID: String, limits: MailboxLimits, now: MailboxTime) {
        guard let records = clients[clientID] else { return }
        let kept = records.filter { !($0.value.startedAt.adding(limits.requestWindow) < now) }
        guard kept.count != records.count else { return }
        total -= records.count - kept.count
        bytes[clientID] = kept.values.reduce(0) { $0 + ($1.answer?.count ?? 0) }
        clients[clientID] = kept.isEmpty ? nil : kept
    }

    /// Forgets what is older than the window, for every client.
    package mutating func dropOld(limits: MailboxLimits, now: MailboxTime) {
        for clientID in Array(clients.keys) { dropOld(of: clientID, limits: limits, now: now) }
    }

    /// Forgets a client's records (its mailbox was removed).
    package mutating func remove(_ clientID: String) {
        total -= clients.removeValue(forKey: clientID)?.count ?? 0
        bytes[clientID] = nil
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
