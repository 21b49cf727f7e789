#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CPostgres
internal import Tether

/// Listens to PostgreSQL notification channels on a connection and a thread of its own,
/// and keeps listening across lost connections.
///
/// ``start()`` connects and runs `LISTEN` for each channel, then calls `onConnection(true,
/// nil)`; each notification then calls `onNotification`. When the connection is lost (or
/// cannot be made), it calls `onConnection(false, message)` once, and retries after
/// ``PostgresConfiguration/reconnectDelay``, doubling the delay after each failure up to
/// 5 s; once `LISTEN` is back, `onConnection(true, nil)` again. Notifications sent while
/// the connection was down are lost (PostgreSQL does not keep them): a caller that must not
/// miss anything rereads its tables on `onConnection(true, nil)`.
///
/// The callbacks run on the listener's thread, one at a time, and must return promptly.
/// ``stop()`` is prompt: the thread waits in `poll` on the connection and on a pipe that
/// `stop` writes to. The thread keeps the listener alive until it is stopped: call
/// ``stop()`` when done with it.
final class PostgresListener: Sendable {
    private let configuration: PostgresConfiguration
    private let channels: [String]
    private let onNotification: @Sendable (_ channel: String, _ payload: String) -> Void
    private let onConnection: @Sendable (_ up: Bool, _ error: String?) -> Void
    /// The wake pipe: `stop` writes to [1], the thread polls [0].
    private let wake: (read: Descriptor, write: Descriptor)
    private let state = Lock(State())

    private struct State {
        var started = false
        var stopping = false
        var ended = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    /// The most the delay between reconnection attempts grows to.
    static let maximumReconnectDelay: Duration = .seconds(5)
    /// How long the connection may be silent before the listener checks it with an empty
    /// statement: a server that vanished without closing the connection is found this way.
    static let idleCheck: Duration = .seconds(15)

    init(
        configuration: PostgresConfiguration,
        channels: [String],
        onNotification: @escaping @Sendable (_ channel: String, _ payload: String) -> Void,
        onConnection: @escaping @Sendable (_ up: Bool, _ error: String?) -> Void
    ) {
        self.configuration = configuration
        self.channels = channels
        self.onNotification = onNotification
        self.onConnection = onConnection
        var descriptors: [Int32] = [-1, -1]
        let made = pipe(&descriptors)
        precondition(made == 0, "pipe failed with errno \(errno)")
        for descriptor in descriptors {
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        }
        // Closed when the listener goes: the thread holds `self` until it ends, so by then
        // it has ended or never started.
        wake = (Descriptor(adopting: descriptors[0]), Descriptor(adopting: descriptors[1]))
    }

    /// Starts the thread; once.
    func start() {
        let first = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started && !state.stopping
        }
        guard first else { return }
        BlockingThread.run { [self] in
            run()
            let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.ended = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    /// Stops listening and closes the connection; returns once the thread has ended.
    func stop() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                state.stopping = true
                if state.ended || !state.started { return true }
                state.waiters.append(continuation)
                return false
            }
            var byte: UInt8 = 1
            _ = write(wake.write.raw, &byte, 1)
            if done { continuation.resume() }
        }
    }

    private var isStopping: Bool { state.withLock { $0.stopping } }

    // MARK: The thread

    private func run() {
        let session = PostgresSession(
            configuration: configuration,
            endpoint: PostgresDatabase.endpoint(of: configuration.url),
            wake: wake.read.raw
        )
        var delay = configuration.reconnectDelay
        var reportedDown = false
        while !isStopping {
            do throws(TetherError) {
                try session.connectIfNeeded()
                for channel in channels {
                    try session.execute("LISTEN \(Self.quoted(channel))")
                }
                reportedDown = false
                delay = configuration.reconnectDelay
                onConnection(true, nil)
                try listen(on: session)
            } catch {
                session.disconnect()
                if isStopping { break }
                if !reportedDown {
                    reportedDown = true
                    onConnection(false, error.message)
                }
                guard pause(delay) else { break }
                delay = min(delay * 2, Self.maximumReconnectDelay)
            }
        }
        session.disconnect()
    }

    /// Delivers notifications until the connection fails (throws) or `stop` (returns).
    private func listen(on session: PostgresSession) throws(TetherError) {
        while true {
            guard let connection = session.connection else {
                throw TetherError(code: .storeFailed, message: "PostgreSQL at \(session.endpoint): connection lost")
            }
            deliver(connection)
            var descriptors = [
                pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.read.raw, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&descriptors, 2, Int32(clamping: Self.idleCheck.postgresMilliseconds))
            if ready < 0 {
                if errno == EINTR { continue }
                throw TetherError(code: .storeFailed, message: "PostgreSQL at \(session.endpoint): poll failed with errno \(errno)")
            }
            if descriptors[1].revents != 0 || isStopping { return }
            if ready == 0 {
                // Silent for a while: make sure the server is still there.
                try session.execute("")
                continue
            }
            if PQconsumeInput(connection) == 0 || PQstatus(connection) != CONNECTION_OK {
                let message = oneLine(String(cString: PQerrorMessage(connection)))
                throw TetherError(code: .storeFailed, message: "PostgreSQL at \(session.endpoint): connection lost: \(message)")
            }
        }
    }

    /// Hands every notification libpq has read to `onNotification`.
    private func deliver(_ connection: OpaquePointer) {
        while let notification = PQnotifies(connection) {
            let channel = String(cString: notification.pointee.relname)
            let payload = String(cString: notification.pointee.extra)
            PQfreemem(notification)
            onNotification(channel, payload)
        }
    }

    /// Waits `delay` unless `stop` comes first; returns whether to go on.
    private func pause(_ delay: Duration) -> Bool {
        let deadline = ContinuousClock.now + delay
        while !isStopping {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return true }
            var descriptor = pollfd(fd: wake.read.raw, events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, Int32(clamping: remaining.postgresMilliseconds)) > 0 { return false }
        }
        return false
    }

    /// `channel` as a quoted identifier: in double quotes, each double quote doubled.
    static func quoted(_ channel: String) -> String {
        "\"" + channel.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

extension String {
    fileprivate func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
