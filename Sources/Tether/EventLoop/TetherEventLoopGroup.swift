import Synchronization

/// A fixed set of event loops that connections and servers share.
///
/// Each loop is one thread running `epoll` (Linux) or `kqueue` (Darwin). Connections are
/// spread across the loops round-robin. Most programs use ``shared``, which has one loop
/// per processor core and lives as long as the process.
public final class TetherEventLoopGroup: Sendable {
    package let loops: [EventLoop]
    private let cursor = Atomic<Int>(0)
    /// The clock of a group whose loops run on a manual clock; `nil` for real time.
    package let manualClock: ManualClock?

    /// The process-wide group: one loop per core, started on first use.
    public static let shared = TetherEventLoopGroup(loopCount: max(1, ProcessorCount.online))

    /// Starts a group of loops.
    ///
    /// - Parameter loopCount: How many loop threads to start; at least one.
    public init(loopCount: Int) {
        precondition(loopCount >= 1, "an event loop group needs at least one loop")
        loops = (0..<loopCount).map { EventLoop(name: "tether-loop-\($0)") }
        manualClock = nil
    }

    /// Starts a group of loops whose time is `clock`: their timers fire only as the clock
    /// is advanced, while their sockets and jobs run as usual.
    ///
    /// - Parameters:
    ///   - loopCount: How many loop threads to start; at least one.
    ///   - clock: The time of every loop of the group.
    package init(loopCount: Int, clock: ManualClock) {
        precondition(loopCount >= 1, "an event loop group needs at least one loop")
        loops = (0..<loopCount).map { EventLoop(name: "tether-manual-loop-\($0)", clock: clock) }
        manualClock = clock
    }

    /// The next loop, round-robin.
    package func next() -> EventLoop {
        let index = cursor.wrappingAdd(1, ordering: .relaxed).oldValue
        return loops[index % loops.count]
    }

    /// Stops every loop after its queued work has run. Do not use connections of the group afterwards.
    public func shutdown() {
        for loop in loops { loop.shutdown() }
    }
}
