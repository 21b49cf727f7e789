extension Connection: TimerTarget {
    /// A request's timeout fired: `tag` is its id, `detail` its serial.
    nonisolated func timerFired(tag: UInt64, detail: UInt32) {
        assumeIsolated { $0.expire(serial: detail, id: tag) }
    }
}

extension Connection {
    /// Sends a request and waits for its response.
    ///
    /// The request gets a fresh serial (never 0, never one in use); the response with the
    /// same serial resumes this call. The call ends exactly once: with the response, with
    /// ``TetherError/Code/timedOut`` when `timeout` passes, with `CancellationError` when the
    /// calling task is cancelled, or with the error that closed the connection. A response
    /// that arrives after its request ended is dropped and counted in
    /// ``ConnectionStatistics/lateResponses``.
    ///
    /// An error answer from the server (`{"error": …}`) is still a response: check
    /// ``Response/errorMessage``.
    ///
    /// - Parameters:
    ///   - request: The type and content to send.
    ///   - timeout: How long to wait; `nil` uses ``ConnectionConfiguration/requestTimeout``.
    /// - Returns: The response.
    /// - Throws: ``TetherError`` or `CancellationError`.
    public func request(_ request: Request, timeout: Duration? = nil) async throws -> Response {
        try Task.checkCancellation()
        let (serial, id) = table.allocate()
        let limit = timeout ?? configuration.requestTimeout
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: Waiter) in
                // Everything from the checks to the insert runs here, without interruption on
                // this actor. The awaits above are suspension points: the connection may have
                // closed, or this task been cancelled, while they were pending.
                guard let channel else {
                    continuation.resume(throwing: notConnected())
                    return
                }
                guard table.count < configuration.limits.maximumPendingRequests else {
                    continuation.resume(throwing: TetherError(
                        code: .tooManyPendingRequests,
                        message: "\(table.count) requests are already waiting on \(channel.remoteAddress), the limit"
                    ))
                    return
                }
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                do {
                    try write(Frame(type: request.type, serial: serial, payload: request.payload), on: channel)
                } catch {
                    continuation.resume(throwing: error)
                    return
                }
                counters.requestsSent += 1
                var timer: LoopTimer?
                if let limit {
                    let deadline = MonotonicTime.now() &+ MonotonicTime.nanoseconds(of: limit)
                    timer = loop.schedule(at: deadline, target: self, tag: id, detail: serial)
                }
                table.insert(serial: serial, entry: .init(waiter: continuation, id: id, type: request.type, timer: timer, timeout: limit))
            }
        } onCancel: {
            loop.execute { [self] in
                assumeIsolated { $0.cancelRequest(serial: serial, id: id) }
            }
        }
    }

    /// Sends a frame that expects no reply.
    ///
    /// The frame is queued and written at the end of the current loop turn, together with
    /// everything else written in that turn.
    ///
    /// - Parameter frame: The frame, sent as is (its serial too).
    /// - Throws: ``TetherError`` when the connection is closed or the outbound buffer is full.
    public func send(_ frame: Frame) throws(TetherError) {
        guard let channel else { throw notConnected() }
        try write(frame, on: channel)
    }

    func write(_ frame: Frame, on channel: SocketChannel) throws(TetherError) {
        try channel.write(frame, with: codec)
    }

    func notConnected() -> TetherError {
        if let reason = state.closeReason {
            if reason.code == .connectionClosed {
                return TetherError(code: .connectionClosed, message: "the connection to \(endpoint) was closed by close()")
            }
            return TetherError(code: .notConnected, message: "the connection to \(endpoint) has closed: \(reason.message)", underlying: reason)
        }
        return TetherError(code: .notConnected, message: "not connected to \(endpoint)")
    }

    /// Number of requests waiting for a response.
    public var pendingRequestCount: Int { table.count }

    private func expire(serial: UInt32, id: UInt64) {
        guard let entry = table.remove(serial: serial, id: id) else { return }
        entry.waiter.resume(throwing: TetherError(
            code: .timedOut,
            message: "request \(hex(entry.type)) serial \(serial) timed out after \(describe(entry.timeout ?? .zero))"
        ))
    }

    private func cancelRequest(serial: UInt32, id: UInt64) {
        guard let entry = table.remove(serial: serial, id: id) else { return }
        if let timer = entry.timer { loop.cancel(timer) }
        entry.waiter.resume(throwing: CancellationError())
    }

    func completeRequest(with frame: Frame) {
        guard let entry = table.remove(serial: frame.serial) else {
            counters.lateResponses += 1
            return
        }
        if let timer = entry.timer { loop.cancel(timer) }
        counters.responsesReceived += 1
        entry.waiter.resume(returning: Response(frame: frame))
    }
}
