import Synchronization

/// An async sequence of events from a connection or server: frames, notifications,
/// heartbeats, states.
///
/// Every `for await` loop over a subscription gets every element delivered after it
/// subscribed. Each subscriber has its own bounded buffer (see
/// ``Limits/subscriberBufferSize``): when a slow subscriber falls that far behind, its
/// oldest element is dropped and counted. The sequence ends when the connection or server
/// it came from closes.
public struct Subscription<Element: Sendable>: AsyncSequence, Sendable {
    /// Subscriptions never throw; they end when their source closes.
    public typealias Failure = Never

    let stream: AsyncStream<Element>
    /// What the subscriber has waiting, counted for flow control; `nil` when nobody counts.
    let backlog: Backlog?
    /// The elements this subscription lost, counted by the broadcaster as it drops them.
    let drops: DropCount
    /// The bytes an element holds, for the backlog; `nil` when only elements are counted.
    let weigh: (@Sendable (Element) -> Int)?

    init(stream: AsyncStream<Element>, backlog: Backlog? = nil, drops: DropCount = DropCount(), weigh: (@Sendable (Element) -> Int)? = nil) {
        self.stream = stream
        self.backlog = backlog
        self.drops = drops
        self.weigh = weigh
    }

    /// How many elements this subscription has lost so far because its buffer was full.
    ///
    /// A subscription holds up to ``Limits/subscriberBufferSize`` elements that its loop has
    /// not read yet. When one more arrives, the oldest is dropped, for this subscription
    /// only, and counted here; other subscriptions of the same source are not affected. The
    /// count only grows; it is 0 for as long as the subscription keeps up, and always 0 for a
    /// subscription that never drops (``Connection/notifications`` with a
    /// ``ConnectionConfiguration/session``, whose buffers grow instead). Reading it costs one
    /// atomic load, and nothing is spent on it while nothing is dropped.
    ///
    /// Keep the subscription in a `let` to read the count from inside its loop, and compare
    /// it with the last value seen to learn that elements went missing, and how many:
    ///
    /// ```swift
    /// let pushes = connection.notifications
    /// var lost = 0
    /// for await push in pushes {
    ///     if pushes.dropped > lost {
    ///         print("missed \(pushes.dropped - lost) pushes")
    ///         lost = pushes.dropped
    ///     }
    ///     handle(push)
    /// }
    /// ```
    ///
    /// The connection's total over all its subscriptions is
    /// ``ConnectionMetrics/droppedElements``.
    public var dropped: Int { drops.count }

    /// The iterator of a subscription.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<Element>.Iterator
        let backlog: Backlog?
        let drops: DropCount
        let weigh: (@Sendable (Element) -> Int)?

        /// How many elements the subscription has lost so far because its buffer was full:
        /// the same count as the subscription's ``Subscription/dropped``.
        public var dropped: Int { drops.count }

        /// The next element, or `nil` once the source has closed.
        ///
        /// - Returns: The oldest element not yet read, waiting for one when none is buffered;
        ///   `nil` once the source has closed and the buffer is empty.
        public mutating func next() async -> Element? {
            let element = await base.next()
            if let backlog, let element { backlog.consumed(bytes: weigh?(element) ?? 0) }
            return element
        }

