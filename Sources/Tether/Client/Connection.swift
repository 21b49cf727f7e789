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
    /// What the framed channel of each connection attempt is made with.
    nonisolated let channelSettings: ChannelSettings
    /// ``ConnectionConfiguration/requestTimeout`` in nanoseconds, worked out once: most
    /// requests use it.
    nonisolated let requestTimeoutNanoseconds: UInt64

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

    /// Who waits for a request's outcome: the caller of ``request(_:timeout:)``, or a place
    /// in a ``pipeline(_:timeout:)``.
    typealias Waiter = RequestWaiter

    /// The framed channel of the current connection.
    typealias Channel = FrameChannel<Connection>

    @exclusivity(unchecked) var channel: Channel?
    @exclusivity(unchecked) var table: RequestTable<Waiter>
    /// For profiles without serials on the wire: which requests wait for an answer, in order.
    @exclusivity(unchecked) var inOrderReplies = InOrderReplies()
    /// Timeouts of requests whose deadlines keep their order, with the one timer set for the
    /// earliest (timer tag 0); other requests get a timer each.
    @exclusivity(unchecked) var deadlines = DeadlineQueue()
    @exclusivity(unchecked) var deadlineTimer: LoopTimer?
    /// Where the connection is in its life: phase, attempts, endpoint rotation. Every change
    /// goes through ``handle(_:)``.
    @exclusivity(unchecked) var lifecycle: ConnectionStateMachine
    /// The current state, as last published.
    var state: ConnectionState { inUse(lifecycle.state) }

    /// `state` with the endpoint in use when it is connected: the main one, an alternate or
    /// the fallback (the machine knows only whether it is the fallback).
    func inUse(_ state: ConnectionState) -> ConnectionState {
        guard state.phase == .connected, state.endpoint == nil else { return state }
        var state = state
        state.endpoint = currentEndpoint
        return state
    }
    @exclusivity(unchecked) var counters = ConnectionMetrics()
    var heartbeatMachine: HeartbeatStateMachine?
    /// The adaptive heartbeat's state on this connection's network, with
    /// ``HeartbeatConfiguration/adaptive``.
    var adaptiveHeartbeat: AdaptiveHeartbeatRun?
    /// When reading last started again after a slow subscriber caught up: a heartbeat sent
    /// before then may have had its ack wait unread.
    var readingResumedAt: UInt64 = 0
    /// What had moved when the outstanding heartbeat went out (see
    /// ``markHeartbeatProgress(on:)``): bytes of a frame moving since excuse its missing ack.
    var heartbeatProgressMark = (read: 0, ahead: 0, delivered: 0, receiving: false)
    /// Whether the server was asked to hold this client's pushes on the current connection
    /// (by the hello, or by a flow signal since).
    var pushesHeld = false
    /// Tests waiting for the connection to hold pushes or to stop reading.
    var testWaiters = TestWaiters()
    var heartbeatTimer: LoopTimer?
    /// Frames from ``send(_:)`` waiting for a connection or for the outbound buffer to drain.
    @exclusivity(unchecked) var sendQueue: [QueuedSend] = []
    var nextSendID: UInt64 = 0
    /// Sends waiting for their frame's bytes to be written, by id.
    var trackedSends: [UInt64: TrackedSend] = [:]
    /// Bytes moved by sockets of earlier connections, for the metrics.
    var earlierBytesIn = 0
    var earlierBytesOut = 0
    /// What the attempt under way holds, from its dial until it is ready or abandoned.
    var attemptHandles = AttemptHandles()
    /// The timers of the reconnects the connection plans: the backoff, the return from the
    /// fallback, the departure from a draining server.
    var reconnectHandles = ReconnectHandles()
    /// The caller of ``connect(to:configuration:)`` while the first connect is under way.
    var openWaiter: CheckedContinuation<Void, any Error>?
    /// Where the session stands, with ``ConnectionConfiguration/session``.
    var session: ClientSessionState?
    /// The channel subscriptions (``subscribe(to:from:info:presenceEvents:)``), by channel name.
    var channelTable: [String: ClientChannel] = [:]
    /// Where the hello's identity comes from; see ``switchSession(to:resumeAfter:resumeEpoch:)``.
    var identity: ConnectionIdentity
    /// The caller of ``switchSession(to:resumeAfter:resumeEpoch:)`` while the switch is under way.
    var switchWaiter: CheckedContinuation<Void, any Error>?
    /// Whether a handshake (TLS, then the session hello) is under way on the socket.
    var handshaking: Bool { lifecycle.isHandshaking }
    /// Whether nothing new may be written on the channel now: a handshake is under way, or
    /// the server announced its drain (what is new waits for the next connection).
    var holdsWrites: Bool { lifecycle.isHandshaking || lifecycle.isDeparting }
    var acknowledgeTimer: LoopTimer?
    /// The connection's observer of ``ConnectionConfiguration/pathMonitor``, while it follows one.
    var pathObservation: PathObservation?
    /// The last network path the connection was told.
    var lastPath: NetworkPath?


    /// What one attempt holds. The connect task and its socket go when the dial ends (the
    /// socket becomes the channel); the hello's timer when the server answers; the
    /// preparation and its timer when it returns; all of them when the attempt is abandoned
    /// (``ConnectionStateMachine/Action/abandonDial``, ``ConnectionStateMachine/Action/detach(graceful:)``).
    struct AttemptHandles {
        /// The connect in progress; at most one at any time.
        var connectTask: Task<Void, Never>?
        /// The socket the connect task opened, until it becomes the channel.
        var dialedSocket: (dialed: Dialed, endpoint: Endpoint)?
        /// Bounds the wait for the server's answer to the session hello.
        var helloTimer: LoopTimer?
        /// The app's preparation of the new connection, while it runs, and its timer.
        var preparationTask: Task<Void, Never>?
        var preparationTimer: LoopTimer?
    }

    /// The timers of planned reconnects. The backoff belongs to backing off and goes with it;
    /// the primary retry and the departure belong to one connection and go when its channel
    /// is detached.
    struct ReconnectHandles {
        var backoffTimer: LoopTimer?
        /// The timer after which a connection over the fallback goes back to the main endpoint.
        var primaryRetryTimer: LoopTimer?
        /// The primary retry whose timer fired while requests were in flight or queued: it is
        /// due as soon as none is.
        var primaryRetryWaiting: ConnectionStateMachine.Token?
        /// Bounds the wait for the responses in flight once the server announced its drain.
        var departureTimer: LoopTimer?

        /// The connection's channel goes: its primary retry and its departure go with it.
        mutating func releaseConnection(on loop: EventLoop) {
            if let primaryRetryTimer { loop.cancel(primaryRetryTimer) }
            primaryRetryTimer = nil
            primaryRetryWaiting = nil
            if let departureTimer { loop.cancel(departureTimer) }
            departureTimer = nil
        }
    }

    /// Tests waiting for the connection to reach a point: no production path appends here.
    struct TestWaiters {
        /// Waiting for a request to hold pushes (``pushesHeldForTesting()``).
        var holds: [CheckedContinuation<Void, Never>] = []
        /// Waiting for reading to stop for a slow subscriber (``readPausedForTesting()``).
        var readPauses: [CheckedContinuation<Void, Never>] = []
    }

    struct QueuedSend {
        var id: UInt64
        var frame: Frame
        /// Resumed once the frame is written into the channel; `nil` for a send that waits
        /// until its bytes are written (``trackedSends``).
        var waiter: UnsafeContinuation<Void, any Error>?
    }

    /// The address of the peer, once connected (the last one while reconnecting).
    public private(set) var remoteAddress: TetherSocketAddress?
    /// The local address of the socket, once connected.
    public private(set) var localAddress: TetherSocketAddress?
    /// What the TLS handshake of the current (or last) connection settled: version, cipher,
    /// ALPN and the server's certificate. `nil` without ``ConnectionConfiguration/tls``, or
    /// before the first handshake finished.
    public private(set) var tlsDetails: TLSDetails?
    /// The endpoint of the current (or last) connection: ``endpoint`` or one of
    /// ``ConnectionConfiguration/alternateEndpoints``.
    public private(set) var currentEndpoint: Endpoint
    /// How the current (or last) connection was opened: the address that won, how long
    /// resolving and connecting took, and every address tried. `nil` before the first
    /// connection.
    public private(set) var connectReport: ConnectReport?

    let frameFeed: Broadcaster<Frame>
    let notificationFeed: Broadcaster<Frame>
    let heartbeatFeed: Broadcaster<Heartbeat>
    let stateFeed: Broadcaster<ConnectionState>
    let transferFeed: Broadcaster<TransferProgress>
    let sessionFeed: Broadcaster<SessionEvent>

    init(endpoint: Endpoint, configuration: ConnectionConfiguration) {
        self.endpoint = endpoint
        self.configuration = configuration
        self.currentEndpoint = endpoint
        self.loop = configuration.eventLoopGroup.next()
        self.channelSettings = ChannelSettings(.client, profile: configuration.profile, limits: configuration.limits, noDelay: configuration.noDelay, tls: configuration.tls, drainTimeout: configuration.drainTimeout, progress: configuration.progress)
        self.table = RequestTable(maximumSerial: configuration.profile.maximumSerial)
        self.requestTimeoutNanoseconds = configuration.requestTimeout.map { MonotonicTime.nanoseconds(of: $0) } ?? 0
        self.lifecycle = ConnectionStateMachine(
            settings: .init(
                endpoint: endpoint,
                endpointCount: 1 + configuration.alternateEndpoints.count,
                policy: configuration.reconnect,
                secured: configuration.tls != nil,
                greets: configuration.session != nil,
                asksIdentity: configuration.session?.identityProvider != nil,
                reconnectsWhenTakenOver: configuration.session?.reconnectsWhenTakenOver ?? false,
                fallback: configuration.fallback,
                prepares: configuration.prepare != nil
            ),
            seed: UInt64.random(in: .min ... .max)
        )
        let size = configuration.limits.subscriberBufferSize
        // Bounded in bytes too: past the bound the connection stops reading its socket until
        // the subscriber has caught up (see Connection+Flow.swift).
        let bytes = configuration.limits.maximumSubscriberBytes
        let weigh: @Sendable (Frame) -> Int = { $0.payload.count }
        let frameGauge = FlowGauge.bytes(bytes)
        frameFeed = Broadcaster(bufferSize: size, gauge: frameGauge, weigh: weigh)
        // With a session no push may be lost once it counts as delivered (and acknowledged):
        // subscribers' buffers are unbounded, and a sequenced push that no subscriber takes
        // (one replayed before the app subscribes, say) is held until one that does comes.
        let sessions = configuration.session != nil
        // Unbounded, but the slowest subscriber's backlog stops the reading (see
        // Connection+Flow.swift).
        let gauge = configuration.session.map { FlowGauge(limit: $0.maximumPendingPushes, byteLimit: bytes) } ?? .bytes(bytes)
        notificationFeed = Broadcaster(
            bufferSize: size,
            holdsUntilSubscribed: sessions,
            lossless: sessions,
            holdLimit: configuration.session.map { max(1, $0.maximumHeldPushes) },
            gauge: gauge,
            weigh: weigh
        )
        // The first subscriber also gets the last heartbeat before it subscribed (its send,
        // then its ack): a subscription made as connect() returns sees heartbeat 1.
        heartbeatFeed = Broadcaster(bufferSize: size, holdsUntilSubscribed: true, holdLimit: 2)
        stateFeed = Broadcaster(bufferSize: max(size, 16), keepsLatest: true)
        transferFeed = Broadcaster(bufferSize: size)
        sessionFeed = Broadcaster(bufferSize: size, tap: Self.sessionTap(configuration, endpoint: endpoint))
        session = configuration.session.map { ClientSessionState(resumeAfter: $0.resumeAfter, epoch: $0.resumeEpoch) }
        identity = ConnectionIdentity(configuration.session)
        stateFeed.publish(.idle)
        if sessions {
            let loop = loop
            notificationFeed.onTaken { [weak self] frames in
                guard let self else { return }
                loop.execute { [self] in assumeIsolated { $0.heldPushesTaken(frames) } }
            }
        }
        for feedGauge in [gauge, frameGauge] {
            let loop = loop
            feedGauge.onRelief { [weak self] in
                guard let self else { return }
                loop.execute { [self] in assumeIsolated { $0.subscribersCaughtUp() } }
            }
        }
    }

    // MARK: Opening

    /// Opens a connection and returns once it is connected.
    ///
    /// The host is resolved and its addresses (IPv6 and IPv4) are raced: a new attempt starts
    /// every ``ConnectionConfiguration/connectionAttemptDelay`` (or as soon as one fails),
    /// the first to accept wins, all within ``ConnectionConfiguration/connectTimeout``;
    /// ``connectReport`` says how it went. When that
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
    ///   ``TetherError/Code/invalidArgument`` when called a second time,
    ///   ``TetherError/Code/connectionClosed`` at once when ``close()`` came first, or
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
    @discardableResult
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
        guard !handle(.connectRequested).contains(.refuseConnect) else {
            throw TetherError(code: .invalidArgument, message: "connect() was already called on the connection to \(endpoint)")
        }
        if configuration.session != nil, configuration.profile.correlation != .bySerial {
            let error = TetherError(
                code: .invalidArgument,
                message: "sessions need a profile that matches responses by serial; the \(configuration.profile.name) profile has no serial"
            )
            handle(.connectAborted(error))
            throw error
        }
        if let fallback = configuration.fallback, fallback.primaryRetryInterval <= .zero {
            let error = TetherError(
                code: .invalidArgument,
                message: "fallback.primaryRetryInterval must be above zero, not \(describe(fallback.primaryRetryInterval))"
            )
            handle(.connectAborted(error))
            throw error
        }
        let reachable = [endpoint] + configuration.alternateEndpoints + (configuration.fallback.map { [$0.endpoint] } ?? [])
        if let mismatch = reachable.lazy.compactMap({ [tls = configuration.tls] in $0.webSocketSecurityMismatch(tls: tls) }).first {
            handle(.connectAborted(mismatch))
            throw mismatch
        }
        if let tls = configuration.tls {
            // Files that cannot be loaded fail here, before any socket is opened.
            do throws(TetherError) {
                try await Self.prepare(tls)
            } catch {
                handle(.connectAborted(error))
                throw error
            }
        }
        followPath()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                openWaiter = continuation
                handle(.connectStarted)
            }
        } onCancel: {
            loop.execute { [self] in assumeIsolated { _ = $0.handle(.connectCancelled) } }
        }
    }

    /// Loads what TLS needs (the system's CA bundle takes tens of milliseconds) off the
    /// event loop, which other connections share.
    @concurrent
    private nonisolated static func prepare(_ tls: TLSConfiguration) async throws(TetherError) {
        try tls.provider.prepare()
    }

    /// Starts the connect task of attempt `token` to `target`.
    private func startDial(_ token: ConnectionStateMachine.Token, to target: Endpoint) {
        attemptHandles.connectTask = Task(executorPreference: loop.taskExecutor) { [self] in
            await runAttempt(token, endpoint: target)
        }
    }

    private func runAttempt(_ token: ConnectionStateMachine.Token, endpoint: Endpoint) async {
        switch await dial(endpoint) {
        case .success(let connected):
            attemptHandles.dialedSocket = (connected, endpoint)
            handle(.dialSucceeded(token))
            // Abandoned meanwhile (closed, suspended) when still here: the socket is nobody's,
            // and dropping it closes it.
            attemptHandles.dialedSocket = nil
        case .failure(let error):
            handle(.dialFailed(token, error))
        }
    }

    /// Makes the dialed socket of attempt `token` the channel.
    private func attachDialed(_ token: ConnectionStateMachine.Token) {
        guard let connected = attemptHandles.dialedSocket else { preconditionFailure("no dialed socket to attach for attempt \(token)") }
        attemptHandles.dialedSocket = nil
        do {
            try attach(connected.dialed.stream, endpoint: connected.endpoint)
        } catch {
            handle(.dialFailed(token, error))
            return
        }
        connectReport = connected.dialed.report
        handle(.attached(token))
    }

    private func attach(_ stream: any OpenedStream, endpoint: Endpoint) throws(TetherError) {
        // Checked before any socket is opened too (``open()``); here for endpoints reached
        // otherwise. The stream is dropped then, which closes it.
        if endpoint.webSocketPath != nil, let mismatch = endpoint.webSocketSecurityMismatch(tls: configuration.tls) { throw mismatch }
        // The channel reports a finished handshake (TLS, or the WebSocket upgrade) before
        // anything else goes.
        lifecycle.settings.secured = configuration.tls != nil || endpoint.webSocketPath != nil
        let channel = try Channel.over(try stream.makeTransport(on: loop, reading: .plain), on: loop, owner: self, settings: channelSettings)
        self.channel = channel
        remoteAddress = stream.remoteAddress
        localAddress = channel.localAddress
        currentEndpoint = endpoint
    }

    /// The TLS handshake on `channel` finished: go on as a plain connection would.
    func secured(_ channel: Channel) {
        guard self.channel === channel else { return }
        tlsDetails = channel.tlsDetails
        handle(.tlsEstablished)
    }

    /// The socket is up (and secured): send the session hello for attempt `token`.
    private func start(on channel: Channel, token: ConnectionStateMachine.Token) {
        // Connected, but not ready: the session hello goes first, and the rest waits for the
        // server's answer (``helloAnswered(_:)``).
        greet(on: channel, token: token)
    }

    /// The connection broke (peer closed, network error, heartbeat timeout, protocol error):
    /// requests in flight fail with ``TetherError/Code/connectionLost``, then it reconnects
    /// by the policy. Queued requests and frames stay queued for the next connection. Lost
    /// during a handshake, it is a failed attempt.
    func connectionLost(_ reason: TetherError) {
        handle(.lost(reason))
    }

    /// Drops the socket and stops its heartbeats; the rest of the connection stays.
    private func detachChannel(graceful: Bool) {
        stopPreparation()
        reconnectHandles.releaseConnection(on: loop)
        if let heartbeatTimer { loop.cancel(heartbeatTimer) }
        heartbeatTimer = nil
        heartbeatsEnded(lost: !graceful)
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
        handle(.suspend(TetherError(code: .connectionLost, message: "the connection to \(currentEndpoint) was suspended by suspend()")))
    }

    /// Connects again at once after ``suspend()``, with a fresh attempt budget and backoff.
    public func resume() {
        handle(.resume)
    }

    /// Skips the rest of a reconnect backoff and connects at once, with a fresh attempt
    /// budget: for a network that just came back, or an app returning to the foreground.
    /// Also ends a ``suspend()``. Does nothing while connected or connecting.
    public func reconnectNow() {
        handle(.reconnectNow)
    }

    // MARK: Subscriptions

    /// Every inbound frame, raw: responses, notifications and heartbeat acks alike.
    ///
    /// Each subscription buffers up to ``Limits/subscriberBufferSize`` frames it has not
    /// read; past that its oldest is dropped and counted in its ``Subscription/dropped``.
    public nonisolated var frames: Subscription<Frame> { frameFeed.subscribe() }

    /// Every push (notification) from the server.
    ///
    /// With a session, a new subscription first gets the sequenced pushes held because no
    /// subscription took them; see ``SessionConfiguration/maximumHeldPushes``. Its buffer
    /// then drops nothing, and while it has more than
    /// ``SessionConfiguration/maximumPendingPushes`` waiting the connection stops reading.
    ///
    /// Without a session, each subscription buffers up to ``Limits/subscriberBufferSize``
    /// pushes it has not read; past that its oldest is dropped, for it alone, and counted in
    /// its ``Subscription/dropped``. Keep the subscription in a `let` to read the count as
    /// you go:
    ///
    /// ```swift
    /// let pushes = connection.notifications
    /// var lost = 0
    /// for await push in pushes {
    ///     if pushes.dropped > lost {
    ///         print("missed \(pushes.dropped - lost) pushes")
    ///         lost = pushes.dropped
    ///     }
    ///     handle(push)
    /// }
    /// ```
    public nonisolated var notifications: Subscription<Frame> { notificationFeed.subscribe() }

    /// Pushes of one type.
    ///
    /// With a session, a new subscription first gets the held sequenced pushes of that type;
    /// see ``SessionConfiguration/maximumHeldPushes``. Without one, it drops its oldest push
    /// when ``Limits/subscriberBufferSize`` are waiting, counted in ``Subscription/dropped``,
    /// as ``notifications`` does.
    ///
    /// - Parameter type: The notification type to keep.
    /// - Returns: A sequence of the pushes of that type.
    public nonisolated func notifications(ofType type: UInt32) -> Subscription<Frame> {
        notificationFeed.subscribe { $0.type == type }
    }

    /// One element per heartbeat event: sent, acked with its round-trip time, or missed.
    ///
    /// Each subscription gets the events from when it subscribes. The first one also gets
    /// the last two events published before anyone subscribed, so a subscription made as
    /// `connect()` returns starts with heartbeat 1, which goes out as the connection comes up.
    ///
    /// Each subscription buffers up to ``Limits/subscriberBufferSize`` events it has not
    /// read; past that its oldest is dropped and counted in its ``Subscription/dropped``:
    ///
    /// ```swift
    /// let beats = connection.heartbeats
    /// var lost = 0
    /// for await beat in beats {
    ///     if beats.dropped > lost {
    ///         print("missed \(beats.dropped - lost) heartbeat events")
    ///         lost = beats.dropped
    ///     }
    ///     print(beat.outcome)
    /// }
    /// ```
    public nonisolated var heartbeats: Subscription<Heartbeat> { heartbeatFeed.subscribe() }

    /// The progress of large frames, sent and received: a report each
    /// ``ProgressConfiguration/step`` bytes and one when the frame is complete, for frames of
    /// at least ``ProgressConfiguration/minimumFrameSize`` bytes
    /// (``ConnectionConfiguration/progress``).
    ///
    /// ```swift
    /// for await progress in connection.transfers where progress.direction == .sending {
    ///     print(progress)   // sending 0x30 serial 4: 12582912 of 52428800 bytes (24 %)
    /// }
    /// ```
    ///
    /// A frame sent reports the bytes handed to the kernel; a frame received, the bytes
    /// arrived. A transfer that the connection's end cuts short reports nothing more.
    public nonisolated var transfers: Subscription<TransferProgress> { transferFeed.subscribe() }

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
            + stateFeed.droppedCount + sessionFeed.droppedCount
        metrics.heldNotifications = session?.held.count ?? 0
        return metrics
    }

    // MARK: Closing

    /// Closes the connection for good. Idempotent; never followed by a reconnect.
    ///
    /// Bytes already queued are flushed; requests still waiting, in flight or queued, fail
    /// with ``TetherError/Code/connectionClosed``; a reconnect backoff or a connect under way
    /// stops at once; every subscription ends.
    public func close() {
        handle(.close(TetherError(code: .connectionClosed, message: "connection to \(remoteAddress?.description ?? endpoint.description) closed by close()")))
    }

    /// Fails every request and frame that waits, for `reason`: the connection has ended.
    private func failWaiting(_ reason: TetherError) {
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
                // Never sent: safe to send again, which a drain's reason says by its code.
                let code: TetherError.Code = reason.code == .serverDraining ? .serverDraining : .notConnected
                error = TetherError(code: code, message: "request \(hex(entry.type)) serial \(serial) was never sent: \(reason.message)", underlying: reason)
            } else {
                error = Self.lost(type: entry.type, serial: serial, reason: reason)
            }
            entry.waiter.resume(throwing: error)
        }
        let sends = sendQueue
        sendQueue.removeAll()
        for send in sends {
            let error = TetherError(
                code: closedByUser ? .connectionClosed : .notConnected,
                message: "frame \(hex(send.frame.type)) was never sent: \(reason.message)",
                underlying: reason
            )
            if let waiter = send.waiter {
                waiter.resume(throwing: error)
            } else {
                finishTrackedSend(send.id, error)
            }
        }
    }

    // MARK: Lifecycle

    /// Feeds `event` to ``lifecycle`` and carries out the actions it returns, in order.
    ///
    /// An action may report an event in turn (a write that fails reports a loss): the actions
    /// of that later event run at once, and what is left of this event's actions is dropped,
    /// since the machine has moved on.
    ///
    /// - Parameter event: What happened.
    /// - Returns: The actions, for the callers that must answer on them.
    @discardableResult
    func handle(_ event: ConnectionStateMachine.Event) -> [ConnectionStateMachine.Action] {
        let actions = lifecycle.handle(event)
        let transitions = lifecycle.transitions
        for action in actions {
            guard lifecycle.transitions == transitions else { break }
            perform(action)
        }
        return actions
    }

    private func perform(_ action: ConnectionStateMachine.Action) {
        switch action {
        case .refuseConnect:
            break
        case .dial(let token, let index, let attempt):
            if attempt > 0 { counters.reconnectAttempts += 1 }
            let endpoints = [endpoint] + configuration.alternateEndpoints
            startDial(token, to: endpoints[index])
        case .dialFallback(let token):
            guard let fallback = configuration.fallback else { preconditionFailure("a fallback dial without a fallback") }
            startDial(token, to: fallback.endpoint)
        case .schedulePrimaryRetry(let token, let delay):
            reconnectHandles.primaryRetryTimer = loop.schedule(after: delay) { [self] in
                assumeIsolated { connection in
                    connection.reconnectHandles.primaryRetryTimer = nil
                    connection.reconnectHandles.primaryRetryWaiting = token
                    connection.retryPrimaryIfIdle()
                }
            }
        case .dialFinished:
            attemptHandles.connectTask = nil
        case .abandonDial:
            attemptHandles.connectTask?.cancel()
            attemptHandles.connectTask = nil
        case .attach(let token):
            attachDialed(token)
        case .sendHello(let token):
            if let channel { start(on: channel, token: token) }
        case .stopHelloTimer:
            if let timer = attemptHandles.helloTimer { loop.cancel(timer) }
            attemptHandles.helloTimer = nil
        case .prepare(let token):
            startPreparation(token)
        case .startHeartbeats:
            startHeartbeats()
        case .verifyConnection:
            verifyConnection()
        case .countConnection:
            counters.connects += 1
            if !channelTable.isEmpty { resubscribeChannels() }
        case .writeQueued:
            pump()
        case .resumeOpener:
            let waiter = openWaiter
            openWaiter = nil
            waiter?.resume()
        case .failOpener(let failure):
            guard let waiter = openWaiter else { return }
            openWaiter = nil
            switch failure {
            case .cancelled: waiter.resume(throwing: CancellationError())
            case .notConnected: waiter.resume(throwing: notConnected())
            case .error(let error): waiter.resume(throwing: error)
            }
        case .scheduleBackoff(let token, let delay):
            reconnectHandles.backoffTimer = loop.schedule(after: delay) { [self] in
                assumeIsolated { connection in
                    connection.reconnectHandles.backoffTimer = nil
                    connection.handle(.backoffElapsed(token))
                }
            }
        case .cancelBackoff:
            if let timer = reconnectHandles.backoffTimer { loop.cancel(timer) }
            reconnectHandles.backoffTimer = nil
        case .detach(let graceful):
            detachChannel(graceful: graceful)
        case .failInFlight(let reason):
            failInFlight(reason)
        case .failWaiting(let reason):
            failWaiting(reason)
        case .publish(let state):
            let state = inUse(state)
            observe(state)
            stateFeed.publish(state)
        case .resetSession:
            resetSession()
        case .resumeSwitcher:
            answerSwitcher(nil)
        case .failSwitcher(let failure):
            answerSwitcher(failure)
        case .awaitDeparture:
            awaitDeparture()
        case .endStreams:
            stopFollowingPath()
            stateFeed.finish()
            sessionFeed.finish()
            frameFeed.finish()
            notificationFeed.finish()
            heartbeatFeed.finish()
            transferFeed.finish()
            endChannels()
        }
    }
}
