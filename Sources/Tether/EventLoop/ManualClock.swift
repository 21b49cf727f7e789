import Synchronization

/// Time that moves only when told to: the time source of event loops that tests drive.
///
/// An ``EventLoop`` made with a manual clock reads its time (``EventLoop/now``) from the
/// clock instead of `CLOCK_MONOTONIC`, and never waits for a timer in real time: it blocks
/// for I/O and jobs only, and its timers fire once ``advance(by:)`` or ``advance(to:)``
/// has moved the clock past their deadlines. Everything else about the loop is real:
/// sockets, readiness, jobs, the actors that run on it. So a connection or a server on such
/// loops (``TetherEventLoopGroup/init(loopCount:clock:)``) talks over real loopback sockets while
/// its heartbeats, timeouts and backoffs wait for the test.
///
/// Advancing is deterministic: time moves from one due deadline to the next, in order, and
/// at each one the clock waits until every loop that uses it is idle (see
/// ``advance(to:)``) before it moves on. A timer callback that schedules another timer
/// due by the target fires in the same advance; one that reads the time reads its own
/// deadline. The order timers with the same deadline fire in is the order they were
/// scheduled in, on each loop.
///
/// What the clock cannot see is work outside its loops: tasks on the global executor,
/// other threads, a server's accept path that hops through a task. Before advancing, a test
/// awaits the event that shows such work is done (a request has reached the server, a peer
/// was admitted), with a bound.
package final class ManualClock: Sendable {
    private struct State {
        var loops: [EventLoop] = []
        var advancing = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let nanoseconds: Atomic<UInt64>
    private let state = Lock(State())

    /// A clock that reads `now` until it is advanced.
    ///
    /// The default start is well away from zero, so code that subtracts a timeout from the
    /// time never wraps.
    ///
    /// - Parameter now: The starting time, in monotonic nanoseconds.
    package init(now: UInt64 = 1_000_000_000_000) {
        nanoseconds = Atomic(now)
        origin = now
    }

    /// The time the clock started at.
    package let origin: UInt64

    /// The time, in monotonic nanoseconds: what ``EventLoop/now`` reads on every loop of
    /// this clock.
    package var now: UInt64 {
        nanoseconds.load(ordering: .acquiring)
    }

    /// Moves time forward by `duration`, firing what falls due on the way.
    ///
    /// Returns once the clock reads the time it read when this advance began plus
    /// `duration`, every timer due by then has fired, and the loops are idle again (see
    /// ``advance(to:)``).
    ///
    /// - Parameter duration: How far to move; negative counts as zero.
    package func advance(by duration: Duration) async {
        let step = MonotonicTime.nanoseconds(of: duration)
        await exclusively { clock in
            await clock.move(to: clock.now &+ step)
        }
    }

    /// Moves time forward by `duration` at once and wakes the loops, without waiting for
    /// them to be idle: the timers due by then fire on each loop's next turn, in deadline
    /// order, all at the new time.
    ///
    /// For time that follows events outside the loops, from any thread (the bytes a link
    /// carries, counted on the link's thread), where the loops may never be idle while those
    /// events go on. The time never moves back, beside an advance or not.
    ///
    /// - Parameter duration: How far to move; negative counts as zero.
    package func jump(by duration: Duration) {
        let step = MonotonicTime.nanoseconds(of: duration)
        guard step > 0 else { return }
        nanoseconds.wrappingAdd(step, ordering: .releasing)
        for loop in state.withLock({ $0.loops }) { loop.execute {} }
    }

    /// Moves time forward to `deadline`, firing what falls due on the way; an earlier
    /// `deadline` leaves the time as it is and only runs what is due.
    ///
    /// The clock first lets its loops settle, then, while the earliest timer of any loop is
    /// due by `deadline`, sets the time to that timer's deadline and lets the loops settle
    /// again; last it sets the time to `deadline`. A loop has settled when it has found,
    /// in one turn, no ready descriptor, no due timer, no queued job and nothing to flush,
    /// and the loops together have settled when a pass over all of them finds each one
    /// settled without any having done work since the pass before. So the callbacks of
    /// timers due at one instant, and everything they cause on the loops (writes, the
    /// reads those provoke on loops of the same clock, jobs, further timers due by then),
    /// happen before the time moves on.
    ///
    /// Advances run one at a time, in the order they were called. Do not call this from a
    /// loop of this clock (an actor on it, or a task that prefers it): the loop would wait
    /// for itself.
    ///
    /// - Parameter deadline: The time to move to, in monotonic nanoseconds.
    package func advance(to deadline: UInt64) async {
        await exclusively { clock in
            await clock.move(to: deadline)
        }
    }

    /// Waits until the loops of this clock have run everything that is due now, without
    /// moving the time.
    package func settle() async {
        await exclusively { clock in
            _ = await clock.settleLoops()
        }
    }

    // MARK: Loops

    /// Starts driving `loop`; called by the loop as it starts.
    func register(_ loop: EventLoop) {
        state.withLock { $0.loops.append(loop) }
    }

    /// Stops driving `loop`; called by the loop as it shuts down.
    func deregister(_ loop: EventLoop) {
        state.withLock { state in state.loops.removeAll { $0 === loop } }
    }

    // MARK: Advancing

    /// Runs `body` when no other advance is under way.
    private func exclusively(_ body: (ManualClock) async -> Void) async {
        let loops = state.withLock { $0.loops }
        for loop in loops {
            precondition(!loop.inLoop, "a manual clock cannot be advanced from its own event loop \(loop.name)")
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.advancing {
                    state.waiting.append(continuation)
                    return false
                }
                state.advancing = true
                return true
            }
            if now { continuation.resume() }
        }
        await body(self)
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiting.isEmpty {
                state.advancing = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }

    /// Steps the time from due deadline to due deadline up to `target`.
    private func move(to target: UInt64) async {
        var earliest = await settleLoops()
        // Never backwards, though a jump may move the time meanwhile.
        while let next = earliest, next <= target {
            nanoseconds.max(next, ordering: .releasing)
            earliest = await settleLoops()
        }
        nanoseconds.max(target, ordering: .releasing)
    }

    /// Waits until every loop is idle and none has done work during a whole pass; returns
    /// the earliest deadline of a timer still scheduled on any of them.
    private func settleLoops() async -> UInt64? {
        var previous: [UInt64] = []
        while true {
            let loops = state.withLock { $0.loops }
            var work: [UInt64] = []
            var earliest: UInt64?
            for loop in loops {
                let report = await loop.idle()
                work.append(report.work)
                if let deadline = report.earliestTimer { earliest = min(earliest ?? deadline, deadline) }
            }
            // One loop that found itself idle has nothing left that another could provoke.
            if loops.count <= 1 || work == previous { return earliest }
            previous = work
        }
    }
}

/// What a loop on a ``ManualClock`` reports when it has found itself idle.
struct LoopIdleReport: Sendable {
    /// How many turns of the loop have done work so far.
    var work: UInt64
    /// The deadline of the loop's earliest timer, if any.
    var earliestTimer: UInt64?
}
