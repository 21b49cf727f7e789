/// The deadlines of requests whose deadlines never decrease in the order they were made:
/// every request given the same timeout. One loop timer, set for the earliest, serves them
/// all, so a request costs an append here instead of a timer inserted into the loop's heap
/// and removed again when its response arrives.
///
/// Entries of requests that already ended stay until they reach the front, where the
/// connection drops them (``dropFront(while:)``); with responses arriving roughly in order
/// the queue stays about as long as the number of requests in flight.
struct DeadlineQueue {
    struct Item: Equatable {
        var deadline: UInt64
        var serial: UInt32
        var id: UInt64
    }

    private var items: [Item] = []
    private var head = 0

    var isEmpty: Bool { head == items.count }
    var count: Int { items.count - head }
    var first: Item? { isEmpty ? nil : items[head] }

    /// Whether a deadline can join at the back without breaking the order.
    func accepts(_ deadline: UInt64) -> Bool {
        isEmpty || items[items.count - 1].deadline <= deadline
    }

    /// Adds a deadline at the back; `accepts(_:)` must hold.
    mutating func append(_ item: Item) {
        assert(accepts(item.deadline), "deadline \(item.deadline) is earlier than the last one queued")
        items.append(item)
    }

    /// Removes and returns the earliest deadline.
    mutating func removeFirst() -> Item? {
        guard !isEmpty else { return nil }
        let item = items[head]
        head += 1
        compact()
        return item
    }

    /// Drops entries from the front while `stale` says they belong to requests that ended.
    mutating func dropFront(while stale: (Item) -> Bool) {
        while head < items.count, stale(items[head]) { head += 1 }
        compact()
    }

    mutating func removeAll() {
        items.removeAll(keepingCapacity: true)
        head = 0
    }

    /// Gives back the consumed front once it is most of the array.
    private mutating func compact() {
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024, head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
    }
}
