/// Connects a nonblocking TCP socket to one address, with a deadline. Loop thread only.
final class ConnectAttempt: IOHandler, @unchecked Sendable {
    // @unchecked Sendable: touched only on `loop`'s thread; Sendable so the cancellation
    // handler can send it to the loop.

    private let loop: EventLoop
    private let address: TetherSocketAddress
    /// The socket being connected, until the attempt ends.
    private var socket: Socket?
    private let fd: Int32
    private var timer: LoopTimer?
    private var continuation: CheckedContinuation<Result<SocketBox, TetherError>, Never>?
    private let timeout: Duration

    private init(loop: EventLoop, address: TetherSocketAddress, socket: consuming Socket, timeout: Duration) {
        self.loop = loop
        self.address = address
        self.fd = socket.descriptor
        self.socket = .some(socket)
        self.timeout = timeout
    }

    /// Opens a socket and connects it to `address` within `timeout`.
    ///
    /// Must be called on `loop`'s executor. Returns the connected socket, which the caller
    /// then owns, or an error that names the address.
    static func connect(
        to address: TetherSocketAddress,
        timeout: Duration,
        on loop: EventLoop,
        isolation: isolated any Actor
    ) async -> Result<SocketBox, TetherError> {
        loop.preconditionInLoop()
        let socket: Socket
        do {
            socket = try Socket(family: address.family, type: SocketOptions.streamType)
        } catch {
            return .failure(TetherError(code: .systemCall, message: "cannot open a socket for \(address): \(error)", underlying: error))
        }
        let connected: Bool
        do {
            connected = try Syscall.startConnect(socket.descriptor, address)
        } catch {
            // The socket goes out of scope here, which closes it.
            return .failure(Self.error(error, address: address))
        }
        if connected { return .success(SocketBox(socket)) }
        let attempt = ConnectAttempt(loop: loop, address: address, socket: socket, timeout: timeout)
        return await withTaskCancellationHandler {
            // Capturing `isolation` keeps this closure on the caller's actor, i.e. the loop.
            _ = isolation
            return await withCheckedContinuation { continuation in
                attempt.start(continuation)
            }
        } onCancel: {
            loop.execute { attempt.finish(TetherError(code: .connectFailed, message: "connecting to \(address) was cancelled", underlying: CancellationError())) }
        }
    }

    private func start(_ continuation: CheckedContinuation<Result<SocketBox, TetherError>, Never>) {
        self.continuation = continuation
        do {
            try loop.register(fd, interest: .write, handler: self)
        } catch {
            finish(TetherError(code: .systemCall, message: "cannot watch the socket for \(address): \(error)"))
            return
        }
        timer = loop.schedule(after: timeout) { [self] in
            timer = nil
            finish(TetherError(code: .connectTimedOut, message: "connecting to \(address) timed out after \(describe(timeout))"))
        }
    }

    func handleReadiness(_ event: ReadinessEvent) {
        guard event.writable || event.hangup else { return }
        let status = (try? Syscall.getOption(fd, level: SocketOptions.socketLevel, name: SocketOptions.error)) ?? 0
        if status == 0 {
            // A stale readiness event (the descriptor number reused within one epoll batch)
            // must not pass for a finished connect: only a socket with a peer is connected.
            guard (try? Syscall.peerAddress(fd)) != nil else { return }
            finish(nil)
        } else {
            finish(Self.error(Errno(rawValue: status), address: address))
        }
    }

    /// Ends the attempt exactly once, connected when `failure` is `nil`; later calls do
    /// nothing. A failed attempt closes its socket; a connected one hands it over.
    private func finish(_ failure: TetherError?) {
        guard let continuation else { return }
        self.continuation = nil
        if let timer { loop.cancel(timer) }
        timer = nil
        loop.deregister(fd)
        guard let socket = socket.take() else { return }
        if let failure {
            socket.close()
            continuation.resume(returning: .failure(failure))
        } else {
            continuation.resume(returning: .success(SocketBox(socket)))
        }
    }

    static func error(_ errno: Errno, address: TetherSocketAddress) -> TetherError {
        if errno == .connectionRefused {
            return TetherError(code: .connectionRefused, message: "connection refused by \(address)", underlying: errno)
        }
        if errno == .timedOut {
            return TetherError(code: .connectTimedOut, message: "connecting to \(address) timed out", underlying: errno)
        }
        return TetherError(code: .connectFailed, message: "cannot connect to \(address): \(errno)", underlying: errno)
    }
}
