/// A heartbeat interval that lengthens while the network lets it, for phones behind NATs.
///
/// Carriers and home routers forget an idle TCP connection's NAT mapping after a time
/// nobody tells the app (often between 2 and 30 minutes); after that, nothing reaches either
/// end and the connection dies without a sound. A fixed short interval keeps the mapping
/// alive at the cost of a radio wake-up each time; a fixed long one dies silently. An
/// adaptive heartbeat starts at ``minimum``, lengthens the interval by ``step`` after
/// ``successesBeforeStep`` healthy intervals in a row, never beyond ``maximum``, and steps
/// back after a silent death. What it learned is kept in ``memory`` per network and server,
/// so the next connection there starts from the last interval that worked.
///
/// An interval of length L is *healthy* when no frame went either way between the ack of
/// one heartbeat and the next heartbeat, sent L after the one before, and that heartbeat was
/// acknowledged: the NAT mapping survived L of silence. An interval with traffic in it
/// proves nothing and counts neither way. A *silent death* is a connection lost while the
/// heartbeat after a silent interval L is unanswered (missed, or the connection reset before
/// its ack): L is recorded as too long, the connection that comes next starts from the last
/// interval that worked (or one ``step`` below L when L itself had worked before), and no
/// interval of L or more is tried again on that network for ``retryFailedAfter``. A
/// heartbeat missed while the connection lives on (its ack was late, or a retry got one)
/// restarts the count of healthy intervals without recording a failure.
///
/// With an adaptive heartbeat, the heartbeat after a miss goes out at once instead of an
/// interval later, so a connection whose mapping is gone is found dead within
/// ``HeartbeatConfiguration/timeout`` × ``HeartbeatConfiguration/maximumMissed`` of the
/// failed heartbeat, whatever the interval.
///
/// ```swift
/// var configuration = ConnectionConfiguration()
/// configuration.heartbeat = .adaptive()                 // 30 s, +60 s per step, up to 9 min
/// ```
public struct AdaptiveHeartbeat: Sendable, Hashable {
    /// The interval a network without history starts from, and the shortest the interval
    /// ever becomes. Default 30 s: shorter than the idle timeouts of mobile carriers' NATs
    /// (which RFC 5382 asks to be at least 2 h 4 min, and which in practice start near a
    /// minute), so the first interval keeps any mapping alive.
    public var minimum: Duration = .seconds(30)
    /// The longest interval. Default 9 min: under the 10-minute idle timeout that many
    /// firewalls and NATs use, and long enough that a longer one would save little: 7
    /// wake-ups an hour instead of 120 at the minimum.
    public var maximum: Duration = .seconds(540)
    /// How much a step lengthens the interval. Default 60 s.
    ///
    /// Added, not multiplied: the interval approaches a network's limit in even steps, so a
    /// failed try overshoots it by at most one step, and the interval kept after it is at
    /// most one step below the limit. From the defaults, 30 s reaches 9 min in 9 steps.
    public var step: Duration = .seconds(60)
    /// Healthy intervals in a row before the interval lengthens. Default 2: one more proof
    /// than strictly needed, as NATs that are short of memory forget mappings sooner.
    public var successesBeforeStep: Int = 2
    /// How long an interval that failed on a network is not tried again there (nor any
    /// longer one); `nil` never tries it again. Default 24 h: a network's NAT rarely changes,
    /// and each new try that fails costs a connection, but a failure that came from
    /// something else (a lift, a tunnel) should not shorten the interval for ever.
    public var retryFailedAfter: Duration? = .seconds(86_400)
    /// Where what was learned is kept, shared by every connection that uses it. Default
    /// ``HeartbeatMemory/shared``.
    public var memory: HeartbeatMemory = .shared

    /// The defaults: from 30 s, +60 s after 2 healthy intervals, up to 9 min; a failed
    /// interval not tried again for 24 h; remembered in ``HeartbeatMemory/shared``.
    public init() {}

    /// An adaptive heartbeat with the given limits.
    ///
    /// - Parameters:
    ///   - minimum: The first and shortest interval.
    ///   - maximum: The longest interval.
    ///   - step: How much a step lengthens the interval.
    ///   - successesBeforeStep: Healthy intervals in a row before a step.
    ///   - retryFailedAfter: How long a failed interval is not tried again; `nil` for never.
    ///   - memory: Where what was learned is kept.
    public init(
        minimum: Duration = .seconds(30),
        maximum: Duration = .seconds(540),
        step: Duration = .seconds(60),
        successesBeforeStep: Int = 2,
        retryFailedAfter: Duration? = .seconds(86_400),
        memory: HeartbeatMemory = .shared
    ) {
        self.minimum = minimum
        self.maximum = maximum
        self.step = step
        self.successesBeforeStep = successesBeforeStep
        self.retryFailedAfter = retryFailedAfter
        self.memory = memory
    }
}

