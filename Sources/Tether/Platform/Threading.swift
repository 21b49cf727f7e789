#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#endif

/// A thread identity, for "am I on this thread" checks.
typealias ThreadID = pthread_t

/// A joinable POSIX thread running one closure.
package struct BlockingThread: ~Copyable {
    private let handle: pthread_t

    /// Box that carries the closure across the C boundary.
    private final class Body {
        let run: () -> Void
        init(_ run: @escaping () -> Void) { self.run = run }
    }

    /// Starts a thread that runs `body` and can be joined.
    init(name: String, _ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        #if canImport(Darwin)
        var handle: pthread_t?
        #else
        var handle = pthread_t()
        #endif
        let status = pthread_create(&handle, nil, { argument in
            let body = Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue()
            body.run()
            return nil
        }, box)
        precondition(status == 0, "pthread_create failed with \(status)")
        #if canImport(Darwin)
        self.handle = handle!
        #else
        self.handle = handle
        #endif
        _ = name
    }

    /// Waits for the thread to finish.
    consuming func join() {
        _ = pthread_join(handle, nil)
    }

    /// Runs `body` on a new detached thread: for calls that block, such as `getaddrinfo`.
    package static func run(_ body: @escaping @Sendable () -> Void) {
        let thread = BlockingThread(name: "tether-blocking", body)
        _ = pthread_detach(thread.handle)
        discardThread(thread)
    }

    private static func discardThread(_ thread: consuming BlockingThread) {
        _ = consume thread
    }

    /// Whether the calling thread is `other`.
    static func isCurrent(_ other: pthread_t) -> Bool {
        pthread_equal(pthread_self(), other) != 0
    }

    static var current: pthread_t { pthread_self() }
}

/// A counting semaphore (`pthread_cond_t`): each `signal()` lets one `wait()` through, so
/// it serves as a one-shot signal one thread waits on and another raises, and as a count of
/// queued work.
package final class Semaphore: @unchecked Sendable {
    // @unchecked Sendable: `count` is only touched with `mutex` held.
    private var mutex = pthread_mutex_t()
    private var condition = pthread_cond_t()
    private var count = 0

    package init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&condition, nil)
    }

    deinit {
        pthread_cond_destroy(&condition)
        pthread_mutex_destroy(&mutex)
    }

    package func signal() {
        pthread_mutex_lock(&mutex)
        count += 1
        pthread_cond_signal(&condition)
        pthread_mutex_unlock(&mutex)
    }

    package func wait() {
        pthread_mutex_lock(&mutex)
        while count == 0 { pthread_cond_wait(&condition, &mutex) }
        count -= 1
        pthread_mutex_unlock(&mutex)
    }
}

