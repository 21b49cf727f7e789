import CPostgres
internal import Tether

/// A pool of connections to one PostgreSQL database, each owned by a thread of its own.
///
/// A call (``withSession(_:)``, ``transaction(_:)``) waits for a free connection, runs on
/// its thread, and suspends its caller meanwhile: no event loop and no thread of the Swift
/// concurrency pool ever waits for the database. Calls run in the order they came, on the
/// first connection free.
///
/// A connection is made on its first call and made again when it broke (the server
/// restarted, the network failed): the next call that gets it reconnects first. A call
/// that fails leaves no transaction open behind it.
final class PostgresDatabase: Sendable {
    let configuration: PostgresConfiguration
    /// `host:port` of the server, for messages.
    let endpoint: String
    private let pool: Pool

    /// Starts the pool's threads; connects nothing yet.
    ///
    /// - Parameter configuration: The database and the pool's size and timeouts.
    init(configuration: PostgresConfiguration) {
        self.configuration = configuration
        endpoint = Self.endpoint(of: configuration.url)
        pool = Pool(configuration: configuration, endpoint: endpoint)
    }

    deinit { pool.finish(waiter: nil) }

    /// Runs `body` on one pooled connection's thread (reconnecting it first if it broke).
    ///
    /// `body` blocks that thread while it waits for the database, and must not wait for
    /// another call to this pool (it might wait for its own connection).
    ///
    /// - Parameter body: The work, given the connection; it must not keep the session.
    /// - Returns: What `body` returned.
    /// - Throws: What `body` threw, or ``Tether/TetherError`` with
    ///   ``Tether/TetherError/Code/storeFailed`` when no connection could be had: the
    ///   server is unreachable, the pool is closed, or every connection stayed busy for
    ///   longer than ``PostgresConfiguration/queryTimeout``.
    @discardableResult
    func withSession<T: Sendable>(_ body: @Sendable (PostgresSession) throws -> T) async throws -> T {
        try await withoutActuallyEscaping(body) { body in
            // The job lets go of `body` before it resumes the caller: once this returns,
            // nothing may hold it.
            let carrier = Carrier(body)
            let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>, Never>) in
                pool.submit { session, failure in
                    var work = carrier.take()
                    let result: Result<T, any Error>
                    if let failure {
                        result = .failure(failure)
                    } else {
                        result = Result { try work!(session) }
                        session.settle()
                    }
                    work = nil
                    continuation.resume(returning: result)
                }
            }
            return try outcome.get()
        }
    }

    /// Runs `body` inside `BEGIN` … `COMMIT` on one pooled connection (`ROLLBACK` when it
    /// throws).
    ///
    /// - Parameter body: The work, given the connection.
    /// - Returns: What `body` returned, once committed.
    /// - Throws: What `body` threw (then nothing it did stays), or
    ///   ``Tether/TetherError`` when the transaction could not begin or commit.
    @discardableResult
    func transaction<T: Sendable>(_ body: @Sendable (PostgresSession) throws -> T) async throws -> T {
        try await withSession { session in
            do {
                try session.execute("BEGIN")
            } catch where Self.connectionLost(error) {
                // Nothing ran yet: on a new connection, the transaction can start afresh.
                try session.reconnect()
                try session.execute("BEGIN")
            }
            do {
                let value = try body(session)
                try session.execute("COMMIT")
                return value
            } catch {
                session.settle()
                throw error
            }
        }
    }

    /// ``withSession(_:)`` for work that is safe to repeat, such as reads: when it fails
    /// because the connection was lost (the server restarted since the connection's last
    /// use), it runs once more on a new connection.
    ///
    /// - Parameter body: The work, given the connection; it may run twice.
    /// - Returns: What `body` returned.
    /// - Throws: What `body` threw the last time, or ``Tether/TetherError`` when no
    ///   connection could be had.
    @discardableResult
    func read<T: Sendable>(_ body: @Sendable (PostgresSession) throws -> T) async throws -> T {
        try await withSession { session in
            do {
                return try body(session)
            } catch where Self.connectionLost(error) {
                try session.reconnect()
                return try body(session)
            }
        }
    }

    /// Whether `error` says the connection was lost.
    static func connectionLost(_ error: any Error) -> Bool {
        ((error as? TetherError)?.underlying as? PostgresFailure)?.connectionLost == true
    }

    /// Lets the calls already queued run, refuses new ones, closes every connection and
    /// ends the threads; returns once they have ended.
    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            pool.finish(waiter: continuation)
        }
    }

    /// `host:port` as the connection string names them, with libpq's defaults.
    static func endpoint(of url: String) -> String {
        var host: String?
        var port: String?
        if let options = PQconninfoParse(url, nil) {
            var option = options
            while let keyword = option.pointee.keyword {
                if let value = option.pointee.val {
                    switch String(cString: keyword) {
                    case "host": host = host ?? String(cString: value)
                    case "hostaddr": host = String(cString: value)
                    case "port": port = String(cString: value)
                    default: break
                    }
                }
                option += 1
            }
            PQconninfoFree(options)
        }
        return "\(host ?? "localhost"):\(port ?? "5432")"
    }
}

