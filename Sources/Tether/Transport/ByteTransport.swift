/// A byte stream between this process and one peer, driven by an event loop: what the
/// framed channel (``FrameChannel``) runs over.
///
/// A transport moves bytes and nothing else: it knows no frames. Received bytes are
/// appended to ``buffers``' `inbound` and announced with
/// ``ByteTransportHandler/transportRead()``; bytes appended to `outbound` by the layer above
/// go out after ``scheduleFlush()`` (at the end of the loop turn) or ``flush()`` (now).
/// The end of the stream and errors are reported once, with
/// ``ByteTransportHandler/transportClosed(_:)``, after which the transport is closed and
/// calls nothing more; closing it from above (``close()``, ``closeAfterFlush(timeout:)``)
/// reports nothing.
///
/// Implementations: ``TCPTransport`` (a nonblocking POSIX socket), ``TLSTransport`` (TLS
/// as a layer over any transport) and ``InMemoryTransport`` (a connected pair on one loop,
/// for tests). Every member is used on the loop's thread only.
package protocol ByteTransport: AnyObject {
    /// The bytes in both directions, shared with the layer above.
    var buffers: TransportBuffers { get }
    /// Hears what happens; cleared when the transport closes.
    var handler: (any ByteTransportHandler)? { get set }
    /// The peer's address.
    var remoteAddress: TetherSocketAddress { get }
    /// This end's address, when it has one.
    var localAddress: TetherSocketAddress? { get }
    /// Whether the transport is open: it reads, writes and reports.
    var isOpen: Bool { get }
    /// Bytes received from and sent to the peer so far, counted where they cross the wire.
    var bytesRead: Int { get }
    /// See ``bytesRead``.
    var bytesWritten: Int { get }
    /// Of ``bytesWritten``, those the peer has acknowledged: what left this machine's
    /// socket send queue, rather than what the kernel took. Asks the kernel (one `ioctl`),
    /// so it is for rare checks, not per frame.
    var bytesDelivered: Int { get }
    /// When set, the handler hears ``ByteTransportHandler/transportWritable()`` once the
    /// bytes waiting to be written (``TransportBuffers/pendingOutboundBytes``) fall to this
    /// many or fewer; it is cleared first.
    var writableThreshold: Int? { get set }
    /// The TLS session of a secured transport; `nil` for one without TLS.
    var security: (any TLSSession)? { get }
    /// Whether part of a unit below the buffers has been received and not the rest (a TLS
    /// record); the layer above adds what its own buffer holds.
    var holdsPartialInput: Bool { get }

    /// Bounds the bytes the socket at the bottom of the stack takes before it has sent them
    /// (`TCP_NOTSENT_LOWAT`): writes beyond it wait in this process, where a frame written
    /// later can still go before them. For a channel that sends large frames in chunks.
    /// Does nothing on a transport without a kernel queue.
    ///
    /// - Parameter count: The most unsent bytes the kernel holds.
    func limitUnsentBytes(_ count: Int)
    /// Begins: starts watching for bytes and, with TLS, sends the client's first flight.
    ///
    /// - Throws: ``TetherError`` when the transport cannot start; it is closed then.
    func start() throws(TetherError)
    /// Writes what `outbound` holds at the end of the current loop turn.
    func scheduleFlush()
    /// Writes what `outbound` holds now, as far as the peer takes it.
    func flush()
    /// Reads what has arrived now, outside the loop's readiness events (for a timer about
    /// to declare the peer silent). Does nothing while reading is paused.
    func readPending()
    /// Stops reading: what the peer sends waits below until ``resumeReading()``.
    func pauseReading()
    /// Reads again after ``pauseReading()``.
    func resumeReading()
    /// Closes at once; pending outbound bytes are dropped. Reports nothing. Idempotent.
    func close()
    /// Writes what is pending, then closes; closes anyway after `timeout`. Reports nothing.
    ///
    /// - Parameter timeout: How long the peer has to take the pending bytes.
    func closeAfterFlush(timeout: Duration)
}

/// A transport that is a layer over another (TLS, WebSocket, the protocol sniffer): the
/// peer, the addresses, the byte counts and the reading controls are those of the
/// transport below.
package protocol TransportLayer: ByteTransport {
    /// The transport below this layer.
    var base: any ByteTransport { get }
}

