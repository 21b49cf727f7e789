extension FaultProxy {
    /// The most bytes one direction of a connection holds read and not yet forwarded: 64 KiB.
    /// At the limit the proxy stops reading that direction's source.
    static let laneLimit = 1 << 16

    /// What one direction holds at most under `mode`: ``laneLimit``, or a tenth of a
    /// second's worth under a bandwidth limit (at least 4 KiB), so that what a slow link
    /// holds in flight is about what a real one would.
    static func laneLimit(_ mode: Mode, _ direction: Direction) -> Int {
        guard let rate = mode.bytesPerSecond(direction) else { return laneLimit }
        return min(laneLimit, max(4 << 10, rate / 10))
    }

    /// The bytes travelling in one direction of one connection, owned by its thread.
    ///
    /// Positions count bytes since the connection opened: `received` were read from the
    /// source, `forwarded` written to the destination; the bytes in between wait in `pending`.
    struct Lane {
        let direction: Direction
        /// Bytes read and not yet forwarded, from `head` on.
        private(set) var pending: [UInt8] = []
        private(set) var head = 0
        /// Injected bytes not yet written, from `injectedHead` on.
        private(set) var injected: [UInt8] = []
        private(set) var injectedHead = 0
        /// How many bytes were read from the source in all.
        private(set) var received = 0
        /// How many of them were forwarded.
        private(set) var forwarded = 0
        /// When each read whose bytes are not all forwarded arrived, and the position its
        /// bytes end at, oldest first.
        private var arrivals: [(end: Int, at: ContinuousClock.Instant)] = []
        /// A coalesced write was started and is not finished yet.
        var flushing = false
        /// The source sent its FIN.
        var sourceEnded = false
        /// Bytes the bandwidth limit lets through now, and when that was reckoned.
        private var tokens = 0.0
        private var tokensAt: ContinuousClock.Instant?
        /// The FIN was passed on to the destination.
        var finished = false

        init(_ direction: Direction) { self.direction = direction }

        /// Bytes read and not yet forwarded.
        var queued: Int { pending.count - head }
        /// Injected bytes not yet written.
        var injectedQueued: Int { injected.count - injectedHead }
        /// When the oldest byte not yet forwarded arrived.
        var oldest: ContinuousClock.Instant? { arrivals.first?.at }

        /// Adds bytes just read from the source.
        mutating func append(_ bytes: ArraySlice<UInt8>, at now: ContinuousClock.Instant) {
            pending += bytes
            received += bytes.count
            arrivals.append((received, now))
        }

        /// Adds bytes to write ahead of the forwarded ones.
        mutating func inject(_ bytes: [UInt8]) {
            injected += bytes
        }

        /// Drops `count` forwarded bytes from the front.
        mutating func consume(_ count: Int) {
            head += count
            forwarded += count
            let done = arrivals.prefix { $0.end <= forwarded }.count
            if done > 0 { arrivals.removeFirst(done) }
            if head == pending.count {
                pending.removeAll(keepingCapacity: true)
                head = 0
                flushing = false
            } else if head >= 1 << 16 {
                pending.removeFirst(head)
                head = 0
            }
        }

        /// Drops `count` written injected bytes from the front.
        mutating func consumeInjected(_ count: Int) {
            injectedHead += count
            if injectedHead == injected.count {
                injected.removeAll()
                injectedHead = 0
            }
        }

        /// The waiting bytes, from the first on.
        func withPending<T>(_ count: Int, _ body: (UnsafeRawBufferPointer) -> T) -> T {
            pending[head..<(head + count)].withUnsafeBytes(body)
        }

        /// The waiting injected bytes.
        func withInjected<T>(_ body: (UnsafeRawBufferPointer) -> T) -> T {
            injected[injectedHead...].withUnsafeBytes(body)
        }

        /// Whether the source is still worth reading from.
        func wantsInput(_ mode: Mode) -> Bool {
            !mode.stalled && !sourceEnded && queued < FaultProxy.laneLimit(mode, direction)
        }

        /// How many of the waiting bytes have been held for the mode's delay at `now`.
        func ready(_ mode: Mode, now: ContinuousClock.Instant) -> Int {
            guard mode.delay > .zero else { return queued }
            guard let last = arrivals.lastIndex(where: { $0.at + mode.delay <= now }) else { return 0 }
            return arrivals[last].end - forwarded
        }

        /// The bucket's size at `rate`: a twentieth of a second's worth, at least 1 byte.
        private static func capacity(_ rate: Int) -> Double { max(1, Double(rate) / 20) }

        /// The bytes in the bandwidth limit's bucket at `now`, refilled at `rate` since it
        /// was last reckoned, up to its capacity.
        private func level(_ rate: Int, now: ContinuousClock.Instant) -> Double {
            guard let tokensAt else { return Self.capacity(rate) }
            let (seconds, attoseconds) = (now - tokensAt).components
            let elapsed = Double(seconds) + Double(attoseconds) / 1e18
            return min(Self.capacity(rate), tokens + elapsed * Double(rate))
        }

        /// How many bytes the bandwidth limit of `mode` lets through at `now`; `Int.max`
        /// without one.
        func allowance(_ mode: Mode, now: ContinuousClock.Instant) -> Int {
            guard let rate = mode.bytesPerSecond(direction) else { return .max }
            return Int(level(rate, now: now))
        }

        /// Takes `count` forwarded bytes from the bandwidth limit's bucket.
        mutating func spend(_ count: Int, _ mode: Mode, now: ContinuousClock.Instant) {
            guard let rate = mode.bytesPerSecond(direction) else { return }
            tokens = level(rate, now: now) - Double(count)
            tokensAt = now
        }

        /// The fewest bytes worth a write under the bandwidth limit: a hundredth of a
        /// second's worth, or what is ready if less, so a slow lane is not written a byte
        /// at a time.
        private func worthwhile(_ mode: Mode, ready: Int) -> Int {
            guard let rate = mode.bytesPerSecond(direction) else { return 1 }
            return max(1, min(ready, rate / 100))
        }

        /// Whether forwarded bytes may be written now under `mode`.
        func mayForward(_ mode: Mode, now: ContinuousClock.Instant) -> Bool {
            guard !mode.stalled else { return false }
            let ready = ready(mode, now: now)
            guard ready > 0 else { return false }
            guard allowance(mode, now: now) >= worthwhile(mode, ready: ready) else { return false }
            guard case .coalesce(let minimum, let flushAfter) = mode.shaping(direction) else { return true }
            return flushing || sourceEnded || ready >= minimum || (oldest.map { now >= $0 + mode.delay + flushAfter } ?? false)
        }

        /// When a lane that may not forward now could next: when its next bytes have been
        /// held for the delay, or its coalescing flush delay ends.
        func deadline(_ mode: Mode, now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
            guard !mode.stalled, queued > 0 else { return nil }
            var due: ContinuousClock.Instant?
            if mode.delay > .zero, let next = arrivals.first(where: { $0.at + mode.delay > now }) {
                due = next.at + mode.delay
            }
            if case .coalesce(_, let flushAfter) = mode.shaping(direction), let oldest {
                let flush = oldest + mode.delay + flushAfter
                due = due.map { min($0, flush) } ?? flush
            }
            if let rate = mode.bytesPerSecond(direction) {
                let ready = ready(mode, now: now)
                let missing = worthwhile(mode, ready: max(ready, 1)) - allowance(mode, now: now)
                if ready > 0, missing > 0 {
                    let refill = now + .nanoseconds(Int64((Double(missing) / Double(rate) * 1e9).rounded(.up)))
                    due = due.map { min($0, refill) } ?? refill
                }
            }
            return due
        }
    }
}
