/// Something that knows the device's ``NetworkPath`` and tells when it changes.
///
/// A ``Connection`` follows the monitor of ``ConnectionConfiguration/pathMonitor``
/// (``SystemPathMonitor/shared`` by default): it verifies a live connection when the path
/// changes, retries at once when a path comes back, and spends no reconnect attempts while
/// there is none (see <doc:Resilience>). One monitor serves every connection of the process:
/// each connection is one observer, not one more watcher of the system.
///
/// Write your own to feed a connection what your app knows better, or use
/// `TestPathMonitor` from `TetherTesting` in tests.
public protocol PathMonitor: AnyObject, Sendable {
    /// The path now.
    var currentPath: NetworkPath { get }

    /// Calls `handler` with the current path, then with every path that differs from the
    /// last one it was given, until the observation is cancelled.
    ///
    /// The calls for one observation never overlap and come in order, on any thread;
    /// `handler` must return quickly and must not call into the monitor. After
    /// ``PathObservation/cancel()`` returns, a call already under way may still finish,
    /// but none starts.
    ///
    /// - Parameter handler: Told each path.
    /// - Returns: The observation; cancel it (or drop it) to stop the calls.
    func observe(_ handler: @escaping @Sendable (NetworkPath) -> Void) -> PathObservation
}

extension PathMonitor {
    /// The current path, then every change, as an async sequence; it ends when the task
    /// that iterates it is cancelled.
    ///
    /// ```swift
    /// for await path in SystemPathMonitor.shared.paths { print(path) }
    /// ```
    public var paths: AsyncStream<NetworkPath> {
        let (stream, continuation) = AsyncStream<NetworkPath>.makeStream(bufferingPolicy: .bufferingNewest(16))
        let observation = observe { continuation.yield($0) }
        continuation.onTermination = { _ in observation.cancel() }
        return stream
    }
}

/// One observer of a ``PathMonitor``: cancel it, or drop the last reference to it, to stop
/// being told.
public final class PathObservation: Sendable {
    private let stop: Lock<(@Sendable () -> Void)?>

    /// An observation that runs `cancel` once, on the first ``cancel()`` or when it is dropped.
    ///
    /// - Parameter cancel: Removes the observer from its monitor.
    public init(cancel: @escaping @Sendable () -> Void) {
        stop = Lock(cancel)
    }

    deinit { cancel() }

    /// Stops the calls; idempotent.
    public func cancel() {
        let body = stop.withLock { body -> (@Sendable () -> Void)? in
            defer { body = nil }
            return body
        }
        body?()
    }
}

/// The observers of one monitor, and the last path each was told: delivers every path that
/// differs from it, in order, never two calls at once.
package final class PathObservers: Sendable {
    private struct Observer {
        var handler: @Sendable (NetworkPath) -> Void
    }

    private struct State {
        var path: NetworkPath
        var observers: [UInt64: Observer] = [:]
        var nextID: UInt64 = 0
    }

    private let state: Lock<State>
    /// Held while handlers are called, so that calls never overlap and a new observer gets
    /// the current path before any later one.
    private let delivering = Lock(())

    /// Observers of a monitor whose path is `initial`.
    ///
    /// - Parameter initial: The path until the first ``publish(_:)``.
    package init(_ initial: NetworkPath) {
        state = Lock(State(path: initial))
    }

    /// The last path published.
    package var path: NetworkPath { state.withLock { $0.path } }

    /// How many observers there are.
    package var count: Int { state.withLock { $0.observers.count } }

    /// Adds `handler` and tells it the current path at once.
    ///
    /// - Parameter handler: Told each path.
    /// - Returns: The observation that removes it.
    package func add(_ handler: @escaping @Sendable (NetworkPath) -> Void) -> PathObservation {
        let id = delivering.withLock { _ in
            let (id, path) = state.withLock { state in
                let id = state.nextID
                state.nextID += 1
                state.observers[id] = Observer(handler: handler)
                return (id, state.path)
            }
            handler(path)
            return id
        }
        return PathObservation { [weak self] in
            self?.state.withLock { _ = $0.observers.removeValue(forKey: id) }
        }
    }

    /// Makes `path` the current path and tells every observer, unless it equals the current one.
    ///
    /// - Parameter path: The path now.
    package func publish(_ path: NetworkPath) {
        delivering.withLock { _ in
            let handlers = state.withLock { state -> [@Sendable (NetworkPath) -> Void] in
                guard state.path != path else { return [] }
                state.path = path
                return state.observers.sorted { $0.key < $1.key }.map(\.value.handler)
            }
            for handler in handlers { handler(path) }
        }
    }
}

