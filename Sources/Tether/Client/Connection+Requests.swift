extension Connection: TimerTarget {
    /// A request's timeout fired: `tag` is its id, `detail` its serial. Tag 0 (no request
    /// has id 0) is the timer of ``deadlines``.
    nonisolated func timerFired(tag: UInt64, detail: UInt32) {
        onLoop(loop, self, (serial: detail, id: tag), Connection.expire)
    }

    private static func expire(_ connection: isolated Connection, _ request: (serial: UInt32, id: UInt64)) {
        if request.id == 0 {
            connection.expireDeadlines()
        } else {
            connection.expire(serial: request.serial, id: request.id)
        }
    }

    /// Sets the timeout of a request that was just given `serial` and `id`: in
    /// ``deadlines`` when its deadline keeps their order (always, for requests that use the
    /// configured timeout), otherwise with a timer of its own, which it returns.
    private func startTimeout(_ limit: Duration, from start: UInt64?, serial: UInt32, id: UInt64) -> LoopTimer? {
        let length = limit == configuration.requestTimeout ? requestTimeoutNanoseconds : MonotonicTime.nanoseconds(of: limit)
        let deadline = (start ?? loop.now) &+ length
        guard deadlines.accepts(deadline) else {
            return loop.schedule(at: deadline, target: self, tag: id, detail: serial)
        }
        deadlines.append(.init(deadline: deadline, serial: serial, id: id))
        // The timer is never later than the front, except when it was set for requests that
        // have all ended since and a shorter timeout starts the queue again.
        if let timer = deadlineTimer, timer.deadline > deadline {
            loop.cancel(timer)
            deadlineTimer = nil
        }
        if deadlineTimer == nil {
            deadlineTimer = loop.schedule(at: deadline, target: self, tag: 0, detail: 0)
        }
        return nil
    }

    /// The timer of ``deadlines`` fired: every request whose deadline has passed times out,
    /// and the timer is set again for the earliest request still waiting.
    ///
    /// The timer may be late but never early: it was set for the deadline at the front, or
    /// for an earlier one whose request has since ended.
    private func expireDeadlines() {
        deadlineTimer = nil
        let now = loop.now
        while let first = deadlines.first, first.deadline <= now {
            _ = deadlines.removeFirst()
            expire(serial: first.serial, id: first.id)
        }
        dropEndedDeadlines()
        if deadlineTimer == nil, let first = deadlines.first {
            deadlineTimer = loop.schedule(at: first.deadline, target: self, tag: 0, detail: 0)
        }
    }

    /// Drops the deadlines of requests that ended from the front of ``deadlines``. The timer
    /// stays set: when it fires for a request that has ended it only sets itself again.
    func dropEndedDeadlines() {
        deadlines.dropFront { !table.contains(serial: $0.serial, id: $0.id) }
    }
}

extension Connection {
    /// Sends a request and waits for its response.
    ///
    /// The request gets a fresh serial (never 0, never one in use); the response with the
    /// same serial resumes this call. It is written at once when the connection is up, fewer
    /// than ``Limits/maximumInFlightRequests`` are in flight and the outbound buffer is below
    /// ``Limits/outboundHighWaterMark``; otherwise it waits in a queue, in order, and is
    /// written as soon as it can be: after a reconnect, a response, or the peer reading.
    ///
    /// The call ends exactly once: with the response; with ``TetherError/Code/timedOut``
    /// when `timeout` passes (queued time included); with `CancellationError` when the
    /// calling task is cancelled; with ``TetherError/Code/connectionLost`` when the
    /// connection breaks while it is in flight (it is never resent: the server may have acted
    /// on it); or with ``TetherError/Code/connectionClosed`` after ``close()``. A response
    /// that arrives after its request ended is dropped and counted in
    /// ``ConnectionMetrics/lateResponses``.
    ///
    /// An error answer from the server (`{"error": …}`) is still a response: check
    /// ``Response/errorMessage``.
    ///
    /// With ``ConnectionConfiguration/observer`` set, the observer hears of the request in
    /// this task just before it is placed and just after its outcome (see
    /// ``ConnectionObserver``).
    ///
    /// - Parameters:
    ///   - request: The type and content to send.
    ///   - timeout: How long to wait: ``RequestTimeout/configured`` (the default) for
    ///     ``ConnectionConfiguration/requestTimeout``, a duration of its own (`.seconds(5)`,
    ///     `.milliseconds(200)`), or ``RequestTimeout/unlimited`` to wait until the response
    ///     comes, the task is cancelled or the connection ends.
    /// - Returns: The response.
    /// - Throws: ``TetherError`` or `CancellationError`.
    public nonisolated func request(_ request: Request, timeout: RequestTimeout = .configured) async throws -> Response {
        if let observer = configuration.observer {
            return try await observedRequest(request, timeout: timeout, observer: observer)
        }
        return try await placeRequest(request, timeout: timeout, trace: nil)
    }

