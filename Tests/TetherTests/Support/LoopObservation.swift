@testable import Tether

/// Watching a connection from its own event loop, so a test compares events by the loop's
/// order and clock (``MonotonicTime``, the clock of request deadlines and backoff timers)
/// instead of by when a busy machine gets round to running the test's tasks.
///
/// What makes this exact: in each turn the loop fires its due timers in deadline order,
/// and a timer's callback (a request timing out, a backoff ending) changes the connection
/// at once, before the next timer fires; the jobs those timers queue run after them. So
/// a check queued by a timer sees everything that timers due earlier did, however late
/// the loop runs.
extension Connection {
    /// The serial and id of a request: what its timeout and its entry in the request table
    /// know it by.
    typealias RequestKey = (serial: UInt32, id: UInt64)

    /// The serial and id the next request will get: the table allocates them
    /// deterministically, so a copy of it tells.
    func nextRequestKey() -> RequestKey {
        var copy = table
        return copy.allocate()
    }

    /// Sends `request` from inside the connection's isolation, and reports on the loop when
    /// it was made and when its caller learned how it ended.
    ///
    /// `made` runs on the loop just before the request is made, so a time read there is at
    /// most the start of the request's timeout, and the key it gets is the request's as long
    /// as no other request is made meanwhile. `ended` runs on the loop once the caller has
    /// been resumed. To order it after something else, await that event before calling
    /// this: spinning on `Task.yield()` here would keep the loop busy, and race real time.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - timeout: Its timeout; `nil` uses the configured one.
    ///   - made: Called on the loop just before the request is made, with the serial and id
    ///     it gets.
    ///   - ended: Called on the loop with the outcome.
    /// - Returns: The outcome.
    func observedRequest(
        _ request: Request,
        timeout: RequestTimeout = .configured,
        made: @Sendable (isolated Connection, RequestKey) -> Void = { _, _ in },
        ended: @Sendable (isolated Connection, Result<Response, any Error>) -> Void
    ) async -> Result<Response, any Error> {
        made(self, nextRequestKey())
        let outcome: Result<Response, any Error>
        do {
            outcome = .success(try await self.request(request, timeout: timeout))
        } catch {
            outcome = .failure(error)
        }
        ended(self, outcome)
        return outcome
    }

    /// Whether the request `key` has not ended: neither answered, timed out, failed nor
    /// cancelled.
    ///
    /// - Parameter key: The request's serial and id.
    /// - Returns: Whether it is still in flight or queued.
    func isPending(_ key: RequestKey) -> Bool {
        table.contains(serial: key.serial, id: key.id)
    }

    /// Runs `check` on the loop once `deadline` (``MonotonicTime``) has passed, after the
    /// callbacks of every timer due before it.
    ///
    /// Call only on the loop (from inside the connection's isolation).
    ///
    /// - Parameters:
    ///   - deadline: When, on the loop's clock.
    ///   - check: What to run; it sees the connection's state.
    func afterTimers(dueBefore deadline: UInt64, _ check: @escaping @Sendable (isolated Connection) -> Void) {
        _ = loop.schedule(at: deadline) { [self] in
            loop.execute { [self] in assumeIsolated(check) }
        }
    }
}

extension Connection {
    /// Awaits `check`, run on the loop once `deadline` (``MonotonicTime``) has passed, after
    /// the callbacks of every timer due before it.
    ///
    /// - Parameters:
    ///   - deadline: When, on the loop's clock.
    ///   - check: What to run; it sees the connection's state.
    /// - Returns: What `check` returned.
    func valueAfterTimers<T: Sendable>(
        dueBefore deadline: UInt64,
        _ check: @escaping @Sendable (isolated Connection) -> T
    ) async -> T {
        await withCheckedContinuation { continuation in
            afterTimers(dueBefore: deadline) { connection in
                continuation.resume(returning: check(connection))
            }
        }
    }
}

/// `duration` after `start`, in ``MonotonicTime`` nanoseconds, plus one: strictly later
/// than a deadline set for `duration` at `start` or before.
func justAfter(_ duration: Duration, from start: UInt64) -> UInt64 {
    start &+ MonotonicTime.nanoseconds(of: duration) &+ 1
}
