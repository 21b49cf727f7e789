/// The requests of a connection that have not ended, keyed by serial: those written and
/// waiting for their response (in flight), and those waiting to be written (queued), in
/// the order they were made.
///
/// Pure bookkeeping: serial allocation (wrapping, never 0, never one in use), exactly-once
/// removal, and the queue. The connection resumes the continuations it gets back.
///
/// Every request and every response looks its serial up here, so the table is an array
/// indexed by the serial's low bits rather than a hash table: a serial is only handed out
/// when its slot is free, so no two requests share a slot and a lookup is one index, with
/// no hashing. Serials are handed out in order and requests mostly end in order, so the
/// next serial's slot is almost always free; the array doubles before it is half full.
struct RequestTable<Waiter> {
    struct Entry {
        var waiter: Waiter
        /// Unique for the life of the connection, so a late timer or cancellation for an
        /// ended request can never hit a newer request that reuses its serial.
        var id: UInt64
        var type: UInt32
        /// The pending timeout; dropped with the entry (the loop recycles it).
        var timer: LoopTimer?
        /// The timeout the request was given, for the error message.
        var timeout: Duration?
        /// Whether the request waits to be written; its frame is then in the queue.
        fileprivate(set) var isQueued = false
        /// The serial, which the slot alone does not tell.
        fileprivate var serial: UInt32 = 0
        /// Told when the request is written, for a ``ConnectionObserver``; `nil` without one.
        var trace: RequestTrace?

        init(waiter: Waiter, id: UInt64, type: UInt32, timer: LoopTimer? = nil, timeout: Duration? = nil) {
            self.waiter = waiter
            self.id = id
            self.type = type
            self.timer = timer
            self.timeout = timeout
        }
    }

    /// Slot `serial & mask` holds the request with that serial, if any.
    private var slots: ContiguousArray<Entry?>
    private var mask: Int
    /// Queued requests in order, with the frame to write; entries that ended while queued
    /// are skipped when met.
    private var order: [(serial: UInt32, id: UInt64, frame: Frame)] = []
    private var head = 0
    private var lastSerial: UInt32
    /// The largest serial the wire carries; allocation wraps after it.
    private let maximumSerial: UInt32
    private var lastID: UInt64 = 0
    /// Requests written and waiting for their response.
    private(set) var inFlightCount = 0
    /// Requests waiting to be written.
    private(set) var queuedCount = 0

    init(firstSerial: UInt32 = 1, maximumSerial: UInt32 = .max) {
        self.maximumSerial = maximumSerial
        lastSerial = firstSerial &- 1
        // One slot to start with: a connection that makes no requests holds next to nothing.
        slots = [nil]
        mask = 0
    }

    /// Every request that has not ended, in flight or queued.
    var count: Int { inFlightCount + queuedCount }
    var isEmpty: Bool { count == 0 }

    /// A serial that is not 0 and not in use, and a unique id.
    /// Call only when `count < maximumSerial`.
    mutating func allocate() -> (serial: UInt32, id: UInt64) {
        // Half the slots at most are in use (see `insert`), so this ends within a few
        // steps; with fewer serials than slots each serial has a slot of its own.
        repeat {
            lastSerial = lastSerial >= maximumSerial ? 1 : lastSerial &+ 1
        } while lastSerial == 0 || slots[Int(truncatingIfNeeded: lastSerial) & mask] != nil
        lastID += 1
        return (lastSerial, lastID)
    }

    /// Adds a request: in flight when `pending` is `nil`, otherwise queued at the end with
    /// the frame to write.
    mutating func insert(serial: UInt32, entry: consuming Entry, pending: Frame? = nil) {
        if (count + 1) * 2 > slots.count, UInt64(slots.count) <= UInt64(maximumSerial) {
            grow()
        }
        let index = Int(truncatingIfNeeded: serial) & mask
        precondition(slots[index] == nil, "serial \(serial) is already waiting")
        entry.serial = serial
        if let pending {
            entry.isQueued = true
            queuedCount += 1
            order.append((serial, entry.id, pending))
        } else {
            entry.isQueued = false
            inFlightCount += 1
        }
        slots[index] = consume entry
    }

