/// Something registered with an event loop that reacts to readiness of its descriptor.
///
/// Called on the loop's thread only.
package protocol IOHandler: AnyObject {
    func handleReadiness(_ event: ReadinessEvent)
}

/// A job for the loop held in an object, so enqueueing it allocates no closure.
protocol LoopJob: AnyObject, Sendable {
    /// Runs on the loop's thread.
    func run()
}

/// Something that wants to write once, after the loop has run every job of the current turn.
protocol Flushable: AnyObject {
    func flushAfterTurn()
}

/// One thread running `epoll`/`kqueue`, a timer heap and a queue of jobs.
///
/// The loop is also a Swift executor: actors that set their `unownedExecutor` to
/// ``serialExecutor`` run on this thread, so socket callbacks reach them with
/// `onLoop(_:_:_:_:)` instead of a thread hop. A turn of the loop is: wait for readiness
/// (or the next timer, or a wake-up), handle I/O, fire due timers, run queued jobs, then
/// flush every connection that wrote during the turn with one system call each.
///
/// State touched on every request (here, in ``FrameChannel``, ``Connection`` and
/// ``Peer``) is marked `@exclusivity(unchecked)`: it is only ever used on the loop's thread
/// (or inside its actor), never through overlapping `inout` accesses, and the run-time
/// exclusivity checks on it cost about a tenth of a request's processor time.
package final class EventLoop: @unchecked Sendable {
    // @unchecked Sendable: fields below `remote` are touched only on the loop thread
    // (checked with `preconditionInLoop()` where it matters); `remote` is behind a lock.

    /// A unit of work for the loop.
    enum Job: Sendable {
        case serial(UnownedJob)
        case task(UnownedJob)
        case closure(@Sendable () -> Void)
        /// Work in an object the caller made anyway, so the job allocates nothing more.
        case object(any LoopJob)
    }

    private struct Remote {
        var jobs: [Job] = []
        /// The loop is blocked (or about to block) in the selector and needs a wake-up.
        var sleeping = false
        /// A wake-up was written and the loop has not yet taken the jobs.
        var wakeupPending = false
        var stopping = false
        var stopped = false
        /// Advances of a ``ManualClock`` waiting for the loop to be idle.
        var idleWaiters: [CheckedContinuation<LoopIdleReport, Never>] = []
    }

    private let remote = Lock(Remote())
    private var selector: Selector
    private var handlers: [(any IOHandler)?] = []
    @exclusivity(unchecked) private var timers = TimerHeap()
    /// When the loop's last wait returned with readiness events (``now``): one clock read
    /// per turn that handlers can use instead of one per read. Loop thread only.
    private(set) var lastWake: UInt64 = 0
    /// Where the loop reads the time: `nil` for `CLOCK_MONOTONIC`, else a clock that moves
    /// only when a test advances it.
    let manualClock: ManualClock?
    /// How many turns did work (I/O, timers, jobs, flushes); with a manual clock, so an
    /// advance can tell whether the loop stayed idle. Loop thread only.
    private var workTurns: UInt64 = 0
    @exclusivity(unchecked) private var timerPool: [LoopTimer] = []
    @exclusivity(unchecked) private var local: [Job] = []
    @exclusivity(unchecked) private var running: [Job] = []
    /// Swapped with the remote queue each turn, so taking the remote jobs copies nothing.
    private var incoming: [Job] = []
    @exclusivity(unchecked) private var flushing: [any Flushable] = []
    @exclusivity(unchecked) private var flushQueue: [any Flushable] = []
    /// The buffer sockets read into when they hold no partial frame: one per loop instead of
    /// one per connection, so an idle connection owns no read buffer at all.
    @exclusivity(unchecked) var readBuffer = FrameBuffer(capacity: 64 << 10)
    /// Where TLS connections read ciphertext: their session takes all of it at once, so one
    /// buffer per loop serves every connection. Allocated on first use.
    var sealedReadBuffer = FrameBuffer(capacity: 0)
    /// Where a WebSocket layer reads its messages' bytes when the layer below it borrows
    /// ``readBuffer`` for the same read (TLS plaintext under `wss://`, a socket whose first
    /// bytes were sniffed): a third buffer per loop, so no layer takes the one below it is
    /// still reading from. Allocated on first use.
    var layerReadBuffer = FrameBuffer(capacity: 0)
    private var thread: ThreadID?
    private var joinable: BlockingThread?
    private var stopped = false
    let name: String

    /// The executor that isolates actors to this loop.
    let serialExecutor: LoopSerialExecutor
    /// The executor a task can prefer, to run nonisolated code on this loop.
    let taskExecutor: LoopTaskExecutor

    /// Starts a loop thread.
    ///
    /// - Parameters:
    ///   - name: The thread's name.
    ///   - clock: Where the loop reads the time: `nil` for the monotonic clock, or a clock
    ///     that moves only when advanced.
    init(name: String, clock: ManualClock? = nil) {
        self.name = name
        self.manualClock = clock
        do {
            selector = try Selector()
        } catch {
            fatalError("cannot create the event loop's selector: \(error)")
        }
        serialExecutor = LoopSerialExecutor()
        taskExecutor = LoopTaskExecutor()
        serialExecutor.loop = self
        taskExecutor.loop = self
        Syscall.ignoreBrokenPipe
        let ready = Semaphore()
        joinable = BlockingThread(name: name) { [self] in
            // The loop thread records itself; the semaphore orders this write before any
            // use of the loop by the thread that created it.
            thread = BlockingThread.current
            ready.signal()
            run()
        }
        ready.wait()
        clock?.register(self)
    }

    /// The time, in monotonic nanoseconds: `CLOCK_MONOTONIC`, or the manual clock the loop
    /// was made with. Every deadline of the loop's timers is on this clock. Any thread.
    ///
    /// With the monotonic clock this costs what `MonotonicTime.now()` costs plus one
    /// predictable branch.
    @inline(__always)
    package var now: UInt64 {
        if let manualClock { return manualClock.now }
        return MonotonicTime.now()
    }

    /// The executor of the actors that run on this loop (``Connection``'s, and those of
    /// sibling modules' clients).
    package var actorExecutor: UnownedSerialExecutor { serialExecutor.asUnownedSerialExecutor() }

    /// Whether the caller runs on this loop's thread.
    package var inLoop: Bool {
        guard let thread else { return false }
        return BlockingThread.isCurrent(thread)
    }

    func preconditionInLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(inLoop, "must run on event loop \(name)", file: file, line: line)
    }

    /// Sets ``lastWake`` to now, for bytes that arrive without a readiness event (an
    /// in-memory transport's read), so what reads it dates them right. Loop thread only.
    func stampWake() {
        lastWake = now
    }

    // MARK: Jobs

    func enqueue(_ job: Job) {
        if inLoop {
            local.append(job)
            return
        }
        // Only a loop that is blocked in the selector needs the wake-up system call; a busy
        // loop takes remote jobs at the end of its turn anyway.
        let wake = remote.withLock { state -> Bool in
            state.jobs.append(job)
            guard state.sleeping, !state.wakeupPending else { return false }
            state.wakeupPending = true
            return true
        }
        if wake { selector.wakeup() }
    }

    /// Runs `body` on the loop thread, soon.
    package func execute(_ body: @escaping @Sendable () -> Void) {
        enqueue(.closure(body))
    }

    /// Runs `body` on the loop thread in a later turn than the one running now, after the
    /// loop has looked at its descriptors and timers again: for work cut into parts, so
    /// that the I/O of every other connection on the loop (a heartbeat to ack) waits for
    /// one part at most, not for all of it. From another thread, the same as ``execute(_:)``.
    func executeNextTurn(_ body: @escaping @Sendable () -> Void) {
        guard inLoop else { return execute(body) }
        // The remote queue is taken once per turn, after the wait for I/O; a loop with
        // remote jobs does not block in that wait, so no wake-up is needed.
        remote.withLock { $0.jobs.append(.closure(body)) }
    }

    // MARK: Timers

    /// Schedules `callback` to run on the loop at `deadline` (monotonic nanoseconds). Loop thread only.
    @discardableResult
    func schedule(at deadline: UInt64, _ callback: @escaping () -> Void) -> LoopTimer {
        preconditionInLoop()
        let timer = LoopTimer(deadline: deadline, action: .closure(callback))
        timers.insert(timer)
        return timer
    }

    /// Schedules `target.timerFired(tag:detail:)` at `deadline` with a recycled timer object.
    ///
    /// The returned handle is valid until the timer fires or is cancelled; after that the
    /// loop reuses the object, so the holder must drop it then. Loop thread only.
    func schedule(at deadline: UInt64, target: any TimerTarget, tag: UInt64, detail: UInt32) -> LoopTimer {
        preconditionInLoop()
        let timer: LoopTimer
        if let reused = timerPool.popLast() {
            reused.deadline = deadline
            reused.action = .target(target, tag: tag, detail: detail)
            timer = reused
        } else {
            timer = LoopTimer(deadline: deadline, action: .target(target, tag: tag, detail: detail))
            timer.recyclable = true
        }
        timers.insert(timer)
        return timer
    }

    private func recycle(_ timer: LoopTimer) {
        guard timer.recyclable else { return }
        timer.action = .none
        if timerPool.count < 4096 { timerPool.append(timer) }
    }

    /// Schedules `callback` to run on the loop after `delay`. Loop thread only.
    @discardableResult
    func schedule(after delay: Duration, _ callback: @escaping () -> Void) -> LoopTimer {
        schedule(at: now &+ MonotonicTime.nanoseconds(of: delay), callback)
    }

    /// Cancels a timer that has not fired yet. Loop thread only.
    func cancel(_ timer: LoopTimer) {
        preconditionInLoop()
        if timers.remove(timer) { recycle(timer) }
    }

    // MARK: Descriptors

    /// Registers `handler` for readiness of `fd`. Loop thread only.
    package func register(_ fd: Int32, interest: Interest, handler: any IOHandler) throws(Errno) {
        preconditionInLoop()
        try selector.register(fd, interest: interest)
        let index = Int(fd)
        if index >= handlers.count {
            handlers.append(contentsOf: repeatElement(nil, count: index - handlers.count + 1))
        }
        handlers[index] = handler
    }

    /// Changes what `fd` is watched for. Loop thread only.
    func reregister(_ fd: Int32, interest: Interest) throws(Errno) {
        try selector.reregister(fd, interest: interest)
    }

    /// Stops watching `fd`. Call before closing it. Loop thread only.
    package func deregister(_ fd: Int32) {
        preconditionInLoop()
        selector.deregister(fd)
        if Int(fd) < handlers.count { handlers[Int(fd)] = nil }
    }

    /// Asks for `target.flushAfterTurn()` once this turn's jobs have run. Loop thread only.
    func flushAfterTurn(_ target: any Flushable) {
        flushQueue.append(target)
    }

    // MARK: The loop

    private func run() {
        // Whether the last turn found nothing to do: no ready descriptor, no due timer, no
        // job, nothing to flush. Only a loop that saw that may tell a manual clock it is idle.
        var quiet = false
        while true {
            var timeout: Int64? = nil
            if !local.isEmpty || !flushQueue.isEmpty {
                timeout = 0
            } else if let earliest = timers.earliest {
                let now = self.now
                if earliest <= now {
                    timeout = 0
                } else if manualClock == nil {
                    timeout = Int64(clamping: earliest - now)
                }
                // A manual clock's timers wait for an advance, which wakes the loop.
            }
            if timeout != 0 {
                // Announce the sleep, unless jobs arrived meanwhile: then do not block at all.
                var idleWaiters: [CheckedContinuation<LoopIdleReport, Never>] = []
                let hasJobs = remote.withLock { state -> Bool in
                    if !state.jobs.isEmpty { return true }
                    if !state.idleWaiters.isEmpty {
                        // Look at the descriptors once more before calling the loop idle.
                        if !quiet { return true }
                        swap(&idleWaiters, &state.idleWaiters)
                    }
                    state.sleeping = true
                    return false
                }
                if hasJobs { timeout = 0 }
                if !idleWaiters.isEmpty {
                    let report = LoopIdleReport(work: workTurns, earliestTimer: timers.earliest)
                    for waiter in idleWaiters { waiter.resume(returning: report) }
                }
            }
            var worked = false
            do {
                var stamped = false
                _ = try selector.wait(timeoutNanoseconds: timeout) { event in
                    if !stamped {
                        // Once per turn, when the wait returned, before any handler runs.
                        lastWake = now
                        stamped = true
                    }
                    worked = true
                    let index = Int(event.fd)
                    if index < handlers.count, let handler = handlers[index] {
                        handler.handleReadiness(event)
                    }
                }
            } catch {
                fatalError("event loop \(name) cannot wait for events: \(error)")
            }

            if !timers.isEmpty {
                // Fire only what was due when this phase began: a callback that schedules
                // another due timer waits for the next turn, so timers cannot starve I/O.
                let now = self.now
                var due: [LoopTimer] = []
                while let timer = timers.popDue(now: now) { due.append(timer) }
                if !due.isEmpty { worked = true }
                for timer in due {
                    timer.fire()
                    recycle(timer)
                }
            }
            let stopping = remote.withLock { state -> Bool in
                state.sleeping = false
                state.wakeupPending = false
                swap(&state.jobs, &incoming)
                return state.stopping
            }
            if !incoming.isEmpty {
                local.append(contentsOf: incoming)
                incoming.removeAll(keepingCapacity: true)
            }
            if !local.isEmpty || !flushQueue.isEmpty { worked = true }
            runJobs()
            if worked { workTurns &+= 1 }
            quiet = !worked
            if stopping && local.isEmpty {
                stopped = true
                let waiters = remote.withLock { state in
                    state.stopped = true
                    defer { state.idleWaiters.removeAll() }
                    return state.idleWaiters
                }
                let report = LoopIdleReport(work: workTurns, earliestTimer: nil)
                for waiter in waiters { waiter.resume(returning: report) }
                return
            }
        }
    }

    /// Waits until the loop has found itself idle in a turn (see ``ManualClock/advance(to:)``)
    /// and reports how much work it has done so far. Loops of a ``ManualClock`` only; not
    /// from the loop itself.
    func idle() async -> LoopIdleReport {
        precondition(manualClock != nil, "only a loop on a manual clock reports when it is idle")
        return await withCheckedContinuation { continuation in
            let wake = remote.withLock { state -> Bool? in
                if state.stopped { return nil }
                state.idleWaiters.append(continuation)
                guard state.sleeping, !state.wakeupPending else { return false }
                state.wakeupPending = true
                return true
            }
            switch wake {
            case nil: continuation.resume(returning: LoopIdleReport(work: 0, earliestTimer: nil))
            case true?: selector.wakeup()
            case false?: break
            }
        }
    }

    private func runJobs() {
        // Jobs enqueued while running land in `local` and run in the same turn, up to a bound,
        // so a chatty actor cannot starve I/O.
        var rounds = 0
        while !local.isEmpty && rounds < 16 {
            rounds += 1
            swap(&running, &local)
            for job in running {
                switch job {
                case .serial(let job):
                    job.runSynchronously(on: serialExecutor.asUnownedSerialExecutor())
                case .task(let job):
                    job.runSynchronously(on: taskExecutor.asUnownedTaskExecutor())
                case .closure(let body):
                    body()
                case .object(let job):
                    job.run()
                }
            }
            running.removeAll(keepingCapacity: true)
        }
        drainFlushes()
    }

    private func drainFlushes() {
        guard !flushQueue.isEmpty, local.isEmpty else { return }
        swap(&flushing, &flushQueue)
        for target in flushing { target.flushAfterTurn() }
        flushing.removeAll(keepingCapacity: true)
    }

    /// Stops the loop after its queued jobs have run and waits for its thread to end.
    func shutdown() {
        precondition(!inLoop, "an event loop cannot shut itself down")
        manualClock?.deregister(self)
        remote.withLock { $0.stopping = true }
        selector.wakeup()
        if let thread = joinable.take() { thread.join() }
    }
}

