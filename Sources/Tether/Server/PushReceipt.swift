// Receipts for pushes: the sender of a push may wait to learn what became of it.

/// What became of a push with a receipt (``Server/pushWithReceipt(_:toClient:timeToLive:)``).
public enum PushOutcome: Sendable, Hashable {
    /// The client has it: its acknowledgement covers the push, and a client acknowledges a
    /// push only once a subscriber of its took it.
    case delivered
    /// Its time to live ended before the client acknowledged it.
    case expired
    /// It will not be told: the reason (the server stopped, or the client's mailbox was
    /// removed as idle).
    case dropped(String)
}

/// A push's receipt: wait on it with ``outcome()``.
public struct PushReceipt: Sendable {
    /// The client the push is for.
    public let clientID: String
    /// The push's sequence number in the client's mailbox.
    public let sequence: UInt64
    let box: ReceiptBox

    /// Waits until the push is delivered, expires, or is dropped; at once when it was
    /// already. Any number of callers may wait.
    ///
    /// - Returns: What became of the push.
    public func outcome() async -> PushOutcome {
        await box.wait()
    }

    /// What became of the push, if it is settled already.
    public var settled: PushOutcome? { box.state.withLock { $0.outcome } }
}

/// The state of one receipt: its outcome once settled, and who waits for it.
final class ReceiptBox: Sendable {
    struct State {
        var outcome: PushOutcome?
        var waiters: [CheckedContinuation<PushOutcome, Never>] = []
    }

    let state = Lock(State())

