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
/// gets every element and ends when the connection closes.
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

    var channel: SocketChannel?
    var codec: any FrameCodec
    var table = RequestTable<Waiter>()
    var state = ConnectionState.connecting
    var counters = ConnectionStatistics()
    var heartbeatMachine: HeartbeatStateMachine?
    var heartbeatTimer: LoopTimer?
    /// The address of the peer, once connected.
    public private(set) var remoteAddress: SocketAddress?
    /// The local address of the socket, once connected.
    public private(set) var localAddress: SocketAddress?

    let frameFeed: Broadcaster<Frame>
    let notificationFeed: Broadcaster<Frame>
    let heartbeatFeed: Broadcaster<Heartbeat>
    let stateFeed: Broadcaster<ConnectionState>

    init(endpoint: Endpoint, configuration: ConnectionConfiguration) {
        self.endpoint = endpoint
        self.configuration = configuration
        self.loop = configuration.eventLoopGroup.next()
        self.codec = configuration.profile.makeCodec(configuration.limits.maximumPayloadLength)
        let size = configuration.limits.subscriberBufferSize
        frameFeed = Broadcaster(bufferSize: size)
        notificationFeed = Broadcaster(bufferSize: size)
        heartbeatFeed = Broadcaster(bufferSize: size)
        stateFeed = Broadcaster(bufferSize: max(size, 16), keepsLatest: true)
        stateFeed.publish(.connecting)
    }

    // MARK: Opening

    /// Opens a connection and returns once it is connected.
    ///
    /// The host is resolved and each of its addresses (IPv4 and IPv6) is tried in turn
    /// until one accepts, all within ``ConnectionConfiguration/connectTimeout``.
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
        let addresses: [SocketAddress]
        do {
            addresses = try await Resolver.resolve(endpoint)
        } catch {
            finish(error, graceful: false)
            throw error
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
            case .success(let fd):
                do {
                    try attach(fd: fd, address: address)
                    return
                } catch {
                    failures.append(error)
                }
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
            finish(TetherError(code: .connectFailed, message: "connecting to \(endpoint) was cancelled"), graceful: false)
            throw CancellationError()
        }
        let error = Self.combine(failures, endpoint: endpoint)
        finish(error, graceful: false)
        throw error
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

    private func attach(fd: Int32, address: SocketAddress) throws(TetherError) {
        let channel = try SocketChannel(
            fd: fd,
            remoteAddress: address,
            loop: loop,
            noDelay: configuration.noDelay,
            maximumOutboundBytes: configuration.limits.maximumOutboundBytes
        )
        channel.delegate = self
        self.channel = channel
        remoteAddress = address
        localAddress = channel.localAddress
        setState(.connected)
        startHeartbeats()
    }

    // MARK: Subscriptions

    /// Every inbound frame, raw: responses, notifications and heartbeat acks alike.
    public nonisolated var frames: Subscription<Frame> { frameFeed.subscribe() }

    /// Every push (notification) from the server.
    public nonisolated var notifications: Subscription<Frame> { notificationFeed.subscribe() }

    /// Pushes of one type.
    ///
    /// - Parameter type: The notification type to keep.
    /// - Returns: A sequence of the pushes of that type.
    public nonisolated func notifications(ofType type: UInt32) -> Subscription<Frame> {
        notificationFeed.subscribe { $0.type == type }
    }

    /// One element per heartbeat event: sent, acked with its round-trip time, or missed.
    public nonisolated var heartbeats: Subscription<Heartbeat> { heartbeatFeed.subscribe() }

    /// The current state first, then every change, ending after ``ConnectionState/Phase/closed``.
    public nonisolated var states: Subscription<ConnectionState> { stateFeed.subscribe() }

    /// The current state.
    public var currentState: ConnectionState { state }

    /// Counters for this connection.
    public var statistics: ConnectionStatistics {
        var counters = counters
        counters.pendingRequests = table.count
        counters.droppedElements = frameFeed.droppedCount + notificationFeed.droppedCount + heartbeatFeed.droppedCount
        return counters
    }

    func setState(_ new: ConnectionState) {
        state = new
        stateFeed.publish(new)
    }

    // MARK: Closing

    /// Closes the connection. Idempotent.
    ///
    /// Bytes already queued are flushed; requests still waiting fail with
    /// ``TetherError/Code/connectionClosed``; every subscription ends.
    public func close() {
        finish(TetherError(code: .connectionClosed, message: "connection to \(remoteAddress?.description ?? endpoint.description) closed by close()"), graceful: true)
    }

    /// Ends the connection for `reason` and fails everything that waits on it. Idempotent.
    func finish(_ reason: TetherError, graceful: Bool) {
        guard state.phase != .closed else { return }
        if let heartbeatTimer { loop.cancel(heartbeatTimer) }
        heartbeatTimer = nil
        if let channel {
            channel.delegate = nil
            if graceful { channel.closeAfterFlush(timeout: configuration.drainTimeout) } else { channel.close() }
            self.channel = nil
        }
        for (serial, entry) in table.removeAll() {
            if let timer = entry.timer { loop.cancel(timer) }
            entry.waiter.resume(throwing: TetherError(
                code: reason.code,
                message: "request \(hex(entry.type)) serial \(serial) failed: \(reason.message)",
                underlying: reason
            ))
        }
        setState(.closed(reason))
        stateFeed.finish()
        frameFeed.finish()
        notificationFeed.finish()
        heartbeatFeed.finish()
    }
}
