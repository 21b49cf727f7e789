/// A long-lived TCP connection that carries requests, responses, pushes and heartbeats.
///
/// ```swift
/// let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: 9000))
/// let reply = try await connection.request(Request(type: 0x402, json: ["hello": "world"]))
/// for await push in connection.notifications { print(push) }
/// ```
///
/// The actor runs on one of Tether's event loops: socket reads are decoded and dispatched
/// to waiting requests and subscribers on the loop thread, with no executor hop per frame.
/// Requests are matched to responses by serial. ``frames``, ``notifications``,
/// ``heartbeats`` and ``states`` are independent async sequences; each `for await` loop
/// gets every element and ends when the connection closes for good.
///
/// When the connection breaks (the server closes it, the network fails, heartbeats go
/// unanswered, the peer sends garbage), requests in flight fail with
/// ``TetherError/Code/connectionLost`` and the connection comes back by itself with
/// exponential backoff (``ConnectionConfiguration/reconnect``). Requests made meanwhile wait
/// for it; subscriptions keep running across it. Only ``close()`` ends it for good, or a
/// ``ReconnectPolicy`` that runs out of attempts.
///
/// A connection owns its socket until it closes: call ``close()`` when you are done with
/// one opened by ``connect(to:configuration:)``, or use
/// ``withConnection(to:configuration:isolation:_:)``, which closes it for you. Dropping the
/// last reference does not close an open connection.
public actor Connection {
    /// Where this connection goes.
    public nonisolated let endpoint: Endpoint
    /// How it behaves.
    public nonisolated let configuration: ConnectionConfiguration
    nonisolated let loop: EventLoop

    /// Runs the actor on its event loop.
    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        loop.serialExecutor.asUnownedSerialExecutor()
    }

    /// The event loop of this connection as a task executor.
    ///
    /// Tasks that prefer it run on the connection's loop thread, so sending a request and
    /// resuming on its response need no thread hop at all: the lowest latency and highest
    /// throughput Tether offers. Use it for code that talks to this connection and never
    /// blocks, since blocking it stalls every connection on that loop:
    ///
    /// ```swift
    /// await withTaskExecutorPreference(connection.taskExecutor) {
    ///     let reply = try? await connection.request(request)
    /// }
    /// ```
    public nonisolated var taskExecutor: any TaskExecutor { loop.taskExecutor }

    /// A waiting request. Unsafe rather than checked (which allocates a box per request):
    /// the request table hands each one out exactly once, and the tests prove every request
    /// ends exactly once.
    typealias Waiter = UnsafeContinuation<Response, any Error>

    /// The framed channel of the current connection.
    typealias Channel = FrameChannel<Connection>

    @exclusivity(unchecked) var channel: Channel?
    @exclusivity(unchecked) var table: RequestTable<Waiter>
    /// For profiles without serials on the wire: which requests wait for an answer, in order.
    @exclusivity(unchecked) var inOrderReplies = InOrderReplies()
    /// Timeouts of requests whose deadlines keep their order, with the one timer set for the
    /// earliest (timer tag 0); other requests get a timer each.
    @exclusivity(unchecked) var deadlines = DeadlineQueue()
    var deadlineTimer: LoopTimer?
    var state = ConnectionState.idle
    @exclusivity(unchecked) var counters = ConnectionMetrics()
    var heartbeatMachine: HeartbeatStateMachine?
    var heartbeatTimer: LoopTimer?
    /// Frames from ``send(_:)`` waiting for a connection or for the outbound buffer to drain.
    @exclusivity(unchecked) var sendQueue: [QueuedSend] = []
    var nextSendID: UInt64 = 0
    /// Bytes moved by sockets of earlier connections, for the metrics.
    var earlierBytesIn = 0
    var earlierBytesOut = 0
    /// The connect in progress; at most one at any time.
    var connectTask: Task<Void, Never>?
    /// Bumped whenever an attempt starts or is abandoned, so a stale one cannot attach.
    var generation: UInt64 = 0
    /// The number of the attempt in progress or scheduled: 0 for one made at once (the
    /// first connect, ``resume()``, ``reconnectNow()``), then 1, 2, … by the policy. It goes
    /// back to 0 only once a connection proves healthy (``provedHealthy()``): a peer that
    /// accepts and then fails spends the budget like one that refuses.
    var attempt = 0
    /// Whether the socket of this connection has proved that a Tether peer is on the other
    /// end: a valid frame arrived after the handshakes (TLS; with a session, the hello's
    /// acceptance, which is itself such a frame).
    var healthy = false
    var backoffTimer: LoopTimer?
    var endpointIndex = 0
    var random = SystemRandomNumberGenerator()
    /// The caller of ``connect(to:configuration:)`` while the first connect is under way.
    var openWaiter: CheckedContinuation<Void, any Error>?
    /// Set by the first ``connect()``.
    var opened = false
    /// Where the session stands, with ``ConnectionConfiguration/session``.
    var session: ClientSessionState?
    /// Set from the hello until the server accepts it; requests and frames wait meanwhile.
    var awaitingHello = false
    var helloTimer: LoopTimer?
    /// Set from TCP connect until the TLS handshake finishes; requests and frames wait meanwhile.
    var awaitingTLS = false
    /// Whether a handshake (TLS, then the session hello) is under way on the socket.
    var handshaking: Bool { awaitingTLS || awaitingHello }
    var acknowledgeTimer: LoopTimer?

    struct QueuedSend {
        var id: UInt64
        var frame: Frame
        var waiter: UnsafeContinuation<Void, any Error>
    }

    /// The address of the peer, once connected (the last one while reconnecting).
    public private(set) var remoteAddress: SocketAddress?
    /// The local address of the socket, once connected.
    public private(set) var localAddress: SocketAddress?
    /// What the TLS handshake of the current (or last) connection settled: version, cipher,
    /// ALPN and the server's certificate. `nil` without ``ConnectionConfiguration/tls``, or
    /// before the first handshake finished.
    public private(set) var tlsDetails: TLSDetails?
    /// The endpoint of the current (or last) connection: ``endpoint`` or one of
    /// ``ConnectionConfiguration/alternateEndpoints``.
    public private(set) var currentEndpoint: Endpoint

    let frameFeed: Broadcaster<Frame>
    let notificationFeed: Broadcaster<Frame>
    let heartbeatFeed: Broadcaster<Heartbeat>
    let stateFeed: Broadcaster<ConnectionState>
    let sessionFeed: Broadcaster<SessionEvent>

    init(endpoint: Endpoint, configuration: ConnectionConfiguration) {
        self.endpoint = endpoint
        self.configuration = configuration
        self.currentEndpoint = endpoint
        self.loop = configuration.eventLoopGroup.next()
        self.table = RequestTable(maximumSerial: configuration.profile.maximumSerial)
        let size = configuration.limits.subscriberBufferSize
        frameFeed = Broadcaster(bufferSize: size)
        // With a session no push may be lost once it counts as delivered (and acknowledged):
        // subscribers' buffers are unbounded, and a sequenced push that no subscriber takes
        // (one replayed before the app subscribes, say) is held until one that does comes.
        let sessions = configuration.session != nil
        notificationFeed = Broadcaster(
            bufferSize: size,
            holdsUntilSubscribed: sessions,
            lossless: sessions,
            holdLimit: configuration.session.map { max(1, $0.maximumHeldPushes) }
        )
        heartbeatFeed = Broadcaster(bufferSize: size)
        stateFeed = Broadcaster(bufferSize: max(size, 16), keepsLatest: true)
        sessionFeed = Broadcaster(bufferSize: size)
        session = configuration.session.map { ClientSessionState(resumeAfter: $0.resumeAfter) }
        stateFeed.publish(.idle)
        if sessions {
            let loop = loop
            notificationFeed.onTaken { [weak self] frames in
                guard let self else { return }
                loop.execute { [self] in assumeIsolated { $0.heldPushesTaken(frames) } }
            }
        }
    }

    // MARK: Opening

    /// Opens a connection and returns once it is connected.
    ///
    /// The host is resolved and each of its addresses (IPv4 and IPv6) is tried in turn
    /// until one accepts, all within ``ConnectionConfiguration/connectTimeout``. When that
    /// fails it keeps trying by ``ConnectionConfiguration/reconnect`` and throws only once the
    /// policy gives up (never, by default: cancel the task to stop it). With
    /// ``ReconnectPolicy/appliesToFirstConnect`` off, or reconnecting disabled, the first
    /// failure throws at once. To watch the attempts, make the connection with
    /// ``init(to:configuration:)``, subscribe to ``states``, then call ``connect()``.
    ///
    /// Once connected, the connection comes back by itself whenever it is lost, by
    /// ``ConnectionConfiguration/reconnect``; watch ``states`` to see it happen.
    ///
    /// - Parameters:
    ///   - endpoint: The host and port.
    ///   - configuration: How the connection behaves.
    /// - Returns: The open connection. Call ``close()`` when done.
    /// - Throws: ``TetherError`` (``TetherError/Code/connectionRefused``,
    ///   ``TetherError/Code/connectTimedOut``, ``TetherError/Code/resolutionFailed``, …) or
    ///   `CancellationError`.
    public static func connect(
        to endpoint: Endpoint,
        configuration: ConnectionConfiguration = .defaults
    ) async throws -> Connection {
        let connection = Connection(endpoint: endpoint, configuration: configuration)
        try await connection.open()
        return connection
    }

    /// Creates a connection without connecting yet: subscribe to its sequences first, then
    /// call ``connect()``, so that nothing that arrives as it opens is missed (the pushes a
    /// session replays on connect, the first states).
    ///
    /// ```swift
    /// let connection = Connection(to: endpoint, configuration: configuration)
    /// let pushes = connection.notifications
    /// try await connection.connect()
    /// for await push in pushes { … }
    /// ```
    ///
    /// - Parameters:
    ///   - endpoint: The host and port.
    ///   - configuration: How the connection behaves.
    public init(to endpoint: Endpoint, configuration: ConnectionConfiguration = .defaults) {
        self.init(endpoint: endpoint, configuration: configuration)
    }

    /// Connects a connection made with ``init(to:configuration:)``, and returns once it is
    /// connected; see ``connect(to:configuration:)`` for how.
    ///
    /// - Throws: ``TetherError`` as ``connect(to:configuration:)`` does, with
    ///   ``TetherError/Code/invalidArgument`` when called a second time, or
    ///   `CancellationError`.
    public func connect() async throws {
        try await open()
    }

    /// Opens a connection, runs `body` with it, and closes it when `body` returns or throws.
    ///
    /// - Parameters:
    ///   - endpoint: The host and port.
    ///   - configuration: How the connection behaves.
    ///   - isolation: The caller's actor; `body` runs there.
    ///   - body: Work to do with the open connection.
    /// - Returns: What `body` returns.
    /// - Throws: What connecting or `body` throws.
    public static func withConnection<Result>(
        to endpoint: Endpoint,
        configuration: ConnectionConfiguration = .defaults,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (Connection) async throws -> sending Result
    ) async throws -> sending Result {
        let connection = try await connect(to: endpoint, configuration: configuration)
        do {
            let result = try await body(connection)
            await connection.close()
            return result
        } catch {
            await connection.close()
            throw error
        }
    }

    private func open() async throws {
        guard !opened else {
            throw TetherError(code: .invalidArgument, message: "connect() was already called on the connection to \(endpoint)")
        }
        opened = true
        if configuration.session != nil, configuration.profile.correlation != .bySerial {
            let error = TetherError(
                code: .invalidArgument,
                message: "sessions need a profile that matches responses by serial; the \(configuration.profile.name) profile has no serial"
            )
            finish(error, graceful: false)
            throw error
        }
        if let tls = configuration.tls {
            // Files that cannot be loaded fail here, before any socket is opened.
            do throws(TetherError) {
                try await Self.prepare(tls)
            } catch {
                finish(error, graceful: false)
                throw error
            }
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                openWaiter = continuation
                startAttempt()
            }
        } onCancel: {
            loop.execute { [self] in assumeIsolated { $0.cancelOpen() } }
        }
    }

    /// Loads what TLS needs (the system's CA bundle takes tens of milliseconds) off the
    /// event loop, which other connections share.
    @concurrent
    private nonisolated static func prepare(_ tls: TLSConfiguration) async throws(TetherError) {
        try tls.provider.prepare()
    }

    private func cancelOpen() {
        guard let waiter = openWaiter else { return }
        openWaiter = nil
        waiter.resume(throwing: CancellationError())
        finish(TetherError(code: .connectFailed, message: "connecting to \(endpoint) was cancelled"), graceful: false)
    }

    /// Starts a connect unless one is under way or the connection is up or final.
    func startAttempt() {
        guard connectTask == nil, channel == nil, !state.isFinal else { return }
        if let backoffTimer { loop.cancel(backoffTimer) }
        backoffTimer = nil
        generation &+= 1
        let generation = generation
        let endpoints = [endpoint] + configuration.alternateEndpoints
        let target = endpoints[endpointIndex % endpoints.count]
        if attempt > 0 { counters.reconnectAttempts += 1 }
        setState(.connecting)
        connectTask = Task(executorPreference: loop.taskExecutor) { [self] in
            await runAttempt(generation: generation, endpoint: target)
        }
    }

    private func runAttempt(generation: UInt64, endpoint: Endpoint) async {
        let outcome = await dial(endpoint)
        guard generation == self.generation, connectTask != nil, !state.isFinal else {
            // Abandoned meanwhile (closed, suspended): the socket is nobody's, and dropping
            // the outcome closes it.
            return
        }
        connectTask = nil
        switch outcome {
        case .success(let connected):
            do {
                try attach(socket: connected.socket.take(), address: connected.address, endpoint: endpoint)
            } catch {
                attemptFailed(error)
            }
        case .failure(let error):
            attemptFailed(error)
        }
    }

    /// Resolves `endpoint` and tries each address until one accepts, within the connect timeout.
    private func dial(_ endpoint: Endpoint) async -> Result<(socket: SocketBox, address: SocketAddress), TetherError> {
        let addresses: [SocketAddress]
        do {
            addresses = try await Resolver.resolve(endpoint)
        } catch {
            return .failure(error)
        }
        let deadline = MonotonicTime.now() &+ MonotonicTime.nanoseconds(of: configuration.connectTimeout)
        var failures: [TetherError] = []
        for address in addresses {
            if Task.isCancelled { break }
            let now = MonotonicTime.now()
            guard now < deadline else {
                failures.append(TetherError(code: .connectTimedOut, message: "connecting to \(endpoint) timed out after \(describe(configuration.connectTimeout))"))
                break
            }
            let remaining = MonotonicTime.duration(nanoseconds: deadline - now)
            switch await ConnectAttempt.connect(to: address, timeout: remaining, on: loop, isolation: self) {
            case .success(let socket):
                return .success((socket, address))
            case .failure(let error) where error.code == .connectTimedOut:
                // The attempt only knew the time left; report the timeout the caller configured.
                failures.append(TetherError(
                    code: .connectTimedOut,
                    message: "connecting to \(address) timed out after \(describe(configuration.connectTimeout))"
                ))
            case .failure(let error):
                failures.append(error)
            }
        }
        if Task.isCancelled {
            return .failure(TetherError(code: .connectFailed, message: "connecting to \(endpoint) was cancelled"))
        }
        return .failure(Self.combine(failures, endpoint: endpoint))
    }

    static func combine(_ failures: [TetherError], endpoint: Endpoint) -> TetherError {
        guard failures.count > 1 else {
            return failures.first ?? TetherError(code: .connectFailed, message: "cannot connect to \(endpoint): no address to try")
        }
        let codes = Set(failures.map(\.code))
        let code: TetherError.Code =
            codes == [.connectionRefused] ? .connectionRefused : codes.contains(.connectTimedOut) ? .connectTimedOut : .connectFailed
        let details = failures.map(\.message).joined(separator: "; ")
        return TetherError(code: code, message: "cannot connect to \(endpoint): \(details)")
    }

    private func attach(socket: consuming Socket, address: SocketAddress, endpoint: Endpoint) throws(TetherError) {
        let channel = try Channel.overTCP(
            socket,
            remoteAddress: address,
            loop: loop,
            owner: self,
            profile: configuration.profile,
            role: .client,
            limits: configuration.limits,
            noDelay: configuration.noDelay,
            drainTimeout: configuration.drainTimeout,
            tls: configuration.tls,
            serverName: endpoint.host
        )
        self.channel = channel
        healthy = false
        remoteAddress = address
        localAddress = channel.localAddress
        currentEndpoint = endpoint
        if channel.isSecured {
            // Connected, but not ready: the TLS handshake goes first (``secured(_:)``); the
            // channel bounds it by ``TLSConfiguration/handshakeTimeout``.
            awaitingTLS = true
            return
        }
        start(on: channel)
    }

    /// The TLS handshake on `channel` finished: go on as a plain connection would.
    func secured(_ channel: Channel) {
        guard awaitingTLS, self.channel === channel else { return }
        awaitingTLS = false
        tlsDetails = channel.tlsDetails
        start(on: channel)
    }

    /// The socket is up (and secured): send the session hello, or be ready.
    private func start(on channel: Channel) {
        if configuration.session != nil {
            // Connected, but not ready: the session hello goes first, and the rest waits
            // for the server's answer (``sessionWelcomed(_:)``).
            sendHello(on: channel)
            if self.channel === channel { startHeartbeats() }
            return
        }
        startHeartbeats()
        becomeReady()
    }

    /// The connection is up (and its session accepted): requests may go.
    ///
    /// The attempt count stays: being connected proves only that something accepted.
    func becomeReady() {
        counters.connects += 1
        setState(.connected)
        if let waiter = openWaiter {
            openWaiter = nil
            waiter.resume()
        }
        pump()
    }

    /// The peer sent a valid frame after the handshakes: the connection works, and the next
    /// loss starts the policy's budget and backoff afresh.
    func provedHealthy() {
        guard !healthy else { return }
        healthy = true
        attempt = 0
    }

    /// A connect failed: try again by the policy, or give up.
    func attemptFailed(_ error: TetherError) {
        endpointIndex += 1
        let policy = configuration.reconnect
        if counters.connects == 0 && !policy.appliesToFirstConnect {
            finish(error, graceful: false)
            return
        }
        scheduleReconnect(attempt: attempt + 1, reason: error)
    }

    /// Waits out the backoff before attempt `next`, or gives up when the policy allows no more.
    private func scheduleReconnect(attempt next: Int, reason: TetherError) {
        let policy = configuration.reconnect
        if !policy.isEnabled {
            finish(reason, graceful: false)
            return
        }
        if let limit = policy.maximumAttempts, next > limit {
            let tried = next - 1
            finish(TetherError(
                code: reason.code,
                message: "gave up on \(endpoint) after \(tried) reconnect attempt\(tried == 1 ? "" : "s"): \(reason.message)",
                underlying: reason
            ), graceful: false, failed: true)
            return
        }
        attempt = next
        let delay = policy.delay(forAttempt: next, using: &random)
        setState(.reconnecting(attempt: next, after: delay, reason: reason))
        backoffTimer = loop.schedule(after: delay) { [self] in
            assumeIsolated { connection in
                connection.backoffTimer = nil
                connection.startAttempt()
            }
        }
    }

    /// The connection broke (peer closed, network error, heartbeat timeout, protocol error):
    /// requests in flight fail with ``TetherError/Code/connectionLost``, then it reconnects
    /// by the policy. Queued requests and frames stay queued for the next connection.
    func connectionLost(_ reason: TetherError) {
        guard channel != nil else { return }
        if handshaking {
            // Lost before TLS finished or the session was accepted: a failed attempt, not a
            // lost connection.
            detachChannel(graceful: false)
            attemptFailed(reason)
            return
        }
        // A connection that never proved healthy (an HTTP server, a proxy whose backend is
        // down, a server at its limit) counts as one more failed attempt, and the next
        // attempt moves on to the next endpoint as after a refused connect.
        let next = healthy ? 1 : attempt + 1
        if !healthy { endpointIndex += 1 }
        detachChannel(graceful: false)
        failInFlight(reason)
        if configuration.reconnect.isEnabled {
            scheduleReconnect(attempt: next, reason: reason)
        } else {
            finish(reason, graceful: false)
        }
    }

    /// Drops the socket and stops its heartbeats; the rest of the connection stays.
    private func detachChannel(graceful: Bool) {
        if let heartbeatTimer { loop.cancel(heartbeatTimer) }
        heartbeatTimer = nil
        awaitingTLS = false
        heartbeatMachine = nil
        inOrderReplies.removeAll()
        if graceful { acknowledgeNow() }
        stopSession()
        guard let channel else { return }
        self.channel = nil
        channel.writableThreshold = nil
        earlierBytesIn += channel.bytesRead
        earlierBytesOut += channel.bytesWritten
        if graceful { channel.closeAfterFlush() } else { channel.close() }
    }

    /// Stops a connect under way or waiting for its backoff.
    private func abandonAttempt() {
        if let backoffTimer { loop.cancel(backoffTimer) }
        backoffTimer = nil
        if let connectTask {
            generation &+= 1
            connectTask.cancel()
            self.connectTask = nil
        }
    }

    private func failInFlight(_ reason: TetherError) {
        for (serial, entry) in table.removeInFlight() {
            if let timer = entry.timer { loop.cancel(timer) }
            counters.requestsFailed += 1
            entry.waiter.resume(throwing: Self.lost(type: entry.type, serial: serial, reason: reason))
        }
    }

    /// The error of a request that was in flight when the connection broke for `reason`.
    static func lost(type: UInt32, serial: UInt32, reason: TetherError) -> TetherError {
        TetherError(
            code: .connectionLost,
            message: "request \(hex(type)) serial \(serial) failed: connection lost: \(reason.message)",
            underlying: reason
        )
    }

    // MARK: App lifecycle

    /// Disconnects on purpose, for an app going to the background: no reconnect attempts
    /// until ``resume()``, and it does not count as a failure.
    ///
    /// Queued bytes are flushed first. Requests in flight fail with
    /// ``TetherError/Code/connectionLost``; requests made while suspended wait for
    /// ``resume()`` (bounded by their timeouts), unless
    /// ``ConnectionConfiguration/requestsWaitForConnection`` is `false`. Subscriptions keep running.
    /// Does nothing before ``connect()`` (``ConnectionState/Phase/idle``) and once closed or failed.
    public func suspend() {
        guard !state.isFinal, state.phase != .suspended, state.phase != .idle else { return }
        abandonAttempt()
        let reason = TetherError(code: .connectionLost, message: "the connection to \(currentEndpoint) was suspended by suspend()")
        if channel != nil {
            detachChannel(graceful: true)
            failInFlight(reason)
        }
        if let waiter = openWaiter {
            openWaiter = nil
            waiter.resume(throwing: TetherError(code: .notConnected, message: "connecting to \(endpoint) was suspended by suspend()"))
        }
        setState(.suspended)
    }

    /// Connects again at once after ``suspend()``, with a fresh attempt budget and backoff.
    public func resume() {
        guard state.phase == .suspended else { return }
        attempt = 0
        startAttempt()
    }

    /// Skips the rest of a reconnect backoff and connects at once, with a fresh attempt
    /// budget: for a network that just came back, or an app returning to the foreground.
    /// Also ends a ``suspend()``. Does nothing while connected or connecting.
    public func reconnectNow() {
        switch state.phase {
        case .reconnecting:
            attempt = 0
            startAttempt()
        case .suspended:
            resume()
        default:
            break
        }
    }

    // MARK: Subscriptions

    /// Every inbound frame, raw: responses, notifications and heartbeat acks alike.
    public nonisolated var frames: Subscription<Frame> { frameFeed.subscribe() }

    /// Every push (notification) from the server.
    ///
    /// With a session, a new subscription first gets the sequenced pushes held because no
    /// subscription took them; see ``SessionConfiguration/maximumHeldPushes``.
    public nonisolated var notifications: Subscription<Frame> { notificationFeed.subscribe() }

    /// Pushes of one type.
    ///
    /// With a session, a new subscription first gets the held sequenced pushes of that type;
    /// see ``SessionConfiguration/maximumHeldPushes``.
    ///
    /// - Parameter type: The notification type to keep.
    /// - Returns: A sequence of the pushes of that type.
    public nonisolated func notifications(ofType type: UInt32) -> Subscription<Frame> {
        notificationFeed.subscribe { $0.type == type }
    }

    /// One element per heartbeat event: sent, acked with its round-trip time, or missed.
    public nonisolated var heartbeats: Subscription<Heartbeat> { heartbeatFeed.subscribe() }

    /// The current state first, then every change, across reconnects; it ends after the
    /// final state, ``ConnectionState/Phase/closed`` or ``ConnectionState/Phase/failed``.
    public nonisolated var states: Subscription<ConnectionState> { stateFeed.subscribe() }

    /// The current state.
    public var currentState: ConnectionState { state }

    /// Counters for this connection, across every reconnect.
    public var metrics: ConnectionMetrics {
        var metrics = counters
        metrics.bytesIn = earlierBytesIn + (channel?.bytesRead ?? 0)
        metrics.bytesOut = earlierBytesOut + (channel?.bytesWritten ?? 0)
        metrics.inFlightRequests = table.inFlightCount
        metrics.queuedRequests = table.queuedCount + sendQueue.count
        metrics.droppedElements = frameFeed.droppedCount + notificationFeed.droppedCount + heartbeatFeed.droppedCount
        metrics.heldNotifications = session?.held.count ?? 0
        return metrics
    }

    func setState(_ new: ConnectionState) {
        state = new
        stateFeed.publish(new)
    }

    // MARK: Closing

    /// Closes the connection for good. Idempotent; never followed by a reconnect.
    ///
    /// Bytes already queued are flushed; requests still waiting, in flight or queued, fail
    /// with ``TetherError/Code/connectionClosed``; a reconnect backoff or a connect under way
    /// stops at once; every subscription ends.
    public func close() {
        finish(TetherError(code: .connectionClosed, message: "connection to \(remoteAddress?.description ?? endpoint.description) closed by close()"), graceful: true)
    }

    /// Ends the connection for `reason` and fails everything that waits on it. Idempotent.
    func finish(_ reason: TetherError, graceful: Bool, failed: Bool = false) {
        guard !state.isFinal else { return }
        abandonAttempt()
        detachChannel(graceful: graceful)
        let closedByUser = reason.code == .connectionClosed
        deadlines.removeAll()
        if let deadlineTimer { loop.cancel(deadlineTimer) }
        deadlineTimer = nil
        for (serial, entry) in table.removeAll() {
            if let timer = entry.timer { loop.cancel(timer) }
            counters.requestsFailed += 1
            let error: TetherError
            if closedByUser {
                error = TetherError(code: .connectionClosed, message: "request \(hex(entry.type)) serial \(serial) failed: \(reason.message)", underlying: reason)
            } else if entry.isQueued {
                error = TetherError(code: .notConnected, message: "request \(hex(entry.type)) serial \(serial) was never sent: \(reason.message)", underlying: reason)
            } else {
                error = Self.lost(type: entry.type, serial: serial, reason: reason)
            }
            entry.waiter.resume(throwing: error)
        }
        let sends = sendQueue
        sendQueue.removeAll()
        for send in sends {
            send.waiter.resume(throwing: TetherError(
                code: closedByUser ? .connectionClosed : .notConnected,
                message: "frame \(hex(send.frame.type)) was never sent: \(reason.message)",
                underlying: reason
            ))
        }
        if let waiter = openWaiter {
            openWaiter = nil
            waiter.resume(throwing: reason)
        }
        setState(failed ? .failed(reason) : .closed(reason))
        stateFeed.finish()
        sessionFeed.finish()
        frameFeed.finish()
        notificationFeed.finish()
        heartbeatFeed.finish()
    }
}
