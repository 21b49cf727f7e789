/// A scheduled callback on an event loop. Cancel it with ``EventLoop/cancel(_:)``.
final class LoopTimer {
    let deadline: UInt64
    let callback: () -> Void
    /// Position in the heap, or -1 once fired or cancelled.
    var index: Int = -1

    init(deadline: UInt64, callback: @escaping () -> Void) {
        self.deadline = deadline
        self.callback = callback
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
