import Testing
@testable import Tether

@Suite("Deadline queue")
struct DeadlineQueueTests {
    typealias Item = DeadlineQueue.Item

    @Test("keeps deadlines in order, refuses an earlier one, and pops from the front")
    func order() {
        var queue = DeadlineQueue()
        #expect(queue.accepts(50))
        queue.append(Item(deadline: 100, serial: 1, id: 1))
        queue.append(Item(deadline: 100, serial: 2, id: 2))
        queue.append(Item(deadline: 250, serial: 3, id: 3))
        #expect(queue.accepts(250))
        #expect(!queue.accepts(249))
        #expect(queue.count == 3)
        #expect(queue.removeFirst() == Item(deadline: 100, serial: 1, id: 1))
        #expect(queue.first == Item(deadline: 100, serial: 2, id: 2))
        #expect(queue.removeFirst()?.serial == 2)
        #expect(queue.removeFirst()?.serial == 3)
        #expect(queue.removeFirst() == nil)
        #expect(queue.isEmpty)
        #expect(queue.accepts(1))
    }

    @Test("drops ended requests only from the front, and stays short when they end in order")
    func dropFront() {
        var queue = DeadlineQueue()
        for n in 1...5 { queue.append(Item(deadline: UInt64(n), serial: UInt32(n), id: UInt64(n))) }
        let ended: Set<UInt32> = [1, 2, 4]
        queue.dropFront { ended.contains($0.serial) }
        #expect(queue.count == 3)
        #expect(queue.first?.serial == 3)
        queue.dropFront { _ in false }
        #expect(queue.count == 3)

        // 100,000 requests, each ending before the next starts, as with one in flight.
        var steady = DeadlineQueue()
        for n in 1...100_000 {
            steady.append(Item(deadline: UInt64(n), serial: UInt32(n), id: UInt64(n)))
            steady.dropFront { _ in true }
            #expect(steady.isEmpty)
        }
        steady.removeAll()
        #expect(steady.first == nil)
    }
}
