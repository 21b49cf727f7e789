extension EventLoop {
    /// Suspends the calling task until `deadline` on the loop's clock (``now``), by a timer
    /// of the loop: a manual clock's loop wakes the task only once the clock has been
    /// advanced that far. Any thread.
    ///
    /// - Parameter deadline: When to resume, in the loop's monotonic nanoseconds; one in the
    ///   past resumes at the loop's next turn.
    /// - Throws: `CancellationError` when the task is cancelled first.
    package func sleep(until deadline: UInt64) async throws {
        let sleeper = LoopSleeper(loop: self)
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                sleeper.start(continuation, deadline: deadline)
            }
        } onCancel: {
            sleeper.cancel()
        }
    }
}

/// One ``EventLoop/sleep(until:)``: a continuation that the loop's timer or the task's
/// cancellation resumes, whichever comes first, exactly once.
private final class LoopSleeper: @unchecked Sendable {
    // @unchecked Sendable: `continuation` and `cancelled` are only used under `state`'s lock;
    // `timer` only on the loop's thread (in jobs and the timer's callback).
    private struct State {
        var continuation: CheckedContinuation<Void, any Error>?
        var cancelled = false
    }

    private let loop: EventLoop
    private let state = Lock(State())
    private var timer: LoopTimer?

    init(loop: EventLoop) {
        self.loop = loop
    }

    func start(_ continuation: CheckedContinuation<Void, any Error>, deadline: UInt64) {
        let cancelled = state.withLock { state -> Bool in
            if state.cancelled { return true }
            state.continuation = continuation
            return false
        }
        if cancelled {
            continuation.resume(throwing: CancellationError())
            return
        }
        loop.execute { [self] in
            // Cancelled before the loop got here: nothing to schedule.
            guard state.withLock({ $0.continuation != nil }) else { return }
            timer = loop.schedule(at: deadline) { [self] in
                timer = nil
                take()?.resume()
            }
        }
    }

    func cancel() {
        guard let continuation = state.withLock({ state -> CheckedContinuation<Void, any Error>? in
            state.cancelled = true
            return takeLocked(&state)
        }) else { return }
        continuation.resume(throwing: CancellationError())
        loop.execute { [self] in
            if let timer { loop.cancel(timer) }
            timer = nil
        }
    }

    private func take() -> CheckedContinuation<Void, any Error>? {
        state.withLock { takeLocked(&$0) }
    }

    private func takeLocked(_ state: inout State) -> CheckedContinuation<Void, any Error>? {
        defer { state.continuation = nil }
        return state.continuation
    }
}
