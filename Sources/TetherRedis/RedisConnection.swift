internal import Tether

/// One connection to Redis, on an event loop: commands are written as they come (pipelined)
/// and answered in order.
///
/// It connects on first use and again after it broke. Every wait is bounded: the connect
/// by ``RedisConfiguration/connectTimeout``, each command by
/// ``RedisConfiguration/commandTimeout`` (a server that does not answer in time costs the
/// connection, and every command waiting on it fails, saying so).
actor RedisConnection {
    nonisolated let loop: EventLoop
    nonisolated let configuration: RedisConfiguration
    nonisolated let limits: RESPLimits

    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.actorExecutor }

    /// A command written and not yet answered.
    private struct Pending {
        var sink: ReplySink
        var deadline: UInt64
        var name: String
    }

    private var transport: (any ByteTransport)?
    private var link: RedisLink?
    /// Commands in the order they were written; those before `head` are answered.
    private var pending: [Pending] = []
    private var head = 0
    /// While connecting: who waits for it.
    private var connectWaiters: [CheckedContinuation<Void, any Error>]?
    /// Bytes the next reply needs before it is worth decoding again.
    private var needed = 0
    private var watchdogRunning = false
    private var closed = false
    /// While a TLS handshake runs: who waits for it.
    private var handshake: CheckedContinuation<Void, any Error>?
    /// For a connection that subscribes: where the messages of its channels go, on the loop.
    private var onMessage: (@Sendable (_ channel: [UInt8], _ payload: [UInt8]) -> Void)?
    /// Told when the connection was given up, on the loop.
    private var onDrop: (@Sendable (TetherError) -> Void)?

    init(configuration: RedisConfiguration, loop: EventLoop) {
        self.configuration = configuration
        self.loop = loop
        self.limits = RESPLimits(maximumBulkBytes: configuration.maximumReplyBytes, maximumElements: 1 << 24)
    }

    /// Runs one command and returns its reply; an error reply is returned, not thrown.
    ///
    /// - Parameters:
    ///   - arguments: The command and its arguments.
    ///   - name: What the command does, for messages.
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the server cannot
    ///   be reached, closed the connection, or did not answer in time.
    func run(_ arguments: [[UInt8]], name: String) async throws(TetherError) -> RESPValue {
        try await runAll([arguments], name: name)[0]
    }

    /// Runs several commands in one write and returns their replies, in order.
    func runAll(_ commands: [[[UInt8]]], name: String) async throws(TetherError) -> [RESPValue] {
        do {
            try await connectIfNeeded()
            guard let transport else { throw failure("the connection closed before \(name) was written") }
            var bytes: [UInt8] = []
            for command in commands { RESPEncoder.append(command, to: &bytes) }
            return try await withCheckedThrowingContinuation { (all: CheckedContinuation<[RESPValue], any Error>) in
                // Each reply goes to the sink; the caller resumes once all came.
                let sink = ReplySink(count: commands.count, continuation: all)
                let deadline = loop.now &+ MonotonicTime.nanoseconds(of: configuration.commandTimeout)
                for _ in 0..<commands.count {
                    pending.append(Pending(sink: sink, deadline: deadline, name: name))
                }
                transport.buffers.outbound.writeBytes(bytes)
                transport.scheduleFlush()
                startWatchdog()
            }
        } catch let error as TetherError {
            throw error
        } catch {
            throw failure("\(name) failed: \(error)")
        }
    }

    /// Makes this a connection that subscribes: pub/sub messages go to `message`, and `drop`
    /// hears when the connection is given up (then it subscribes to nothing any more).
    func subscribing(
        message: @escaping @Sendable (_ channel: [UInt8], _ payload: [UInt8]) -> Void,
        drop: @escaping @Sendable (TetherError) -> Void
    ) {
        onMessage = message
        onDrop = drop
    }

    /// Whether the connection is up now.
    var isConnected: Bool { transport != nil }

    /// Ends the connection; commands waiting fail.
    func close() {
        closed = true
        drop(failure("the store was closed"))
    }

    // MARK: Connecting

    private func connectIfNeeded() async throws {
        if transport != nil { return }
        if closed { throw failure("the store was closed") }
        if connectWaiters != nil {
            try await withCheckedThrowingContinuation { connectWaiters!.append($0) }
            return
        }
        connectWaiters = []
        let result: Result<Void, TetherError>
        do {
            try await connect()
            result = .success(())
        } catch {
            result = .failure(error)
        }
        let waiters = connectWaiters ?? []
        connectWaiters = nil
        for waiter in waiters { waiter.resume(with: result.mapError { $0 as any Error }) }
        try result.get()
    }

    private func connect() async throws(TetherError) {
        let endpoint = Endpoint(host: configuration.host, port: configuration.port)
        let context = ConnectContext(loop: loop, timeout: configuration.connectTimeout)
        var connector = SocketNetwork().connector(for: endpoint)
        if let tls = configuration.tls {
            do {
                try tls.provider.prepare()
            } catch {
                throw failure("cannot be reached with its TLS configuration: \(error.message)")
            }
            connector = TLSConnector(over: connector, tls: tls)
        }
        let connected: ConnectedStream
        switch await connector.connect(to: endpoint, in: context, isolation: self) {
        case .success(let stream): connected = stream
        case .failure(let error): throw failure("cannot connect: \(error.message)")
        }
        let transport: any ByteTransport
        do {
            transport = try connected.stream.makeTransport(on: loop, reading: .plain)
        } catch {
            throw failure("cannot use the connection: \(error.message)")
        }
        let link = RedisLink(connection: self, loop: loop)
        transport.handler = link
        self.transport = transport
        self.link = link
        needed = 0
        do {
            try transport.start()
        } catch {
            self.transport = nil
            throw failure("cannot use the connection: \(error.message)")
        }
        if configuration.tls != nil, transport.security?.isEstablished != true {
            // Bounded like the connect: a server that never finishes the handshake costs
            // the attempt.
            let bound = configuration.connectTimeout
            let timer = Task { [weak self] in
                try? await Task.sleep(for: bound)
                await self?.handshakeTimedOut(after: bound)
            }
            defer { timer.cancel() }
            do {
                try await withCheckedThrowingContinuation { handshake = $0 }
            } catch {
                throw failure("refused the TLS handshake: \(TetherError.reason(of: error))")
            }
        }
        var greeting: [[[UInt8]]] = []
        if let password = configuration.password {
            greeting.append([Array("AUTH".utf8)] + (configuration.user.map { [Array($0.utf8)] } ?? []) + [Array(password.utf8)])
        }
        if configuration.database != 0 {
            greeting.append([Array("SELECT".utf8), Array(String(configuration.database).utf8)])
        }
        guard !greeting.isEmpty else { return }
        let replies = try await runAll(greeting, name: "logging in")
        for reply in replies {
            if case .error(let message) = reply {
                drop(failure("refused the login: \(message)"))
                throw failure("refused the login: \(message)")
            }
        }
    }

    // MARK: Replies

    /// New bytes arrived: answers every command whose reply is whole.
    func readable() {
        guard let transport else { return }
        while transport.buffers.inbound.readableBytes > 0 {
            guard head < pending.count || onMessage != nil else {
                drop(failure("sent \(transport.buffers.inbound.readableBytes) bytes no command asked for"))
                return
            }
            if transport.buffers.inbound.readableBytes < needed { return }
            let limits = limits
            let outcome = transport.buffers.inbound.withReadableBytes { RESPDecoder.decode($0, limits: limits) }
            switch outcome {
            case .value(let value, let consumed):
                transport.buffers.inbound.moveReaderIndex(forwardBy: consumed)
                needed = 0
                if let onMessage, let elements = value.elements, elements.count == 3, elements[0].bytes == Self.message,
                    let channel = elements[1].bytes, let payload = elements[2].bytes {
                    onMessage(channel, payload)
                    continue
                }
                guard head < pending.count else {
                    drop(failure("sent a reply no command asked for"))
                    return
                }
                let answered = pending[head]
                head += 1
                if head == pending.count {
                    pending.removeAll(keepingCapacity: true)
                    head = 0
                } else if head > 64, head * 2 > pending.count {
                    pending.removeFirst(head)
                    head = 0
                }
                answered.sink.deliver(value)
            case .incomplete(let count):
                needed = count
                return
            case .invalid(let reason):
                drop(failure("sent a reply that is not RESP: \(reason)"))
                return
            }
        }
    }

    private func handshakeTimedOut(after bound: Duration) {
        guard let waiter = handshake else { return }
        handshake = nil
        drop(failure("did not finish the TLS handshake within \(bound)"))
        waiter.resume(throwing: TetherError(code: .handshakeTimeout, message: "no handshake within \(bound)"))
    }

    /// The TLS handshake finished.
    func secured() {
        let waiter = handshake
        handshake = nil
        waiter?.resume()
    }

    /// The connection closed by itself.
    func closedByPeer(_ error: TetherError) {
        if let waiter = handshake {
            handshake = nil
            transport = nil
            link = nil
            waiter.resume(throwing: error)
            return
        }
        drop(failure("closed the connection: \(error.message)"))
    }

    /// Gives the connection up: every command waiting fails with `error`.
    private func drop(_ error: TetherError) {
        let wasUp = transport != nil
        let waiting = pending[head...]
        pending = []
        head = 0
        needed = 0
        if let transport {
            transport.handler = nil
            transport.close()
        }
        transport = nil
        link = nil
        for command in waiting { command.sink.fail(error) }
        if wasUp { onDrop?(error) }
    }

    private static let message = Array("message".utf8)

    /// Watches the oldest command's deadline while commands wait.
    private func startWatchdog() {
        guard !watchdogRunning else { return }
        watchdogRunning = true
        Task { await watch() }
    }

    private func watch() async {
        defer { watchdogRunning = false }
        while head < pending.count {
            let oldest = pending[head]
            if loop.now >= oldest.deadline {
                drop(failure("did not answer \(oldest.name) within \(configuration.commandTimeout)"))
                return
            }
            try? await loop.sleep(until: oldest.deadline)
        }
    }

    private nonisolated func failure(_ reason: String) -> TetherError {
        TetherError(code: .storeFailed, message: "Redis at \(configuration.endpointName) \(reason)")
    }
}

