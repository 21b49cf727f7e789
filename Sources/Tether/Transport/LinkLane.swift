import Synchronization

/// One direction of a ``MemoryLink``: what lies between the writing end's outbound buffer
/// and the reading end's receive queue, where the direction's ``MemoryDirectionFaults`` act.
///
/// Bytes a writer flushes enter the lane and pass its stages in order:
/// 1. **delay**: each flush waits its ``MemoryDirectionFaults/delay`` (a loop timer), in order;
/// 2. **coalescing**: bytes gather until ``MemoryDirectionFaults/Coalescing/minimum`` wait or the
///    oldest has waited ``MemoryDirectionFaults/Coalescing/flushAfter``, then go on together;
/// 3. **stall**: while ``MemoryDirectionFaults/stalled``, everything waits here;
/// 4. **delivery** into the reader's queue, at most ``MemoryDirectionFaults/bytesPerSecond`` (a
///    bucket that fills on the loop's clock and holds a tenth of a second's bytes), counted
///    against ``MemoryDirectionFaults/cutAfter``, whose end breaks the link.
///
/// ``MemoryDirectionFaults/maximumWrite`` acts on the reader, which reads at most that many bytes
/// at a time. An orderly end of stream follows the bytes through every stage (it flushes
/// what is gathering); a reset overtakes them and drops them.
///
/// Bytes held in the lane count against the reader's ``InMemoryTransport/capacity``, as
/// bytes in flight fill a socket's buffers: a writer whose bytes are held stops writing
/// once the capacity is taken, and its outbound buffer grows instead.
///
/// With no faults the lane hands bytes straight to the reader. Loop thread only, but for
/// the counters.
final class LinkLane: @unchecked Sendable {
    // @unchecked Sendable: every member but `delivered` (atomic) is touched only on
    // `loop`'s thread; Sendable so jobs queued on the loop can capture it.

    let loop: EventLoop
    weak var reader: InMemoryTransport?
    weak var link: MemoryLink?
    /// Bytes put into the reader's queue so far, injected ones included. Any thread.
    let delivered = Atomic<Int>(0)
    private(set) var faults: MemoryDirectionFaults
    /// Whether bytes go straight to the reader: no fault holds them.
    private(set) var passThrough: Bool
    /// Set once the link is cut or reset: the lane carries nothing more.
    private(set) var severed = false
    /// Bytes in the lane, not yet in the reader's queue.
    private(set) var held = 0

    /// A flush waiting out its delay; `nil` bytes stand for the end of the stream.
    private struct Flight {
        var bytes: [UInt8]?
        var sentAt: UInt64
    }

    private var flights: [Flight] = []
    private var flightsStart = 0
    private var delayTimer: LoopTimer?
    private var gathering: [UInt8] = []
    private var gatheringSince: UInt64 = 0
    private var coalesceTimer: LoopTimer?
    /// Bytes through every stage but the stall and delivery.
    private var ready: [UInt8] = []
    private var endReady = false
    private var remainingBeforeCut: Int?
    /// Bytes the rate allows now, and when they were counted.
    private var allowance = 0
    private var allowanceAt: UInt64 = 0
    private var rateTimer: LoopTimer?

    init(loop: EventLoop, faults: MemoryDirectionFaults) {
        self.loop = loop
        self.faults = faults
        self.passThrough = Self.passesThrough(faults)
        self.remainingBeforeCut = faults.cutAfter.map { max(0, $0) }
    }

    private static func passesThrough(_ faults: MemoryDirectionFaults) -> Bool {
        !faults.stalled && faults.coalesce == nil && faults.delay == nil && faults.cutAfter == nil && faults.bytesPerSecond == nil
    }

    /// The bytes the rate allows now, the bucket filled for the time since it was counted.
    private func allowed(at rate: Int) -> Int {
        let now = loop.now
        let burst = max(1, rate / 10)
        let elapsed = now &- allowanceAt
        let earned = elapsed >= 1_000_000_000 ? burst : Int((UInt64(rate) &* elapsed) / 1_000_000_000)
        if earned > 0 {
            allowance = min(burst, allowance + earned)
            allowanceAt = now
        }
        return allowance
    }