        /// The next element, or `nil` once the source has closed, without leaving the
        /// caller's actor.
        ///
        /// - Parameter actor: The actor the caller is isolated to, or `nil`.
        /// - Returns: The oldest element not yet read, waiting for one when none is buffered;
        ///   `nil` once the source has closed and the buffer is empty.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            let element = await base.next(isolation: actor)
            if let backlog, let element { backlog.consumed(bytes: weigh?(element) ?? 0) }
            return element
        }
    }

    /// The same elements as an `AsyncStream`, for an API that takes one.
    ///
    /// Nothing is copied and no buffer is added: the stream reads this subscription's own
    /// buffer, bounded as it is (``Limits/subscriberBufferSize``), and what it loses still
    /// counts in ``dropped``. Make it once and read it from one task, as the subscription
    /// itself; do not also iterate the subscription.
    ///
    /// ```swift
    /// let frames: AsyncStream<Frame> = connection.frames.asyncStream
    /// ```
    ///
    /// The subscription is the default because it tells what it dropped and, for a
    /// session's pushes, counts what the app has taken for flow control; an `AsyncStream`
    /// has no place for either.
    public var asyncStream: AsyncStream<Element> {
        // Without flow-control counting, the stream underneath is the subscription.
        guard backlog != nil else { return stream }
        let reader = SubscriptionReader(makeAsyncIterator())
        return AsyncStream(unfolding: { await reader.next() })
    }

    /// Makes the iterator that a `for await` loop uses.
    ///
    /// - Returns: An iterator over the elements delivered since the subscription was made,
    ///   the oldest still buffered first.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator(), backlog: backlog, drops: drops, weigh: weigh)
    }
}

/// The elements one subscription lost because its buffer was full, shared by the broadcaster
/// (which counts) and the subscription (which reads). Touched only when an element is dropped.
/// The iterator an ``Subscription/asyncStream`` pulls from, for a subscription that counts
/// what is taken: the stream's one consumer calls it, one call at a time.
final class SubscriptionReader<Element: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `AsyncStream(unfolding:)` calls `next()` for one consumer, one
    // call after another, never two at once.
    private var iterator: Subscription<Element>.AsyncIterator

    init(_ iterator: Subscription<Element>.AsyncIterator) { self.iterator = iterator }

    func next() async -> Element? { await iterator.next() }
}

final class DropCount: Sendable {
    private let value = Atomic<Int>(0)

    init() {}

    /// Elements dropped so far.
    var count: Int { value.load(ordering: .relaxed) }

    /// Counts one more dropped element.
    func add() {
        value.wrappingAdd(1, ordering: .relaxed)
    }
}

/// Fans elements out to any number of subscribers, each with a bounded buffer.
///
/// Thread-safe: subscribe from anywhere; publish from the owner's executor.
final class Broadcaster<Element: Sendable>: Sendable {
    /// Subscribers right now, readable without the lock: publishing to nobody is one load.
    private let subscriberCount = Atomic<Int>(0)
    private struct Subscriber {
        var continuation: AsyncStream<Element>.Continuation
        var filter: (@Sendable (Element) -> Bool)?
        /// Counted with a ``FlowGauge``; `nil` without one.
        var backlog: Backlog?
        /// What this subscriber lost, shared with its ``Subscription``.
        var drops: DropCount

        /// Yields `element`, counting it in the backlog first (the subscriber may take it
        /// before `yield` returns). When the buffer was full and the oldest element made room
        /// for this one, that is counted in `drops` and in the broadcaster's `total`.
        func deliver(_ element: Element, total: inout Int, weigh: (@Sendable (Element) -> Int)?) -> AsyncStream<Element>.Continuation.YieldResult {
            guard let backlog else {
                let result = continuation.yield(element)
                if case .dropped = result { dropped(&total) }
                return result
            }
            backlog.added(bytes: weigh?(element) ?? 0)
            let result = continuation.yield(element)
            switch result {
            case .enqueued:
                return result
            case .dropped(let oldest):
                // The oldest made room for this one.
                backlog.withdrawn(bytes: weigh?(oldest) ?? 0)
                dropped(&total)
            default:
                backlog.withdrawn(bytes: weigh?(element) ?? 0)
            }
            return result
        }

        private func dropped(_ total: inout Int) {
            drops.add()
            total += 1
        }
    }

    /// An element kept for a subscriber to come.
    private struct Held {
        var element: Element
        /// Kept until a subscriber whose filter takes it comes (``publishUntilTaken(_:)``),
        /// rather than offered to the first subscriber only (``publish(_:)``).
        var untilTaken: Bool
    }

