import Testing
@testable import Tether

/// Runs `body` on `loop` and waits for it.
private func onLoopThread(_ loop: EventLoop, _ body: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        loop.execute {
            body()
            continuation.resume()
        }
    }
}

/// What the timers of a test did, in order: a label and the loop's time when it fired.
private final class FiringLog: Sendable {
    private let entries = Lock<[(String, UInt64)]>([])

    func record(_ label: String, on loop: EventLoop) {
        let now = loop.now
        entries.withLock { $0.append((label, now)) }
    }

    var labels: [String] { entries.withLock { $0.map(\.0) } }
    var times: [UInt64] { entries.withLock { $0.map(\.1) } }
}

private let millisecond: UInt64 = 1_000_000

@Suite("Manual clock on an event loop")
struct ManualClockTests {
    @Test("a jump moves the time at once and the timers due by then fire on the loop's next turn, in deadline order, at the new time; those after it wait", .timeLimit(.guarded))
    func jump() async throws {
        try await withManualLoop { clock, group in
            let loop = group.loops[0]
            let base = clock.now
            let log = FiringLog()
            let (fired, firing) = AsyncStream<Void>.makeStream()
            await onLoopThread(loop) {
                loop.schedule(at: base + 20 * millisecond) {
                    log.record("20", on: loop)
                    firing.yield()
                }
                loop.schedule(at: base + 10 * millisecond) { log.record("10", on: loop) }
                loop.schedule(at: base + 200 * millisecond) { log.record("200", on: loop) }
            }
            clock.jump(by: .milliseconds(100))
            #expect(clock.now == base + 100 * millisecond)
            for await _ in fired { break }
            #expect(log.labels == ["10", "20"])
            #expect(log.times == [base + 100 * millisecond, base + 100 * millisecond])
            await clock.settle()
            #expect(log.labels == ["10", "20"])
        }
    }

    @Test("timers fire in deadline order, each reading its own deadline, and only when the clock is advanced", .timeLimit(.guarded))
    func deadlineOrder() async throws {
        try await withManualLoop { clock, group in
            let loop = group.loops[0]
            let base = clock.now
            let log = FiringLog()
            await onLoopThread(loop) {
                // Scheduled out of order; two share a deadline and must keep this order.
                loop.schedule(at: base + 30 * millisecond) { log.record("30a", on: loop) }
                loop.schedule(at: base + 10 * millisecond) { log.record("10", on: loop) }
                loop.schedule(after: .milliseconds(20)) { log.record("20", on: loop) }
                loop.schedule(at: base + 30 * millisecond) { log.record("30b", on: loop) }
                loop.schedule(at: base + 30 * millisecond) { log.record("30c", on: loop) }
            }
            await clock.settle()
            #expect(log.labels == [])
            #expect(clock.now == base)

            await clock.advance(by: .milliseconds(10) - .nanoseconds(1))
            #expect(log.labels == [])
            await clock.advance(by: .nanoseconds(1))
            #expect(log.labels == ["10"])
            #expect(clock.now == base + 10 * millisecond)

            await clock.advance(by: .milliseconds(100))
            #expect(log.labels == ["10", "20", "30a", "30b", "30c"])
            #expect(log.times == [10, 20, 30, 30, 30].map { base + $0 * millisecond })
            #expect(clock.now == base + 110 * millisecond)
            #expect(loop.now == clock.now)
        }
    }

    @Test("timers that timers schedule fire in the same advance when due by its end, in deadline order", .timeLimit(.guarded))
    func nestedTimers() async throws {
        try await withManualLoop { clock, group in
            let loop = group.loops[0]
            let base = clock.now
            let log = FiringLog()
            await onLoopThread(loop) {
                loop.schedule(at: base + 10 * millisecond) {
                    log.record("outer", on: loop)
                    loop.schedule(after: .zero) { log.record("now", on: loop) }
                    loop.schedule(after: .milliseconds(25)) { log.record("+25", on: loop) }
                    loop.schedule(after: .milliseconds(5)) {
                        log.record("+5", on: loop)
                        loop.execute { log.record("job of +5", on: loop) }
                        loop.schedule(after: .milliseconds(5)) { log.record("+5+5", on: loop) }
                    }
                    loop.schedule(after: .milliseconds(50)) { log.record("+50", on: loop) }
                }
                loop.schedule(at: base + 17 * millisecond) { log.record("17", on: loop) }
            }
            await clock.advance(by: .milliseconds(40))
            #expect(log.labels == ["outer", "now", "+5", "job of +5", "17", "+5+5", "+25"])
            #expect(log.times == [10, 10, 15, 15, 17, 20, 35].map { base + $0 * millisecond })

            await clock.advance(by: .milliseconds(20))
            #expect(log.labels.last == "+50")
            #expect(log.times.last == base + 60 * millisecond)
        }
    }

    @Test("a cancelled timer never fires; the others do", .timeLimit(.guarded))
    func cancel() async throws {
        try await withManualLoop { clock, group in
            let loop = group.loops[0]
            let log = FiringLog()
            await onLoopThread(loop) {
                let doomed = loop.schedule(after: .seconds(1)) { log.record("cancelled", on: loop) }
                loop.schedule(after: .seconds(2)) { log.record("kept", on: loop) }
                let late = loop.schedule(after: .seconds(3)) { log.record("cancelled by a timer", on: loop) }
                loop.schedule(after: .milliseconds(1500)) { loop.cancel(late) }
                loop.cancel(doomed)
            }
            await clock.advance(by: .seconds(10))
            #expect(log.labels == ["kept"])
        }
    }