/// The operating system's view of the network, watched once for the whole process: on
/// Linux from the kernel's routing messages (rtnetlink), on Apple platforms with
/// Network.framework's `NWPathMonitor`.
///
/// The watcher starts the first time a connection (or your code) asks for the path, and
/// runs until the process ends, on a thread (or queue) of its own, never on an event loop;
/// every observer shares it. Until it has read the system's path once, shortly after the
/// start, the path is ``NetworkPath/assumedUsable``, and the first real path is no change
/// to a connection (it differs from the assumed one in nothing a connection acts on). When it cannot start (a sandbox without
/// netlink, say), the monitor reports ``NetworkPath/assumedUsable`` forever, so connections
/// behave as they would without one, and ``failure`` says why.
public final class SystemPathMonitor: PathMonitor {
    /// The monitor of the process.
    public static let shared = SystemPathMonitor()

    private let observers = PathObservers(.assumedUsable)
    private let watcher = Lock<Watcher>(.notStarted)
    /// Whether the watcher has read the system's path once (or failed to), and who waits for it.
    private let firstReading = Lock<FirstReading>(FirstReading())

    private enum Watcher {
        case notStarted
        case running(any Sendable)
        case failed(TetherError)
    }

    private struct FirstReading {
        var done = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private init() {}

    /// The path now; starts watching the system on first use.
    public var currentPath: NetworkPath {
        startIfNeeded()
        return observers.path
    }

    /// Why the system could not be watched, when it could not; `nil` while the watcher
    /// runs (or before it started).
    public var failure: TetherError? {
        startIfNeeded()
        return watcher.withLock { watcher in
            if case .failed(let error) = watcher { return error }
            return nil
        }
    }

    /// Calls `handler` with the current path, then with every change; starts watching the
    /// system on first use. See ``PathMonitor/observe(_:)``.
    ///
    /// - Parameter handler: Told each path.
    /// - Returns: The observation; cancel it to stop the calls.
    public func observe(_ handler: @escaping @Sendable (NetworkPath) -> Void) -> PathObservation {
        startIfNeeded()
        return observers.add(handler)
    }

    /// Starts watching the system on first use, and returns once the watcher has read the
    /// system's path (``currentPath`` is then the system's) or failed to (``failure`` says
    /// why). The watcher bounds its reads, so this returns soon: for `tether path`, whose
    /// first line is the system's path.
    package func waitForFirstReading() async {
        startIfNeeded()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = firstReading.withLock { reading in
                if !reading.done { reading.waiters.append(continuation) }
                return reading.done
            }
            if done { continuation.resume() }
        }
    }

    private func finishFirstReading() {
        let waiters = firstReading.withLock { reading -> [CheckedContinuation<Void, Never>] in
            guard !reading.done else { return [] }
            reading.done = true
            defer { reading.waiters = [] }
            return reading.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    private func startIfNeeded() {
        let failedToStart = watcher.withLock { watcher -> Bool in
            guard case .notStarted = watcher else { return false }
            let observers = observers
            do throws(TetherError) {
                watcher = .running(try Self.startWatching({ [self] path in
                    observers.publish(path)
                    finishFirstReading()
                }, failed: { [self] error in
                    self.watcher.withLock { $0 = .failed(error) }
                    finishFirstReading()
                }))
                return false
            } catch {
                watcher = .failed(error)
                return true
            }
        }
        if failedToStart { finishFirstReading() }
    }
}
