import Synchronization
import Testing
@testable import Tether

@Suite("Broadcaster", .timeLimit(.minutes(1)))
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
            }
            done.signal()
        }
        try await bounded("2,000 subscribers cancelled mid-publish", .seconds(30)) {
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
}