    private struct State {
        var subscribers: [UInt64: Subscriber] = [:]
        var nextID: UInt64 = 0
        var finished = false
        /// Elements replayed to each new subscriber (the current state, for `states`).
        var replay: Element?
        /// Elements kept for subscribers to come, oldest first.
        var held: [Held] = []
        /// The bytes of `held`, by ``Broadcaster/weigh``.
        var heldBytes = 0
        /// Elements dropped from subscribers' full buffers: the sum of their ``DropCount``s,
        /// those that have ended included.
        var dropped = 0
        /// Elements held for subscribers to come that were let go: to make room, or refused
        /// by the filter of the first subscriber they were held for. No subscription lost them.
        var discarded = 0
        /// Told which elements of ``publishUntilTaken(_:)`` a new subscriber took.
        var onTaken: (@Sendable ([Element]) -> Void)?
    }

    private let state = Lock(State())
    /// Subscribers whose stream ended (its task cancelled, its loop left), to be removed
    /// under `state` by the next call that takes it. A termination handler runs while the
    /// runtime holds the ending task's status lock, and `publish` holds `state` while
    /// `yield` takes a task's status lock: taking `state` in the handler would invert that
    /// order and could deadlock. This lock is a leaf: nothing else is taken while it is held.
    private let ended = Lock([UInt64]())
    /// Whether `ended` may hold ids: publishing checks this one load, not the lock.
    private let hasEnded = Atomic<Bool>(false)
    private let bufferSize: Int
    private let keepsLatest: Bool
    private let holdsUntilSubscribed: Bool
    private let lossless: Bool
    /// The most elements held for subscribers to come.
    private let holdLimit: Int
    /// The most bytes held for subscribers to come, by ``weigh``.
    private let holdByteLimit: Int
    /// The bytes an element holds, for the byte bounds; `nil` counts none.
    let weigh: (@Sendable (Element) -> Int)?
    /// Told of every published element first; see ``init(bufferSize:keepsLatest:holdsUntilSubscribed:lossless:holdLimit:gauge:tap:)``.
    private let tap: (@Sendable (Element) -> Void)?
    /// Counts what each subscriber has waiting, when set: for a lossless feed whose
    /// publisher stops when a subscriber falls too far behind.
    let gauge: FlowGauge?

    /// - Parameters:
    ///   - bufferSize: Elements each subscriber may have waiting.
    ///   - keepsLatest: Whether a new subscriber first gets the latest published element.
    ///   - holdsUntilSubscribed: Whether elements published while nobody is subscribed are
    ///     kept for the first subscriber.
    ///   - lossless: Whether subscribers' buffers grow as needed: nothing published to a
    ///     subscriber is dropped, and `bufferSize` is ignored.
    ///   - holdLimit: The most elements held for subscribers to come (by `publish` while
    ///     nobody is subscribed, by `publishUntilTaken` while nobody takes them); `nil` for
    ///     `bufferSize`.
    ///   - gauge: Counts what each subscriber has waiting and says when the slowest is too
    ///     far behind; `nil` counts nothing.
    ///   - weigh: The bytes an element holds: counted by the gauge, and bounding what is
    ///     held for subscribers to come by the gauge's ``FlowGauge/byteLimit``; `nil`
    ///     counts elements only.
    ///   - tap: Told of every element of ``publish(_:)`` first, on the publishing thread,
    ///     whether anyone is subscribed or not: a ``TetherObserver``.
    init(bufferSize: Int, keepsLatest: Bool = false, holdsUntilSubscribed: Bool = false, lossless: Bool = false, holdLimit: Int? = nil, gauge: FlowGauge? = nil, weigh: (@Sendable (Element) -> Int)? = nil, tap: (@Sendable (Element) -> Void)? = nil) {
        self.tap = tap
        self.gauge = gauge
        self.weigh = weigh
        self.holdByteLimit = weigh == nil ? .max : gauge?.byteLimit ?? .max
        self.bufferSize = lossless ? .max : max(1, bufferSize)
        self.keepsLatest = keepsLatest
        self.holdsUntilSubscribed = holdsUntilSubscribed
        self.lossless = lossless
        self.holdLimit = max(1, holdLimit ?? bufferSize)
    }

