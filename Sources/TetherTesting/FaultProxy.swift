#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
public import Tether

/// A TCP proxy on 127.0.0.1 that forwards every connection to a server on 127.0.0.1 and
/// breaks the byte stream on demand, for tests of what crosses real sockets.
///
/// Point a client at ``endpoint`` instead of the server, then choose a ``Mode``: writes in
/// tiny pieces, several writes coalesced into one, a delay, a cut after some bytes (with a
/// FIN or a reset), a stall; or act at once with ``inject(_:toward:)``, ``cutAll()``,
/// ``resetAll()`` and ``refusesConnections``. A mode applies to new connections, to the
/// open ones, or to both (``Scope``), and can change at any time.
///
/// ```swift
/// let proxy = try FaultProxy(upstream: server.endpoint, mode: .pieces(1))
/// let connection = try await Connection.connect(to: proxy.endpoint)
/// // ... every byte now crosses in a segment of its own
/// proxy.resetAll()
/// try await proxy.waitForClosed(1)
/// await proxy.stop()
/// ```
///
/// The proxy listens on 127.0.0.1 only and forwards to 127.0.0.1 only, so a test can never
/// send traffic off the machine through it; any other upstream host is refused by
/// ``init(upstream:mode:)``.
///
/// One thread accepts; each connection has one thread of its own that owns both of its
/// sockets (nonblocking) and waits in `poll(2)` on them and on a wake pipe. Every other
/// thread only posts requests under a lock and writes a byte into the wake pipe, so no
/// descriptor is ever used by two threads and none is closed while another thread waits on
/// it. No thread of the cooperative pool ever blocks here: waiting for an event
/// (``waitUntil(_:within:_:)``) suspends on a continuation that a proxy thread resumes, and
/// ``stop()`` suspends until every proxy thread has exited. Each direction of a connection
/// holds at most 64 KiB read and not yet forwarded; beyond that the proxy stops reading and
/// TCP flow control pushes back on the sender. Every socket of the proxy has a receive
/// buffer of 64 KiB too, so the kernel holds little more than the proxy: a sender sees its
/// bytes acknowledged at the pace the proxy forwards them, as over a slow link, rather than
/// all at once into a deep buffer.
///
/// Call ``stop()`` when done (or use ``withFaultProxy(to:mode:isolation:_:)``): the threads run until
/// then.
public final class FaultProxy: Sendable {
    /// The port the proxy listens on, on 127.0.0.1; the system picked it.
    public let port: Int
    /// The port on 127.0.0.1 that every connection is forwarded to.
    public let upstreamPort: Int
    /// Where clients connect: host `127.0.0.1` and ``port``.
    public var endpoint: Endpoint { Endpoint(host: "127.0.0.1", port: port) }
    /// Where every connection is forwarded: host `127.0.0.1` and ``upstreamPort``.
    public var upstream: Endpoint { Endpoint(host: "127.0.0.1", port: upstreamPort) }

    /// How long the waits wait by default: 10 s.
    public static let defaultWaitLimit: Duration = .seconds(10)

    let state: Lock<State>