extension TransportLayer {
    var remoteAddress: TetherSocketAddress { base.remoteAddress }
    var localAddress: TetherSocketAddress? { base.localAddress }
    var bytesRead: Int { base.bytesRead }
    var bytesWritten: Int { base.bytesWritten }
    var bytesDelivered: Int { base.bytesDelivered }
    func readPending() { base.readPending() }
    func limitUnsentBytes(_ count: Int) { base.limitUnsentBytes(count) }
    func pauseReading() { base.pauseReading() }
    func resumeReading() { base.resumeReading() }
}

extension ByteTransport {
    /// A transport with no kernel queue below it (in memory): what it wrote is delivered.
    package var bytesDelivered: Int { bytesWritten }

    /// A transport with no kernel queue below it holds nothing unsent.
    package func limitUnsentBytes(_ count: Int) {}

    /// For a layer over `base` (TLS, WebSocket), when `base` has drained to the threshold
    /// the layer set on it: tells the handler once this layer's own pending bytes are at
    /// ``writableThreshold`` too, or asks `base` for the rest.
    ///
    /// - Parameter base: The transport below this layer.
    func relayWritable(from base: any ByteTransport) {
        guard let threshold = writableThreshold else { return }
        if buffers.pendingOutboundBytes <= threshold {
            writableThreshold = nil
            handler?.transportWritable()
        } else {
            base.writableThreshold = max(0, threshold - buffers.outbound.readableBytes)
        }
    }

    /// Closes, then tells the handler why: the one report of the end of a transport.
    ///
    /// - Parameter error: Why the transport ended.
    func closeReporting(_ error: TetherError) {
        let handler = self.handler
        close()
        handler?.transportClosed(error)
    }
}

/// Tells whoever set it that the bottom transport of a stack wrote bytes to its socket (or
/// peer): one reference in the buffers, set only while something waits on the writes.
package final class FlushNotice {
    private let flushed: () -> Void

    /// - Parameter flushed: Called on the loop after each write that moved bytes.
    init(_ flushed: @escaping () -> Void) {
        self.flushed = flushed
    }

    /// Bytes were just written below every layer.
    func transportFlushed() {
        flushed()
    }
}

/// Hears what happens on a ``ByteTransport``, on the loop's thread.
package protocol ByteTransportHandler: AnyObject {
    /// New bytes are in the transport's `inbound` buffer.
    func transportRead()
    /// The transport closed by itself: the peer closed (``TetherError/Code/peerClosed``) or
    /// it failed. Bytes already received were announced first. Called once, last.
    ///
    /// - Parameter error: Why.
    func transportClosed(_ error: TetherError)
    /// The pending bytes fell to the ``ByteTransport/writableThreshold``.
    func transportWritable()
    /// The TLS handshake finished: ``ByteTransport/security`` holds its details.
    func transportSecured()
    /// The transport this handler sits on took itself out of the stack
    /// (``ProtocolSniffer``): `transport`, already pointing at this handler, is the one to
    /// read from and write to from now on. Only a framed channel sits over such a layer.
    ///
    /// - Parameter transport: The transport that replaces the old one.
    func transportReplaced(by transport: any ByteTransport)
}

extension ByteTransportHandler {
    /// Default: a handler that never sits over a layer that replaces itself.
    ///
    /// - Parameter transport: The transport that replaces the old one.
    package func transportReplaced(by transport: any ByteTransport) {
        preconditionFailure("only a framed channel goes over a layer that replaces itself")
    }
}

