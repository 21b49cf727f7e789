// The seam where transports are chosen: connecting to an endpoint and listening on one,
// each of which hands over an ``OpenedStream``, a connected byte stream that becomes a
// ``ByteTransport`` on the loop that will drive it.
//
// Bottom transports (TCP with its address race, Unix domain sockets, the in-memory
// network) implement ``StreamConnector`` and ``StreamListener``; layers (TLS, WebSocket,
// the HTTP proxy, the protocol sniffer) are connectors and listeners over another one.
// A client stacks them for each endpoint, a server for each port it listens on, and the
// framed channel takes the transport at the top without knowing any of them by name.
// The seam costs one call per connect attempt or accepted connection, nothing per frame.

/// Which of its loop's read buffers the transport at the bottom of a stack borrows while
/// it reads: the plain one, or the sealed one when a layer over it (TLS, WebSocket)
/// borrows the plain one itself.
package enum ReadBufferUse: Sendable {
    case plain
    case sealed
}

/// A byte stream a connector opened or a listener accepted, not yet a transport.
///
/// It becomes one on the loop that drives it (``makeTransport(on:reading:)``), or is
/// refused unused (``refuse(notice:drainTimeout:on:)``). Dropped unused, whatever it holds
/// is closed: a socket inside closes with its owner.
package protocol OpenedStream: Sendable {
    /// The peer's address.
    var remoteAddress: TetherSocketAddress { get }

    /// The transport over this stream, not started, driven by `loop`; the caller is on
    /// `loop`'s thread. Called at most once.
    ///
    /// - Parameters:
    ///   - loop: The loop that drives the transport.
    ///   - use: Which of the loop's read buffers the bottom transport borrows.
    /// - Returns: The transport; it owns the stream from now on.
    /// - Throws: ``TetherError`` when a layer cannot be made (a TLS session); the stream
    ///   is closed then.
    func makeTransport(on loop: EventLoop, reading use: ReadBufferUse) throws(TetherError) -> any ByteTransport

    /// Ends the stream unused, after sending `notice` when the peer reads Tether frames
    /// straight off this stream: one write that never waits, dropped when it does not fit.
    /// Layers that change the bytes (TLS, WebSocket) drop the notice.
    ///
    /// - Parameters:
    ///   - notice: What tells the peer why (``CloseNotice``), or `nil`.
    ///   - drainTimeout: How long a stream without a kernel queue waits for the peer.
    ///   - loop: The loop the stream would have run on.
    func refuse(notice: [UInt8]?, drainTimeout: Duration, on loop: EventLoop)

    /// A short exchange on the stream before it becomes a transport: writes `request`,
    /// then reads until `headEnd` finds where the answer's head ends (the byte after it) in
    /// what arrived, within `timeout`; an HTTP proxy's `CONNECT`. The caller is on
    /// `loop`'s thread. On a failure the stream is closed.
    ///
    /// - Parameters:
    ///   - request: The bytes to write first.
    ///   - headEnd: Where the head ends in the bytes read so far, or `nil` while it has not.
    ///   - limit: The most bytes the head may take.
    ///   - timeout: The bound on the whole exchange.
    ///   - loop: The loop the stream runs on.
    /// - Returns: The stream to make the transport from, and every byte read (the head,
    ///   then whatever followed it); or why the exchange failed.
    func exchange(
        _ request: [UInt8],
        headEnd: @escaping @Sendable (UnsafeRawBufferPointer) -> Int?,
        limit: Int,
        timeout: Duration,
        on loop: EventLoop,
        isolation: isolated any Actor
    ) async -> Result<(stream: any OpenedStream, answer: [UInt8]), StreamExchangeFailure>
}

extension OpenedStream {
    /// A stream that cannot carry an exchange before its transport (a layer's): refused.
    package func exchange(
        _ request: [UInt8],
        headEnd: @escaping @Sendable (UnsafeRawBufferPointer) -> Int?,
        limit: Int,
        timeout: Duration,
        on loop: EventLoop,
        isolation: isolated any Actor
    ) async -> Result<(stream: any OpenedStream, answer: [UInt8]), StreamExchangeFailure> {
        .failure(.unsupported)
    }
}

/// Why an exchange before the transport (``OpenedStream/exchange(_:headEnd:limit:timeout:on:isolation:)``)
/// failed; the caller names the exchange in its error.
package enum StreamExchangeFailure: Error, Sendable {
    /// The stream cannot carry one.
    case unsupported
    /// The stream could not be watched for readiness.
    case unwatchable(any Error & Sendable)
    /// Writing the request failed.
    case writeFailed(any Error & Sendable)
    /// Reading the answer failed.
    case readFailed(any Error & Sendable)
    /// The peer closed the stream before the head ended.
    case closed
    /// The head did not end within the limit.
    case headTooLarge
    /// The timeout passed.
    case timedOut
    /// The task waiting for it was cancelled.
    case cancelled
}

