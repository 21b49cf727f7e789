/// The places for suspending handlers over all the peers of a server:
/// ``ServerConfiguration/maximumHandlers`` of them.
///
/// A peer that finds none free joins a queue and is handed the next place released, in the
/// order the peers asked: a released place goes straight to the first peer waiting, so the
/// count never drops below the limit while peers wait and nobody can take a place ahead of
/// them.
final class HandlerSlots: Sendable {
    private struct State {
        var inUse = 0
        /// Peers waiting for a place, oldest first from `head`.
        var waiting: [Peer] = []
        var head = 0
    }

    let limit: Int
    private let state = Lock(State())

    init(limit: Int) {
        self.limit = max(limit, 1)
    }

    /// Places taken now.
    var inUse: Int { state.withLock { $0.inUse } }

    /// Takes a place, or queues `peer` for the next one released.
    ///
    /// - Returns: `true` with a place; `false` when the peer was queued: it is then given a
    ///   place by ``Peer/slotGranted()`` on its loop.
    func acquire(orQueue peer: Peer) -> Bool {
        state.withLock { state in
            if state.inUse < limit && state.head == state.waiting.count {
                state.inUse += 1
                return true
            }
            state.waiting.append(peer)
            return false
        }
    }

    /// Gives a place back, or hands it to the first peer waiting, which the caller tells.
    ///
    /// - Returns: The peer that now holds the place, if one was waiting.
    func release() -> Peer? {
        state.withLock { state -> Peer? in
            guard state.head < state.waiting.count else {
                state.inUse -= 1
                return nil
            }
            let next = state.waiting[state.head]
            state.head += 1
            if state.head == state.waiting.count {
                state.waiting.removeAll(keepingCapacity: state.waiting.count <= 64)
                state.head = 0
            } else if state.head >= 64 && state.head * 2 >= state.waiting.count {
                state.waiting.removeFirst(state.head)
                state.head = 0
            }
            return next
        }
    }

    /// Takes `peer` out of the queue as it ends.
    ///
    /// - Returns: `false` when it was not queued: a place may be on its way to it, which it
    ///   must then release.
    func withdraw(_ peer: Peer) -> Bool {
        state.withLock { state in
            guard let index = state.waiting[state.head...].firstIndex(where: { $0 === peer }) else { return false }
            state.waiting.remove(at: index)
            return true
        }
    }
}