    /// Sets what is told, outside the lock and on the subscribing thread, which held
    /// elements of ``publishUntilTaken(_:)`` a new subscriber took.
    func onTaken(_ body: @escaping @Sendable ([Element]) -> Void) {
        state.withLock { $0.onTaken = body }
    }

    func subscribe(where filter: (@Sendable (Element) -> Bool)? = nil) -> Subscription<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: lossless ? .unbounded : .bufferingNewest(bufferSize))
        var taken: [Element] = []
        let backlog = gauge.map(Backlog.init)
        let drops = DropCount()
        let subscriber = Subscriber(continuation: continuation, filter: filter, backlog: backlog, drops: drops)
        let (finished, onTaken) = state.withLock { state -> (Bool, (@Sendable ([Element]) -> Void)?) in
            removeEnded(&state)
            if let replay = state.replay, filter?(replay) ?? true {
                _ = subscriber.deliver(replay, total: &state.dropped, weigh: weigh)
            }
            if !state.held.isEmpty {
                // The subscriber takes what was held and its filter accepts. What it refuses
                // stays if it waits for a taker; otherwise it was for the first subscriber
                // only, and is dropped.
                var kept: [Held] = []
                for held in state.held {
                    if filter?(held.element) ?? true {
                        _ = subscriber.deliver(held.element, total: &state.dropped, weigh: weigh)
                        if held.untilTaken { taken.append(held.element) }
                    } else if held.untilTaken {
                        kept.append(held)
                    } else {
                        state.discarded += 1
                    }
                }
                state.held = kept
                state.heldBytes = weigh.map { weigh in kept.reduce(0) { $0 + weigh($1.element) } } ?? 0
            }
            if state.finished { return (true, taken.isEmpty ? nil : state.onTaken) }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = subscriber
            subscriberCount.store(state.subscribers.count, ordering: .relaxed)
            continuation.onTermination = { [weak self] _ in
                // Only noted here; see `ended`.
                // A subscriber that left holds nothing back any more.
                backlog?.ended()
                guard let self else { return }
                self.ended.withLock { $0.append(id) }
                self.hasEnded.store(true, ordering: .releasing)
            }
            return (false, taken.isEmpty ? nil : state.onTaken)
        }
        if finished {
            backlog?.ended()
            continuation.finish()
        }
        onTaken?(taken)
        return Subscription(stream: stream, backlog: backlog, drops: drops, weigh: weigh)
    }

    /// Delivers `element` to every subscriber whose filter accepts it.
    func publish(_ element: Element) {
        tap?(element)
        // A subscriber that joins concurrently may miss this element: it subscribed "from now".
        if !keepsLatest && !holdsUntilSubscribed && subscriberCount.load(ordering: .relaxed) == 0 { return }
        state.withLock { state in
            removeEnded(&state)
            if keepsLatest { state.replay = element }
            if holdsUntilSubscribed && state.subscribers.isEmpty && !state.finished {
                guard makeRoom(for: element, &state) else {
                    state.discarded += 1
                    return
                }
                state.held.append(Held(element: element, untilTaken: false))
                return
            }
            for subscriber in state.subscribers.values where subscriber.filter?(element) ?? true {
                _ = subscriber.deliver(element, total: &state.dropped, weigh: weigh)
            }
        }
    }

    /// What became of an element of ``publishUntilTaken(_:)``.
    enum Publication: Equatable {
        /// At least one subscriber whose filter accepts it has it in its buffer.
        case taken
        /// No subscriber accepts it: it is held for the first one to come that does.
        case held
        /// No subscriber accepts it and the hold is full (or the broadcaster finished): it
        /// was not kept.
        case refused
    }

    /// Delivers `element` to every subscriber whose filter accepts it, or, when none does,
    /// holds it until one subscribes (see ``onTaken(_:)``), within the hold limit.
    ///
    /// - Returns: Whether a subscriber took it, it is held, or neither.
    func publishUntilTaken(_ element: Element) -> Publication {
        state.withLock { state in
            removeEnded(&state)
            var taken = false
            for subscriber in state.subscribers.values where subscriber.filter?(element) ?? true {
                switch subscriber.deliver(element, total: &state.dropped, weigh: weigh) {
                case .enqueued:
                    taken = true
                case .dropped:
                    // An older element made room for this one (counted by `deliver`).
                    taken = true
                case .terminated:
                    continue
                @unknown default:
                    continue
                }
            }
            if taken { return .taken }
            guard !state.finished, makeRoom(for: element, &state) else { return .refused }
            state.held.append(Held(element: element, untilTaken: true))
            return .held
        }
    }

    /// Whether there is room for `element` among the held elements, in number and in
    /// bytes, making it by dropping the oldest elements held for the first subscriber only,
    /// if need be; counts its bytes when there is. `state` is held.
    private func makeRoom(for element: Element, _ state: inout State) -> Bool {
        let size = weigh?(element) ?? 0
        // One element alone always fits in bytes, as one frame always fits a buffer.
        while state.held.count >= holdLimit || (state.heldBytes + size > holdByteLimit && !state.held.isEmpty) {
            guard let oldest = state.held.firstIndex(where: { !$0.untilTaken }) else { return false }
            let dropped = state.held.remove(at: oldest)
            state.heldBytes -= weigh?(dropped.element) ?? 0
            state.discarded += 1
        }
        state.heldBytes += size
        return true
    }

    /// Drops every element held for subscribers to come: they were for a session that ended.
    func dropHeld() {
        state.withLock { state in
            state.held.removeAll()
            state.heldBytes = 0
        }
    }

    /// Elements held for subscribers to come, for tests.
    var heldCountForTesting: Int { state.withLock { $0.held.count } }

    /// Removes the subscribers whose streams ended since the last call; `state` is held.
    private func removeEnded(_ state: inout State) {
        guard hasEnded.load(ordering: .acquiring) else { return }
        hasEnded.store(false, ordering: .relaxed)
        let ids = ended.withLock { ids -> [UInt64] in
            defer { ids.removeAll() }
            return ids
        }
        guard !ids.isEmpty else { return }
        for id in ids { state.subscribers.removeValue(forKey: id) }
        subscriberCount.store(state.subscribers.count, ordering: .relaxed)
    }

    /// Subscribers still registered, for tests.
    var subscriberCountForTesting: Int { state.withLock { $0.subscribers.count } }

    /// Elements dropped because a subscriber's buffer was full, over every subscriber so far.
    var droppedCount: Int { state.withLock { $0.dropped } }

    /// Elements held for subscribers to come that were let go, for tests.
    var discardedCountForTesting: Int { state.withLock { $0.discarded } }

    /// Ends every subscription; later subscribers get the replayed element, then the end.
    func finish(last: Element? = nil) {
        let subscribers = state.withLock { state -> [Subscriber] in
            removeEnded(&state)
            if let last {
                if keepsLatest { state.replay = last }
                for subscriber in state.subscribers.values where subscriber.filter?(last) ?? true {
                    _ = subscriber.deliver(last, total: &state.dropped, weigh: weigh)
                }
            }
            state.finished = true
            let all = Array(state.subscribers.values)
            state.subscribers.removeAll()
            subscriberCount.store(0, ordering: .relaxed)
            return all
        }
        for subscriber in subscribers { subscriber.continuation.finish() }
    }
}