    @Test("an advance with nothing due moves the time and returns; one made while the loop is busy waits for it", .timeLimit(.guarded))
    func nothingDue() async throws {
        let clock = ManualClock(now: 5_000)
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let loop = group.loops[0]
        await clock.advance(by: .seconds(3))
        #expect(clock.now == 5_000 + 3_000_000_000)
        #expect(loop.now == clock.now)
        // Earlier targets leave the time alone.
        await clock.advance(to: 1)
        #expect(clock.now == 5_000 + 3_000_000_000)

        // The loop is busy in a job when the advance starts; the timer the job sets is due
        // by the advance's end, so it must have fired when the advance returns.
        let log = FiringLog()
        let release = Semaphore()
        let started = Semaphore()
        loop.execute {
            started.signal()
            release.wait()
            loop.schedule(after: .seconds(1)) { log.record("set while busy", on: loop) }
        }
        try await offThread { started.wait() }
        let advancing = Task { await clock.advance(by: .seconds(2)) }
        try await offThread { release.signal() }
        await advancing.value
        #expect(log.labels == ["set while busy"])
    }

    @Test("advances made at once run one after another and add up", .timeLimit(.guarded))
    func concurrentAdvances() async throws {
        try await withManualLoop { clock, group in
            let loop = group.loops[0]
            let base = clock.now
            let log = FiringLog()
            await onLoopThread(loop) {
                for step in 1...8 {
                    loop.schedule(at: base + UInt64(step) * millisecond) { log.record("\(step)", on: loop) }
                }
            }
            await withTaskGroup(of: Void.self) { tasks in
                for _ in 0..<8 { tasks.addTask { await clock.advance(by: .milliseconds(1)) } }
            }
            #expect(clock.now == base + 8 * millisecond)
            #expect(log.labels == (1...8).map(String.init))
            #expect(log.times == (1...8).map { base + UInt64($0) * millisecond })
        }
    }

    @Test("timers on two loops of one clock fire in deadline order across the loops", .timeLimit(.guarded))
    func twoLoops() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 2, clock: clock)
        defer { group.shutdown() }
        let (first, second) = (group.loops[0], group.loops[1])
        let base = clock.now
        let log = FiringLog()
        await onLoopThread(first) {
            first.schedule(at: base + 10 * millisecond) {
                log.record("first 10", on: first)
                // A job sent to the other loop sets a timer there, 5 ms after this one.
                second.execute {
                    second.schedule(after: .milliseconds(5)) { log.record("second 15", on: second) }
                }
            }
            first.schedule(at: base + 16 * millisecond) { log.record("first 16", on: first) }
        }
        await onLoopThread(second) {
            second.schedule(at: base + 12 * millisecond) { log.record("second 12", on: second) }
        }
        await clock.advance(by: .milliseconds(20))
        #expect(log.labels == ["first 10", "second 12", "second 15", "first 16"])
        #expect(log.times == [10, 12, 15, 16].map { base + $0 * millisecond })
    }

    @Test("a task sleeping on a loop wakes when the clock reaches its deadline, reading that time; a cancelled one throws at once", .timeLimit(.guarded))
    func sleep() async throws {
        try await withManualLoop { clock, group in
            let loop = group.loops[0]
            let deadline = clock.now + 5_000_000_000
            let woke = Lock<UInt64?>(nil)
            // Both tasks start on the loop, so their timers are set by jobs on it, which the
            // advance waits for however late the tasks would start elsewhere.
            let sleeper = Task(executorPreference: loop.taskExecutor) {
                try await loop.sleep(until: deadline)
                woke.withLock { $0 = loop.now }
            }
            let forever = Task(executorPreference: loop.taskExecutor) { try await loop.sleep(until: .max) }
            await clock.advance(by: .seconds(5) - .nanoseconds(1))
            #expect(woke.withLock { $0 } == nil)
            await clock.advance(by: .nanoseconds(1))
            try await bounded("the sleeper to wake") { try await sleeper.value }
            #expect(woke.withLock { $0 } == deadline)

            forever.cancel()
            let outcome = try await bounded("the cancelled sleep to end") { await forever.result }
            #expect(throws: CancellationError.self) { try outcome.get() }
            // A sleep whose deadline has passed ends at the loop's next turn.
            try await bounded("a sleep into the past") { try await loop.sleep(until: 0) }
        }
    }

    @Test("the mailbox clock moves with the manual clock, to the millisecond")
    func mailboxClock() async throws {
        try await withManualLoop { clock, group in
            let mailboxNow = clock.mailboxClock(startingAt: MailboxTime(millisecondsSince1970: 1_000))
            #expect(mailboxNow() == MailboxTime(millisecondsSince1970: 1_000))
            await clock.advance(by: .milliseconds(2_500) + .nanoseconds(999_999))
            #expect(mailboxNow() == MailboxTime(millisecondsSince1970: 3_500))
        }
    }
}
