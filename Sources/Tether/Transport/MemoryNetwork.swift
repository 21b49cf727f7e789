/// A network inside the process: servers listen on it and connections dial it by host
/// name and port, and each connection is a pair of ``InMemoryTransport``s instead of a
/// socket pair in the kernel.
///
/// Everything on one network runs on one event loop (``loop``), the loop of every client
/// and server configured for it, so a pair's ends never cross threads and, with a
/// ``ManualClock``, every timer of both sides fires in one deadline order.
///
/// Hosts are names, not addresses: `"server"` and `"127.0.0.1"` are just two names. A
/// listening server gets an address in `127.0.10.0/24` for its host (the same one for every
/// port of that host), and each client end a port from 49152 up on `127.0.9.1`, so the
/// addresses that errors, events and metrics show are unique per link and never those of
/// a real socket.
///
/// What happens to a dial is up to the network's rules (``refuse(_:)``, ``blackHole(_:)``),
/// and each connection's bytes pass through a ``MemoryLink`` whose faults a test sets.
package final class MemoryNetwork: Sendable {
    /// The loop every end of every link runs on.
    package let loop: EventLoop

    private struct Listening {
        var address: TetherSocketAddress
        var accept: @Sendable (InMemoryTransport, TetherSocketAddress) -> Void
    }

    /// How a dial to a host and port is answered, besides by a listener.
    package enum Rule: Sendable, Equatable {
        /// Refused at once, as by a host with nothing on the port (`ECONNREFUSED`).
        case refuse
        /// Never answered: the dial waits until its connect timeout, as SYNs into a black
        /// hole do.
        case blackHole
    }

    private struct State {
        var listeners: [Endpoint: Listening] = [:]
        var hostAddresses: [String: TetherSocketAddress] = [:]
        var rules: [Endpoint: Rule] = [:]
        var nextClientPort = 49152
        var nextListenPort = 30000
        var links: [MemoryLink] = []
        var defaultFaults = MemoryLinkFaults()
        var linkWaiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Lock(State())

    /// A network whose links all run on `loop`.
    ///
    /// - Parameter loop: The loop of every client and server on the network.
    package init(loop: EventLoop) {
        self.loop = loop
    }

    // MARK: Listening

    /// Starts taking connections to `host` and `port` (0 picks a free port).
    ///
    /// - Parameters:
    ///   - host: The name clients dial.
    ///   - port: The port; 0 picks one from 30000 up that nothing listens on.
    ///   - accept: Called on ``loop`` with the server's end of each new link, not started,
    ///     and the client's address.
    /// - Returns: The address the server listens on, with the port picked.
    /// - Throws: ``TetherError/Code/bindFailed`` when something already listens there.
    package func listen(
        host: String,
        port: Int,
        accept: @escaping @Sendable (InMemoryTransport, TetherSocketAddress) -> Void
    ) throws(TetherError) -> TetherSocketAddress {
        let result = state.withLock { state -> Result<TetherSocketAddress, TetherError> in
            var port = port
            if port == 0 {
                while state.listeners[Endpoint(host: host, port: state.nextListenPort)] != nil { state.nextListenPort += 1 }
                port = state.nextListenPort
                state.nextListenPort += 1
            }
            let endpoint = Endpoint(host: host, port: port)
            guard state.listeners[endpoint] == nil else {
                return .failure(TetherError(code: .bindFailed, message: "cannot listen on \(endpoint) of the in-memory network: the port is in use"))
            }
            let address = Self.address(of: host, port: port, in: &state)
            state.listeners[endpoint] = Listening(address: address, accept: accept)
            return .success(address)
        }
        return try result.get()
    }

    /// Stops taking connections to `address`'s host and port; links already made stay.
    ///
    /// - Parameter host: The host the server listened on.
    /// - Parameter port: Its port.
    package func stopListening(host: String, port: Int) {
        state.withLock { _ = $0.listeners.removeValue(forKey: Endpoint(host: host, port: port)) }
    }

    /// Whether a server listens on `endpoint`.
    package func isListening(_ endpoint: Endpoint) -> Bool {
        state.withLock { $0.listeners[endpoint] != nil }
    }

    private static func address(of host: String, port: Int, in state: inout State) -> TetherSocketAddress {
        let base: TetherSocketAddress
        if let known = state.hostAddresses[host] {
            base = known
        } else {
            let index = state.hostAddresses.count + 1
            base = TetherSocketAddress(ipAddress: "127.0.10.\(index % 255)", port: 0)!
            state.hostAddresses[host] = base
        }
        return TetherSocketAddress(ipAddress: base.ipAddress, port: port)!
    }

    // MARK: Rules

    /// Answers dials to `endpoint` by `rule` instead of by its listener, until
    /// ``clearRule(for:)``.
    package func setRule(_ rule: Rule, for endpoint: Endpoint) {
        state.withLock { $0.rules[endpoint] = rule }
    }

    /// Answers dials to `endpoint` by its listener again.
    package func clearRule(for endpoint: Endpoint) {
        state.withLock { _ = $0.rules.removeValue(forKey: endpoint) }
    }

    // MARK: Links

    /// The faults each new link starts with.
    package var defaultFaults: MemoryLinkFaults {
        get { state.withLock { $0.defaultFaults } }
        set { state.withLock { $0.defaultFaults = newValue } }
    }

    /// Every link made so far, oldest first, open or not.
    package var links: [MemoryLink] {
        state.withLock { $0.links }
    }

    /// Waits until at least `count` links have been made.
    package func waitForLinks(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.links.count >= count { return true }
                state.linkWaiters.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Dials `endpoint` from a client on ``loop``.
    ///
    /// - Parameters:
    ///   - endpoint: The host name and port.
    ///   - timeout: How long a dial that gets no answer waits.
    /// - Returns: The client's end, not started, and the server's address; or
    ///   ``TetherError/Code/connectionRefused`` when nothing listens there (or the endpoint
    ///   refuses), ``TetherError/Code/connectTimedOut`` when the endpoint is a black hole.
    package func connect(
        to endpoint: Endpoint,
        timeout: Duration
    ) async -> Result<(InMemoryTransport, TetherSocketAddress), TetherError> {
        enum Answer {
            case refused
            case blackHole
            case link(MemoryLink, Listening)
        }
        let answer = state.withLock { state -> Answer in
            switch state.rules[endpoint] {
            case .refuse?: return .refused
            case .blackHole?: return .blackHole
            case nil: break
            }
            guard let listening = state.listeners[endpoint] else { return .refused }
            let client = TetherSocketAddress(ipAddress: "127.0.9.1", port: state.nextClientPort)!
            state.nextClientPort = state.nextClientPort >= 65535 ? 49152 : state.nextClientPort + 1
            let (clientEnd, serverEnd) = InMemoryTransport.makePair(
                on: loop,
                clientAddress: client,
                serverAddress: listening.address,
                clientSealed: false,
                serverSealed: false
            )
            let link = MemoryLink(id: state.links.count + 1, endpoint: endpoint, client: clientEnd, server: serverEnd, faults: state.defaultFaults)
            state.links.append(link)
            return .link(link, listening)
        }
        switch answer {
        case .refused:
            return .failure(TetherError(code: .connectionRefused, message: "connection to \(endpoint) refused: nothing listens there on the in-memory network"))
        case .blackHole:
            return await waitOut(timeout, dialing: endpoint)
        case .link(let link, let listening):
            let waiters = state.withLock { state in
                let count = state.links.count
                let ready = state.linkWaiters.filter { $0.count <= count }
                state.linkWaiters.removeAll { $0.count <= count }
                return ready.map(\.continuation)
            }
            for waiter in waiters { waiter.resume() }
            // The server hears of the link in the loop turn after the client has its end,
            // as an accept follows a connect.
            loop.execute { listening.accept(link.server, link.client.localAddress!) }
            return .success((link.client, listening.address))
        }
    }

    /// A dial that nobody answers: it ends at its timeout, on the loop's clock, or when
    /// its task is cancelled.
    private func waitOut(_ timeout: Duration, dialing endpoint: Endpoint) async -> Result<(InMemoryTransport, TetherSocketAddress), TetherError> {
        let wait = PendingDial(loop: loop)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                wait.start(continuation, timeout: timeout, endpoint: endpoint)
            }
        } onCancel: { [loop] in
            loop.execute { wait.finish(TetherError(code: .connectFailed, message: "connecting to \(endpoint) was cancelled", underlying: CancellationError())) }
        }
    }
}