/// The adaptive heartbeat's rules as a pure value over monotonic nanoseconds: which interval
/// to use, after which healthy intervals and failures. No clock, no I/O: tests drive it with
/// explicit lengths and instants.
struct AdaptiveHeartbeatState: Sendable, Hashable {
    /// What an event did to the interval.
    enum Change: Equatable, Sendable { case unchanged, lengthened, shortened }

    /// An interval that died, and when: `nil` for a failure restored from a snapshot, held
    /// from when a connection first reads it.
    struct Failure: Sendable, Hashable {
        var interval: UInt64
        var at: UInt64?
    }

    /// What is remembered of one network.
    struct Record: Sendable, Hashable {
        /// The interval to start from: the last that worked.
        var lastGood: UInt64?
        /// The shortest interval that failed, while it is not to be tried again.
        var failure: Failure?
    }

    let minimum: UInt64
    let maximum: UInt64
    let step: UInt64
    let successesBeforeStep: Int
    let retryFailedAfter: UInt64?
    /// The interval in use.
    private(set) var interval: UInt64
    /// Healthy intervals in a row at ``interval``.
    private(set) var successes = 0
    private(set) var record = Record()

    /// The state of a network without history, or of one with `record`: it starts from
    /// the last interval that worked there, within the limits, below a failure still held.
    init(_ settings: AdaptiveHeartbeat, record: Record? = nil, now: UInt64 = 0) {
        minimum = max(1, MonotonicTime.nanoseconds(of: settings.minimum))
        maximum = max(minimum, MonotonicTime.nanoseconds(of: settings.maximum))
        step = max(1, MonotonicTime.nanoseconds(of: settings.step))
        successesBeforeStep = max(1, settings.successesBeforeStep)
        retryFailedAfter = settings.retryFailedAfter.map { MonotonicTime.nanoseconds(of: $0) }
        interval = minimum
        if let record { self.record = record }
        if self.record.failure != nil, self.record.failure?.at == nil { self.record.failure?.at = now }
        expireFailure(now: now)
        var start = min(maximum, max(minimum, self.record.lastGood ?? minimum))
        if let failure = self.record.failure, start >= failure.interval {
            start = max(minimum, failure.interval > step ? failure.interval - step : minimum)
        }
        interval = start
    }

    /// The longest interval that may be tried now: one below the failure still held.
    private var ceiling: UInt64? { record.failure?.interval }

    /// Forgets a failure older than ``retryFailedAfter``; one recorded on another clock
    /// (an instant after `now`) counts as old.
    private mutating func expireFailure(now: UInt64) {
        guard let at = record.failure?.at, let hold = retryFailedAfter else { return }
        if now < at || now - at >= hold { record.failure = nil }
    }

    /// A silent interval of `length` ended with an acked heartbeat: the mapping survived it.
    /// After ``successesBeforeStep`` of them at the interval in use, the interval lengthens
    /// by ``step``, up to ``maximum`` and below a failed interval still held.
    ///
    /// - Returns: Whether the interval changed.
    mutating func healthy(_ length: UInt64, now: UInt64) -> Change {
        record.lastGood = max(record.lastGood ?? 0, length)
        // Another connection on the network proved it after all.
        if let failure = record.failure, length >= failure.interval { record.failure = nil }
        guard length >= interval else { return .unchanged }
        successes += 1
        guard successes >= successesBeforeStep else { return .unchanged }
        expireFailure(now: now)
        var next = min(maximum, interval + step)
        if let ceiling, next >= ceiling { next = interval }
        guard next > interval else { return .unchanged }
        interval = next
        successes = 0
        return .lengthened
    }

    /// A heartbeat was missed but the connection lived on: nothing proven either way; the
    /// count of healthy intervals starts again.
    mutating func inconclusive() {
        successes = 0
    }

    /// The connection died while the heartbeat after a silent interval of `length` went
    /// unanswered: `length` is too long here. The interval goes back to the last that worked,
    /// or one ``step`` below `length` (not below ``minimum``) when `length` had worked before.
    ///
    /// - Returns: Whether the interval changed.
    mutating func failed(_ length: UInt64, now: UInt64) -> Change {
        expireFailure(now: now)
        let shortest = min(record.failure?.interval ?? .max, length)
        record.failure = Failure(interval: shortest, at: now)
        successes = 0
        let next: UInt64
        if let good = record.lastGood, good < length {
            next = max(minimum, good)
        } else {
            next = length > minimum + step ? length - step : minimum
            record.lastGood = next
        }
        let before = interval
        interval = min(next, maximum)
        return interval < before ? .shortened : interval > before ? .lengthened : .unchanged
    }
}
