/// An exchange on a connected socket before it becomes a transport (an HTTP proxy's
/// `CONNECT`): the request written, the answer read until its head ends, with a deadline.
/// Loop thread only.
final class SocketExchange: IOHandler, @unchecked Sendable {
    // @unchecked Sendable: touched only on `loop`'s thread; Sendable so the cancellation
    // handler can send it to the loop.

    typealias Outcome = Result<(stream: any OpenedStream, answer: [UInt8]), StreamExchangeFailure>

    private let loop: EventLoop
    private var socket: Socket?
    private let fd: Int32
    private let remoteAddress: TetherSocketAddress
    private let noDelay: Bool
    private let request: [UInt8]
    private let headEnd: @Sendable (UnsafeRawBufferPointer) -> Int?
    private let limit: Int
    private var sent = 0
    private var answer: [UInt8] = []
    private var timer: LoopTimer?
    private var continuation: CheckedContinuation<Outcome, Never>?

    private init(
        loop: EventLoop,
        stream: SocketStream,
        request: [UInt8],
        headEnd: @escaping @Sendable (UnsafeRawBufferPointer) -> Int?,
        limit: Int
    ) {
        let socket = stream.box.take()
        self.loop = loop
        self.fd = socket.descriptor
        self.socket = .some(socket)
        self.remoteAddress = stream.remoteAddress
        self.noDelay = stream.noDelay
        self.request = request
        self.headEnd = headEnd
        self.limit = limit
    }

    /// Runs the exchange on `stream`'s socket; see ``OpenedStream/exchange(_:headEnd:limit:timeout:on:isolation:)``.
    static func run(
        on stream: SocketStream,
        request: [UInt8],
        headEnd: @escaping @Sendable (UnsafeRawBufferPointer) -> Int?,
        limit: Int,
        timeout: Duration,
        loop: EventLoop,
        isolation: isolated any Actor
    ) async -> Outcome {
        loop.preconditionInLoop()
        let exchange = SocketExchange(loop: loop, stream: stream, request: request, headEnd: headEnd, limit: limit)
        return await withTaskCancellationHandler {
            _ = isolation
            return await withCheckedContinuation { continuation in
                exchange.start(continuation, timeout: timeout)
            }
        } onCancel: {
            loop.execute { exchange.finish(.failure(.cancelled)) }
        }
    }

    private func start(_ continuation: CheckedContinuation<Outcome, Never>, timeout: Duration) {
        self.continuation = continuation
        do {
            try loop.register(fd, interest: .write, handler: self)
        } catch {
            finish(.failure(.unwatchable(error)))
            return
        }
        timer = loop.schedule(after: timeout) { [self] in
            timer = nil
            finish(.failure(.timedOut))
        }
    }

    func handleReadiness(_ event: ReadinessEvent) {
        if sent < request.count {
            guard event.writable || event.hangup else { return }
            writeRequest()
        } else {
            guard event.readable || event.hangup else { return }
            readAnswer()
        }
    }

    private func writeRequest() {
        do {
            while sent < request.count {
                let result = try request.withUnsafeBytes { bytes throws(Errno) in
                    try Syscall.sendBytes(fd, bytes.baseAddress! + sent, bytes.count - sent)
                }
                guard case .processed(let count) = result else { return }
                sent += count
            }
            try loop.reregister(fd, interest: .read)
        } catch {
            finish(.failure(.writeFailed(error)))
        }
    }

    private func readAnswer() {
        var chunk = [UInt8](repeating: 0, count: 2048)
        while true {
            let result: IOResult<Int>
            do {
                result = try chunk.withUnsafeMutableBytes { bytes throws(Errno) in
                    try Syscall.readBytes(fd, bytes.baseAddress!, bytes.count)
                }
            } catch {
                finish(.failure(.readFailed(error)))
                return
            }
            guard case .processed(let count) = result else { return }
            if count == 0 {
                finish(.failure(.closed))
                return
            }
            answer.append(contentsOf: chunk[..<count])
            if let end = answer.withUnsafeBytes({ headEnd($0) }), end <= limit {
                guard let socket = socket.take() else { preconditionFailure("the exchange's socket was already handed over") }
                finish(.success((SocketStream(SocketBox(socket), remoteAddress: remoteAddress, noDelay: noDelay), answer)))
                return
            }
            if answer.count > limit {
                finish(.failure(.headTooLarge))
                return
            }
        }
    }

    /// Ends the exchange exactly once; later calls do nothing. A failure closes the socket.
    private func finish(_ outcome: Outcome) {
        guard let continuation else { return }
        self.continuation = nil
        if let timer { loop.cancel(timer) }
        timer = nil
        loop.deregister(fd)
        if case .failure = outcome, let socket = socket.take() { socket.close() }
        continuation.resume(returning: outcome)
    }
}

extension SocketStream {
    package func exchange(
        _ request: [UInt8],
        headEnd: @escaping @Sendable (UnsafeRawBufferPointer) -> Int?,
        limit: Int,
        timeout: Duration,
        on loop: EventLoop,
        isolation: isolated any Actor
    ) async -> Result<(stream: any OpenedStream, answer: [UInt8]), StreamExchangeFailure> {
        await SocketExchange.run(on: self, request: request, headEnd: headEnd, limit: limit, timeout: timeout, loop: loop, isolation: isolation)
    }
}
