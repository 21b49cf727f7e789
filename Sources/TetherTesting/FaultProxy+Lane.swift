extension FaultProxy {
    /// The most bytes one direction of a connection holds read and not yet forwarded: 64 KiB.
    /// At the limit the proxy stops reading that direction's source.
    static let laneLimit = 1 << 16

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
            !mode.stalled && !sourceEnded && queued < FaultProxy.laneLimit
        }

        /// How many of the waiting bytes have been held for the mode's delay at `now`.
        func ready(_ mode: Mode, now: ContinuousClock.Instant) -> Int {
            guard mode.delay > .zero else { return queued }
            guard let last = arrivals.lastIndex(where: { $0.at + mode.delay <= now }) else { return 0 }
            return arrivals[last].end - forwarded
        }

        /// Whether forwarded bytes may be written now under `mode`.
        func mayForward(_ mode: Mode, now: ContinuousClock.Instant) -> Bool {
            guard !mode.stalled else { return false }
            let ready = ready(mode, now: now)
            guard ready > 0 else { return false }
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
            return due
        }
    }
}
