/// A connected, nonblocking TCP socket registered with an event loop: the POSIX
/// ``ByteTransport``.
///
/// Reads go into the loop's shared read buffer, lent to the inbound buffer for the read; the
/// transport keeps a buffer of its own only while the layer above leaves part of a unit in
/// it. A readiness event reads at most four times 16 KiB (or more, as the buffer grows),
/// so one busy peer cannot starve the loop. Writes gathered in `outbound` during a loop
/// turn go out once at its end, in one `send`; partial writes keep the rest and wait for
/// writability. Loop thread only.
final class TCPTransport: TransportBuffers, ByteTransport, IOHandler, Flushable, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only on `loop`'s thread; the type is
    // Sendable only so it can be captured by closures that `loop.execute` runs there.

    let loop: EventLoop
    let remoteAddress: TetherSocketAddress
    let localAddress: TetherSocketAddress?
    /// The transport is its own buffers: one object per connection rather than two.
    var buffers: TransportBuffers { self }
    @exclusivity(unchecked) var handler: (any ByteTransportHandler)?
    /// The socket, until the transport closes.
    @exclusivity(unchecked) private var socket: Socket?
    /// The socket's descriptor, for the loop's registrations; stale once closed.
    let descriptor: Int32
    @exclusivity(unchecked) private(set) var bytesRead = 0
    @exclusivity(unchecked) private(set) var bytesWritten = 0

    var bytesDelivered: Int {
        guard isOpen else { return bytesWritten }
        return bytesWritten - Syscall.unacknowledgedBytes(descriptor)
    }
    @exclusivity(unchecked) var writableThreshold: Int?
    @exclusivity(unchecked) private var wantsWrite = false
    private(set) var isReadingPaused = false
    private var closeWhenFlushed = false
    private var drainTimer: LoopTimer?
    private var registered = false

    /// Takes ownership of a connected socket; ``start()`` registers it for reading.
    ///
    /// - Parameters:
    ///   - socket: The connected socket, which the transport closes.
    ///   - remoteAddress: The peer's address.
    ///   - loop: The loop that drives it; the caller is on its thread.
    ///   - noDelay: Whether to set `TCP_NODELAY`.
    ///   - sealed: Whether the bytes are the ciphertext of a TLS layer above.
    init(socket: consuming Socket, remoteAddress: TetherSocketAddress, loop: EventLoop, noDelay: Bool, sealed: Bool = false) {
        loop.preconditionInLoop()
        let fd = socket.descriptor
        self.descriptor = fd
        self.loop = loop
        self.remoteAddress = remoteAddress
        self.localAddress = try? Syscall.localAddress(fd)
        if noDelay {
            try? Syscall.setOption(fd, level: SocketOptions.tcpLevel, name: SocketOptions.noDelay, value: 1)
        }
        self.socket = .some(socket)
        super.init(sealed: sealed, carriesLargePayloads: !sealed)
    }

    var isOpen: Bool { socket != nil }

    func limitUnsentBytes(_ count: Int) {
        guard isOpen else { return }
        try? Syscall.setOption(descriptor, level: SocketOptions.tcpLevel, name: SocketOptions.unsentLowWater, value: Int32(clamping: count))
    }

    var security: (any TLSSession)? { nil }
    var holdsPartialInput: Bool { false }

    func start() throws(TetherError) {
        guard isOpen else { return }
        do {
            try loop.register(descriptor, interest: .read, handler: self)
            registered = true
        } catch {
            close()
            throw TetherError(code: .systemCall, message: "cannot watch the socket of \(remoteAddress): \(error)")
        }
    }

    // MARK: Reading

    func handleReadiness(_ event: ReadinessEvent) {
        if event.writable && wantsWrite { flushNow() }
        // A hang-up is reported even while reading is paused, and would be again at every
        // turn: the read finds the end of the stream and closes.
        if event.readable && isOpen && (!isReadingPaused || event.hangup) { readNow() }
    }

    func readPending() {
        if isOpen && !isReadingPaused { readNow() }
    }

    func pauseReading() {
        guard !isReadingPaused, isOpen else { return }
        isReadingPaused = true
        try? loop.reregister(descriptor, interest: interest)
    }

    func resumeReading() {
        guard isReadingPaused, isOpen else { return }
        isReadingPaused = false
        try? loop.reregister(descriptor, interest: interest)
    }

    /// What the socket is watched for now.
    private var interest: Interest {
        var interest: Interest = isReadingPaused ? [] : .read
        if wantsWrite { interest.insert(.write) }
        return interest
    }

    /// Reads what the socket holds, four reads at most: into a large body's own storage
    /// while one is under way, into `inbound` otherwise. The handler hears of the bytes after
    /// each run of reads into one place, so a body completed is handed over before the
    /// bytes after it are read; with large payloads, also after each read that filled its
    /// space, so the layer above can give a large body its own storage
    /// (``LargePayloads/incoming``) before the rest of it is read.
    private func readNow() {
        let buffers = self.buffers
        var reads = 4
        while true {
            if let large = buffers.large, large.isReceivingBody {
                let outcome = readBody(into: large, reads: &reads)
                if outcome.count > 0 { handler?.transportRead() }
                if let closeError = outcome.error {
                    if isOpen { closeReporting(closeError) }
                    return
                }
                guard outcome.completed, reads > 0, isOpen, !isReadingPaused else { return }
            }
            let borrowed = buffers.borrowInbound(from: loop)
            let outcome = readSocket(reads: &reads)
            if outcome.count > 0 { handler?.transportRead() }
            buffers.settleInbound(borrowed: borrowed, on: loop)
            if let closeError = outcome.error {
                if isOpen { closeReporting(closeError) }
                return
            }
            guard outcome.more, reads > 0, isOpen, !isReadingPaused else { return }
        }
    }

    /// Reads into the missing part of the body under way until it is complete, the socket
    /// has nothing more, or `reads` are spent; returns the byte count, whether the body is
    /// complete, and the error that ends the transport, if any (end of stream included).
    private func readBody(into large: LargePayloads, reads: inout Int) -> (count: Int, completed: Bool, error: TetherError?) {
        var total = 0
        let fd = descriptor
        while reads > 0, large.isReceivingBody {
            reads -= 1
            let result: IOResult<Int>
            do {
                result = try large.incoming!.receive { (space) throws(Errno) -> IOResult<Int> in
                    try Syscall.readBytes(fd, space.baseAddress!, space.count)
                }
            } catch {
                return (total, false, socketError(error, doing: "reading from"))
            }
            guard case .processed(let count) = result else { break }
            if count == 0 {
                return (total, false, TetherError(code: .peerClosed, message: "peer \(remoteAddress) closed the connection"))
            }
            total += count
            bytesRead += count
        }
        return (total, large.incoming?.isComplete ?? false, nil)
    }

    /// Reads what the socket holds now into `inbound`, up to `reads` times 16 KiB or more;
    /// returns the byte count, whether more is waiting that the layer above should hear of
    /// first (a read filled its space on a transport that carries large payloads), and the
    /// error that ends the transport, if any (end of stream included).
    private func readSocket(reads: inout Int) -> (count: Int, more: Bool, error: TetherError?) {
        var total = 0
        let fd = descriptor
        while reads > 0 {
            reads -= 1
            var full = false
            var endOfStream = false
            do {
                let count = try inbound.withWritableSpace(minimum: 16 << 10) { (space) throws(Errno) -> Int in
                    switch try Syscall.readBytes(fd, space.baseAddress!, space.count) {
                    case .processed(let count):
                        full = count == space.count
                        endOfStream = count == 0
                        return count
                    case .wouldBlock:
                        return 0
                    }
                }
                if endOfStream {
                    return (total, false, TetherError(code: .peerClosed, message: "peer \(remoteAddress) closed the connection"))
                }
                if count == 0 { break }
                total += count
                bytesRead += count
                if !full { break }
                // More is waiting: the layer above hears of these bytes first, so that what
                // continues a large body goes to the body's own storage rather than through
                // this buffer.
                if reads > 0, carriesLargePayloads { return (total, true, nil) }
            } catch {
                return (total, false, socketError(error, doing: "reading from"))
            }
        }
        return (total, false, nil)
    }

    private func socketError(_ error: Errno, doing action: String) -> TetherError {
        switch error {
        case .connectionReset, .brokenPipe:
            TetherError(code: .connectionReset, message: "connection with \(remoteAddress) was reset while \(action) it", underlying: error)
        default:
            TetherError(code: .connectionReset, message: "\(action) \(remoteAddress) failed: \(error)", underlying: error)
        }
    }

    // MARK: Writing

    func scheduleFlush() {
        if isOpen { buffers.scheduleFlush(of: self, on: loop) }
    }

    func flushAfterTurn() {
        buffers.flushScheduled = false
        if !wantsWrite { flushNow() }
    }

    func flush() {
        if !wantsWrite { flushNow() }
    }

    private func flushNow() {
        guard isOpen else { return }
        let buffers = self.buffers
        let outcome = buffers.hasLargeOutgoing ? buffers.sendGathering(to: descriptor) : Self.send(&buffers.outbound, to: descriptor)
        bytesWritten += outcome.written
        if let error = outcome.error {
            closeReporting(socketError(error, doing: "writing to"))
            return
        }
        if outcome.written > 0, let flushObserver = buffers.flushObserver { flushObserver.transportFlushed() }
        if outcome.blocked {
            setWriteInterest(true)
            notifyIfWritable()
            return
        }
        buffers.outbound.shrinkIfIdle(keeping: TransportBuffers.idleBufferLimit)
        setWriteInterest(false)
        if closeWhenFlushed {
            close()
            return
        }
        notifyIfWritable()
    }

    /// Writes `buffer` to `fd` until it is empty or the socket would block.
    static func send(_ buffer: inout FrameBuffer, to fd: Int32) -> (written: Int, error: Errno?, blocked: Bool) {
        var written = 0
        while buffer.readableBytes > 0 {
            let result: IOResult<Int>
            do {
                result = try buffer.withReadableBytes { (bytes) throws(Errno) -> IOResult<Int> in
                    try Syscall.sendBytes(fd, bytes.baseAddress!, bytes.count)
                }
            } catch {
                return (written, error, false)
            }
            switch result {
            case .processed(let count):
                buffer.moveReaderIndex(forwardBy: count)
                written += count
            case .wouldBlock:
                return (written, nil, true)
            }
        }
        return (written, nil, false)
    }

    private func notifyIfWritable() {
        guard let threshold = writableThreshold, buffers.pendingOutboundBytes <= threshold, isOpen else { return }
        writableThreshold = nil
        handler?.transportWritable()
    }

    private func setWriteInterest(_ enabled: Bool) {
        guard enabled != wantsWrite, isOpen else { return }
        wantsWrite = enabled
        try? loop.reregister(descriptor, interest: interest)
    }

    // MARK: Closing

    func close() {
        guard let socket = socket.take() else { return }
        if let drainTimer { loop.cancel(drainTimer) }
        drainTimer = nil
        if registered { loop.deregister(descriptor) }
        socket.close()
        large?.dropOutgoing()
        handler = nil
    }

    func closeAfterFlush(timeout: Duration) {
        guard isOpen else { return }
        handler = nil
        if buffers.pendingOutboundBytes == 0 {
            close()
            return
        }
        // Written now rather than at the end of the turn: by the time the caller's close()
        // returns, what the socket could take is with the kernel, which delivers it even if
        // the process exits next.
        closeWhenFlushed = true
        if !wantsWrite { flushNow() }
        guard isOpen else { return }
        drainTimer = loop.schedule(after: timeout) { [self] in
            drainTimer = nil
            close()
        }
    }

}