/// The `SerialExecutor` face of an ``EventLoop``.
final class LoopSerialExecutor: SerialExecutor, @unchecked Sendable {
    // @unchecked Sendable: `loop` is set once in the loop's init before the executor is shared.
    unowned(unsafe) var loop: EventLoop!

    func enqueue(_ job: consuming ExecutorJob) {
        loop.enqueue(.serial(UnownedJob(job)))
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    func isSameExclusiveExecutionContext(other: LoopSerialExecutor) -> Bool {
        other === self
    }

    func checkIsolated() {
        precondition(loop.inLoop, "expected to run on event loop \(loop.name)")
    }
}

/// The `TaskExecutor` face of an ``EventLoop``.
final class LoopTaskExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked Sendable: `loop` is set once in the loop's init before the executor is shared.
    unowned(unsafe) var loop: EventLoop!

    func enqueue(_ job: consuming ExecutorJob) {
        loop.enqueue(.task(UnownedJob(job)))
    }

    func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }
}

extension EventLoop {
    /// Runs `body` on the loop and returns its result.
    package func submit<T: Sendable>(_ body: @escaping @Sendable () throws(TetherError) -> T) async throws(TetherError) -> T {
        let result: Result<T, TetherError> = await withCheckedContinuation { continuation in
            execute {
                do throws(TetherError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}
