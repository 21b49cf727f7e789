/// The requests of a connection that have not ended, keyed by serial: those written and
/// waiting for their response (in flight), and those waiting to be written (queued), in
/// the order they were made.
///
/// Pure bookkeeping: serial allocation (wrapping, never 0, never one in use), exactly-once
/// removal, and the queue. The connection resumes the continuations it gets back.
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
        /// The frame to write while the request is queued; `nil` once written.
        var pending: Frame?

        var isQueued: Bool { pending != nil }
    }

    private var entries: [UInt32: Entry] = [:]
    /// Queued requests in order, as serial and id; entries that ended while queued are
    /// skipped when met.
    private var order: [(serial: UInt32, id: UInt64)] = []
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
    }

    /// Every request that has not ended, in flight or queued.
    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    /// A serial that is not 0 and not in use, and a unique id.
    /// Call only when `count < maximumSerial`.
    mutating func allocate() -> (serial: UInt32, id: UInt64) {
        repeat {
            lastSerial = lastSerial >= maximumSerial ? 1 : lastSerial &+ 1
        } while lastSerial == 0 || entries[lastSerial] != nil
        lastID += 1
        return (lastSerial, lastID)
    }

    /// Adds a request: in flight when `entry.pending` is `nil`, otherwise queued at the end.
    mutating func insert(serial: UInt32, entry: Entry) {
        precondition(entries[serial] == nil, "serial \(serial) is already waiting")
        entries[serial] = entry
        if entry.isQueued {
            queuedCount += 1
            order.append((serial, entry.id))
        } else {
            inFlightCount += 1
        }
    }

    /// Removes the in-flight request a response answers. A queued request is never
    /// answered: its serial has not been written, so a response that names it is bogus.
    mutating func removeAnswered(serial: UInt32) -> Entry? {
        // One hash lookup: this is the path of every response.
        guard let index = entries.index(forKey: serial), !entries.values[index].isQueued else { return nil }
        return take(at: index)
    }

    /// Whether request `id` has not ended yet.
    func contains(serial: UInt32, id: UInt64) -> Bool {
        entries[serial]?.id == id
    }

    /// Removes the entry only if it is still the request `id` (for timeouts and cancellation).
    mutating func remove(serial: UInt32, id: UInt64) -> Entry? {
        guard let index = entries.index(forKey: serial), entries.values[index].id == id else { return nil }
        return take(at: index)
    }

    /// The oldest queued request, now counted as in flight: the caller writes `frame`.
    mutating func dequeue() -> (serial: UInt32, frame: Frame)? {
        while head < order.count {
            let (serial, id) = order[head]
            head += 1
            guard var entry = entries[serial], entry.id == id, let frame = entry.pending else { continue }
            entry.pending = nil
            entries[serial] = entry
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
        let serials = entries.compactMap { $0.value.isQueued ? nil : $0.key }.sorted()
        return serials.map { (serial: $0, entry: take(at: entries.index(forKey: $0)!)) }
    }

    /// Removes and returns every entry, in flight and queued, in serial order.
    mutating func removeAll() -> [(serial: UInt32, entry: Entry)] {
        let all = entries.sorted { $0.key < $1.key }.map { (serial: $0.key, entry: $0.value) }
        entries.removeAll()
        order.removeAll()
        head = 0
        inFlightCount = 0
        queuedCount = 0
        return all
    }

    private mutating func take(at index: Dictionary<UInt32, Entry>.Index) -> Entry {
        let entry = entries.remove(at: index).value
        if entry.isQueued {
            queuedCount -= 1
            compact()
        } else {
            inFlightCount -= 1
        }
        return entry
    }

    /// Drops consumed and ended positions from the queue order once they outnumber the
    /// live ones, so requests that time out while queued do not pile up.
    private mutating func compact() {
        let stale = order.count - queuedCount
        guard stale > 64, stale > queuedCount else { return }
        order = order[head...].filter { entries[$0.serial]?.id == $0.id && entries[$0.serial]?.isQueued == true }
        head = 0
    }
}
