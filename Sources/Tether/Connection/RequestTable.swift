/// The requests waiting for a response, keyed by serial.
///
/// Pure bookkeeping: serial allocation (wrapping, never 0, never one in use) and exactly-once
/// removal. The connection resumes the continuations it gets back.
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
    }

    private var entries: [UInt32: Entry] = [:]
    private var lastSerial: UInt32
    private var lastID: UInt64 = 0

    init(firstSerial: UInt32 = 1) {
        lastSerial = firstSerial &- 1
    }

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    /// A serial that is not 0 and not in use, and a unique id.
    /// Call only when `count < UInt32.max`.
    mutating func allocate() -> (serial: UInt32, id: UInt64) {
        repeat {
            lastSerial &+= 1
        } while lastSerial == 0 || entries[lastSerial] != nil
        lastID += 1
        return (lastSerial, lastID)
    }

    mutating func insert(serial: UInt32, entry: Entry) {
        precondition(entries[serial] == nil, "serial \(serial) is already waiting")
        entries[serial] = entry
    }

    /// Removes the entry for a response.
    mutating func remove(serial: UInt32) -> Entry? {
        entries.removeValue(forKey: serial)
    }

    /// Removes the entry only if it is still the request `id` (for timeouts and cancellation).
    mutating func remove(serial: UInt32, id: UInt64) -> Entry? {
        guard let entry = entries[serial], entry.id == id else { return nil }
        return entries.removeValue(forKey: serial)
    }

    /// Removes and returns every entry, in serial order.
    mutating func removeAll() -> [(serial: UInt32, entry: Entry)] {
        let all = entries.sorted { $0.key < $1.key }.map { (serial: $0.key, entry: $0.value) }
        entries.removeAll()
        return all
    }
}