    /// Pumps again once the bucket holds `bytes` more, up to a burst.
    private func scheduleRatePump(rate: Int, bytes: Int) {
        guard rateTimer == nil else { return }
        let needed = min(max(1, rate / 10), bytes) - allowance
        let wait = UInt64(max(1, needed)) &* 1_000_000_000 / UInt64(rate)
        rateTimer = loop.schedule(at: allowanceAt &+ max(1, wait)) { [self] in
            rateTimer = nil
            pump()
        }
    }

    /// The most a read of the reader takes at once under `faults`.
    static func readLimit(for faults: MemoryDirectionFaults) -> Int {
        min(InMemoryTransport.maximumRead, max(1, faults.maximumWrite ?? InMemoryTransport.maximumRead))
    }

    // MARK: Faults

    /// Puts `faults` in force now: a cleared stall or delay releases what it held, a new
    /// ``MemoryDirectionFaults/cutAfter`` counts from here.
    func apply(_ faults: MemoryDirectionFaults) {
        let old = self.faults
        self.faults = faults
        // Until the stages are empty under the new faults: pump() says so.
        passThrough = false
        reader?.readLimit = Self.readLimit(for: faults)
        if faults.cutAfter != old.cutAfter {
            remainingBeforeCut = faults.cutAfter.map { max(0, $0) }
        }
        guard !severed else { return }
        if faults.delay != old.delay { releaseDueFlights() }
        if faults.coalesce != old.coalesce { regather() }
        pump()
    }

    // MARK: Sending

    /// The writer flushed: takes up to `limit` bytes from `bytes` into the lane.
    ///
    /// - Returns: How many bytes it took.
    func send(_ bytes: inout FrameBuffer, limit: Int) -> Int {
        let count = min(bytes.readableBytes, limit)
        guard count > 0 || severed else { return 0 }
        if severed {
            // Into a dead link: the bytes are gone.
            let all = bytes.readableBytes
            bytes.moveReaderIndex(forwardBy: all)
            return all
        }
        if passThrough, let reader {
            let taken = reader.receive(&bytes, limit: count)
            delivered.add(taken, ordering: .relaxed)
            return taken
        }
        let chunk = bytes.withReadableBytes { Array($0[..<count]) }
        bytes.moveReaderIndex(forwardBy: count)
        held += count
        passThrough = false
        if faults.delay != nil || flightsStart < flights.count {
            flights.append(Flight(bytes: chunk, sentAt: loop.now))
            releaseDueFlights()
        } else {
            gather(chunk)
        }
        pump()
        return count
    }

    /// The writer ended its stream: the end follows the bytes in the lane.
    func sendEnd() {
        guard !severed else { return }
        if passThrough {
            reader?.receiveEndOfStream()
            return
        }
        passThrough = false
        if faults.delay != nil || flightsStart < flights.count {
            flights.append(Flight(bytes: nil, sentAt: loop.now))
            releaseDueFlights()
        } else {
            gatherEnd()
        }
        pump()
    }

    /// The writer closed with bytes unread: the reset overtakes what the lane holds.
    func sendReset() {
        guard !severed else { return }
        drop()
        reader?.receiveEndOfStream(reset: true)
    }

    /// Puts `bytes` in the reader's queue now, ahead of anything the lane holds.
    func inject(_ bytes: [UInt8]) {
        guard !severed, let reader, reader.isOpen, !bytes.isEmpty else { return }
        bytes.withUnsafeBytes { reader.deliver($0) }
        delivered.add(bytes.count, ordering: .relaxed)
    }

    /// Drops what the lane holds and carries nothing more.
    func sever() {
        severed = true
        passThrough = false
        drop()
    }