    /// What ``request(_:timeout:)`` does once the observer is taken care of; `trace`, when
    /// given, is told the serial the request gets.
    @inline(__always)
    nonisolated func placeRequest(_ request: Request, timeout: RequestTimeout, trace: RequestTrace?) async throws -> Response {
        // A caller on the loop (a task that prefers ``taskExecutor``) places the request
        // within the actor. Any other caller hands the loop a job and waits here, outside
        // the actor: its response then resumes it on its own executor, with no hop back to
        // the loop to end an isolated call and none from there to the caller.
        if loop.inLoop {
            return try await requestOnLoop(request, timeout: timeout, trace: trace)
        }
        if configuration.prepare != nil, callerPrepares {
            return try await preparationRequest(request, timeout: timeout, trace: trace)
        }
        // A caller cancelled already goes through the loop too: the placement job ends it
        // there, counted in ``ConnectionMetrics/requestsCancelled``.
        let placement = RequestPlacement(connection: self, request: request, timeout: timeout)
        placement.trace = trace
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Response, any Error>) in
                placement.continuation = continuation
                loop.enqueue(.object(placement))
            }
        } onCancel: {
            loop.execute { placement.cancel() }
        }
    }

    /// ``request(_:timeout:)`` for a caller whose task runs on the loop (it prefers
    /// ``taskExecutor``).
    ///
    /// The caller runs a job of the loop's thread, so no job of this actor runs meanwhile:
    /// the request is placed at once, with no job for the actor, and the response resumes
    /// the caller on the loop with no hop through the actor either.
    private nonisolated func requestOnLoop(_ request: Request, timeout: RequestTimeout, trace: RequestTrace?) async throws -> Response {
        if configuration.prepare != nil, callerPrepares {
            return try await preparationRequest(request, timeout: timeout, trace: trace)
        }
        if Task.isCancelled {
            callOnLoop(loop, self, ()) { connection, _ in connection.counters.requestsCancelled += 1 }
            throw CancellationError()
        }
        let (serial, id) = callOnLoop(loop, self, ()) { connection, _ in connection.table.allocate() }
        trace?.serial = serial
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Response, any Error>) in
                // Still the same job on the loop's thread: everything from the checks to the
                // insert runs without interruption.
                precondition(loop.inLoop, "a request placed from the loop left the loop's thread")
                onLoop(loop, self, (request, timeout, serial, id, continuation, trace)) { connection, placing in
                    connection.place(placing.0, timeout: placing.1, serial: placing.2, id: placing.3, cancelled: Task.isCancelled, continuation: placing.4, trace: placing.5)
                }
            }
        } onCancel: {
            loop.execute { [self] in
                assumeIsolated { $0.cancelRequest(serial: serial, id: id) }
            }
        }
    }

    /// A request of the connection's preparation: written at once, ahead of everything that
    /// waits for the connection to be ready.
    private func preparationRequest(_ request: Request, timeout: RequestTimeout, trace: RequestTrace?) async throws -> Response {
        let (serial, id) = table.allocate()
        trace?.serial = serial
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Response, any Error>) in
                place(request, timeout: timeout, serial: serial, id: id, cancelled: Task.isCancelled, continuation: continuation, trace: trace, first: true)
            }
        } onCancel: {
            loop.execute { [self] in
                assumeIsolated { $0.cancelRequest(serial: serial, id: id) }
            }
        }
    }

    /// Places a request whose serial and id are allocated, or ends it at once when it
    /// cannot be: the connection has ended, or its caller was cancelled (`cancelled`).
    private func place(_ request: Request, timeout: RequestTimeout, serial: UInt32, id: UInt64, cancelled: Bool, continuation: UnsafeContinuation<Response, any Error>, trace: RequestTrace?, first: Bool = false) {
        if lifecycle.hasEnded {
            counters.requestsFailed += 1
            continuation.resume(throwing: notConnected())
            return
        }
        if cancelled {
            counters.requestsCancelled += 1
            continuation.resume(throwing: CancellationError())
            return
        }
        let limit = timeout.limit(configured: configuration.requestTimeout)
        if let error = place(request, serial: serial, id: id, limit: limit, waiter: .single(continuation), trace: trace, first: first) {
            continuation.resume(throwing: error)
        }
    }

    /// Places the request of a caller on another thread, on the loop: what
    /// ``requestOnLoop(_:timeout:)`` does inside its continuation. A cancellation that
    /// overtook the job ends it here.
    func place(_ placement: RequestPlacement) {
        guard let continuation = placement.continuation else { return }
        let (serial, id) = table.allocate()
        placement.serial = serial
        placement.id = id
        placement.trace?.serial = serial
        place(placement.request, timeout: placement.timeout, serial: serial, id: id, cancelled: placement.cancelled, continuation: continuation, trace: placement.trace)
    }

    /// Writes request `request` as `serial` when it can go now, or queues it, and records
    /// `waiter` for its outcome with its timeout, counted from `start` (the loop's time;
    /// `nil` for now). Returns the error when it can do neither (a write that failed, a full
    /// queue); `waiter` is then not recorded.
    /// A request of the connection's preparation goes `first`: at once, whatever waits.
    /// A request of a type that cannot be answered (a push or heartbeat type, or a session's
    /// hello or acknowledgement) is refused here with ``TetherError/Code/invalidArgument``.
    func place(_ request: Request, serial: UInt32, id: UInt64, limit: Duration?, from start: UInt64? = nil, waiter: Waiter, trace: RequestTrace? = nil, first: Bool = false) -> TetherError? {
        if let refusal = configuration.profile.requestRefusal(of: request.type, session: configuration.session?.wireTypes) {
            // Written, it would be taken for what its type says and never answered.
            counters.requestsFailed += 1
            return TetherError(code: .invalidArgument, message: "request not sent: \(refusal)")
        }
        let frame = Frame(type: request.type, serial: serial, payload: request.payload, fields: request.fields)
        var pending: Frame?
        if let channel, first || (!holdsWrites && table.queuedCount == 0 && sendQueue.isEmpty),
           table.inFlightCount < configuration.limits.maximumInFlightRequests,
           channel.bytesAhead(of: frame) <= configuration.limits.outboundHighWaterMark {
            do {
                try write(frame, on: channel)
            } catch {
                counters.requestsFailed += 1
                return error
            }
            awaitAnswer(to: frame)
            counters.requestsSent += 1
            if let trace { watchWrite(of: trace, serial: serial, on: channel) }
        } else if let refusal = queueRefusal() {
            return refusal
        } else {
            pending = frame
            awaitDrainIfNeeded()
        }
        let timer = limit.flatMap { startTimeout($0, from: start, serial: serial, id: id) }
        var entry = RequestTable.Entry(waiter: waiter, id: id, type: request.type, timer: timer, timeout: limit)
        entry.trace = trace
        table.insert(serial: serial, entry: entry, pending: pending)
        return nil
    }

    /// Sends a frame that expects no reply.
    ///
    /// When the connection is up and the outbound buffer is below
    /// ``Limits/outboundHighWaterMark``, the frame is queued and written at the end of the
    /// current loop turn, together with everything else written in that turn, and the call
    /// returns at once. Otherwise it waits, in order, until the frame can be written: after a
    /// reconnect, or once the peer has read enough (backpressure).
    ///
    /// In a profile that matches responses in order (``Profile/Correlation``), a server
    /// answers a request-type frame sent this way too; that answer is dropped and counted in
    /// ``ConnectionMetrics/lateResponses``, never taken for the answer to a request.
    ///
    /// - Parameter frame: The frame, sent as is (its serial too).
    /// - Throws: ``TetherError`` when the connection is closed or the queue is full;
    ///   `CancellationError` when the task is cancelled while the frame waits.
    public func send(_ frame: Frame) async throws {
        if let channel = channelForSendNow() {
            try writeSent(frame, on: channel)
            return
        }
        try Task.checkCancellation()
        nextSendID += 1
        let id = nextSendID
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                if lifecycle.hasEnded {
                    continuation.resume(throwing: notConnected())
                } else if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                } else if let refusal = queueRefusal() {
                    continuation.resume(throwing: refusal)
                } else {
                    sendQueue.append(QueuedSend(id: id, frame: frame, waiter: continuation))
                    awaitDrainIfNeeded()
                    pump()
                }
            }
        } onCancel: {
            loop.execute { [self] in
                assumeIsolated { $0.cancelSend(id: id) }
            }
        }
    }

    /// The channel a frame of ``send(_:)`` may be written to at once: connected, writes not
    /// held back (or the frame is the preparation's), no frame waiting before it, and the
    /// outbound buffer at most at its high-water mark; `nil` when it must wait.
    func channelForSendNow() -> Channel? {
        guard let channel, (!holdsWrites && sendQueue.isEmpty) || (configuration.prepare != nil && callerPrepares),
              channel.pendingOutboundBytes <= configuration.limits.outboundHighWaterMark else { return nil }
        return channel
    }

    /// Writes a frame of ``send(_:)``, keeping its place in the line of answers.
    func writeSent(_ frame: Frame, on channel: Channel) throws(TetherError) {
        try write(frame, on: channel)
        holdPlaceForAnswer(to: frame)
    }

    /// Why a request or frame that cannot be written now may not wait either, if so.
    func queueRefusal() -> TetherError? {
        if channel == nil && !configuration.requestsWaitForConnection {
            counters.requestsFailed += 1
            return TetherError(code: .notConnected, message: "not connected to \(currentEndpoint) (\(state.phase)), and requests do not wait for the connection")
        }
        let limit = configuration.limits.maximumQueuedRequests
        guard table.queuedCount + sendQueue.count < limit else {
            counters.requestsRefused += 1
            return TetherError(
                code: .tooManyPendingRequests,
                message: "\(counted(limit, "request")) already \(limit == 1 ? "waits" : "wait") to be sent to \(currentEndpoint), the limit"
            )
        }
        return nil
    }

    /// When the outbound buffer is what holds writes back, asks to hear when it drains.
    private func awaitDrainIfNeeded() {
        guard let channel, channel.writableThreshold == nil else { return }
        let high = configuration.limits.outboundHighWaterMark
        if channel.pendingOutboundBytes > high {
            counters.backpressureWaits += 1
            channel.writableThreshold = high / 2
        }
    }

    /// Writes what waits in the queues, oldest first, as far as the connection, the
    /// in-flight limit and the outbound buffer allow.
    func pump() {
        guard let channel, !holdsWrites, !sendQueue.isEmpty || table.queuedCount > 0 else { return }
        let high = configuration.limits.outboundHighWaterMark
        var sent = 0
        while sent < sendQueue.count, self.channel === channel, channel.pendingOutboundBytes <= high {
            let send = sendQueue[sent]
            sent += 1
            do {
                try writeSent(send.frame, on: channel)
                if let waiter = send.waiter {
                    waiter.resume()
                } else {
                    trackWritten(send.id, on: channel)
                }
            } catch {
                if let waiter = send.waiter {
                    waiter.resume(throwing: error)
                } else {
                    finishTrackedSend(send.id, error)
                }
            }
        }
        sendQueue.removeFirst(sent)
        if sent > 0 { requestEnded() }
        while self.channel === channel, table.queuedCount > 0,
              table.inFlightCount < configuration.limits.maximumInFlightRequests,
              channel.pendingOutboundBytes <= high,
              let (serial, frame) = table.dequeue() {
            do {
                try write(frame, on: channel)
                awaitAnswer(to: frame)
                counters.requestsSent += 1
                if configuration.observer != nil, let trace = table.trace(serial: serial) { watchWrite(of: trace, serial: serial, on: channel) }
            } catch {
                guard let entry = table.removeAnswered(serial: serial) else { continue }
                if let timer = entry.timer { loop.cancel(timer) }
                counters.requestsFailed += 1
                entry.waiter.resume(throwing: error)
            }
        }
        if self.channel === channel { awaitDrainIfNeeded() }
    }

    func write(_ frame: Frame, on channel: Channel) throws(TetherError) {
        try channel.write(frame)
        counters.framesOut += 1
    }

    func notConnected() -> TetherError {
        if state.isFinal, let reason = state.reason {
            if reason.code == .connectionClosed {
                return TetherError(code: .connectionClosed, message: "the connection to \(endpoint) was closed by close()")
            }
            if reason.code == .serverDraining {
                return TetherError(code: .serverDraining, message: "not sent: the connection to \(endpoint) left it as it drains: \(reason.message)", underlying: reason)
            }
            return TetherError(code: .notConnected, message: "the connection to \(endpoint) has closed: \(reason.message)", underlying: reason)
        }
        return TetherError(code: .notConnected, message: "not connected to \(endpoint)")
    }

    /// Number of requests that have not ended: in flight or queued.
    public var pendingRequestCount: Int { table.count }

    private func expire(serial: UInt32, id: UInt64) {
        guard let entry = table.remove(serial: serial, id: id) else { return }
        counters.requestsTimedOut += 1
        let waited = entry.isQueued ? " (never sent: \(state.phase))" : ""
        entry.waiter.resume(throwing: TetherError(
            code: .timedOut,
            message: "request \(hex(entry.type)) serial \(serial) timed out after \(describe(entry.timeout ?? .zero))\(waited)"
        ))
        if !entry.isQueued { pump() }
        requestEnded()
    }

    func cancelRequest(serial: UInt32, id: UInt64) {
        guard let entry = table.remove(serial: serial, id: id) else { return }
        if let timer = entry.timer { loop.cancel(timer) }
        dropEndedDeadlines()
        counters.requestsCancelled += 1
        entry.waiter.resume(throwing: CancellationError())
        if !entry.isQueued { pump() }
        requestEnded()
    }

    private func cancelSend(id: UInt64) {
        guard let index = sendQueue.firstIndex(where: { $0.id == id }), let waiter = sendQueue[index].waiter else { return }
        sendQueue.remove(at: index)
        waiter.resume(throwing: CancellationError())
        requestEnded()
    }

    /// For profiles without serials on the wire: the written request takes its place in line.
    private func awaitAnswer(to frame: Frame) {
        guard let key = configuration.profile.correlation.key(for: frame.type) else { return }
        inOrderReplies.sent(serial: frame.serial, key: key)
    }

    /// For profiles without serials on the wire: a request-type frame written with
    /// ``send(_:)`` will be answered too, and its answer must not be taken for that of a
    /// request made later. Its place holds serial 0, which no request has, so the answer is
    /// dropped as late.
    private func holdPlaceForAnswer(to frame: Frame) {
        guard let key = configuration.profile.correlation.key(for: frame.type),
              configuration.profile.classify(frame.type) == .message else { return }
        inOrderReplies.sent(serial: 0, key: key)
    }

    func completeRequest(with frame: Frame) {
        var frame = frame
        if let key = configuration.profile.correlation.key(for: frame.type) {
            guard let serial = inOrderReplies.answer(key: key) else {
                counters.lateResponses += 1
                return
            }
            frame.serial = serial
        }
        guard let entry = table.removeAnswered(serial: frame.serial) else {
            counters.lateResponses += 1
            return
        }
        if let timer = entry.timer { loop.cancel(timer) }
        dropEndedDeadlines()
        if lifecycle.isDeparting, let refusal = drainingRefusal(frame) {
            // The draining server did not run it: an error, not an answer of the app's.
            counters.requestsFailed += 1
            entry.waiter.resume(throwing: refusal)
        } else {
            counters.requestsCompleted += 1
            entry.waiter.resume(returning: Response(frame: frame))
        }
        if table.queuedCount > 0 { pump() }
        requestEnded()
    }
}