    /// Removes the in-flight request a response answers. A queued request is never
    /// answered: its serial has not been written, so a response that names it is bogus.
    mutating func removeAnswered(serial: UInt32) -> Entry? {
        let index = Int(truncatingIfNeeded: serial) & mask
        // The fields are read in place: no copy of the entry unless it is the one.
        guard slots[index]?.serial == serial, slots[index]?.isQueued == false else { return nil }
        return take(at: index)
    }

    /// The trace of the request with `serial`, if it has one.
    func trace(serial: UInt32) -> RequestTrace? {
        let index = Int(truncatingIfNeeded: serial) & mask
        guard slots[index]?.serial == serial else { return nil }
        return slots[index]?.trace
    }

    /// Whether request `id` has not ended yet.
    func contains(serial: UInt32, id: UInt64) -> Bool {
        let index = Int(truncatingIfNeeded: serial) & mask
        return slots[index]?.id == id && slots[index]?.serial == serial
    }

    /// Removes the entry only if it is still the request `id` (for timeouts and cancellation).
    mutating func remove(serial: UInt32, id: UInt64) -> Entry? {
        let index = Int(truncatingIfNeeded: serial) & mask
        guard slots[index]?.id == id, slots[index]?.serial == serial else { return nil }
        return take(at: index)
    }

    /// The oldest queued request, now counted as in flight: the caller writes `frame`.
    mutating func dequeue() -> (serial: UInt32, frame: Frame)? {
        while head < order.count {
            let (serial, id, frame) = order[head]
            head += 1
            let index = Int(truncatingIfNeeded: serial) & mask
            guard slots[index]?.id == id else { continue }
            slots[index]!.isQueued = false
            queuedCount -= 1
            inFlightCount += 1
            compact()
            return (serial, frame)
        }
        compact()
        return nil
    }

    /// Removes every in-flight request, in serial order; queued ones stay.
    mutating func removeInFlight() -> [(serial: UInt32, entry: Entry)] {
        let serials = slots.compactMap { $0.flatMap { $0.isQueued ? nil : $0.serial } }.sorted()
        return serials.map { (serial: $0, entry: take(at: Int(truncatingIfNeeded: $0) & mask)) }
    }

    /// Removes and returns every entry, in flight and queued, in serial order.
    mutating func removeAll() -> [(serial: UInt32, entry: Entry)] {
        let all = slots.compactMap { $0 }.sorted { $0.serial < $1.serial }.map { (serial: $0.serial, entry: $0) }
        slots = [nil]
        mask = 0
        order.removeAll()
        head = 0
        inFlightCount = 0
        queuedCount = 0
        return all
    }

    private mutating func take(at index: Int) -> Entry {
        let entry = slots[index].take()!
        if entry.isQueued {
            queuedCount -= 1
            compact()
        } else {
            inFlightCount -= 1
        }
        return entry
    }

    /// Doubles the slots. Serials in different slots stay in different slots, since they
    /// differed in the low bits already.
    private mutating func grow() {
        var larger = ContiguousArray<Entry?>(repeating: nil, count: slots.count * 2)
        let largerMask = larger.count - 1
        for index in slots.indices {
            guard let entry = slots[index].take() else { continue }
            larger[Int(truncatingIfNeeded: entry.serial) & largerMask] = entry
        }
        slots = larger
        mask = largerMask
    }

    /// Drops consumed and ended positions from the queue order once they outnumber the
    /// live ones, so requests that time out while queued do not pile up.
    private mutating func compact() {
        let stale = order.count - head - queuedCount
        if head == order.count {
            order.removeAll(keepingCapacity: true)
            head = 0
            return
        }
        guard stale > 64, stale > queuedCount else { return }
        order = order[head...].filter { item in
            let entry = slots[Int(truncatingIfNeeded: item.serial) & mask]
            return entry?.id == item.id && entry?.isQueued == true
        }
        head = 0
    }
}