/// What a connector needs to know for one connect attempt.
package struct ConnectContext: Sendable {
    /// The loop the connection runs on: where attempts are made and timed.
    package var loop: EventLoop
    /// When connecting began, on the loop's clock (monotonic nanoseconds).
    package var began: UInt64
    /// The bound on the whole attempt, resolving included.
    package var timeout: Duration
    /// How long one address's attempt runs before the next one starts beside it.
    package var attemptDelay: Duration
    /// Resolves names instead of the system's resolver, when set.
    package var resolver: (any NameResolver)?
    /// Whether a socket sets `TCP_NODELAY`.
    package var noDelay: Bool

    /// When the attempt must have ended, on the loop's clock.
    package var deadline: UInt64 {
        began &+ MonotonicTime.nanoseconds(of: timeout)
    }

    /// What is left of the timeout now.
    package var remaining: Duration {
        let now = loop.now
        return MonotonicTime.duration(nanoseconds: deadline > now ? deadline - now : 0)
    }
}

extension ConnectContext {
    /// A context for one attempt that begins now.
    ///
    /// - Parameters:
    ///   - loop: The loop the connection runs on.
    ///   - timeout: The bound on the whole attempt, resolving included.
    ///   - attemptDelay: How long one address's attempt runs before the next starts beside it.
    ///   - noDelay: Whether a socket sets `TCP_NODELAY`.
    package init(loop: EventLoop, timeout: Duration, attemptDelay: Duration = .milliseconds(250), noDelay: Bool = true) {
        self.init(loop: loop, began: loop.now, timeout: timeout, attemptDelay: attemptDelay, resolver: nil, noDelay: noDelay)
    }
}

/// A stream that connected, and how the attempt went.
package struct ConnectedStream: Sendable {
    /// The stream, not yet a transport.
    package var stream: any OpenedStream
    /// The endpoint, the address reached and each attempt of the race.
    package var report: ConnectReport
}

/// Opens byte streams to endpoints: TCP, a Unix domain socket, the in-memory network, or a
/// layer over one of them.
package protocol StreamConnector: Sendable {
    /// Connects to `endpoint` within the context's timeout. Runs on the context's loop.
    ///
    /// - Parameters:
    ///   - endpoint: Where to.
    ///   - context: The loop, the clock and the bounds of the attempt.
    ///   - isolation: The caller's actor, which runs on the context's loop.
    /// - Returns: The connected stream, or an error that names the endpoint.
    func connect(
        to endpoint: Endpoint,
        in context: ConnectContext,
        isolation: isolated any Actor
    ) async -> Result<ConnectedStream, TetherError>
}

/// What a listener needs to know to bind and accept.
package struct ListenContext: Sendable {
    /// The loop that accepts.
    package let acceptLoop: EventLoop
    /// The loops the accepted streams will run on.
    package let group: TetherEventLoopGroup
    /// The listen queue's length.
    package let backlog: Int
    /// Whether accepted sockets set `TCP_NODELAY`.
    package let noDelay: Bool
}

/// Takes byte streams from peers: a TCP port, a Unix domain socket's path, a port of the
/// in-memory network, or a layer over one of them.
package protocol StreamListener: Sendable {
    /// Binds and starts taking streams; each goes to `accept`, on the accepting loop.
    ///
    /// - Parameters:
    ///   - context: The loops and bounds.
    ///   - accept: Owns each accepted stream from then on.
    /// - Returns: The port, listening.
    /// - Throws: ``TetherError`` with ``TetherError/Code/bindFailed`` when it cannot listen.
    func listen(
        in context: ListenContext,
        accept: @escaping @Sendable (any OpenedStream) -> Void
    ) async throws(TetherError) -> any ListeningPort
}

/// A listener that listens.
package protocol ListeningPort: Sendable {
    /// Where it listens, with the port the system picked.
    var address: TetherSocketAddress { get }
    /// Stops taking streams and releases what it holds; streams already accepted stay.
    /// Idempotent; on the accepting loop.
    func close()
}

/// Where the bottom transports come from: the system's sockets, or a network in memory.
package protocol StreamNetwork: Sendable {
    /// The connector for `endpoint`: by its scheme on the system's sockets.
    func connector(for endpoint: Endpoint) -> any StreamConnector
    /// The listener for `endpoint`.
    func listener(for endpoint: Endpoint) -> any StreamListener
}

/// A stream that is a layer over another: the peer and the refusal are those of the one
/// below, and the notice goes only if the layer leaves the bytes as they are.
package protocol LayeredStream: OpenedStream {
    /// The stream below.
    var below: any OpenedStream { get }
    /// Whether the layer passes the bytes through unchanged (a sniffer).
    var keepsBytes: Bool { get }
}

extension LayeredStream {
    package var remoteAddress: TetherSocketAddress { below.remoteAddress }

    package func refuse(notice: [UInt8]?, drainTimeout: Duration, on loop: EventLoop) {
        below.refuse(notice: keepsBytes ? notice : nil, drainTimeout: drainTimeout, on: loop)
    }
}

/// A listener that layers each stream another one accepts.
package struct LayeringListener: StreamListener {
    let below: any StreamListener
    let layer: @Sendable (any OpenedStream) -> any OpenedStream

    /// - Parameters:
    ///   - below: The listener that accepts.
    ///   - layer: Makes the layer over each accepted stream.
    package init(over below: any StreamListener, layer: @escaping @Sendable (any OpenedStream) -> any OpenedStream) {
        self.below = below
        self.layer = layer
    }

    package func listen(
        in context: ListenContext,
        accept: @escaping @Sendable (any OpenedStream) -> Void
    ) async throws(TetherError) -> any ListeningPort {
        try await below.listen(in: context) { [layer] stream in accept(layer(stream)) }
    }
}
