/// The threads every call to a ``MailboxStore`` runs on: threads of their own, never an
/// event loop's and never one of the Swift concurrency pool's.
///
/// A store may block the thread it is called on (a SQLite read, a wait for a lock held by
/// a write that flushes to disk, a database client without async I/O). Called from a peer,
/// whose tasks prefer its event loop, a store's nonisolated `async` method would run on that
/// loop and stall every connection on it; called from the pool, it would hold one of the
/// few threads that all of Swift concurrency shares. So the server calls stores with this
/// executor as the task's preference (``MailboxHub``): a store that blocks holds up only
/// the callers waiting for it.
///
/// The threads start on first use and live as long as the process, shared by every server
/// in it, like ``TetherEventLoopGroup/shared``. There are ``threadCount`` of them: that many
/// store calls can block at once before the next waits its turn.
final class StoreExecutor: TaskExecutor, Sendable {
    /// The executor of every server in the process.
    static let shared = StoreExecutor(threads: threadCount)

    /// How many threads the shared executor runs store calls on: 4.
    static let threadCount = 4

    /// The jobs waiting for a thread, oldest first.
    private struct Queue {
        var jobs: [UnownedJob] = []
        var head = 0

        mutating func push(_ job: UnownedJob) {
            jobs.append(job)
        }

        mutating func pop() -> UnownedJob {
            let job = jobs[head]
            head += 1
            if head == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 64, head * 2 >= jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            return job
        }
    }

    private let queue = Lock(Queue())
    /// Raised once per job queued; each thread takes one job per wait.
    private let available = Semaphore()

    /// An executor of its own, with `threads` threads that live as long as the process: for
    /// tests whose stores block their threads on purpose, so that they hold up no other
    /// server's store calls in the same process.
    ///
    /// - Parameter threads: How many store calls can block at once.
    init(threads: Int) {
        for _ in 0..<threads {
            BlockingThread.run { [self] in work() }
        }
    }

    /// Queues a job for the next free thread.
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.withLock { $0.push(job) }
        available.signal()
    }

    func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    private func work() {
        while true {
            available.wait()
            let job = queue.withLock { $0.pop() }
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// A store that does its work on threads of its own and only suspends its callers, never
/// blocking their threads (the SQLite store): the server calls it directly from wherever it
/// is, without the two thread hops of going through the ``StoreExecutor``.
package protocol SelfThreadedMailboxStore: MailboxStore {}