/// A request from a caller off the loop, on its way to the loop: the job that places it,
/// and afterwards the serial and id its cancellation needs.
///
/// `@unchecked Sendable`: the caller sets ``continuation`` before enqueueing the job (the
/// loop's queue orders that write before the job runs); from then on only the loop touches
/// it.
final class RequestPlacement: LoopJob, @unchecked Sendable {
    let connection: Connection
    let request: Request
    let timeout: RequestTimeout
    var continuation: UnsafeContinuation<Response, any Error>?
    /// Set when placed: id 0 means not yet.
    var serial: UInt32 = 0
    var id: UInt64 = 0
    /// Set when the caller was cancelled before the request was placed.
    var cancelled = false
    /// Told the serial, for a ``ConnectionObserver``.
    var trace: RequestTrace?

    init(connection: Connection, request: Request, timeout: RequestTimeout) {
        self.connection = connection
        self.request = request
        self.timeout = timeout
    }

    func run() {
        onLoop(connection.loop, connection, self) { connection, placement in
            connection.place(placement)
        }
    }

    /// The caller was cancelled; on the loop.
    func cancel() {
        if id == 0 {
            // Not placed yet (the cancellation overtook the job): it ends when placed.
            cancelled = true
            return
        }
        onLoop(connection.loop, connection, (serial, id)) { connection, request in
            connection.cancelRequest(serial: request.0, id: request.1)
        }
    }
}
