// Requests with an idempotency key run once per client and key, whatever the network does:
// the store records that each ran and what it answered, and a repeat gets that answer.

/// A keyed request: its client and its key.
struct KeyedID: Hashable, Sendable {
    var clientID: String
    var key: String
}

/// How a keyed request ended, for its caller and for the repeats that waited for it.
enum KeyedOutcome: Sendable {
    /// Its answer, from its handler now or from the record.
    case answer(Response)
    /// It did not run, and will not: the reason.
    case refused(String)
    /// It may or may not have run: the reason.
    case unknown(String)
}

extension MailboxHub {
    /// Runs `run` for the keyed request `key` of `clientID` unless it ran already, or runs
    /// on this server now: then the outcome is that run's.
    func runOnce(_ key: String, of clientID: String, _ run: @escaping @Sendable () async -> Response?) async -> KeyedOutcome {
        let id = KeyedID(clientID: clientID, key: key)
        while true {
            let first = state.withLock { state -> Bool in
                guard state.keyed[id] == nil else { return false }
                state.keyed[id] = []
                return true
            }
            if first {
                let outcome = await runFirst(id, run)
                let waiters = state.withLock { $0.keyed.removeValue(forKey: id) } ?? []
                for waiter in waiters { waiter.resume(returning: outcome) }
                return outcome
            }
            // A copy runs here: its outcome is this one's. When it ended before this one
            // could wait, the store has it.
            let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<KeyedOutcome?, Never>) in
                let waiting = state.withLock { state -> Bool in
                    guard state.keyed[id] != nil else { return false }
                    state.keyed[id]!.append(continuation)
                    return true
                }
                if !waiting { continuation.resume(returning: nil) }
            }
            if let outcome { return outcome }
        }
    }

    private func runFirst(_ id: KeyedID, _ run: @Sendable () async -> Response?) async -> KeyedOutcome {
        let limits = configuration.limits
        var record: RequestRecord
        do {
            record = try await begin(id, limits)
            // Running elsewhere (another node, or a server that stopped while running it):
            // wait a while for its answer.
            var delay = Duration.milliseconds(10)
            var waited = Duration.zero
            while case .running = record, waited < Self.keyedWait {
                try await Task.sleep(for: delay)
                waited += delay
                delay = min(delay * 2, .milliseconds(250))
                record = try await begin(id, limits)
            }
        } catch {
            return .refused("its record could not be read, so it did not run: \(TetherError.reason(of: error))")
        }
        switch record {
        case .answered(let payload):
            return .answer(Response(payload: payload))
        case .answerNotKept:
            return .unknown("it ran, but its answer was larger than its record may keep (MailboxLimits.maximumRequestRecordBytesPerClient)")
        case .refused(let reason):
            return .refused(reason)
        case .running:
            return .unknown("a copy of it has been running for more than \(Self.keyedWait) elsewhere, or its server stopped while it ran")
        case .started:
            guard let response = await run() else {
                return .unknown("its handler was stopped as the server shut down")
            }
            let now = configuration.clock()
            // A record that cannot be written leaves it running: a repeat is told it may
            // have run, never run again.
            _ = try? await callStoreForKeyed { try await $0.finishRequest(id.key, of: id.clientID, answer: response.payload, limits: limits, now: now) }
            return .answer(response)
        }
    }

    private func begin(_ id: KeyedID, _ limits: MailboxLimits) async throws -> RequestRecord {
        let now = configuration.clock()
        return try await callStoreForKeyed { try await $0.beginRequest(id.key, of: id.clientID, limits: limits, now: now) }
    }

    /// How long a repeat waits for a copy that runs elsewhere.
    static let keyedWait = Duration.seconds(5)
}
