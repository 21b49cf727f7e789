/// An exchange on an end of the in-memory network before it becomes a transport (an HTTP
/// proxy's `CONNECT`), as ``SocketExchange`` does on a socket: the request flushed to the
/// peer, the answer read from the end's receive queue until its head ends, with a deadline
/// on the loop's clock. The end is not started meanwhile, so it still lends its read buffer
/// as the layers above ask. Loop thread only.
final class MemoryExchange: @unchecked Sendable {
    // @unchecked Sendable: touched only on the end's loop; Sendable so the cancellation
    // handler can send it there.

    typealias Outcome = Result<(stream: any OpenedStream, answer: [UInt8]), StreamExchangeFailure>

    private let end: InMemoryTransport
    private let headEnd: @Sendable (UnsafeRawBufferPointer) -> Int?
    private let limit: Int
    private var timer: LoopTimer?
    private var continuation: CheckedContinuation<Outcome, Never>?

    private init(end: InMemoryTransport, headEnd: @escaping @Sendable (UnsafeRawBufferPointer) -> Int?, limit: Int) {
        self.end = end
        self.headEnd = headEnd
        self.limit = limit
    }

    /// Runs the exchange on `stream`'s end; see ``OpenedStream/exchange(_:headEnd:limit:timeout:on:isolation:)``.
    static func run(
        on stream: MemoryStream,
        request: [UInt8],
        headEnd: @escaping @Sendable (UnsafeRawBufferPointer) -> Int?,
        limit: Int,
        timeout: Duration,
        isolation: isolated any Actor
    ) async -> Outcome {
        let end = stream.end
        end.loop.preconditionInLoop()
        let exchange = MemoryExchange(end: end, headEnd: headEnd, limit: limit)
        return await withTaskCancellationHandler {
            _ = isolation
            return await withCheckedContinuation { continuation in
                exchange.start(continuation, request: request, timeout: timeout)
            }
        } onCancel: {
            end.loop.execute { exchange.finish(.failure(.cancelled)) }
        }
    }

    private func start(_ continuation: CheckedContinuation<Outcome, Never>, request: [UInt8], timeout: Duration) {
        self.continuation = continuation
        end.arrivalBeforeStart = { [self] in check() }
        timer = end.loop.schedule(after: timeout) { [self] in
            timer = nil
            finish(.failure(.timedOut))
        }
        end.buffers.outbound.writeBytes(request)
        end.flush()
        check()
    }

    /// Looks at what arrived: the head's end, a head over the limit, or the peer's end.
    private func check() {
        guard continuation != nil else { return }
        guard end.isOpen else {
            finish(.failure(.writeFailed(TetherError(code: .connectionReset, message: "connection with \(end.remoteAddress) was reset while writing to it"))))
            return
        }
        enum Verdict { case wait, done, tooLarge, closed, reset }
        let verdict = end.receivedBeforeStart { bytes, ended, reset -> Verdict in
            if let at = headEnd(bytes), at <= limit { return .done }
            if bytes.count > limit { return .tooLarge }
            if ended { return reset ? .reset : .closed }
            return .wait
        }
        switch verdict {
        case .wait:
            return
        case .done:
            let answer = end.takeReceivedBeforeStart()
            finish(.success((MemoryStream(end: end), answer)))
        case .tooLarge:
            finish(.failure(.headTooLarge))
        case .closed:
            finish(.failure(.closed))
        case .reset:
            finish(.failure(.readFailed(TetherError(code: .connectionReset, message: "connection with \(end.remoteAddress) was reset while reading from it"))))
        }
    }

    /// Ends the exchange exactly once; later calls do nothing. A failure closes the end.
    private func finish(_ outcome: Outcome) {
        guard let continuation else { return }
        self.continuation = nil
        end.arrivalBeforeStart = nil
        if let timer { end.loop.cancel(timer) }
        timer = nil
        if case .failure = outcome { end.close() }
        continuation.resume(returning: outcome)
    }
}

extension MemoryStream {
    func exchange(
        _ request: [UInt8],
        headEnd: @escaping @Sendable (UnsafeRawBufferPointer) -> Int?,
        limit: Int,
        timeout: Duration,
        on loop: EventLoop,
        isolation: isolated any Actor
    ) async -> Result<(stream: any OpenedStream, answer: [UInt8]), StreamExchangeFailure> {
        guard loop === end.loop else {
            end.close()
            return .failure(.unsupported)
        }
        return await MemoryExchange.run(on: self, request: request, headEnd: headEnd, limit: limit, timeout: timeout, isolation: isolation)
    }
}
