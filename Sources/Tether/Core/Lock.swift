import CTetherShims

/// A value guarded by a `pthread_mutex_t`.
///
/// Used instead of the standard library's `Mutex`, whose Linux implementation waits on a
/// futex that ThreadSanitizer cannot see, so every access under it would be reported as a
/// race. An uncontended `pthread_mutex_lock` costs the same.
package final class Lock<Value>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read or written with `mutex` held.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    package func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