/// Hands a call's body to the job that runs it, once.
private final class Carrier<T>: Sendable {
    private let body: Lock<(@Sendable (PostgresSession) throws -> T)?>

    init(_ body: @escaping @Sendable (PostgresSession) throws -> T) {
        self.body = Lock(body)
    }

    func take() -> (@Sendable (PostgresSession) throws -> T)? {
        body.withLock { body in
            defer { body = nil }
            return body
        }
    }
}

/// The pool's queue of calls and its threads.
private final class Pool: Sendable {
    /// A call: given the thread's session, connected, or the reason it could not be.
    typealias Job = @Sendable (PostgresSession, TetherError?) -> Void

    private struct Queued {
        var job: Job
        var since: ContinuousClock.Instant
    }

    private struct State {
        var queue: [Queued] = []
        var head = 0
        var finishing = false
        var running: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Lock<State>
    private let available = Semaphore()
    private let configuration: PostgresConfiguration
    private let endpoint: String

    init(configuration: PostgresConfiguration, endpoint: String) {
        self.configuration = configuration
        self.endpoint = endpoint
        let threads = max(1, configuration.connections)
        state = Lock(State(running: threads))
        for _ in 0..<threads {
            BlockingThread.run { [self] in work() }
        }
    }

    func submit(_ job: @escaping Job) {
        let accepted = state.withLock { state -> Bool in
            guard !state.finishing else { return false }
            state.queue.append(Queued(job: job, since: .now))
            return true
        }
        guard accepted else {
            let session = PostgresSession(configuration: configuration, endpoint: endpoint)
            job(session, TetherError(code: .storeFailed, message: "PostgreSQL at \(endpoint): the connection pool is closed"))
            return
        }
        available.signal()
    }

    /// Refuses new calls; the threads end once the queue is empty. `waiter` is resumed when
    /// the last has ended.
    func finish(waiter: CheckedContinuation<Void, Never>?) {
        let (wake, done) = state.withLock { state -> (Int, Bool) in
            if let waiter { state.waiters.append(waiter) }
            let first = !state.finishing
            state.finishing = true
            return (first ? state.running : 0, state.running == 0)
        }
        for _ in 0..<wake { available.signal() }
        if done { resumeWaiters() }
    }

    private func resumeWaiters() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    private func next() -> Queued? {
        available.wait()
        return state.withLock { state -> Queued? in
            guard state.head < state.queue.count else { return nil }
            let queued = state.queue[state.head]
            state.head += 1
            if state.head == state.queue.count {
                state.queue.removeAll(keepingCapacity: true)
                state.head = 0
            }
            return queued
        }
    }

    private func work() {
        let session = PostgresSession(configuration: configuration, endpoint: endpoint)
        while true {
            guard let queued = next() else {
                // A wake-up with nothing queued comes only from `finish`.
                if state.withLock({ $0.finishing }) { break }
                continue
            }
            let waited = queued.since.duration(to: .now)
            if waited > configuration.queryTimeout {
                queued.job(session, TetherError(
                    code: .storeFailed,
                    message: "PostgreSQL at \(endpoint): every one of the \(max(1, configuration.connections)) connections was busy for longer than \(configuration.queryTimeout)"
                ))
                continue
            }
            do throws(TetherError) {
                try session.connectIfNeeded()
                queued.job(session, nil)
            } catch {
                queued.job(session, error)
            }
        }
        session.disconnect()
        let last = state.withLock { state -> Bool in
            state.running -= 1
            return state.running == 0
        }
        if last { resumeWaiters() }
    }
}
