internal import Synchronization

/// Thrown by ``withTimeLimit(_:_:_:)`` when what it waits for takes longer than its limit.
public struct TimeLimitExceeded: Error, CustomStringConvertible {
    /// The limit that passed.
    public var limit: Duration
    /// What was awaited, as the caller named it.
    public var what: String

    /// The error for `what`, not done within `limit`.
    ///
    /// - Parameters:
    ///   - limit: The limit that passed.
    ///   - what: What was awaited.
    public init(limit: Duration, what: String) {
        self.limit = limit
        self.what = what
    }

    /// "no <what> within <limit>".
    public var description: String { "no \(what) within \(limit)" }
}

/// Runs `operation`, and throws ``TimeLimitExceeded`` if it has not finished within
/// `limit` of real time.
///
/// A race, not a task group: when the limit passes, the operation is cancelled and left
/// behind, and the caller gets the error at once, even if the operation ignores
/// cancellation. Tether's requests, connects and sequences all end when cancelled.
///
/// The limit is a bound on a bug, not a way to wait: it is real time, whatever clock the
/// code under test runs on, and a test that passes never reaches it.
///
/// - Parameters:
///   - limit: How long to wait, in real time; 10 s by default.
///   - what: What is awaited, for the error; `"result"` by default.
///   - operation: The work.
/// - Returns: What `operation` returns.
/// - Throws: What `operation` throws, or ``TimeLimitExceeded``.
@discardableResult
public func withTimeLimit<T: Sendable>(
    _ limit: Duration = .seconds(10),
    _ what: String = "result",
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let slot = Mutex<CheckedContinuation<T, any Error>?>(nil)
    let finish: @Sendable (Result<T, any Error>) -> Void = { result in
        let continuation = slot.withLock { slot -> CheckedContinuation<T, any Error>? in
            defer { slot = nil }
            return slot
        }
        continuation?.resume(with: result)
    }
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            // Stored before either racer starts, so neither can finish into an empty slot.
            slot.withLock { $0 = continuation }
            let work = Task {
                do { finish(.success(try await operation())) } catch { finish(.failure(error)) }
            }
            Task {
                try? await Task.sleep(for: limit)
                finish(.failure(TimeLimitExceeded(limit: limit, what: what)))
                work.cancel()
            }
        }
    } onCancel: {
        finish(.failure(CancellationError()))
    }
}

/// The first element of `sequence`, within `limit` of real time.
///
/// Make the sequence before doing what causes the element: Tether's sequences deliver what
/// arrives after they were made (``Tether/Connection/states`` starts with the current state).
///
/// - Parameters:
///   - sequence: The sequence.
///   - limit: How long to wait; 10 s by default.
/// - Returns: The first element, or `nil` when the sequence ends before it has one.
/// - Throws: What the sequence throws, or ``TimeLimitExceeded``.
public func firstElement<S: AsyncSequence & Sendable>(
    of sequence: S,
    within limit: Duration = .seconds(10)
) async throws -> S.Element? where S.Element: Sendable {
    try await withTimeLimit(limit, "element") {
        for try await element in sequence { return element }
        return nil
    }
}

/// The first `count` elements of `sequence`, within `limit` of real time.
///
/// - Parameters:
///   - count: How many elements to take.
///   - sequence: The sequence.
///   - limit: How long to wait for all of them; 10 s by default.
/// - Returns: `count` elements, or fewer when the sequence ends first.
/// - Throws: What the sequence throws, or ``TimeLimitExceeded``.
public func collect<S: AsyncSequence & Sendable>(
    _ count: Int,
    from sequence: S,
    within limit: Duration = .seconds(10)
) async throws -> [S.Element] where S.Element: Sendable {
    try await withTimeLimit(limit, "\(count) elements") {
        var elements: [S.Element] = []
        guard count > 0 else { return elements }
        for try await element in sequence {
            elements.append(element)
            if elements.count == count { break }
        }
        return elements
    }
}

/// Suspends until the calling task is cancelled, then throws `CancellationError`: for a
/// handler that must never answer, with no timer and no thread held meanwhile.
///
/// ```swift
/// server.handle(type: 0x410) { _, _ in
///     try await suspendUntilCancelled()   // ends when the server stops
/// }
/// ```
///
/// - Throws: `CancellationError`, once the task is cancelled (at once if it already is).
public func suspendUntilCancelled() async throws -> Never {
    let waiter = Mutex<(cancelled: Bool, continuation: CheckedContinuation<Void, any Error>?)>((false, nil))
    try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let cancelled = waiter.withLock { state -> Bool in
                if state.cancelled { return true }
                state.continuation = continuation
                return false
            }
            if cancelled { continuation.resume(throwing: CancellationError()) }
        }
    } onCancel: {
        let continuation = waiter.withLock { state -> CheckedContinuation<Void, any Error>? in
            state.cancelled = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(throwing: CancellationError())
    }
    throw CancellationError()
}
