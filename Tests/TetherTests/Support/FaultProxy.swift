#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@testable import Tether

/// A TCP proxy on 127.0.0.1 that forwards every accepted connection to a fixed upstream
/// port on 127.0.0.1 and breaks the stream on demand: tiny pieces, coalesced writes, a cut
/// after some bytes, a stall, injected bytes, or every connection closed at once.
///
/// One thread accepts; each connection has one thread of its own that owns both sockets
/// (nonblocking) and waits in `poll(2)` on them and on a wake pipe. Every other thread only
/// posts requests under a lock and writes a byte into the wake pipe, so no descriptor is
/// ever used by two threads and none is closed while another thread waits on it. No thread
/// of the cooperative pool ever blocks here: waiting for an event is a continuation resumed
/// by a proxy thread, and ``stop()`` suspends until every proxy thread has exited.
///
/// Modes (``Mode``) apply to new connections (``defaultMode``), to current ones, or to
/// both (``setMode(_:for:)``), and can change at any time.
final class FaultProxy: Sendable {
    /// A direction of the byte stream.
    enum Direction: Sendable, Hashable, CustomStringConvertible {
        /// Client to server.
        case upstream
        /// Server to client.
        case downstream

        var description: String { self == .upstream ? "upstream" : "downstream" }
    }

    /// How the bytes of one direction are written out.
    enum Shaping: Sendable, Equatable {
        /// As soon as they are read, as much as the socket takes per write.
        case passThrough
        /// In writes of at most `maximum` bytes each (both sockets have `TCP_NODELAY`, so
        /// each write goes out as its own segment).
        case pieces(maximum: Int)
        /// Held back until at least `minimum` bytes are waiting or the oldest of them has
        /// waited `flushAfter`, then written in one write. The end of the stream flushes.
        case coalesce(minimum: Int, flushAfter: Duration)
    }

    /// Closing a connection after a number of forwarded bytes.
    struct Cut: Sendable, Equatable {
        /// Which forwarded bytes count towards the cut.
        enum Counting: Sendable, Equatable {
            case upstream, downstream, total
        }

        /// How many more bytes may be forwarded before both sockets are closed.
        var afterBytes: Int
        var counting: Counting
        /// Reset both sides (`SO_LINGER` 0, an RST) instead of closing them (a FIN).
        var reset: Bool

        init(after bytes: Int, counting: Counting = .total, reset: Bool = false) {
            precondition(bytes >= 0)
            afterBytes = bytes
            self.counting = counting
            self.reset = reset
        }

        func counts(_ direction: Direction) -> Bool {
            switch counting {
            case .total: true
            case .upstream: direction == .upstream
            case .downstream: direction == .downstream
            }
        }
    }

    /// The faults applied to a connection.
    ///
    /// A cut counts from the moment a connection opens with it or its cut changes: setting
    /// the same cut again does not restart the count.
    struct Mode: Sendable, Equatable {
        var upstream: Shaping = .passThrough
        var downstream: Shaping = .passThrough
        /// Read nothing (so TCP flow control pushes back on both peers) and forward nothing
        /// already read, until unstalled or closed. Injected bytes still go out.
        var stalled = false
        var cut: Cut?

        init(upstream: Shaping = .passThrough, downstream: Shaping = .passThrough, stalled: Bool = false, cut: Cut? = nil) {
            self.upstream = upstream
            self.downstream = downstream
            self.stalled = stalled
            self.cut = cut
        }

        static let passThrough = Mode()
        static let stalled = Mode(stalled: true)

        /// Pieces of at most `maximum` bytes in both directions.
        static func pieces(_ maximum: Int) -> Mode {
            precondition(maximum > 0)
            return Mode(upstream: .pieces(maximum: maximum), downstream: .pieces(maximum: maximum))
        }

        /// Coalesced writes in both directions.
        static func coalesce(minimum: Int, flushAfter: Duration) -> Mode {
            precondition(minimum > 0)
            return Mode(upstream: .coalesce(minimum: minimum, flushAfter: flushAfter), downstream: .coalesce(minimum: minimum, flushAfter: flushAfter))
        }

        /// A cut after `bytes` more forwarded bytes, with no other fault.
        static func cut(after bytes: Int, counting: Cut.Counting = .total, reset: Bool = false) -> Mode {
            Mode(cut: Cut(after: bytes, counting: counting, reset: reset))
        }