    /// Listens on 127.0.0.1 at a free port and starts accepting connections, each forwarded
    /// to `upstream`.
    ///
    /// Nothing connects upstream until a client connects to the proxy, so the upstream
    /// server may start later; a client that connects while nothing listens upstream is
    /// reset (``Counters/upstreamFailed``).
    ///
    /// - Parameters:
    ///   - upstream: The server to forward to. Its host must be `127.0.0.1`, and its port
    ///     between 1 and 65535.
    ///   - mode: The mode of new connections. Default ``Mode/passThrough``.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument`` when `upstream`
    ///   is not on 127.0.0.1 or its port is out of range, or with
    ///   ``Tether/TetherError/Code/bindFailed`` when the proxy cannot listen.
    public init(upstream: Endpoint, mode: Mode = .passThrough) throws {
        guard upstream.host == "127.0.0.1" else {
            throw TetherError(
                code: .invalidArgument,
                message: "the fault proxy forwards only to 127.0.0.1, not to \(upstream)"
            )
        }
        guard (1...65535).contains(upstream.port) else {
            throw TetherError(code: .invalidArgument, message: "the fault proxy cannot forward to port \(upstream.port) of 127.0.0.1")
        }
        _ = Syscall.ignoreBrokenPipe
        let listener: Descriptor
        let wake: WakePipe
        do {
            // Closed when dropped, if anything below fails.
            listener = Descriptor(adopting: try Syscall.makeSocket(family: AF_INET, type: SocketOptions.streamType))
            try Syscall.setOption(listener.raw, level: SocketOptions.socketLevel, name: SocketOptions.reuseAddress, value: 1)
            // Inherited by every accepted socket, before its window is offered.
            limitReceiveBuffer(listener.raw)
            try Syscall.bindAddress(listener.raw, TetherSocketAddress(ipAddress: "127.0.0.1", port: 0)!)
            try Syscall.startListening(listener.raw, backlog: 64)
            port = try Syscall.localAddress(listener.raw).port
            wake = try WakePipe()
        } catch {
            throw TetherError(code: .bindFailed, message: "the fault proxy cannot listen on 127.0.0.1: \(error)", underlying: error)
        }
        upstreamPort = upstream.port
        state = Lock(State(defaultMode: mode, acceptorWake: wake.writeEnd))
        BlockingThread.run { [self] in acceptLoop(listener: listener, wake: wake.readEnd) }
    }

    /// The counters now.
    public var counters: Counters { state.withLock { $0.counters } }

    /// The mode of connections accepted from now on; setting it leaves open connections as
    /// they are (see ``setMode(_:for:)``).
    public var defaultMode: Mode {
        get { state.withLock { $0.defaultMode } }
        set { setMode(newValue, for: .newConnections) }
    }

    /// Whether connections are refused: while `true`, each new connection is accepted and
    /// reset at once, without connecting upstream, and counted in ``Counters/refused``.
    /// Open connections are not touched. Default `false`.
    ///
    /// The client's connect may complete before the reset arrives (the system accepts on the
    /// proxy's behalf), so the client sees a reset rather than `ECONNREFUSED`.
    public var refusesConnections: Bool {
        get { state.withLock { $0.refusing } }
        set { state.withLock { $0.refusing = newValue } }
    }

    /// Sets the mode of new connections, open ones, or both.
    ///
    /// - Parameters:
    ///   - mode: The mode.
    ///   - scope: Which connections it applies to. Default ``Scope/all``.
    public func setMode(_ mode: Mode, for scope: Scope = .all) {
        updateMode(for: scope) { $0 = mode }
    }

    /// Changes the mode of new connections, open ones, or both, field by field.
    ///
    /// Each open connection's own mode is changed, so `{ $0.stalled = true }` keeps whatever
    /// shaping each one had.
    ///
    /// - Parameters:
    ///   - scope: Which connections it applies to. Default ``Scope/all``.
    ///   - change: Changes a mode in place; called once for the default mode and once per
    ///     open connection, under a lock, so it must be quick.
    public func updateMode(for scope: Scope = .all, _ change: (inout Mode) -> Void) {
        let links = state.withLock { state -> [Link] in
            if scope != .currentConnections { change(&state.defaultMode) }
            return scope == .newConnections ? [] : Array(state.links.values)
        }
        for link in links { link.update(change) }
    }

    /// Sends `bytes` on every open connection, to the server or to the client, ahead of any
    /// forwarded bytes still waiting, stalled or not.
    ///
    /// The bytes are queued at once and written by each connection's thread; they count in
    /// ``Counters/bytesInjected`` once written, not towards a cut.
    ///
    /// - Parameters:
    ///   - bytes: The bytes to send.
    ///   - direction: ``Direction/upstream`` to the server, ``Direction/downstream`` to the client.
    /// - Returns: How many connections the bytes were queued on.
    @discardableResult
    public func inject(_ bytes: [UInt8], toward direction: Direction) -> Int {
        let links = state.withLock { Array($0.links.values) }
        return links.filter { $0.inject(bytes, toward: direction) }.count
    }

    /// Closes both sides of every open connection now, after reading and discarding what is
    /// waiting, so the peers see a FIN rather than an RST.
    public func cutAll() {
        breakAll(.close)
    }

