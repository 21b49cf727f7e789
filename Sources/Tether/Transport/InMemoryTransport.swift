/// One end of a connected pair of in-memory byte transports on one event loop: a
/// ``ByteTransport`` without sockets, for tests of everything above the transport seam.
///
/// It behaves as a TCP socket does, as seen from above:
/// - Bytes flushed by one end at the end of a loop turn are in the other's receive queue
///   then, and are read (announced to its handler) in the next turn, up to 64 KiB a read.
/// - Each receive queue is bounded (``capacity``): a writer whose peer does not read keeps
///   the rest in its outbound buffer, as a socket whose kernel buffers are full does, and
///   writes on once the reader has taken bytes.
/// - ``close()`` drops what this end had not written yet; the peer reads what had arrived,
///   then the end of the stream (``TetherError/Code/peerClosed``), or, when this end closed
///   with bytes it had not read, a reset (``TetherError/Code/connectionReset``), as a
///   socket closed with unread data sends one. ``shutdownOutput()`` sends the end of the
///   stream once the pending bytes are written, and keeps reading.
/// - Writing to a peer that has closed fails with ``TetherError/Code/connectionReset``.
/// - While reading is paused, received bytes wait in the queue; once the peer's end of
///   stream is queued behind them, they are read and the end reported even then, as a
///   socket's hang-up is.
/// - The end of the stream and errors are reported once; nothing is reported after a
///   close from above.
///
/// The ends of a ``MemoryLink`` write through its lanes (``LinkLane``), where the link's
/// faults act on the bytes between one end's outbound buffer and the other's receive queue.
///
/// Loop thread only; make a pair with ``makePair(on:capacity:sealed:)``.
package final class InMemoryTransport: ByteTransport, Flushable, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only on `loop`'s thread; Sendable so
    // jobs queued on the loop can capture it.

    let loop: EventLoop
    package private(set) var buffers: TransportBuffers
    package var handler: (any ByteTransportHandler)?
    package let remoteAddress: TetherSocketAddress
    package let localAddress: TetherSocketAddress?
    /// The bound on bytes received and not yet read, per direction.
    package let capacity: Int
    /// The other end; the pair refer to each other weakly, and whoever uses them keeps them.
    private weak var peer: InMemoryTransport?
    package private(set) var bytesRead = 0
    package private(set) var bytesWritten = 0
    /// Reads made so far: each one a ``ByteTransportHandler/transportRead()``.
    package private(set) var reads = 0
    package var writableThreshold: Int?
    package private(set) var isOpen = true
    private var started = false
    private(set) var isReadingPaused = false
    /// Bytes the peer wrote that this end has not read yet: the kernel's receive buffer.
    private var received = FrameBuffer()
    /// Set once the peer's end of stream is queued behind ``received``.
    private var endOfStream = false
    /// Set when that end is a reset rather than an orderly end of stream.
    private var reset = false
    /// Set while a read is queued on the loop.
    private var readScheduled = false
    /// Set while the outbound buffer waits for room in the peer's queue.
    private var blocked = false
    /// Set by ``shutdownOutput()``: the end of the stream goes after the pending bytes.
    private var outputShutdown = false
    private var outputEnded = false
    private var closeWhenFlushed = false
    private var drainTimer: LoopTimer?
    /// The most one read takes from the receive queue.
    static let maximumRead = 64 << 10
    /// The most one read takes now: ``maximumRead``, or less when the link's faults cut
    /// deliveries into pieces.
    var readLimit = InMemoryTransport.maximumRead
    /// The way to the peer through a ``MemoryLink``, where its faults act; `nil` for a pair
    /// made directly, whose bytes go straight into the peer's queue.
    var lane: LinkLane?
    /// Set while an exchange before the transport (``MemoryExchange``) waits for what the
    /// peer sends: called on the loop as bytes or the end of the stream arrive, while the
    /// end is not started.
    var arrivalBeforeStart: (() -> Void)?

    private init(loop: EventLoop, local: TetherSocketAddress, remote: TetherSocketAddress, capacity: Int, sealed: Bool) {
        self.loop = loop
        self.localAddress = local
        self.remoteAddress = remote
        self.capacity = capacity
        self.buffers = TransportBuffers(sealed: sealed)
    }

    /// A connected pair: what one end writes, the other reads.
    ///
    /// - Parameters:
    ///   - loop: The loop both ends run on.
    ///   - capacity: The bound on bytes received and not yet read, per direction; 256 KiB
    ///     by default, in the range of a socket's buffers.
    ///   - sealed: Whether the ends will carry TLS (``TLSTransport`` over them).
    /// - Returns: The two ends; their addresses are `127.0.0.1` ports 1 and 2.
    static func makePair(on loop: EventLoop, capacity: Int = 256 << 10, sealed: Bool = false) -> (InMemoryTransport, InMemoryTransport) {
        makePair(
            on: loop,
            clientAddress: TetherSocketAddress(ipAddress: "127.0.0.1", port: 1)!,
            serverAddress: TetherSocketAddress(ipAddress: "127.0.0.1", port: 2)!,
            capacity: capacity,
            clientSealed: sealed,
            serverSealed: sealed
        )
    }

    /// A connected pair with the addresses of a client and a server.
    ///
    /// - Parameters:
    ///   - loop: The loop both ends run on.
    ///   - clientAddress: The first end's local address, the second's remote one.
    ///   - serverAddress: The second end's local address, the first's remote one.
    ///   - capacity: The bound on bytes received and not yet read, per direction.
    ///   - clientSealed: Whether the first end will carry TLS.
    ///   - serverSealed: Whether the second end will carry TLS.
    /// - Returns: The client's end and the server's end.
    package static func makePair(
        on loop: EventLoop,
        clientAddress: TetherSocketAddress,
        serverAddress: TetherSocketAddress,
        capacity: Int = 256 << 10,
        clientSealed: Bool,
        serverSealed: Bool
    ) -> (InMemoryTransport, InMemoryTransport) {
        let a = InMemoryTransport(loop: loop, local: clientAddress, remote: serverAddress, capacity: max(1, capacity), sealed: clientSealed)
        let b = InMemoryTransport(loop: loop, local: serverAddress, remote: clientAddress, capacity: max(1, capacity), sealed: serverSealed)
        a.peer = b
        b.peer = a
        return (a, b)
    }

    /// Makes the end borrow the loop's sealed read buffer, for a layer over it that borrows
    /// the plain one (TLS, WebSocket). Before ``start()`` only, while the buffers are empty.
    func lendSealedBuffer() {
        precondition(!started, "an in-memory end lends its read buffer before it starts")
        guard !buffers.sealed else { return }
        buffers = TransportBuffers(sealed: true)
    }

    package var security: (any TLSSession)? { nil }
    package var holdsPartialInput: Bool { false }

    package func start() throws(TetherError) {
        loop.preconditionInLoop()
        guard isOpen, !started else { return }
        started = true
        scheduleRead()
    }

    // MARK: Reading

    private func scheduleRead() {
        guard !readScheduled, started, isOpen, !received.isEmpty || endOfStream else { return }
        guard !isReadingPaused || endOfStream else { return }
        readScheduled = true
        loop.execute { [self] in
            readScheduled = false
            readNow()
        }
    }

    package func readPending() {
        if isOpen && started && !isReadingPaused { readNow() }
    }

    package func pauseReading() {
        guard isOpen else { return }
        isReadingPaused = true
    }

    package func resumeReading() {
        guard isReadingPaused, isOpen else { return }
        isReadingPaused = false
        scheduleRead()
    }

    /// Moves up to 64 KiB from the receive queue into the inbound buffer and announces it;
    /// reports the end of the stream once the queue is drained.
    private func readNow() {
        guard isOpen, started else { return }
        if !isReadingPaused || endOfStream, !received.isEmpty {
            let count = min(received.readableBytes, readLimit)
            let borrowed = buffers.borrowInbound(from: loop)
            received.withReadableBytes { bytes in
                buffers.inbound.writeBytes(UnsafeRawBufferPointer(rebasing: bytes[..<count]))
            }
            received.moveReaderIndex(forwardBy: count)
            if received.isEmpty { received.clear() }
            bytesRead += count
            reads += 1
            // No readiness event announced these bytes: date them for the layers above.
            loop.stampWake()
            handler?.transportRead()
            buffers.settleInbound(borrowed: borrowed, on: loop)
            // Room in the queue: a writer that waited for it goes on.
            if let peer, peer.blocked { peer.loop.execute { [peer] in peer.flush() } }
        }
        guard isOpen else { return }
        if endOfStream && received.isEmpty {
            if reset {
                closeReporting(TetherError(code: .connectionReset, message: "connection with \(remoteAddress) was reset while reading from it"))
            } else {
                closeReporting(TetherError(code: .peerClosed, message: "peer \(remoteAddress) closed the connection"))
            }
            return
        }
        scheduleRead()
    }

    /// The peer wrote `bytes`, or ended its stream: queue them for reading.
    func receive(_ bytes: inout FrameBuffer, limit: Int) -> Int {
        let count = min(bytes.readableBytes, limit)
        guard count > 0 else { return 0 }
        bytes.withReadableBytes { all in
            received.writeBytes(UnsafeRawBufferPointer(rebasing: all[..<count]))
        }
        bytes.moveReaderIndex(forwardBy: count)
        scheduleRead()
        announceArrivalBeforeStart()
        return count
    }

    /// Bytes a link delivers: queue them for reading.
    func deliver(_ bytes: UnsafeRawBufferPointer) {
        guard isOpen, !bytes.isEmpty else { return }
        received.writeBytes(bytes)
        scheduleRead()
        announceArrivalBeforeStart()
    }

    func receiveEndOfStream(reset: Bool = false) {
        guard isOpen, !endOfStream || (reset && !self.reset) else { return }
        endOfStream = true
        self.reset = reset
        scheduleRead()
        announceArrivalBeforeStart()
    }

    private func announceArrivalBeforeStart() {
        guard !started, arrivalBeforeStart != nil else { return }
        loop.execute { [self] in
            if !started { arrivalBeforeStart?() }
        }
    }

    /// What the peer sent before this end started, and whether its stream ended (and was
    /// reset) behind it: for an exchange before the transport.
    func receivedBeforeStart<R>(_ body: (UnsafeRawBufferPointer, _ ended: Bool, _ reset: Bool) -> R) -> R {
        precondition(!started, "an exchange reads an in-memory end before it starts")
        return received.withReadableBytes { body($0, endOfStream, reset) }
    }

    /// Takes every byte received before this end started: they were the exchange's answer.
    func takeReceivedBeforeStart() -> [UInt8] {
        precondition(!started, "an exchange reads an in-memory end before it starts")
        let bytes = Array(received.readableBytesView)
        bytesRead += bytes.count
        received.clear()
        return bytes
    }

    // MARK: Writing

    package func scheduleFlush() {
        if isOpen { buffers.scheduleFlush(of: self, on: loop) }
    }

    func flushAfterTurn() {
        buffers.flushScheduled = false
        flush()
    }

    package func flush() {
        guard isOpen, !outputEnded else { return }
        guard let peer, peer.isOpen else {
            if buffers.outbound.readableBytes > 0 {
                closeReporting(TetherError(code: .connectionReset, message: "connection with \(remoteAddress) was reset while writing to it"))
            }
            return
        }
        if let lane {
            let room = max(0, peer.capacity - peer.received.readableBytes - lane.held)
            bytesWritten += lane.send(&buffers.outbound, limit: room)
        } else {
            let room = max(0, peer.capacity - peer.received.readableBytes)
            bytesWritten += peer.receive(&buffers.outbound, limit: room)
        }
        blocked = buffers.outbound.readableBytes > 0
        if let flushObserver = buffers.flushObserver { flushObserver.transportFlushed() }
        if blocked {
            notifyIfWritable()
            return
        }
        buffers.outbound.clear()
        buffers.outbound.shrinkIfIdle(keeping: TransportBuffers.idleBufferLimit)
        if outputShutdown {
            outputEnded = true
            sendEndOfStream()
        }
        if closeWhenFlushed {
            close()
            return
        }
        notifyIfWritable()
    }

    private func notifyIfWritable() {
        guard let threshold = writableThreshold, buffers.outbound.readableBytes <= threshold, isOpen else { return }
        writableThreshold = nil
        handler?.transportWritable()
    }

    /// Half-closes: the peer reads the end of the stream after the bytes pending now, and
    /// this end keeps reading (`shutdown(SHUT_WR)`).
    package func shutdownOutput() {
        guard isOpen, !outputShutdown else { return }
        outputShutdown = true
        flush()
    }

    // MARK: Closing

    package func close() {
        guard isOpen else { return }
        isOpen = false
        handler = nil
        if let drainTimer { loop.cancel(drainTimer) }
        drainTimer = nil
        // Bytes the peer sent that this end never read: the kernel would answer with a reset.
        let unread = !received.isEmpty
        received.clear()
        buffers.outbound.clear()
        if unread {
            outputEnded = true
            if let lane { lane.sendReset() } else { peer?.receiveEndOfStream(reset: true) }
        } else if !outputEnded {
            outputEnded = true
            sendEndOfStream()
        }
        lane?.link?.endClosed()
    }

    /// The orderly end of this end's stream, behind the bytes on their way.
    private func sendEndOfStream() {
        if let lane { lane.sendEnd() } else { peer?.receiveEndOfStream() }
    }

    package func closeAfterFlush(timeout: Duration) {
        guard isOpen else { return }
        handler = nil
        if buffers.outbound.readableBytes == 0 {
            close()
            return
        }
        closeWhenFlushed = true
        flush()
        guard isOpen else { return }
        drainTimer = loop.schedule(after: timeout) { [self] in
            drainTimer = nil
            close()
        }
    }

}