/// A dial that waits for its timeout; ends exactly once. Loop thread only.
private final class PendingDial: @unchecked Sendable {
    // @unchecked Sendable: touched only on `loop`'s thread.
    private let loop: EventLoop
    private var continuation: CheckedContinuation<Result<(InMemoryTransport, TetherSocketAddress), TetherError>, Never>?
    private var timer: LoopTimer?
    private var finished = false

    init(loop: EventLoop) { self.loop = loop }

    func start(_ continuation: CheckedContinuation<Result<(InMemoryTransport, TetherSocketAddress), TetherError>, Never>, timeout: Duration, endpoint: Endpoint) {
        loop.execute { [self] in
            guard !finished else {
                continuation.resume(returning: .failure(TetherError(code: .connectFailed, message: "connecting to \(endpoint) was cancelled", underlying: CancellationError())))
                return
            }
            self.continuation = continuation
            timer = loop.schedule(after: timeout) { [self] in
                timer = nil
                finish(TetherError(code: .connectTimedOut, message: "connecting to \(endpoint) timed out after \(describe(timeout))"))
            }
        }
    }

    func finish(_ error: TetherError) {
        finished = true
        if let timer { loop.cancel(timer) }
        timer = nil
        let continuation = self.continuation
        self.continuation = nil
        continuation?.resume(returning: .failure(error))
    }
}