        func shaping(_ direction: Direction) -> Shaping {
            direction == .upstream ? upstream : downstream
        }
    }

    /// Which connections a mode change applies to.
    enum Scope: Sendable {
        /// Connections accepted from now on (the ``defaultMode``).
        case newConnections
        /// Connections open now.
        case currentConnections
        /// Both.
        case all
    }

    /// What the proxy has done so far.
    struct Counters: Sendable, Equatable, CustomStringConvertible {
        /// Client connections accepted.
        var accepted = 0
        /// Upstream connections established.
        var upstreamConnected = 0
        /// Upstream connections that failed (the client was then reset).
        var upstreamFailed = 0
        /// Connections fully closed (both sockets closed, thread exited).
        var closed = 0
        /// Bytes forwarded client to server, and server to client.
        var bytesUpstream = 0
        var bytesDownstream = 0
        /// `send` calls that forwarded those bytes.
        var writesUpstream = 0
        var writesDownstream = 0
        /// Bytes written by ``inject(_:toward:)``, in either direction.
        var bytesInjected = 0

        /// Connections accepted and not yet closed.
        var open: Int { accepted - closed }

        var description: String {
            "accepted \(accepted), connected \(upstreamConnected), failed \(upstreamFailed), closed \(closed), "
                + "up \(bytesUpstream) B in \(writesUpstream) writes, down \(bytesDownstream) B in \(writesDownstream) writes, "
                + "injected \(bytesInjected) B"
        }
    }

    /// Thrown to waiters still waiting when the proxy stops and their condition never held.
    struct Stopped: Error, CustomStringConvertible {
        var what: String
        var description: String { "the proxy stopped before \(what)" }
    }

    /// The port the proxy listens on, on 127.0.0.1.
    let port: Int
    /// The port on 127.0.0.1 every connection is forwarded to.
    let upstreamPort: Int
    /// Where clients connect: 127.0.0.1 and ``port``.
    var endpoint: Endpoint { Endpoint(host: "127.0.0.1", port: port) }

    private let state: Lock<State>

    /// Listens on 127.0.0.1 at a free port and starts accepting.
    ///
    /// - Parameters:
    ///   - upstreamPort: The port on 127.0.0.1 to forward each connection to.
    ///   - mode: The mode of new connections.
    init(upstreamPort: Int, mode: Mode = .passThrough) throws {
        _ = Syscall.ignoreBrokenPipe
        let listener = try Syscall.makeSocket(family: AF_INET, type: SocketOptions.streamType)
        let wake: WakePipe
        do {
            try Syscall.setOption(listener, level: SOL_SOCKET, name: SO_REUSEADDR, value: 1)
            try Syscall.bindAddress(listener, SocketAddress(ipAddress: "127.0.0.1", port: 0)!)
            try Syscall.startListening(listener, backlog: 64)
            port = try Syscall.localAddress(listener).port
            wake = try WakePipe()
        } catch {
            Syscall.closeDescriptor(listener)
            throw error
        }
        self.upstreamPort = upstreamPort
        state = Lock(State(defaultMode: mode, acceptorWake: wake.writeEnd))
        BlockingThread.run { [self] in acceptLoop(listener: listener, wake: wake.readEnd) }
    }

    /// A snapshot of the counters.
    var counters: Counters { state.withLock { $0.counters } }

    /// The mode of connections accepted from now on.
    var defaultMode: Mode {
        get { state.withLock { $0.defaultMode } }
        set { setMode(newValue, for: .newConnections) }
    }

    /// Sets the mode of new connections, current ones or both.
    func setMode(_ mode: Mode, for scope: Scope = .all) {
        updateMode(for: scope) { $0 = mode }
    }

    /// Changes the mode of new connections, current ones or both; each current connection's
    /// own mode is changed, so `{ $0.stalled = true }` keeps whatever shaping it had.
    func updateMode(for scope: Scope = .all, _ change: (inout Mode) -> Void) {
        let links = state.withLock { state -> [Link] in
            if scope != .currentConnections { change(&state.defaultMode) }
            return scope == .newConnections ? [] : Array(state.links.values)
        }
        for link in links { link.update(change) }
    }

