// Requests that run once: a request with an idempotency key is written again on the next
// connection when its connection breaks before the answer came, and the server answers a
// repeat from its record instead of running it twice.

extension Connection {
    /// Sends a request that runs once on the server, whatever the network does, and waits
    /// for its response.
    ///
    /// On a connection with a session (``ConnectionConfiguration/session``), the request
    /// carries `idempotencyKey`. When the connection breaks after it was written and before
    /// its answer came, the call does not fail: the request is written again on the next
    /// connection (ahead of requests made after the break), with the same key, and the call
    /// goes on waiting. The server runs the handler for a client and a key once, records
    /// what it answered in its mailbox store (``MailboxStore/beginRequest(_:of:limits:now:)``),
    /// and answers a repeat from that record, or, while the first copy still runs, with its
    /// answer once it ends. So the caller gets exactly one response, and it is the one of
    /// the single run.
    ///
    /// When that cannot be promised, the call throws ``TetherError/Code/outcomeUnknown`` and
    /// never runs the request twice: the connection broke and ``SessionConfiguration/requestWindow``
    /// passed since the first attempt, or the timeout ran out after a break, or the server
    /// says its record is gone (the client's history began again, its answer was too large to
    /// keep, a copy runs elsewhere and did not end within 5 s). Errors that say the request
    /// did not run (a bound of the records, an unknown type) come as a response, as for any
    /// request: check ``Response/errorMessage``.
    ///
    /// Give each operation its own key, and the same key to every attempt of one operation:
    /// a payment's id, a message's id made when the user pressed send. `timeout` bounds the
    /// whole wait, repeats included.
    ///
    /// - Parameters:
    ///   - request: The type and content to send.
    ///   - idempotencyKey: 1 to 128 bytes of printable ASCII, no spaces; unique per
    ///     operation of this client.
    ///   - timeout: How long to wait in all, as for ``request(_:timeout:)``.
    /// - Returns: The response of the request's one run.
    /// - Throws: ``TetherError/Code/invalidArgument`` without a session or for a key that
    ///   cannot be one; ``TetherError/Code/outcomeUnknown`` as above; otherwise what
    ///   ``request(_:timeout:)`` throws.
    public nonisolated func request(_ request: Request, idempotencyKey: String, timeout: RequestTimeout = .configured) async throws -> Response {
        guard let session = configuration.session else {
            throw TetherError(code: .invalidArgument, message: "a request with an idempotency key needs a session (ConnectionConfiguration.session)")
        }
        if let problem = KeyedWire.keyProblem(idempotencyKey) {
            throw TetherError(code: .invalidArgument, message: problem)
        }
        let types = session.wireTypes
        let limit = timeout.limit(configured: configuration.requestTimeout)
        let clock = ContinuousClock()
        let start = clock.now
        var epoch: String?
        var breaks = 0
        while true {
            let elapsed = clock.now - start
            let remaining: RequestTimeout = limit.map { .after($0 - elapsed) } ?? .unlimited
            let envelope = Request(
                type: types.keyedRequest,
                payload: KeyedWire.envelope(.init(key: idempotencyKey, type: request.type, epoch: epoch, payload: request.payload))
            )
            do {
                let response = try await placeRequest(envelope, timeout: remaining, trace: nil)
                if response.type == types.keyedRequest {
                    throw TetherError(code: .outcomeUnknown, message: "request \(hex(request.type)) with idempotency key \(idempotencyKey): \(response.errorMessage ?? response.text)")
                }
                return response
            } catch let error as TetherError where error.code == .connectionLost {
                breaks += 1
                // The request was written on the connection that broke, after its welcome:
                // the epoch the connection knows now is the one it was written in.
                if epoch == nil { epoch = await sessionEpoch }
                let waited = clock.now - start
                if waited >= session.requestWindow {
                    throw TetherError(code: .outcomeUnknown, message: "request \(hex(request.type)) with idempotency key \(idempotencyKey) may or may not have run: its connection broke \(breaks) time\(breaks == 1 ? "" : "s"), and \(waited) have passed since its first attempt, more than SessionConfiguration.requestWindow (\(session.requestWindow))", underlying: error)
                }
                continue
            } catch let error as TetherError where error.code == .timedOut && breaks > 0 {
                throw TetherError(code: .outcomeUnknown, message: "request \(hex(request.type)) with idempotency key \(idempotencyKey) may or may not have run: it timed out after its connection broke \(breaks) time\(breaks == 1 ? "" : "s") (\(error.message))", underlying: error)
            }
        }
    }
}