    /// Settles the receipt, unless it was already; wakes who waits.
    func settle(_ outcome: PushOutcome) {
        let waiters = state.withLock { state -> [CheckedContinuation<PushOutcome, Never>] in
            guard state.outcome == nil else { return [] }
            state.outcome = outcome
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    func wait() async -> PushOutcome {
        await withCheckedContinuation { continuation in
            let settled = state.withLock { state -> PushOutcome? in
                if let outcome = state.outcome { return outcome }
                state.waiters.append(continuation)
                return nil
            }
            if let settled { continuation.resume(returning: settled) }
        }
    }
}

/// The receipts a server has not settled, by client, in sequence order.
struct ReceiptTable {
    var byClient: [String: [(sequence: UInt64, box: ReceiptBox)]] = [:]
    var count = 0
    /// Places taken by pushes being stored, so the bound holds before they are.
    var reserved = 0
    /// The highest acknowledgement of each client seen while receipts wait or are being
    /// made: one that comes between a push's store and its receipt settles it.
    var acknowledged: [String: UInt64] = [:]
}

extension MailboxHub {
    /// Takes a place for a receipt, or says why there is none.
    func reserveReceipt() throws(TetherError) {
        let bound = configuration.maximumReceipts
        let full = receipts.withLock { table -> Bool in
            guard table.count + table.reserved < bound else { return true }
            table.reserved += 1
            return false
        }
        if full {
            throw TetherError(code: .invalidArgument, message: "the server waits on \(bound) push receipts already, the most it keeps (MailboxConfiguration.maximumReceipts): the push was not stored")
        }
    }

    /// Gives back a place taken with ``reserveReceipt()``.
    func releaseReservation() {
        receipts.withLock { $0.reserved -= 1 }
    }

    /// Turns a reserved place into the receipt of the stored push; settles it `expired`
    /// when `timeToLive` ends before it is delivered.
    func addReceipt(clientID: String, sequence: UInt64, timeToLive: Duration?) -> PushReceipt {
        let box = ReceiptBox()
        let delivered = receipts.withLock { table -> Bool in
            table.reserved -= 1
            if let through = table.acknowledged[clientID], through >= sequence { return true }
            table.count += 1
            table.byClient[clientID, default: []].append((sequence, box))
            return false
        }
        if delivered {
            box.settle(.delivered)
            return PushReceipt(clientID: clientID, sequence: sequence, box: box)
        }
        if let timeToLive {
            // On the server's clock: the loop's, manual under a test network.
            let loop = state.withLock { $0.timerLoop }
            Task { [weak self] in
                if let loop {
                    try? await loop.sleep(until: loop.now &+ MonotonicTime.nanoseconds(of: timeToLive))
                } else {
                    try? await Task.sleep(for: timeToLive)
                }
                self?.removeReceipt(box, of: clientID)
                box.settle(.expired)
            }
        }
        return PushReceipt(clientID: clientID, sequence: sequence, box: box)
    }

    private func removeReceipt(_ box: ReceiptBox, of clientID: String) {
        receipts.withLock { table in
            guard let index = table.byClient[clientID]?.firstIndex(where: { $0.box === box }) else { return }
            table.byClient[clientID]!.remove(at: index)
            if table.byClient[clientID]!.isEmpty { table.byClient[clientID] = nil }
            table.count -= 1
        }
    }

    /// Acknowledgements came: the receipts they cover are delivered.
    func settleReceipts(_ positions: [String: UInt64]) {
        let settled = receipts.withLock { table -> [ReceiptBox] in
            guard table.count > 0 || table.reserved > 0 else {
                table.acknowledged.removeAll()
                return []
            }
            var settled: [ReceiptBox] = []
            for (clientID, through) in positions {
                table.acknowledged[clientID] = max(table.acknowledged[clientID] ?? 0, through)
                guard let waiting = table.byClient[clientID] else { continue }
                let covered = waiting.prefix { $0.sequence <= through }
                guard !covered.isEmpty else { continue }
                settled += covered.map(\.box)
                let rest = waiting.dropFirst(covered.count)
                table.byClient[clientID] = rest.isEmpty ? nil : Array(rest)
                table.count -= covered.count
            }
            return settled
        }
        for box in settled { box.settle(.delivered) }
    }

    /// Settles the receipts of `clientIDs` as dropped, with `reason`.
    func dropReceipts(of clientIDs: [String], _ reason: String) {
        guard !clientIDs.isEmpty else { return }
        let dropped = receipts.withLock { table -> [ReceiptBox] in
            guard table.count > 0 else { return [] }
            var dropped: [ReceiptBox] = []
            for clientID in clientIDs {
                guard let waiting = table.byClient.removeValue(forKey: clientID) else { continue }
                table.count -= waiting.count
                dropped += waiting.map(\.box)
            }
            return dropped
        }
        for box in dropped { box.settle(.dropped(reason)) }
    }

    /// Settles every receipt as dropped, with `reason`.
    func dropReceipts(_ reason: String) {
        let all = receipts.withLock { table -> [ReceiptBox] in
            defer {
                table.byClient.removeAll()
                table.count = 0
            }
            return table.byClient.values.flatMap { $0.map(\.box) }
        }
        for box in all { box.settle(.dropped(reason)) }
    }
}

extension Server {
    /// Pushes a frame to an identified client, as ``push(_:toClient:timeToLive:)`` does, and
    /// returns a receipt the sender may wait on: ``PushOutcome/delivered`` once the client
    /// acknowledges the push (it acknowledges only what a subscriber took), at once if it is
    /// connected and later when an offline client comes back; ``PushOutcome/expired`` when
    /// `timeToLive` ends first; ``PushOutcome/dropped(_:)`` when the server stops first.
    ///
    /// A push without a receipt costs nothing of this. At most
    /// ``MailboxConfiguration/maximumReceipts`` wait at once.
    ///
    /// The receipt is this server's: on a node of a cluster it learns of the
    /// acknowledgements made on this node, so a client that comes back on another node
    /// settles it only when it acknowledges here, or its time to live ends.
    ///
    /// - Parameters:
    ///   - frame: The notification; its type and payload are kept, its serial is replaced.
    ///   - clientID: The client.
    ///   - timeToLive: How long the push may be delivered; `nil` for as long as the
    ///     mailbox keeps it.
    /// - Returns: The receipt.
    /// - Throws: ``TetherError``, as ``push(_:toClient:)``, and
    ///   ``TetherError/Code/invalidArgument`` past ``MailboxConfiguration/maximumReceipts``;
    ///   then nothing was stored.
    public func pushWithReceipt(_ frame: Frame, toClient clientID: String, timeToLive: Duration? = nil) async throws(TetherError) -> PushReceipt {
        let hub = try requireMailboxes()
        try hub.reserveReceipt()
        let sequence: UInt64
        do {
            sequence = try await push(frame, toClient: clientID, timeToLive: timeToLive)
        } catch {
            hub.releaseReservation()
            throw error
        }
        return hub.addReceipt(clientID: clientID, sequence: sequence, timeToLive: timeToLive)
    }
}
