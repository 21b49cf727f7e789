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
struct TimerHeap {
    private var items: [LoopTimer] = []

    var isEmpty: Bool { items.isEmpty }
    var count: Int { items.count }
    var earliest: UInt64? { items.first?.deadline }

    mutating func insert(_ timer: LoopTimer) {
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

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard items[child].deadline < items[parent].deadline else { return }
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
            if left + 1 < items.count, items[left + 1].deadline < items[left].deadline { smallest = left + 1 }
            guard items[smallest].deadline < items[parent].deadline else { return }
            items.swapAt(smallest, parent)
            items[smallest].index = smallest
            items[parent].index = parent
            parent = smallest
        }
    }
}