    /// Resets both sides of every open connection now (`SO_LINGER` 0: the peers see an RST).
    public func resetAll() {
        breakAll(.reset)
    }

    private func breakAll(_ kind: Break) {
        let links = state.withLock { Array($0.links.values) }
        for link in links { link.requestBreak(kind) }
    }

    /// Stops accepting, closes every connection, and returns once every proxy thread has
    /// exited and every socket is closed.
    ///
    /// Calling it again returns at once. Waits still waiting whose condition does not hold
    /// by then fail with ``Tether/TetherError/Code/connectionClosed``.
    public func stop() async {
        let links = state.withLock { state -> [Link] in
            state.stopping = true
            if let wake = state.acceptorWake { WakePipe.poke(wake.raw) }
            return Array(state.links.values)
        }
        for link in links { link.requestBreak(.close) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let finished = state.withLock { state -> Bool in
                if state.liveThreads == 0 { return true }
                state.stopWaiters.append(continuation)
                return false
            }
            if finished { continuation.resume() }
        }
    }

    // MARK: Waiting

    /// Waits until `condition` holds for the counters, at most `limit`.
    ///
    /// The condition is checked at once and after every change of the counters, on the
    /// thread that changed them, so it must be quick. Cancelling the calling task ends the
    /// wait with `CancellationError`.
    ///
    /// - Parameters:
    ///   - what: What is awaited, for the error message (`"2 accepted connections"`).
    ///   - limit: How long to wait at most. Default ``defaultWaitLimit`` (10 s).
    ///   - condition: Whether the counters show what is awaited.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/timedOut`` (its message names
    ///   `what` and the counters) when `limit` passes first, or with
    ///   ``Tether/TetherError/Code/connectionClosed`` when the proxy stops first.
    public func waitUntil(
        _ what: String,
        within limit: Duration = FaultProxy.defaultWaitLimit,
        _ condition: @escaping @Sendable (Counters) -> Bool
    ) async throws {
        let met = try await withThrowingTaskGroup(of: Bool.self) { group in
            defer { group.cancelAll() }
            group.addTask {
                try await self.until(what, condition)
                return true
            }
            group.addTask {
                try await Task.sleep(for: limit)
                return false
            }
            return try await group.next() ?? false
        }
        guard met else {
            throw TetherError(code: .timedOut, message: "waited \(limit) for \(what) through the fault proxy (\(counters))")
        }
    }

    /// Waits until `count` connections have been accepted in all, at most `limit`.
    ///
    /// - Parameters:
    ///   - count: How many accepted connections, counted since the proxy started.
    ///   - limit: How long to wait at most. Default ``defaultWaitLimit`` (10 s).
    /// - Throws: As ``waitUntil(_:within:_:)``.
    public func waitForAccepted(_ count: Int, within limit: Duration = FaultProxy.defaultWaitLimit) async throws {
        try await waitUntil("\(count) accepted connections", within: limit) { $0.accepted >= count }
    }

    /// Waits until `count` connections have been closed in all, at most `limit`.
    ///
    /// A connection counts as closed once both its sockets are closed and its thread has
    /// exited.
    ///
    /// - Parameters:
    ///   - count: How many closed connections, counted since the proxy started.
    ///   - limit: How long to wait at most. Default ``defaultWaitLimit`` (10 s).
    /// - Throws: As ``waitUntil(_:within:_:)``.
    public func waitForClosed(_ count: Int, within limit: Duration = FaultProxy.defaultWaitLimit) async throws {
        try await waitUntil("\(count) closed connections", within: limit) { $0.closed >= count }
    }

