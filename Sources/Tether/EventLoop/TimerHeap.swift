/// Something a timer can call without a closure: lets the loop recycle timer objects, so a
/// request timeout costs no allocation in steady state.
protocol TimerTarget: AnyObject {
    /// The timer scheduled with `tag` and `detail` fired. Called on the loop thread.
    func timerFired(tag: UInt64, detail: UInt32)
}

/// A scheduled callback on an event loop. Cancel it with ``EventLoop/cancel(_:)``.
final class LoopTimer {
    enum Action {
        case closure(() -> Void)
        case target(any TimerTarget, tag: UInt64, detail: UInt32)
        case none
    }

    var deadline: UInt64
    /// The order of insertion into the heap: timers with the same deadline fire in it.
    var sequence: UInt64 = 0
    var action: Action
    /// Position in the heap, or -1 once fired or cancelled.
    var index: Int = -1
    /// Returned to the loop's pool once fired or cancelled; its holder must then drop it.
    var recyclable = false

    init(deadline: UInt64, action: Action) {
        self.deadline = deadline
        self.action = action
    }

    func fire() {
        switch action {
        case .closure(let body): body()
        case .target(let target, let tag, let detail): target.timerFired(tag: tag, detail: detail)
        case .none: break
        }
    }
}

/// A binary min-heap of timers by deadline, with O(log n) removal of any timer.
///
/// Timers with the same deadline come out in the order they went in, so the order timers
/// fire in depends only on their deadlines and the order they were scheduled.
struct TimerHeap {
    private var items: [LoopTimer] = []
    private var inserted: UInt64 = 0

    var isEmpty: Bool { items.isEmpty }
    var count: Int { items.count }
    var earliest: UInt64? { items.first?.deadline }

    mutating func insert(_ timer: LoopTimer) {
        timer.sequence = inserted
        inserted &+= 1
        timer.index = items.count
        items.append(timer)
        siftUp(items.count - 1)
    }

    /// Removes `timer` if it is still scheduled; returns whether it was.
    @discardableResult
    mutating func remove(_ timer: LoopTimer) -> Bool {
        let index = timer.index
        guard index >= 0, index < items.count, items[index] === timer else { return false }
        let last = items.count - 1
        if index != last {
            items.swapAt(index, last)
            items[index].index = index
        }
        items.removeLast()
        timer.index = -1
        if index < items.count {
            siftDown(index)
            siftUp(index)
        }
        return true
    }

    /// Removes and returns the earliest timer if its deadline is at or before `now`.
    mutating func popDue(now: UInt64) -> LoopTimer? {
        guard let first = items.first, first.deadline <= now else { return nil }
        remove(first)
        return first
    }

    /// Whether `first` fires before `second`: an earlier deadline, or the same one and
    /// scheduled earlier.
    @inline(__always)
    private static func precedes(_ first: LoopTimer, _ second: LoopTimer) -> Bool {
        first.deadline < second.deadline || (first.deadline == second.deadline && first.sequence < second.sequence)
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.precedes(items[child], items[parent]) else { return }
            items.swapAt(child, parent)
            items[child].index = child
            items[parent].index = parent
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = parent * 2 + 1
            guard left < items.count else { return }
            var smallest = left
            if left + 1 < items.count, Self.precedes(items[left + 1], items[left]) { smallest = left + 1 }
            guard Self.precedes(items[smallest], items[parent]) else { return }
            items.swapAt(smallest, parent)
            items[smallest].index = smallest
            items[parent].index = parent
            parent = smallest
        }
    }
}
