#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
@testable import Tether

@Suite("Broadcaster", .timeLimit(.guarded))
struct BroadcasterTests {
    @Test("subscribers cancelled while another thread publishes to them: no deadlock, every one removed")
    func cancelWhilePublishing() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4)
        let running = Atomic<Bool>(true)
        let published = Atomic<Int>(0)
        let done = Semaphore()
        // A publisher on a thread of its own, as an event loop publishes.
        BlockingThread.run {
            var value = 0
            while running.load(ordering: .acquiring) {
                broadcaster.publish(value)
                value += 1
                published.store(value, ordering: .relaxed)
                // Publishing all the time, but letting the rest of the suite run: a thread
                // that never yields takes a core from hundreds of other tests.
                sched_yield()
            }
            done.signal()
        }
        try await bounded("2,000 subscribers cancelled mid-publish") {
            for _ in 0..<2_000 {
                let subscription = broadcaster.subscribe()
                let reader = Task {
                    var count = 0
                    for await _ in subscription { count += 1 }
                    return count
                }
                // Let it take a few elements (or wait in next()), then cancel it while the
                // publisher is yielding to it.
                await Task.yield()
                reader.cancel()
                _ = await reader.value
            }
        }
        running.store(false, ordering: .releasing)
        try await offThread { done.wait() }
        // The next publish removes every ended subscriber.
        broadcaster.publish(-1)
        #expect(broadcaster.subscriberCountForTesting == 0)
        #expect(published.load(ordering: .relaxed) > 0)
    }

    @Test("an element no subscriber takes is held for the first later subscriber that does, which is reported; past the limit it is refused")
    func heldUntilTaken() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4, holdsUntilSubscribed: true, lossless: true, holdLimit: 3)
        let reported = Lock<[[Int]]>([])
        broadcaster.onTaken { elements in reported.withLock { $0.append(elements) } }
        let odd = broadcaster.subscribe { $0 % 2 == 1 }
        #expect(broadcaster.publishUntilTaken(1) == .taken)
        #expect(broadcaster.publishUntilTaken(2) == .held)
        #expect(broadcaster.publishUntilTaken(4) == .held)
        #expect(broadcaster.publishUntilTaken(3) == .taken)
        #expect(broadcaster.publishUntilTaken(6) == .held)
        #expect(broadcaster.publishUntilTaken(8) == .refused)
        #expect(broadcaster.heldCountForTesting == 3)
        // A subscriber that takes only some of them leaves the rest held.
        let fours = broadcaster.subscribe { $0 % 4 == 0 }
        #expect(reported.withLock { $0 } == [[4]])
        let even = broadcaster.subscribe { $0 % 2 == 0 }
        #expect(reported.withLock { $0 } == [[4], [2, 6]])
        #expect(broadcaster.heldCountForTesting == 0)
        #expect(broadcaster.publishUntilTaken(10) == .taken)
        broadcaster.finish()
        #expect(try await collect(3, from: odd, "the odd ones") == [1, 3])
        #expect(try await collect(2, from: fours, "the multiples of four") == [4])
        #expect(try await collect(3, from: even, "the even ones") == [2, 6, 10])
        #expect(broadcaster.droppedCount == 0)
    }

    @Test("elements published while nobody subscribes make room for held-until-taken ones; the first subscriber gets what it accepts of them")
    func firstSubscriberOnly() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4, holdsUntilSubscribed: true, lossless: true, holdLimit: 2)
        broadcaster.publish(1)
        broadcaster.publish(3)
        #expect(broadcaster.publishUntilTaken(2) == .held)
        #expect(broadcaster.discardedCountForTesting == 1)
        #expect(broadcaster.publishUntilTaken(4) == .held)
        #expect(broadcaster.discardedCountForTesting == 2)
        #expect(broadcaster.publishUntilTaken(6) == .refused)
        broadcaster.publish(5)
        #expect(broadcaster.discardedCountForTesting == 3)
        let odd = broadcaster.subscribe { $0 % 2 == 1 }
        #expect(broadcaster.heldCountForTesting == 2)
        let all = broadcaster.subscribe()
        broadcaster.finish()
        #expect(try await collect(1, from: odd, "nothing") == [])
        #expect(try await collect(3, from: all, "the held ones") == [2, 4])
    }
}