    /// Queues `bytes` to be written at once, ahead of any forwarded bytes still waiting, to
    /// the server (`.upstream`) or the client (`.downstream`) of every current connection,
    /// stalled or not.
    ///
    /// - Returns: How many connections the bytes were queued on.
    @discardableResult
    func inject(_ bytes: [UInt8], toward direction: Direction) -> Int {
        let links = state.withLock { Array($0.links.values) }
        return links.filter { $0.inject(bytes, toward: direction) }.count
    }

    /// Closes both sides of every current connection now (after reading and discarding
    /// what is waiting, so the peers see a FIN rather than an RST).
    func cutAll() {
        breakAll(.close)
    }

    /// Resets both sides of every current connection now (`SO_LINGER` 0: the peers see an RST).
    func resetAll() {
        breakAll(.reset)
    }

    private func breakAll(_ kind: Break) {
        let links = state.withLock { Array($0.links.values) }
        for link in links { link.requestBreak(kind) }
    }

    /// Stops accepting, closes every connection and returns once every proxy thread has
    /// exited and every socket is closed. Idempotent. Waiters whose condition does not hold
    /// by then fail with ``Stopped``.
    func stop() async {
        let links = state.withLock { state -> [Link] in
            state.stopping = true
            if state.acceptorWake >= 0 { WakePipe.poke(state.acceptorWake) }
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

    /// Waits, at most `limit`, until `condition` holds for the counters.
    func waitUntil(
        _ what: String,
        within limit: Duration = eventBound,
        _ condition: @escaping @Sendable (Counters) -> Bool
    ) async throws {
        do {
            try await bounded(what, limit) { try await self.until(what, condition) }
        } catch let timeout as TimedOut {
            throw TimedOut(what: "\(timeout.what) (proxy: \(counters))")
        }
    }

    /// Waits, at most `limit`, until `count` connections have been accepted in all.
    func waitForAccepted(_ count: Int, within limit: Duration = eventBound) async throws {
        try await waitUntil("\(count) accepted connections", within: limit) { $0.accepted >= count }
    }

    /// Waits, at most `limit`, until `count` connections have been closed in all.
    func waitForClosed(_ count: Int, within limit: Duration = eventBound) async throws {
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
                    if state.stopping, state.liveThreads == 0 { return .failure(Stopped(what: what)) }
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

    // MARK: Shared state

    private struct Waiter {
        var what: String
        var condition: @Sendable (Counters) -> Bool
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var defaultMode: Mode
        /// Write end of the acceptor's wake pipe; -1 once the acceptor closed it.
        var acceptorWake: Int32
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

        init(defaultMode: Mode, acceptorWake: Int32) {
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

    /// Changes the counters and resumes the waiters whose condition now holds.
    fileprivate func count(_ change: (inout Counters) -> Void) {
        let ready = state.withLock { state -> [Waiter] in
            change(&state.counters)
            return state.takeSatisfiedWaiters()
        }
        for waiter in ready { waiter.continuation.resume() }
    }

    /// Called last by every proxy thread.
    private func threadExited(_ change: (inout State) -> Void) {
        let (stopWaiters, waiters) = state.withLock { state -> ([CheckedContinuation<Void, Never>], [Waiter]) in
            change(&state)
            state.liveThreads -= 1
            var waiters = state.takeSatisfiedWaiters()
            guard state.stopping, state.liveThreads == 0 else { return ([], waiters) }
            waiters += state.waiters.values
            state.waiters = [:]
            defer { state.stopWaiters = [] }
            return (state.stopWaiters, waiters)
        }
        let counters = self.counters
        for waiter in waiters {
            if waiter.condition(counters) {
                waiter.continuation.resume()
            } else {
                waiter.continuation.resume(throwing: Stopped(what: waiter.what))
            }
        }
        for continuation in stopWaiters { continuation.resume() }
    }

    // MARK: Accepting

    private func acceptLoop(listener: Int32, wake: Int32) {
        var descriptors = [
            pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
        ]
        while !state.withLock({ $0.stopping }) {
            descriptors[0].revents = 0
            descriptors[1].revents = 0
            _ = poll(&descriptors, 2, 250)
            WakePipe.drain(wake)
            guard descriptors[0].revents != 0 else { continue }
            while case .processed(let client)? = try? Syscall.acceptConnection(listener) {
                admit(client)
            }
        }
        Syscall.closeDescriptor(listener)
        threadExited { state in
            Syscall.closeDescriptor(state.acceptorWake)
            state.acceptorWake = -1
        }
        Syscall.closeDescriptor(wake)
    }

    /// Registers an accepted client and starts its connection thread, unless the proxy is stopping.
    private func admit(_ client: Int32) {
        setNoDelay(client)
        guard let wake = try? WakePipe() else {
            resetAndClose(client)
            return
        }
        let (link, ready) = state.withLock { state -> (Link?, [Waiter]) in
            guard !state.stopping else { return (nil, []) }
            state.nextLinkID += 1
            let link = Link(id: state.nextLinkID, mode: state.defaultMode, wake: wake.writeEnd)
            state.links[link.id] = link
            state.liveThreads += 1
            state.counters.accepted += 1
            return (link, state.takeSatisfiedWaiters())
        }
        for waiter in ready { waiter.continuation.resume() }
        guard let link else {
            resetAndClose(client)
            wake.close()
            return
        }
        let upstreamPort = upstreamPort
        BlockingThread.run { [self] in
            let relay = Relay(proxy: self, link: link, client: client, wake: wake.readEnd)
            relay.run(upstreamPort: upstreamPort)
            link.closeWake()
            Syscall.closeDescriptor(wake.readEnd)
            threadExited { state in
                state.links.removeValue(forKey: link.id)
                state.counters.closed += 1
            }
        }
    }

    fileprivate enum Break: Sendable {
        case close, reset
    }

    // MARK: One connection's shared part

    /// What other threads may ask of one connection, under its lock.
    private final class Link: Sendable {
        struct Control {
            var mode: Mode
            /// Bytes the cut still allows, or nil without a cut.
            var cutRemaining: Int?
            /// Changes whenever the cut restarts, so a count taken before does not apply.
            var cutEpoch = 0
            var breakRequest: Break?
            var injectUpstream: [UInt8] = []
            var injectDownstream: [UInt8] = []
            /// Write end of the connection thread's wake pipe; -1 once it closed it.
            var wake: Int32
        }

        let id: Int
        let control: Lock<Control>

        init(id: Int, mode: Mode, wake: Int32) {
            self.id = id
            control = Lock(Control(mode: mode, cutRemaining: mode.cut?.afterBytes, wake: wake))
        }

        func update(_ change: (inout Mode) -> Void) {
            control.withLock { control in
                var mode = control.mode
                change(&mode)
                if mode.cut != control.mode.cut {
                    control.cutRemaining = mode.cut?.afterBytes
                    control.cutEpoch += 1
                }
                control.mode = mode
                poke(control)
            }
        }

        func requestBreak(_ kind: Break) {
            control.withLock { control in
                if control.breakRequest != .reset { control.breakRequest = kind }
                poke(control)
            }
        }

        func inject(_ bytes: [UInt8], toward direction: Direction) -> Bool {
            control.withLock { control in
                guard control.wake >= 0 else { return false }
                if direction == .upstream { control.injectUpstream += bytes } else { control.injectDownstream += bytes }
                poke(control)
                return true
            }
        }

        /// Called by the connection thread as it exits: nobody may write to the pipe after this.
        func closeWake() {
            control.withLock { control in
                if control.wake >= 0 { Syscall.closeDescriptor(control.wake) }
                control.wake = -1
            }
        }

        private func poke(_ control: Control) {
            if control.wake >= 0 { WakePipe.poke(control.wake) }
        }
    }

    // MARK: One connection's thread

    /// The bytes travelling in one direction.
    private struct Lane {
        let direction: Direction
        /// Bytes read and not yet forwarded, from `head` on.
        var pending: [UInt8] = []
        var head = 0
        /// Injected bytes not yet written, from `injectedHead` on.
        var injected: [UInt8] = []
        var injectedHead = 0
        /// When the oldest pending byte arrived (for coalescing).
        var oldest: ContinuousClock.Instant?
        /// A coalesced write was started and is not finished yet.
        var flushing = false
        /// The source sent its FIN.
        var sourceEnded = false
        /// The FIN was passed on to the destination.
        var finished = false

        init(_ direction: Direction) { self.direction = direction }

        var queued: Int { pending.count - head }
        var injectedQueued: Int { injected.count - injectedHead }

        mutating func consume(_ count: Int) {
            head += count
            if head == pending.count {
                pending.removeAll(keepingCapacity: true)
                head = 0
                oldest = nil
                flushing = false
            } else if head >= 1 << 16 {
                pending.removeFirst(head)
                head = 0
            }
        }

        mutating func consumeInjected(_ count: Int) {
            injectedHead += count
            if injectedHead == injected.count {
                injected.removeAll()
                injectedHead = 0
            }
        }

        /// Whether the source is still worth reading from.
        func wantsInput(_ mode: Mode) -> Bool {
            !mode.stalled && !sourceEnded && queued < FaultProxy.laneLimit
        }

        /// Whether forwarded bytes may be written now under `mode`.
        func mayForward(_ mode: Mode, now: ContinuousClock.Instant) -> Bool {
            guard !mode.stalled, queued > 0 else { return false }
            guard case .coalesce(let minimum, let flushAfter) = mode.shaping(direction) else { return true }
            return flushing || sourceEnded || queued >= minimum || (oldest.map { now >= $0 + flushAfter } ?? false)
        }

        /// When a coalesced lane becomes due, if it waits for its flush delay.
        func deadline(_ mode: Mode) -> ContinuousClock.Instant? {
            guard !mode.stalled, queued > 0, case .coalesce(_, let flushAfter) = mode.shaping(direction), let oldest else { return nil }
            return oldest + flushAfter
        }
    }

    fileprivate static let laneLimit = 1 << 16

    private enum Outcome {
        case carryOn
        case breakOff(Break)
    }

    /// The connection thread's own state: both sockets and both lanes. Only this thread
    /// touches the descriptors, and it closes them itself.
    private final class Relay {
        let proxy: FaultProxy
        let link: Link
        let client: Int32
        var server: Int32 = -1
        let wake: Int32
        var up = Lane(.upstream)
        var down = Lane(.downstream)
        var readBuffer = [UInt8](repeating: 0, count: FaultProxy.laneLimit)

        init(proxy: FaultProxy, link: Link, client: Int32, wake: Int32) {
            self.proxy = proxy
            self.link = link
            self.client = client
            self.wake = wake
        }

        func run(upstreamPort: Int) {
            guard connectUpstream(port: upstreamPort) else {
                proxy.count { $0.upstreamFailed += 1 }
                proxy.resetAndClose(client)
                if server >= 0 { Syscall.closeDescriptor(server) }
                return
            }
            proxy.count { $0.upstreamConnected += 1 }
            let kind = relay()
            if let kind { breakOff(kind) } else { closeBoth() }
        }

        /// Connects to 127.0.0.1:`port` without blocking past a break request or 5 s.
        private func connectUpstream(port: Int) -> Bool {
            guard let fd = try? Syscall.makeSocket(family: AF_INET, type: SocketOptions.streamType) else { return false }
            server = fd
            setNoDelay(fd)
            guard let connected = try? Syscall.startConnect(fd, SocketAddress(ipAddress: "127.0.0.1", port: port)!) else { return false }
            if connected { return true }
            let deadline = ContinuousClock.now + .seconds(5)
            var descriptors = [
                pollfd(fd: fd, events: Int16(POLLOUT), revents: 0),
                pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
            ]
            while ContinuousClock.now < deadline {
                descriptors[0].revents = 0
                descriptors[1].revents = 0
                _ = poll(&descriptors, 2, 100)
                WakePipe.drain(wake)
                if link.control.withLock({ $0.breakRequest }) != nil { return false }
                if descriptors[0].revents != 0 {
                    return (try? Syscall.getOption(fd, level: SOL_SOCKET, name: SO_ERROR)) == 0
                }
            }
            return false
        }

        /// Forwards until both directions have ended (nil) or the connection must break.
        private func relay() -> Break? {
            while true {
                WakePipe.drain(wake)
                let (mode, request, toServer, toClient) = link.control.withLock { control in
                    defer {
                        control.injectUpstream = []
                        control.injectDownstream = []
                    }
                    return (control.mode, control.breakRequest, control.injectUpstream, control.injectDownstream)
                }
                if let request { return request }
                if let cut = mode.cut, link.control.withLock({ $0.cutRemaining }) == 0 { return cut.reset ? .reset : .close }
                up.injected += toServer
                down.injected += toClient

                if case .breakOff(let kind) = write(&down, to: client, mode: mode) { return kind }
                if case .breakOff(let kind) = write(&up, to: server, mode: mode) { return kind }
                if up.finished, down.finished { return nil }

                let now = ContinuousClock.now
                var descriptors = [
                    pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
                    pollfd(fd: client, events: events(reading: up, writing: down, mode: mode, now: now), revents: 0),
                    pollfd(fd: server, events: events(reading: down, writing: up, mode: mode, now: now), revents: 0),
                ]
                for index in 1...2 where descriptors[index].events == 0 { descriptors[index].fd = -1 }
                // Wake for a coalescing lane's flush delay; a lane already due waits for POLLOUT.
                var timeout: Int32 = 250
                for lane in [up, down] where !lane.mayForward(mode, now: now) {
                    if let deadline = lane.deadline(mode) { timeout = min(timeout, milliseconds(until: deadline, from: now)) }
                }
                if poll(&descriptors, 3, timeout) < 0, Errno.current != .interrupted { return .reset }

                if descriptors[1].revents != 0, descriptors[1].events & Int16(POLLIN) != 0 {
                    if case .breakOff(let kind) = read(from: client, into: &up) { return kind }
                }
                if descriptors[2].revents != 0, descriptors[2].events & Int16(POLLIN) != 0 {
                    if case .breakOff(let kind) = read(from: server, into: &down) { return kind }
                }
            }
        }

        private func events(reading source: Lane, writing destination: Lane, mode: Mode, now: ContinuousClock.Instant) -> Int16 {
            var events: Int16 = 0
            if source.wantsInput(mode) { events |= Int16(POLLIN) }
            if destination.injectedQueued > 0 || destination.mayForward(mode, now: now) { events |= Int16(POLLOUT) }
            return events
        }

        private func read(from fd: Int32, into lane: inout Lane) -> Outcome {
            let room = FaultProxy.laneLimit - lane.queued
            let result = readBuffer.withUnsafeMutableBytes { buffer in
                Syscall.nonblockingResult { recv(fd, buffer.baseAddress, room, 0) }
            }
            switch result {
            case .wouldBlock:
                return .carryOn
            case .failed:
                return .breakOff(.reset)
            case .done(0):
                lane.sourceEnded = true
                return .carryOn
            case .done(let count):
                if lane.queued == 0 { lane.oldest = ContinuousClock.now }
                lane.pending += readBuffer[0..<count]
                return .carryOn
            }
        }

        /// Writes what may go out now: injected bytes first, then forwarded ones shaped by the
        /// mode and limited by the cut; passes on the FIN once the source ended and all is out.
        private func write(_ lane: inout Lane, to fd: Int32, mode: Mode) -> Outcome {
            while lane.injectedQueued > 0 {
                let result = lane.injected[lane.injectedHead...].withUnsafeBytes { bytes in
                    Syscall.nonblockingResult { send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
                }
                switch result {
                case .wouldBlock: return .carryOn
                case .failed: return .breakOff(.reset)
                case .done(let count):
                    lane.consumeInjected(count)
                    proxy.count { $0.bytesInjected += count }
                }
            }
            while lane.mayForward(mode, now: ContinuousClock.now) {
                var size = lane.queued
                if case .pieces(let maximum) = mode.shaping(lane.direction) { size = min(size, maximum) }
                let (allowance, epoch) = link.control.withLock { control -> (Int?, Int) in
                    guard let cut = control.mode.cut, cut.counts(lane.direction) else { return (nil, control.cutEpoch) }
                    return (control.cutRemaining, control.cutEpoch)
                }
                if let allowance { size = min(size, allowance) }
                guard size > 0 else { return .carryOn }
                let result = lane.pending[lane.head..<(lane.head + size)].withUnsafeBytes { bytes in
                    Syscall.nonblockingResult { send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
                }
                switch result {
                case .wouldBlock:
                    return .carryOn
                case .failed:
                    return .breakOff(.reset)
                case .done(let count):
                    if case .coalesce = mode.shaping(lane.direction) { lane.flushing = true }
                    lane.consume(count)
                    let direction = lane.direction
                    proxy.count { counters in
                        if direction == .upstream {
                            counters.bytesUpstream += count
                            counters.writesUpstream += 1
                        } else {
                            counters.bytesDownstream += count
                            counters.writesDownstream += 1
                        }
                    }
                    guard allowance != nil else { continue }
                    let cut = link.control.withLock { control -> Cut? in
                        guard control.cutEpoch == epoch, let remaining = control.cutRemaining else { return nil }
                        control.cutRemaining = max(0, remaining - count)
                        return control.cutRemaining == 0 ? control.mode.cut : nil
                    }
                    if let cut { return .breakOff(cut.reset ? .reset : .close) }
                }
            }
            if lane.sourceEnded, lane.queued == 0, lane.injectedQueued == 0, !lane.finished {
                _ = shutdown(fd, Int32(SHUT_WR))
                lane.finished = true
            }
            return .carryOn
        }

        /// Closes both sockets at once: after discarding what is waiting to be read (so the
        /// close is a FIN, not an RST), or with `SO_LINGER` 0 (an RST).
        private func breakOff(_ kind: Break) {
            for fd in [client, server] {
                if kind == .reset {
                    proxy.resetAndClose(fd)
                } else {
                    discardInput(fd)
                    Syscall.closeDescriptor(fd)
                }
            }
        }

        private func closeBoth() {
            Syscall.closeDescriptor(client)
            Syscall.closeDescriptor(server)
        }

        private func discardInput(_ fd: Int32) {
            var scratch = [UInt8](repeating: 0, count: 4096)
            for _ in 0..<256 {
                let got = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                if got <= 0 { return }
            }
        }

        private func milliseconds(until deadline: ContinuousClock.Instant, from now: ContinuousClock.Instant) -> Int32 {
            guard deadline > now else { return 0 }
            let (seconds, attoseconds) = (deadline - now).components
            return Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
        }
    }

    // MARK: Socket helpers

    fileprivate func resetAndClose(_ fd: Int32) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        Syscall.closeDescriptor(fd)
    }
}

private func setNoDelay(_ fd: Int32) {
    try? Syscall.setOption(fd, level: SocketOptions.tcpLevel, name: SocketOptions.noDelay, value: 1)
}

/// The outcome of one nonblocking `send` or `recv`.
private enum TransferResult {
    case done(Int)
    case wouldBlock
    case failed
}

extension Syscall {
    /// Runs a nonblocking transfer, retrying `EINTR`.
    fileprivate static func nonblockingResult(_ body: () -> Int) -> TransferResult {
        do {
            switch try nonblocking(body) {
            case .processed(let count): return .done(count)
            case .wouldBlock: return .wouldBlock
            }
        } catch {
            return .failed
        }
    }
}

/// A nonblocking pipe used to wake a thread out of `poll(2)`.
private struct WakePipe: Sendable {
    let readEnd: Int32
    let writeEnd: Int32

    init() throws {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw Errno.current }
        for fd in ends {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        readEnd = ends[0]
        writeEnd = ends[1]
    }

    func close() {
        Syscall.closeDescriptor(readEnd)
        Syscall.closeDescriptor(writeEnd)
    }

    /// Writes one byte; a full pipe already wakes the reader, so `EAGAIN` is fine.
    static func poke(_ writeEnd: Int32) {
        var byte: UInt8 = 1
        _ = Glibc.write(writeEnd, &byte, 1)
    }

    static func drain(_ readEnd: Int32) {
        var scratch = [UInt8](repeating: 0, count: 64)
        while scratch.withUnsafeMutableBytes({ Glibc.read(readEnd, $0.baseAddress, $0.count) }) > 0 {}
    }
}

/// Runs `body` with a proxy in front of `upstream` (which must be on 127.0.0.1), then stops
/// the proxy, requiring ``FaultProxy/stop()`` to return within the bound.
func withFaultProxy<T: Sendable>(
    to upstream: Endpoint,
    mode: FaultProxy.Mode = .passThrough,
    _ body: @Sendable (FaultProxy) async throws -> T
) async throws -> T {
    precondition(upstream.host == "127.0.0.1", "the fault proxy only forwards to 127.0.0.1")
    let proxy = try FaultProxy(upstreamPort: upstream.port, mode: mode)
    let result: Result<T, any Error>
    do {
        result = .success(try await body(proxy))
    } catch {
        result = .failure(error)
    }
    try await bounded("the fault proxy to stop") { await proxy.stop() }
    return try result.get()
}

/// Runs a blocking call on a thread of its own, so no cooperative thread waits on it.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        BlockingThread.run { continuation.resume(with: Result { try body() }) }
    }
}
