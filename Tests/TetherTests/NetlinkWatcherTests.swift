#if os(Linux)
import Testing
@testable import Tether

/// The Linux path watcher's thread, on a source that plays the kernel: its reads run on a
/// thread of its own, and every event loop goes on serving while one of them is stuck.
@Suite("The netlink path watcher's thread", .timeLimit(.guarded))
struct NetlinkWatcherTests {
    /// A kernel the test plays: a change comes when the test sends one, and each read of the
    /// tables blocks until the test answers it, saying which thread asked.
    final class PlayedKernel: NetlinkPathSource, @unchecked Sendable {
        // @unchecked Sendable: `state` is only touched with its lock held; the semaphores
        // are thread-safe.
        private struct State {
            var changes = 0
            var woken = false
            var answers: [NetworkPath] = []
            var closed = false
        }

        private let state = Lock(State())
        private let wakeups = Semaphore()
        private let answered = Semaphore()
        /// Each read, as it starts: whether it runs on a thread of an event loop of the
        /// shared group, and on which thread.
        let reads: AsyncStream<(onLoop: Bool, thread: ThreadID)>
        private let readStarted: AsyncStream<(onLoop: Bool, thread: ThreadID)>.Continuation

        init() {
            (reads, readStarted) = AsyncStream<(onLoop: Bool, thread: ThreadID)>.makeStream()
        }

        /// The kernel says something changed, `count` times at once: a burst the watcher
        /// finds whole when it wakes, however late its thread runs.
        func change(times count: Int = 1) {
            state.withLock { $0.changes += count }
            wakeups.signal()
        }

        /// The read under way (or the next) returns `path`.
        func answer(_ path: NetworkPath) {
            state.withLock { $0.answers.append(path) }
            answered.signal()
        }

        var isClosed: Bool { state.withLock { $0.closed } }

        func waitForChange(until deadline: UInt64?) throws(TetherError) -> NetlinkWait {
            // No time passes here: the settling wait ends at once, unless a change is queued.
            while true {
                let wait = state.withLock { state -> NetlinkWait? in
                    if state.woken { return .stopped }
                    if state.changes > 0 {
                        state.changes -= 1
                        return .changed
                    }
                    return deadline == nil ? nil : .timedOut
                }
                if let wait { return wait }
                wakeups.wait()
            }
        }

        func readPath() throws(TetherError) -> NetworkPath {
            let onLoop = TetherEventLoopGroup.shared.loops.contains { $0.inLoop }
            readStarted.yield((onLoop, BlockingThread.current))
            answered.wait()
            let path = state.withLock { $0.answers.removeFirst() }
            return path
        }

        func wake() {
            state.withLock { $0.woken = true }
            wakeups.signal()
        }

        func close() {
            state.withLock { $0.closed = true }
            readStarted.finish()
        }
    }

    /// The next read of `kernel` as it starts, within the bound; `nil` once it closed.
    static func nextRead(of kernel: PlayedKernel, _ what: String) async throws -> (onLoop: Bool, thread: ThreadID)? {
        try await bounded(what) {
            var reads = kernel.reads.makeAsyncIterator()
            return await reads.next()
        }
    }

    /// Awaits one job on every loop of the shared group: each loop is free to run it.
    static func everyLoopRuns() async throws {
        for loop in TetherEventLoopGroup.shared.loops {
            try await bounded("a job on \(loop.name)") {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    loop.execute { continuation.resume() }
                }
            }
        }
    }

    @Test("reads run on the watcher's own thread, never an event loop's; every loop runs jobs while a read is stuck; each read is published in order")
    func readsRunOffTheLoops() async throws {
        let kernel = PlayedKernel()
        let (published, publish) = AsyncStream<NetworkPath>.makeStream()
        let failures = Lock<[String]>([])
        let watcher = NetlinkPathWatcher.start(source: kernel, publish: { publish.yield($0) }, failed: { error in failures.withLock { $0.append(error.message) } })

        // The first read is stuck in the kernel: no loop is held up by it.
        let first = try #require(try await Self.nextRead(of: kernel, "the first read"))
        #expect(!first.onLoop)
        try await Self.everyLoopRuns()
        let wifi = NetworkPath(isUsable: true, routes: [.init(family: .ipv4, interfaceName: "wlan0", interfaceIndex: 3, gateway: "192.168.1.1", localAddresses: ["192.168.1.20/24"])])
        kernel.answer(wifi)

        // A burst of changes is one read, on the same thread.
        kernel.change(times: 2)
        let second = try #require(try await Self.nextRead(of: kernel, "the second read"))
        #expect(!second.onLoop)
        #expect(first.thread == second.thread)
        try await Self.everyLoopRuns()
        let elsewhere = NetworkPath(isUsable: true, routes: [.init(family: .ipv4, interfaceName: "wlan0", interfaceIndex: 3, gateway: "192.168.1.1", localAddresses: ["192.168.1.57/24"])])
        kernel.answer(elsewhere)
        #expect(try await collect(2, from: published, "the published paths") == [wifi, elsewhere])

        try await offThread { watcher.stop() }
        #expect(kernel.isClosed)
        #expect(failures.withLock { $0 } == [])
    }

    @Test("a first read that fails ends the watcher and says why")
    func firstReadFails() async throws {
        final class Broken: NetlinkPathSource, @unchecked Sendable {
            // @unchecked Sendable: `closed` is only touched with its lock held.
            let closed = Lock(false)
            func waitForChange(until deadline: UInt64?) throws(TetherError) -> NetlinkWait { .stopped }
            func readPath() throws(TetherError) -> NetworkPath {
                throw TetherError(code: .systemCall, message: "cannot read the network path: the kernel refused a netlink dump")
            }
            func wake() {}
            func close() { closed.withLock { $0 = true } }
        }
        let source = Broken()
        let (failures, fail) = AsyncStream<TetherError>.makeStream()
        let watcher = NetlinkPathWatcher.start(source: source, publish: { _ in Issue.record("nothing is published") }, failed: { fail.yield($0) })
        let error = try await bounded("the failure") { await failures.first { _ in true } }
        #expect(error?.code == .systemCall)
        try await offThread { watcher.stop() }
        #expect(source.closed.withLock { $0 })
    }
}
#endif
