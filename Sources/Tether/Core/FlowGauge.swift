import Synchronization

/// Tells a publisher when the slowest subscriber of a ``Broadcaster`` has too many elements,
/// or too many bytes, waiting, and when it has caught up again.
///
/// Each subscriber has a ``Backlog``: atomic adds when an element goes into its buffer,
/// atomic subtracts when its loop takes one out. A subscriber whose backlog rises above
/// ``limit`` elements or ``byteLimit`` bytes counts as lagging, and above ``hardLimit`` or
/// ``byteHardLimit`` as overflowing, until both fall below half their limits
/// (``resumeBelow``, ``byteResumeBelow``). The publisher reads ``isLagging`` and
/// ``isOverflowing`` (one load each), and ``onRelief(_:)``'s body is called when the last
/// lagging subscriber catches up, on the thread of its loop.
final class FlowGauge: Sendable {
    /// The most elements a subscriber may have waiting before it lags.
    let limit: Int
    /// The most elements a subscriber may have waiting before it overflows: the publisher
    /// must stop taking elements at all.
    let hardLimit: Int
    /// The backlog below which a lagging subscriber has caught up.
    let resumeBelow: Int
    /// The most bytes a subscriber may have waiting before it lags.
    let byteLimit: Int
    /// The most bytes before it overflows.
    let byteHardLimit: Int
    /// The bytes below which a lagging subscriber has caught up.
    let byteResumeBelow: Int
    /// The most bytes any subscriber had waiting once it went above the byte limit.
    private let bytePeak = Atomic<Int>(0)
    /// Subscribers lagging now.
    private let lagging = Atomic<Int>(0)
    /// Subscribers overflowing now.
    private let overflowing = Atomic<Int>(0)
    /// The largest backlog seen above the limit, for tests.
    private let peak = Atomic<Int>(0)
    /// Called, on the consuming thread, when no subscriber lags any more.
    private let relief = Lock<(@Sendable () -> Void)?>(nil)

    /// - Parameters:
    ///   - limit: The most elements a subscriber may have waiting before it lags; at least 1.
    ///   - hardLimit: The most before it overflows; at least `limit`, twice it when `nil`.
    ///   - byteLimit: The most bytes a subscriber may have waiting before it lags; no bound
    ///     when `nil`.
    ///   - byteHardLimit: The most bytes before it overflows; at least `byteLimit`, twice it
    ///     when `nil`.
    init(limit: Int, hardLimit: Int? = nil, byteLimit: Int? = nil, byteHardLimit: Int? = nil) {
        self.limit = max(1, limit)
        self.hardLimit = max(self.limit, hardLimit ?? (self.limit > Int.max / 2 ? .max : self.limit * 2))
        self.resumeBelow = max(1, self.limit / 2)
        let bytes = max(1, byteLimit ?? .max)
        self.byteLimit = bytes
        self.byteHardLimit = max(bytes, byteHardLimit ?? (bytes > Int.max / 2 ? .max : bytes * 2))
        self.byteResumeBelow = bytes == .max ? .max : max(1, bytes / 2)
    }

    /// A gauge of bytes only, for a feed whose subscribers drop elements by number: a
    /// subscriber overflows above `bytes` and has caught up below half of it.
    ///
    /// - Parameter bytes: The most bytes a subscriber may have waiting.
    /// - Returns: The gauge.
    static func bytes(_ bytes: Int) -> FlowGauge {
        FlowGauge(limit: .max, hardLimit: .max, byteLimit: bytes, byteHardLimit: bytes)
    }

    /// Sets what is called, on the consuming thread, when no subscriber lags any more.
    func onRelief(_ body: @escaping @Sendable () -> Void) {
        relief.withLock { $0 = body }
    }

    /// Whether a subscriber lags: the publisher should stop until the body of ``onRelief(_:)`` is called.
    var isLagging: Bool { lagging.load(ordering: .relaxed) > 0 }

    /// Whether a subscriber overflows: the publisher must take no more elements until the
    /// body of ``onRelief(_:)`` is called.
    var isOverflowing: Bool { overflowing.load(ordering: .relaxed) > 0 }

    /// The largest backlog any subscriber had once it went above the limit; 0 if none did.
    var peakBacklog: Int { peak.load(ordering: .relaxed) }

    /// The most bytes any subscriber had waiting once it went above the byte limit; 0 if
    /// none did.
    var peakBytes: Int { bytePeak.load(ordering: .relaxed) }

