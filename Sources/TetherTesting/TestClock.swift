public import Tether
internal import Synchronization

/// Time that moves only when a test says so.
///
/// Connections and servers whose event loops run on a test clock (``TestNetwork``'s, or a
/// group from ``makeEventLoopGroup(loopCount:)`` for real sockets) read their time from it:
/// request timeouts, heartbeats and the detection of a dead peer, reconnect backoff, idle
/// and handshake timeouts all wait for ``advance(by:)``. With ``mailboxClock`` in the
/// server's ``Tether/MailboxConfiguration``, the ages of stored pushes follow it too. Everything
/// else runs as usual: bytes move, handlers run, actors and tasks make progress.
///
/// ```swift
/// let clock = TestClock()
/// await clock.advance(by: .seconds(30))     // 30 s of heartbeats, in a few milliseconds
/// ```
///
/// An advance is deterministic: time moves from one due timer to the next, in deadline
/// order, and at each one the loops finish what the timer set off (the writes, the reads
/// they cause on the other side, the next timers due by then) before time moves on. What
/// the clock cannot see is work outside its loops: a task the test started, another thread.
/// Before advancing, await the event that shows such work is done (a request has reached
/// its handler, a peer was admitted), with ``firstElement(of:within:)`` or
/// ``withTimeLimit(_:_:_:)``.
///
/// Never call ``advance(by:)`` from code that runs on the clock's loops (a server's
/// handler, a task on a connection's executor): the loop would wait for itself.
public final class TestClock: Sendable {
    package let manual: ManualClock
    private let origin: UInt64
    private let groups = Mutex<[TetherEventLoopGroup]>([])

    /// A clock at its start; ``elapsed`` reads zero.
    public init() {
        manual = ManualClock()
        origin = manual.now
    }

    /// How far the clock has moved since it was made.
    public var elapsed: Duration {
        .nanoseconds(Int64(clamping: manual.now &- origin))
    }

    /// Moves time forward by `duration`, and fires, in deadline order, every timer due on
    /// the way.
    ///
    /// Returns once the clock reads the time it read when the advance began plus
    /// `duration`, every timer due by then has fired, and the loops are idle. Advances
    /// from several tasks run one after the other.
    ///
    /// - Parameter duration: How far to move; negative counts as zero.
    public func advance(by duration: Duration) async {
        await manual.advance(by: duration)
    }

    /// Waits, without moving the time, until the clock's loops have run everything that
    /// is due now: bytes written have been read by the other side, and what that caused
    /// has run.
    public func runUntilIdle() async {
        await manual.settle()
    }

    /// A mailbox clock (``Tether/MailboxConfiguration/clock``) that moves with this clock, so
    /// pushes age as the test advances time; ``Tether/ServerConfiguration/use(_:)`` sets it.
    ///
    /// It starts at 2023-11-14 22:13:20 UTC (1,700,000,000,000 ms since 1970) when the
    /// property is read, and moves with each advance, to the millisecond.
    public var mailboxClock: @Sendable () -> MailboxTime {
        manual.mailboxClock()
    }

    /// Starts a group of event loops whose timers follow this clock, for connections and
    /// servers over real sockets; the clock shuts it down in ``shutdown()``.
    ///
    /// Put a client and a server on one group of one loop (the default) and every timer of
    /// both fires in one deadline order.
    ///
    /// - Parameter loopCount: How many loop threads; at least one.
    /// - Returns: The group; set it as ``Tether/ConnectionConfiguration/eventLoopGroup`` and
    ///   ``Tether/ServerConfiguration/eventLoopGroup``.
    public func makeEventLoopGroup(loopCount: Int = 1) -> TetherEventLoopGroup {
        let group = TetherEventLoopGroup(loopCount: loopCount, clock: manual)
        groups.withLock { $0.append(group) }
        return group
    }

    /// Stops the loops of every group made by ``makeEventLoopGroup(loopCount:)``. Call it
    /// when the connections and servers on them have closed; idempotent.
    public func shutdown() {
        let made = groups.withLock { groups in
            defer { groups.removeAll() }
            return groups
        }
        for group in made { group.shutdown() }
    }
}
