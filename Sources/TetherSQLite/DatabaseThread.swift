internal import Tether

/// The thread a ``SQLiteMailboxStore`` does its work on: one job at a time, in the order
/// they were submitted.
///
/// SQLite blocks the thread that calls it while it reads or writes the file, flushes it to
/// disk or waits for another process's lock. Doing that on a thread of its own keeps the
/// store's `async` methods from blocking their callers' threads: a caller suspends until its
/// job has run, and its thread (an event loop's, one of the Swift concurrency pool's) is
/// free meanwhile.
///
/// The thread ends when the store lets go of this object: ``finish(with:)`` runs a last job
/// (closing the database) and waits for the thread to end. Jobs must not hold the store,
/// only what they work on, or the store could never be released.
final class DatabaseThread: Sendable {
    /// What the thread and the submitters share.
    private final class Jobs: Sendable {
        struct Queue {
            var pending: [@Sendable () -> Void] = []
            var head = 0
            var finishing = false
        }

        let queue = Lock(Queue())
        /// Raised once per job queued, and once to finish.
        let available = Semaphore()
        /// Raised by the thread as it ends.
        let ended = Semaphore()

        /// The next job, or `nil` once the thread is to end.
        func next() -> (@Sendable () -> Void)? {
            available.wait()
            return queue.withLock { queue -> (@Sendable () -> Void)? in
                guard queue.head < queue.pending.count else { return nil }
                let job = queue.pending[queue.head]
                queue.head += 1
                if queue.head == queue.pending.count {
                    queue.pending.removeAll(keepingCapacity: true)
                    queue.head = 0
                }
                return job
            }
        }
    }

    private let jobs = Jobs()

    /// Starts the thread.
    init() {
        BlockingThread.run { [jobs] in
            while let job = jobs.next() { job() }
            jobs.ended.signal()
        }
    }

    /// Queues `job` to run on the thread after those queued before it.
    func submit(_ job: @escaping @Sendable () -> Void) {
        let accepted = jobs.queue.withLock { queue -> Bool in
            guard !queue.finishing else { return false }
            queue.pending.append(job)
            return true
        }
        precondition(accepted, "a job was submitted to a database thread that is finishing")
        jobs.available.signal()
    }

    /// Runs `body` on the thread after the jobs queued before it, suspending the caller
    /// (not blocking its thread) until it has.
    ///
    /// - Parameter body: The work; it runs on the thread.
    /// - Returns: What `body` returned.
    /// - Throws: What `body` threw.
    func run<Value: Sendable>(_ body: @escaping @Sendable () throws(TetherError) -> Value) async throws(TetherError) -> Value {
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Value, TetherError>, Never>) in
            submit {
                continuation.resume(returning: Result { () throws(TetherError) -> Value in try body() })
            }
        }
        return try outcome.get()
    }

    /// Runs `last` after every job queued, then ends the thread, and waits until it has
    /// ended: when this returns, `last` has run.
    ///
    /// - Parameter last: The last job, such as closing the database.
    func finish(with last: @escaping @Sendable () -> Void) {
        submit(last)
        jobs.queue.withLock { $0.finishing = true }
        // A wake-up with nothing queued after `last`: the thread's cue to end.
        jobs.available.signal()
        jobs.ended.wait()
    }
}