    fileprivate func startedLagging(at backlog: Int) {
        lagging.wrappingAdd(1, ordering: .sequentiallyConsistent)
        peak.max(backlog, ordering: .relaxed)
    }

    fileprivate func stoppedLagging() {
        if lagging.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue == 0 {
            relief.withLock { $0 }?()
        }
    }

    fileprivate func startedOverflowing() {
        overflowing.wrappingAdd(1, ordering: .sequentiallyConsistent)
    }

    fileprivate func stoppedOverflowing() {
        overflowing.wrappingSubtract(1, ordering: .sequentiallyConsistent)
    }

    fileprivate func noteBacklog(_ backlog: Int) {
        peak.max(backlog, ordering: .relaxed)
    }

    fileprivate func noteBytes(_ bytes: Int) {
        bytePeak.max(bytes, ordering: .relaxed)
    }
}

/// What one subscriber of a ``Broadcaster`` with a ``FlowGauge`` has waiting in its buffer.
///
/// The publisher counts an element before yielding it (``added()``), the subscription's
/// iterator after taking it (``consumed()``). Whether the subscriber lags, and whether it
/// overflows, are flags that either side may flip, each by compare-and-exchange, so the gauge
/// counts each exactly once.
final class Backlog: Sendable {
    private let gauge: FlowGauge
    private let pending = Atomic<Int>(0)
    private let bytes = Atomic<Int>(0)
    private let lagging = Atomic<Bool>(false)
    private let overflowing = Atomic<Bool>(false)

    init(_ gauge: FlowGauge) {
        self.gauge = gauge
    }

    /// Elements waiting now, for tests.
    var count: Int { pending.load(ordering: .relaxed) }

    /// Bytes waiting now, for tests.
    var byteCount: Int { bytes.load(ordering: .relaxed) }

    /// Whether both the elements and the bytes waiting are below the marks at which a
    /// lagging subscriber has caught up.
    private var caughtUp: Bool {
        pending.load(ordering: .sequentiallyConsistent) < gauge.resumeBelow
            && bytes.load(ordering: .sequentiallyConsistent) < gauge.byteResumeBelow
    }

    /// An element of `size` bytes is about to go into the buffer.
    func added(bytes size: Int = 0) {
        let backlog = pending.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
        let held = size == 0 ? bytes.load(ordering: .sequentiallyConsistent) : bytes.wrappingAdd(size, ordering: .sequentiallyConsistent).newValue
        let overBytes = held > gauge.byteLimit
        guard backlog > gauge.limit || overBytes else { return }
        if overBytes { gauge.noteBytes(held) }
        let over = backlog > gauge.hardLimit || held > gauge.byteHardLimit
        if over, overflowing.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged {
            gauge.startedOverflowing()
        }
        guard lagging.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged else {
            gauge.noteBacklog(backlog)
            if over, caughtUp { release() }
            return
        }
        gauge.startedLagging(at: backlog)
        // The subscriber may have caught up between the add and the flag, and seen no flag
        // to clear: then clear it here, or nothing would.
        if caughtUp { release() }
    }

    /// The element of `size` bytes just counted did not go into the buffer (it ended), or
    /// one of that size was dropped from it to make room.
    func withdrawn(bytes size: Int = 0) {
        consumed(bytes: size)
    }

    /// The subscriber took an element of `size` bytes out of its buffer.
    func consumed(bytes size: Int = 0) {
        let backlog = pending.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue
        let held = size == 0 ? bytes.load(ordering: .sequentiallyConsistent) : bytes.wrappingSubtract(size, ordering: .sequentiallyConsistent).newValue
        guard backlog < gauge.resumeBelow, held < gauge.byteResumeBelow, lagging.load(ordering: .sequentiallyConsistent) else { return }
        release()
    }

    /// The subscriber left: it holds nothing back any more.
    func ended() {
        release()
    }

    private func release() {
        // Overflowing first: once the last lagging subscriber has caught up, none overflows.
        if overflowing.compareExchange(expected: true, desired: false, ordering: .sequentiallyConsistent).exchanged {
            gauge.stoppedOverflowing()
        }
        guard lagging.compareExchange(expected: true, desired: false, ordering: .sequentiallyConsistent).exchanged else { return }
        gauge.stoppedLagging()
    }
}