/// The two buffers between a transport and the layer above it, in one object that both
/// hold, so the per-frame path (decode from `inbound`, encode into `outbound`) reaches them
/// directly rather than through the transport protocol.
///
/// A transport may be its own buffers (``TCPTransport`` is): an idle connection then keeps
/// one object fewer. Every member is final, so reaching them never goes through a table.
package class TransportBuffers {
    /// Bytes received and not yet consumed by the layer above. Without storage between
    /// reads unless it holds part of a unit: the transport lends it the loop's shared read
    /// buffer while it reads.
    @exclusivity(unchecked) package final var inbound = FrameBuffer()
    /// Bytes to send, appended by the layer above and taken by the transport as it writes.
    @exclusivity(unchecked) package final var outbound = FrameBuffer(capacity: 0)
    /// Set while a flush is scheduled for the end of the loop turn.
    @exclusivity(unchecked) package final var flushScheduled = false
    /// Told when the transport of these buffers, at the bottom of its stack, wrote bytes:
    /// set while a channel waits for its bytes to be written.
    @exclusivity(unchecked) package final var flushObserver: FlushNotice?
    /// The buffers of the transport below, for a layer (TLS) that keeps bytes there.
    @exclusivity(unchecked) package final var below: TransportBuffers?
    /// Large payloads sent from and received into their own storage: `nil` until the
    /// first one, and always on a transport that does not take them.
    @exclusivity(unchecked) package final var large: LargePayloads?
    /// Whether this is the ciphertext of a TLS layer, which borrows the loop's other buffer.
    let sealed: Bool
    /// Whether these are the buffers of a WebSocket layer over a transport that borrows the
    /// loop's plain read buffer itself (TLS plaintext, a socket whose first bytes were
    /// sniffed): `inbound` then borrows the loop's third buffer
    /// (``EventLoop/layerReadBuffer``), never one the layer below holds during the read.
    let layered: Bool
    /// Whether the transport sends large payloads from their own arrays and reads large
    /// bodies into theirs (``LargePayloads``): a plain TCP socket does.
    let carriesLargePayloads: Bool

    /// Empty buffers.
    ///
    /// - Parameters:
    ///   - sealed: Whether they carry a TLS layer's ciphertext.
    ///   - carriesLargePayloads: Whether the transport takes large payloads in their own
    ///     storage.
    ///   - layered: Whether they belong to a layer over buffers that borrow the loop's
    ///     plain read buffer (``layered``).
    init(sealed: Bool = false, carriesLargePayloads: Bool = false, layered: Bool = false) {
        precondition(!(sealed && layered), "buffers borrow one of the loop's read buffers")
        self.sealed = sealed
        self.carriesLargePayloads = carriesLargePayloads
        self.layered = layered
    }

    /// Bytes handed to the transport and not yet sent: in `outbound`, in the payloads
    /// waiting in their own arrays, and in the layers below.
    package final var pendingOutboundBytes: Int {
        var pending = outbound.readableBytes
        if let large { pending += large.outgoingBytes }
        if let below { pending += below.pendingOutboundBytes }
        return pending
    }

    /// Queues `target` to flush at the end of the loop turn, unless it already is: one
    /// flush per turn, however many writes the turn made.
    final func scheduleFlush(of target: any Flushable, on loop: EventLoop) {
        guard !flushScheduled else { return }
        flushScheduled = true
        loop.flushAfterTurn(target)
    }

    /// Storage a drained buffer keeps; above it, the storage is released, so a burst of
    /// large frames does not pin memory for the life of the connection, while a connection
    /// that keeps sending large frames does not reallocate for each one.
    static let idleBufferLimit = 16 << 20

    /// Before a read: an `inbound` that holds nothing of its own borrows the loop's shared
    /// buffer. Returns whether it did, for ``settleInbound(borrowed:on:)``.
    final func borrowInbound(from loop: EventLoop) -> Bool {
        guard inbound.capacity == 0 else { return false }
        if sealed {
            swap(&inbound, &loop.sealedReadBuffer)
        } else if layered {
            swap(&inbound, &loop.layerReadBuffer)
        } else {
            swap(&inbound, &loop.readBuffer)
        }
        return true
    }

    /// After a read: the loop's buffer goes back if everything was consumed. A buffer that
    /// holds part of a unit stays here, which then keeps a buffer of its own (up to
    /// ``idleBufferLimit``), so a stream of large frames does not regrow one per frame.
    final func settleInbound(borrowed: Bool, on loop: EventLoop) {
        guard inbound.isEmpty else { return }
        if borrowed {
            if sealed {
                swap(&inbound, &loop.sealedReadBuffer)
                loop.sealedReadBuffer.shrinkIfIdle(keeping: Self.idleBufferLimit)
            } else if layered {
                swap(&inbound, &loop.layerReadBuffer)
                loop.layerReadBuffer.shrinkIfIdle(keeping: Self.idleBufferLimit)
            } else {
                swap(&inbound, &loop.readBuffer)
                loop.readBuffer.shrinkIfIdle(keeping: Self.idleBufferLimit)
            }
        } else {
            inbound.shrinkIfIdle(keeping: Self.idleBufferLimit)
        }
    }
}