// MARK: Streams

extension MemoryNetwork: StreamNetwork {
    package func connector(for endpoint: Endpoint) -> any StreamConnector {
        MemoryConnector(network: self)
    }

    package func listener(for endpoint: Endpoint) -> any StreamListener {
        MemoryListener(network: self, endpoint: endpoint)
    }
}

/// One end of a link of the in-memory network, not started yet.
struct MemoryStream: OpenedStream {
    let end: InMemoryTransport

    var remoteAddress: TetherSocketAddress { end.remoteAddress }

    func makeTransport(on loop: EventLoop, reading use: ReadBufferUse) throws(TetherError) -> any ByteTransport {
        guard loop === end.loop else {
            end.close()
            throw TetherError(code: .invalidArgument, message: "an end of the in-memory network must run on the network's event loop")
        }
        if use == .sealed { end.lendSealedBuffer() }
        return end
    }

    func refuse(notice: [UInt8]?, drainTimeout: Duration, on loop: EventLoop) {
        end.loop.execute { [end] in
            if let notice { end.buffers.outbound.writeBytes(notice) }
            end.closeAfterFlush(timeout: drainTimeout)
        }
    }
}

/// Dials the in-memory network from a client on its loop.
struct MemoryConnector: StreamConnector {
    let network: MemoryNetwork

    func connect(to endpoint: Endpoint, in context: ConnectContext, isolation: isolated any Actor) async -> Result<ConnectedStream, TetherError> {
        let loop = context.loop
        guard network.loop === loop else {
            return .failure(TetherError(code: .invalidArgument, message: "a connection on an in-memory network must use the network's event loop group"))
        }
        // The network knows hosts and ports: a WebSocket endpoint's path is for the layer above.
        return await network.connect(to: Endpoint(host: endpoint.host, port: endpoint.port), timeout: context.timeout).map { end, address in
            let elapsed = MonotonicTime.duration(nanoseconds: loop.now &- context.began)
            let attempt = ConnectReport.Attempt(address: address, startedAfter: .zero, outcome: .connected, duration: elapsed)
            let report = ConnectReport(endpoint: endpoint, address: address, resolutionTime: .zero, connectTime: elapsed, attempts: [attempt])
            return ConnectedStream(stream: MemoryStream(end: end), report: report)
        }
    }
}

/// Listens on a host name and port of the in-memory network.
struct MemoryListener: StreamListener {
    let network: MemoryNetwork
    let endpoint: Endpoint

    func listen(in context: ListenContext, accept: @escaping @Sendable (any OpenedStream) -> Void) async throws(TetherError) -> any ListeningPort {
        guard context.group.loops.count == 1, context.group.loops[0] === network.loop else {
            throw TetherError(code: .invalidArgument, message: "a server on an in-memory network must use the network's event loop group")
        }
        let address = try network.listen(host: endpoint.host, port: endpoint.port) { end, _ in
            accept(MemoryStream(end: end))
        }
        return MemoryPort(network: network, endpoint: Endpoint(host: endpoint.host, port: address.port), address: address)
    }
}

/// A port the in-memory network listens on. Closes once: a server closes its ports more
/// than once as it stops, and a later close must not take the port from a server that
/// listens there since.
final class MemoryPort: ListeningPort, @unchecked Sendable {
    // @unchecked Sendable: `close()` runs on the network's loop only.
    let network: MemoryNetwork
    let endpoint: Endpoint
    let address: TetherSocketAddress
    private var closed = false

    init(network: MemoryNetwork, endpoint: Endpoint, address: TetherSocketAddress) {
        self.network = network
        self.endpoint = endpoint
        self.address = address
    }

    func close() {
        guard !closed else { return }
        closed = true
        network.stopListening(host: endpoint.host, port: endpoint.port)
    }
}