    private func until(_ what: String, _ condition: @escaping @Sendable (Counters) -> Bool) async throws {
        let id = state.withLock { state -> Int in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { state -> Result<Void, any Error>? in
                    if state.cancelledWaiters.remove(id) != nil { return .failure(CancellationError()) }
                    if condition(state.counters) { return .success(()) }
                    if state.stopping, state.liveThreads == 0 { return .failure(Self.stopped(before: what)) }
                    state.waiters[id] = Waiter(what: what, condition: condition, continuation: continuation)
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
                state.cancelledWaiters.insert(id)
                return nil
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    static func stopped(before what: String) -> TetherError {
        TetherError(code: .connectionClosed, message: "the fault proxy stopped before \(what)")
    }

    // MARK: Shared state

    struct Waiter {
        var what: String
        var condition: @Sendable (Counters) -> Bool
        var continuation: CheckedContinuation<Void, any Error>
    }

    struct State {
        var defaultMode: Mode
        var refusing = false
        /// Write end of the acceptor's wake pipe; `nil` once the acceptor closed it.
        var acceptorWake: Descriptor?
        var links: [Int: Link] = [:]
        var nextLinkID = 0
        var counters = Counters()
        var stopping = false
        /// The acceptor and every connection thread that has not exited yet.
        var liveThreads = 1
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        var waiters: [Int: Waiter] = [:]
        var cancelledWaiters: Set<Int> = []
        var nextWaiterID = 0
        var observer: (@Sendable (Counters) -> Void)?

        init(defaultMode: Mode, acceptorWake: Descriptor) {
            self.defaultMode = defaultMode
            self.acceptorWake = acceptorWake
        }

        /// Removes and returns the waiters whose condition now holds.
        mutating func takeSatisfiedWaiters() -> [Waiter] {
            guard !waiters.isEmpty else { return [] }
            let ready = waiters.filter { $0.value.condition(counters) }
            for id in ready.keys { waiters.removeValue(forKey: id) }
            return Array(ready.values)
        }
    }

    /// Changes the counters, resumes the waiters whose condition now holds, and tells the
    /// observer.
    func count(_ change: (inout Counters) -> Void) {
        let (ready, observer, counters) = state.withLock { state -> ([Waiter], (@Sendable (Counters) -> Void)?, Counters) in
            change(&state.counters)
            return (state.takeSatisfiedWaiters(), state.observer, state.counters)
        }
        for waiter in ready { waiter.continuation.resume() }
        observer?(counters)
    }

    /// Calls `observer` with the counters after every change, on the thread that changed
    /// them, until it is set to `nil`: for a test whose clock follows what the proxy
    /// carries. It must be quick.
    package func observeCounters(_ observer: (@Sendable (Counters) -> Void)?) {
        state.withLock { $0.observer = observer }
    }

    /// Called last by every proxy thread.
    func threadExited(_ change: (inout State) -> Void) {
        let (stopWaiters, waiters, counters) = state.withLock { state -> ([CheckedContinuation<Void, Never>], [Waiter], Counters) in
            change(&state)
            state.liveThreads -= 1
            var waiters = state.takeSatisfiedWaiters()
            guard state.stopping, state.liveThreads == 0 else { return ([], waiters, state.counters) }
            waiters += state.waiters.values
            state.waiters = [:]
            defer { state.stopWaiters = [] }
            return (state.stopWaiters, waiters, state.counters)
        }
        for waiter in waiters {
            if waiter.condition(counters) {
                waiter.continuation.resume()
            } else {
                waiter.continuation.resume(throwing: Self.stopped(before: waiter.what))
            }
        }
        for continuation in stopWaiters { continuation.resume() }
    }
}

/// Runs `body` with a fault proxy in front of `upstream`, then stops the proxy, however
/// `body` ends.
///
/// - Parameters:
///   - upstream: The server to forward to; its host must be `127.0.0.1`.
///   - mode: The mode of new connections. Default ``FaultProxy/Mode/passThrough``.
///   - isolation: The actor `body` runs on; the caller's by default.
///   - body: The test, given the running proxy.
/// - Returns: What `body` returns.
/// - Throws: What ``FaultProxy/init(upstream:mode:)`` or `body` throws.
@discardableResult
public func withFaultProxy<Result>(
    to upstream: Endpoint,
    mode: FaultProxy.Mode = .passThrough,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (FaultProxy) async throws -> sending Result
) async throws -> sending Result {
    let proxy = try FaultProxy(upstream: upstream, mode: mode)
    do {
        let result = try await body(proxy)
        await proxy.stop()
        return result
    } catch {
        await proxy.stop()
        throw error
    }
}