    private func drop() {
        if let delayTimer { loop.cancel(delayTimer) }
        if let coalesceTimer { loop.cancel(coalesceTimer) }
        if let rateTimer { loop.cancel(rateTimer) }
        delayTimer = nil
        coalesceTimer = nil
        rateTimer = nil
        flights = []
        flightsStart = 0
        gathering = []
        ready = []
        endReady = false
        held = 0
        passThrough = !severed && Self.passesThrough(faults)
    }

    // MARK: Stages

    /// Moves the flights whose delay is over into coalescing, oldest first, and sets the
    /// timer for the next.
    private func releaseDueFlights() {
        if let delayTimer { loop.cancel(delayTimer) }
        delayTimer = nil
        let delay = faults.delay.map { MonotonicTime.nanoseconds(of: $0) } ?? 0
        let now = loop.now
        while flightsStart < flights.count {
            let flight = flights[flightsStart]
            let due = flight.sentAt &+ delay
            guard due <= now else {
                delayTimer = loop.schedule(at: due) { [self] in
                    delayTimer = nil
                    releaseDueFlights()
                    pump()
                }
                return
            }
            flightsStart += 1
            if let bytes = flight.bytes { gather(bytes) } else { gatherEnd() }
        }
        flights = []
        flightsStart = 0
    }

    private func gather(_ bytes: [UInt8]) {
        guard let coalesce = faults.coalesce else {
            ready += bytes
            return
        }
        if gathering.isEmpty { gatheringSince = loop.now }
        gathering += bytes
        if gathering.count >= coalesce.minimum {
            flushGathering()
        } else if coalesceTimer == nil {
            coalesceTimer = loop.schedule(at: gatheringSince &+ MonotonicTime.nanoseconds(of: coalesce.flushAfter)) { [self] in
                coalesceTimer = nil
                flushGathering()
                pump()
            }
        }
    }

    private func gatherEnd() {
        flushGathering()
        endReady = true
    }

    /// After the coalescing changed: what gathers goes on under the new rule, the oldest
    /// byte keeping its age.
    private func regather() {
        if let coalesceTimer { loop.cancel(coalesceTimer) }
        coalesceTimer = nil
        guard !gathering.isEmpty else { return }
        guard let coalesce = faults.coalesce, gathering.count < coalesce.minimum else {
            flushGathering()
            return
        }
        let due = gatheringSince &+ MonotonicTime.nanoseconds(of: coalesce.flushAfter)
        guard due > loop.now else {
            flushGathering()
            return
        }
        coalesceTimer = loop.schedule(at: due) { [self] in
            coalesceTimer = nil
            flushGathering()
            pump()
        }
    }

    private func flushGathering() {
        if let coalesceTimer { loop.cancel(coalesceTimer) }
        coalesceTimer = nil
        guard !gathering.isEmpty else { return }
        ready += gathering
        gathering = []
    }

    /// Delivers what is ready unless stalled, up to the cut; then the end, if it came. A
    /// cut whose count is spent breaks the link here.
    func pump() {
        guard !severed else { return }
        if remainingBeforeCut == 0 {
            link?.sever(reset: faults.resetOnCut)
            return
        }
        guard !faults.stalled else { return }
        if !ready.isEmpty {
            var count = ready.count
            if let remaining = remainingBeforeCut { count = min(count, remaining) }
            if let rate = faults.bytesPerSecond, rate > 0 {
                count = min(count, allowed(at: rate))
                if count < ready.count { scheduleRatePump(rate: rate, bytes: ready.count - count) }
                guard count > 0 else { return }
                allowance -= count
            }
            if let reader, reader.isOpen {
                ready.withUnsafeBytes { reader.deliver(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
                delivered.add(count, ordering: .relaxed)
            }
            ready.removeFirst(count)
            held -= count
            if let remaining = remainingBeforeCut {
                remainingBeforeCut = remaining - count
                if remaining == count {
                    link?.sever(reset: faults.resetOnCut)
                    return
                }
            }
        }
        if ready.isEmpty, endReady {
            endReady = false
            reader?.receiveEndOfStream()
        }
        if held == 0, !endReady, flightsStart == flights.count, gathering.isEmpty {
            passThrough = Self.passesThrough(faults)
        }
    }
}