/// Gathers the replies of several commands written together, for their one caller.
private final class ReplySink: @unchecked Sendable {
    // @unchecked Sendable: used only on the connection's loop.
    private var replies: [RESPValue] = []
    private let count: Int
    private var continuation: CheckedContinuation<[RESPValue], any Error>?

    init(count: Int, continuation: CheckedContinuation<[RESPValue], any Error>) {
        self.count = count
        self.continuation = continuation
        replies.reserveCapacity(count)
    }

    func deliver(_ reply: RESPValue) {
        replies.append(reply)
        guard replies.count == count, let continuation else { return }
        self.continuation = nil
        continuation.resume(returning: replies)
    }

    func fail(_ error: TetherError) {
        guard let continuation else { return }
        self.continuation = nil
        continuation.resume(throwing: error)
    }
}

/// Hears the transport of a ``RedisConnection`` on its loop.
final class RedisLink: ByteTransportHandler {
    private weak var connection: RedisConnection?
    private let loop: EventLoop

    init(connection: RedisConnection, loop: EventLoop) {
        self.connection = connection
        self.loop = loop
    }

    func transportRead() {
        guard let connection else { return }
        onLoop(loop, connection, ()) { connection, _ in connection.readable() }
    }

    func transportClosed(_ error: TetherError) {
        guard let connection else { return }
        onLoop(loop, connection, error) { connection, error in connection.closedByPeer(error) }
    }

    func transportWritable() {}

    func transportSecured() {
        guard let connection else { return }
        onLoop(loop, connection, ()) { connection, _ in connection.secured() }
    }
}
