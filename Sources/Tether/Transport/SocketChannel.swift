/// Receives what happens on a ``SocketChannel``. Called on the channel's loop thread.
protocol ChannelDelegate: AnyObject {
    /// New bytes are in `channel.inbound`.
    func channelRead(_ channel: SocketChannel)
    /// The channel closed by itself: the peer closed (`peerClosed`) or the socket failed.
    /// Bytes already in `channel.inbound` have been offered to ``channelRead(_:)`` first.
    func channelClosed(_ channel: SocketChannel, error: TetherError)
    /// The outbound buffer has drained to ``SocketChannel/writableThreshold``, which is
    /// cleared first.
    func channelWritable(_ channel: SocketChannel)
    /// The TLS handshake finished: ``SocketChannel/tls`` holds its details.
    func channelSecured(_ channel: SocketChannel)
}

extension ChannelDelegate {
    func channelWritable(_ channel: SocketChannel) {}
    func channelSecured(_ channel: SocketChannel) {}
}

/// A connected, nonblocking TCP socket registered with an event loop.
///
/// Reads go into the loop's shared read buffer, lent to ``inbound`` for the read; the
/// channel keeps a buffer of its own only while it holds part of a frame. Writes are encoded
/// straight into one ``outbound`` buffer and flushed once per loop turn, so many frames
/// written in a turn go out in one `send`. Partial writes keep the rest and wait for
/// writability.
/// Loop thread only.
final class SocketChannel: IOHandler, Flushable, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only on `loop`'s thread; the type is
    // Sendable only so it can be captured by closures that `loop.execute` runs there.

    let loop: EventLoop
    let remoteAddress: SocketAddress
    let localAddress: SocketAddress?
    /// The socket, until the channel closes.
    private var socket: Socket?
    /// The socket's descriptor while open; -1 once closed.
    private(set) var fd: Int32
    /// Bytes received and not yet decoded. Empty and without storage between reads unless
    /// it holds part of a frame.
    @exclusivity(unchecked) var inbound = FrameBuffer()
    @exclusivity(unchecked) var outbound = FrameBuffer(capacity: 0)
    var delegate: (any ChannelDelegate)?
    /// TLS between the socket and the codec, when the connection uses it.
    let tls: (any TLSSession)?
    /// With TLS: encrypted bytes waiting to be written.
    private var sealed = FrameBuffer(capacity: 0)
    /// With TLS: the peer sent its close_notify.
    private var peerSentCloseNotify = false
    /// With TLS: set while the session waits for the server's verdict on our certificate.
    private var verdictTimer: LoopTimer?
    let maximumOutboundBytes: Int
    /// Bytes read from and written to the socket so far, for metrics.
    @exclusivity(unchecked) private(set) var bytesRead = 0
    @exclusivity(unchecked) private(set) var bytesWritten = 0
    /// When set, the delegate hears ``ChannelDelegate/channelWritable(_:)`` once the bytes
    /// waiting to be written fall to this many or fewer.
    var writableThreshold: Int?
    @exclusivity(unchecked) private var flushScheduled = false
    private var wantsWrite = false
    /// Set while the channel does not read its socket (``pauseReading()``).
    private(set) var isReadingPaused = false
    private var closeWhenFlushed = false
    private var drainTimer: LoopTimer?

    /// Storage a drained buffer keeps; above it, the storage is released, so a burst of
    /// large frames does not pin memory for the life of the connection, while a connection
    /// that keeps sending large frames does not reallocate for each one.
    static let idleBufferLimit = 16 << 20

    /// Takes ownership of a connected descriptor and registers it for reading.
    init(
        socket: consuming Socket,
        remoteAddress: SocketAddress,
        loop: EventLoop,
        noDelay: Bool,
        maximumOutboundBytes: Int,
        tls: (any TLSSession)? = nil
    ) throws(TetherError) {
        loop.preconditionInLoop()
        let fd = socket.descriptor
        self.fd = fd
        self.tls = tls
        self.loop = loop
        self.remoteAddress = remoteAddress
        self.localAddress = try? Syscall.localAddress(fd)
        self.maximumOutboundBytes = maximumOutboundBytes
        if noDelay {
            try? Syscall.setOption(fd, level: SocketOptions.tcpLevel, name: SocketOptions.noDelay, value: 1)
        }
        do {
            try loop.register(fd, interest: .read, handler: self)
        } catch {
            self.fd = -1
            throw TetherError(code: .systemCall, message: "cannot watch the socket of \(remoteAddress): \(error)")
        }
        self.socket = .some(socket)
        if let tls {
            do {
                try tls.start(output: &sealed)
            } catch {
                close()
                throw error
            }
            scheduleFlush()
        }
    }

    // MARK: Reading

    func handleReadiness(_ event: ReadinessEvent) {
        if event.writable && wantsWrite { flushNow() }
        // A hang-up is reported even while reading is paused, and would be again at every
        // turn: the read finds the end of the stream and closes.
        if event.readable && fd >= 0 && (!isReadingPaused || event.hangup) { readNow() }
    }

    /// Reads what the socket holds now, outside the loop's readiness events: a timer that is
    /// about to declare the peer silent calls it first, since bytes may have arrived after
    /// this turn's readiness check. Does nothing while reading is paused.
    func readPending() {
        if fd >= 0 && !isReadingPaused { readNow() }
    }

    /// Stops reading the socket: what the peer sends waits in the kernel's buffers, and
    /// then in the peer's, until ``resumeReading()``. Bytes already in ``inbound`` stay there.
    func pauseReading() {
        guard !isReadingPaused, fd >= 0 else { return }
        isReadingPaused = true
        try? loop.reregister(fd, interest: interest)
    }

    /// Reads the socket again after ``pauseReading()``; bytes that arrived meanwhile are
    /// reported at the next loop turn.
    func resumeReading() {
        guard isReadingPaused, fd >= 0 else { return }
        isReadingPaused = false
        try? loop.reregister(fd, interest: interest)
    }

    /// What the socket is watched for now.
    private var interest: Interest {
        var interest: Interest = isReadingPaused ? [] : .read
        if wantsWrite { interest.insert(.write) }
        return interest
    }

    private func readNow() {
        if tls != nil {
            readSealed()
            return
        }
        // A channel that has never held part of a frame owns no buffer: it borrows the loop's.
        let borrowed = inbound.capacity == 0
        if borrowed { swap(&inbound, &loop.readBuffer) }
        defer { settleInbound(borrowed: borrowed) }
        let outcome = readSocket(into: &inbound)
        if outcome.count > 0 { delegate?.channelRead(self) }
        if let closeError = outcome.error, fd >= 0 { fail(closeError) }
    }

    /// Reads what the socket holds now into `buffer`, up to four times 16 KiB or more;
    /// returns the byte count and the error that ends the channel, if any (end of stream
    /// included).
    private func readSocket(into buffer: inout FrameBuffer) -> (count: Int, error: TetherError?) {
        var total = 0
        for _ in 0..<4 {
            var full = false
            var endOfStream = false
            do {
                let count = try buffer.withWritableSpace(minimum: 16 << 10) { (space) throws(Errno) -> Int in
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
                    return (total, TetherError(code: .peerClosed, message: "peer \(remoteAddress) closed the connection"))
                }
                if count == 0 { break }
                total += count
                bytesRead += count
                if !full { break }
            } catch {
                return (total, socketError(error, doing: "reading from"))
            }
        }
        return (total, nil)
    }

    /// The handshake finished: the delegate hears it.
    private func secured() {
        if let verdictTimer { loop.cancel(verdictTimer) }
        verdictTimer = nil
        delegate?.channelSecured(self)
    }

    /// The TLS read: ciphertext into the loop's buffer, all of it through the session, and
    /// the plaintext into ``inbound``.
    private func readSealed() {
        guard let tls else { return }
        let outcome = readSocket(into: &loop.sealedReadBuffer)
        if outcome.count > 0 {
            let borrowed = inbound.capacity == 0
            if borrowed { swap(&inbound, &loop.readBuffer) }
            defer { settleInbound(borrowed: borrowed) }
            let plaintextBefore = inbound.readableBytes
            let wasEstablished = tls.isEstablished
            // The peer's first bytes, kept to explain a handshake that fails on them.
            let opening = !wasEstablished && bytesRead == outcome.count ? loop.sealedReadBuffer.readableBytesView.prefix(64) : []
            do {
                if try tls.receive(&loop.sealedReadBuffer, plaintext: &inbound, output: &sealed) == .closed {
                    peerSentCloseNotify = true
                }
            } catch {
                loop.sealedReadBuffer.clear()
                failSendingAlert(notTLS(error, opening: opening))
                return
            }
            loop.sealedReadBuffer.clear()
            if sealed.readableBytes > 0 || (!wasEstablished && tls.isEstablished && outbound.readableBytes > 0) {
                scheduleFlush()
            }
            if !wasEstablished && tls.isEstablished {
                secured()
            } else if let wait = tls.pendingVerdict, verdictTimer == nil {
                verdictTimer = loop.schedule(after: wait) { [self] in
                    verdictTimer = nil
                    // The verdict may have arrived after this turn's readiness check.
                    readPending()
                    guard fd >= 0, let tls = self.tls, !tls.isEstablished, tls.pendingVerdict != nil else { return }
                    tls.establishWithoutVerdict()
                    if outbound.readableBytes > 0 { scheduleFlush() }
                    secured()
                }
            }
            // Once established, bytes that only add to a record still count as a read: the
            // delegate sees that part of a frame is under way (``holdsPartialInput``).
            if fd >= 0, inbound.readableBytes > plaintextBefore || tls.isEstablished { delegate?.channelRead(self) }
        }
        guard fd >= 0 else { return }
        if peerSentCloseNotify {
            fail(TetherError(code: .peerClosed, message: "peer \(remoteAddress) closed the connection"))
        } else if var closeError = outcome.error {
            if closeError.code == .peerClosed { closeError = tls.endOfStreamError() }
            fail(closeError)
        }
    }

    /// After a read: return the loop's buffer if everything was decoded. A buffer that holds
    /// part of a frame stays with the channel, which then keeps a buffer of its own (up to
    /// ``idleBufferLimit``), so a stream of large frames does not regrow one per frame.
    private func settleInbound(borrowed: Bool) {
        guard inbound.isEmpty else { return }
        if borrowed {
            swap(&inbound, &loop.readBuffer)
            loop.readBuffer.shrinkIfIdle(keeping: Self.idleBufferLimit)
        } else {
            inbound.shrinkIfIdle(keeping: Self.idleBufferLimit)
        }
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

    /// Encodes `frame` into the outbound buffer and arranges a flush at the end of this loop turn.
    ///
    /// - Throws: ``TetherError`` when the channel is closed, the outbound buffer is over its
    ///   limit, or the codec cannot encode the frame.
    func write(_ frame: Frame, with codec: any FrameCodec) throws(TetherError) {
        try checkOutboundSpace(for: frame)
        try codec.encode(frame, into: &outbound)
        scheduleFlush()
    }

    /// Throws when the outbound buffer is over its limit; call before encoding a frame.
    private func checkOutboundSpace(for frame: Frame) throws(TetherError) {
        guard fd >= 0 else {
            throw TetherError(code: .notConnected, message: "the connection with \(remoteAddress) is closed")
        }
        let pending = pendingOutboundBytes
        if pending + frame.payload.count > maximumOutboundBytes && pending > 0 {
            throw TetherError(
                code: .outboundBufferFull,
                message: "\(pending) bytes are waiting to be written to \(remoteAddress), over the \(describeBytes(maximumOutboundBytes)) limit"
            )
        }
    }

    /// Arranges a flush after the current loop turn.
    func scheduleFlush() {
        guard !flushScheduled, fd >= 0 else { return }
        flushScheduled = true
        loop.flushAfterTurn(self)
    }

    func flushAfterTurn() {
        flushScheduled = false
        if !wantsWrite { flushNow() }
    }

    private func flushNow() {
        guard fd >= 0 else { return }
        let outcome: (written: Int, error: Errno?, blocked: Bool)
        if let tls {
            if tls.isEstablished && outbound.readableBytes > 0 {
                do {
                    try tls.send(&outbound, output: &sealed)
                } catch {
                    fail(error)
                    return
                }
                outbound.shrinkIfIdle(keeping: Self.idleBufferLimit)
            }
            outcome = Self.send(&sealed, to: fd)
        } else {
            outcome = Self.send(&outbound, to: fd)
        }
        bytesWritten += outcome.written
        if let error = outcome.error {
            fail(socketError(error, doing: "writing to"))
            return
        }
        if outcome.blocked {
            setWriteInterest(true)
            notifyIfWritable()
            return
        }
        if tls == nil {
            outbound.shrinkIfIdle(keeping: Self.idleBufferLimit)
        } else {
            sealed.shrinkIfIdle(keeping: Self.idleBufferLimit)
        }
        setWriteInterest(false)
        if closeWhenFlushed {
            close()
            return
        }
        notifyIfWritable()
    }

    /// Writes `buffer` to `fd` until it is empty or the socket would block.
    private static func send(_ buffer: inout FrameBuffer, to fd: Int32) -> (written: Int, error: Errno?, blocked: Bool) {
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

    /// Whether part of a frame has been received and not the rest: bytes in ``inbound`` that
    /// do not make a whole frame, or, with TLS, part of a record.
    var holdsPartialInput: Bool {
        if !inbound.isEmpty { return true }
        guard let tls, tls.isEstablished else { return false }
        return tls.holdsPartialRecord
    }

    /// Bytes encoded and not yet written.
    var pendingOutboundBytes: Int { outbound.readableBytes + sealed.readableBytes }

    private func notifyIfWritable() {
        guard let threshold = writableThreshold, pendingOutboundBytes <= threshold, fd >= 0 else { return }
        writableThreshold = nil
        delegate?.channelWritable(self)
    }

    private func setWriteInterest(_ enabled: Bool) {
        guard enabled != wantsWrite, fd >= 0 else { return }
        wantsWrite = enabled
        try? loop.reregister(fd, interest: interest)
    }

    // MARK: Closing

    /// Closes at once; pending outbound bytes are discarded. Does not call the delegate.
    func close() {
        guard fd >= 0 else { return }
        if let drainTimer { loop.cancel(drainTimer) }
        drainTimer = nil
        if let verdictTimer { loop.cancel(verdictTimer) }
        verdictTimer = nil
        loop.deregister(fd)
        socket.take()?.close()
        fd = -1
        delegate = nil
    }

    /// Writes what is pending, at once and then as the socket takes it, then closes; closes
    /// anyway after `timeout` if the peer does not read. Does not call the delegate.
    /// With TLS, the pending plaintext is encrypted and followed by a close_notify; plaintext
    /// written before a handshake that never finished is dropped.
    func closeAfterFlush(timeout: Duration) {
        guard fd >= 0 else { return }
        delegate = nil
        if let tls {
            if tls.isEstablished {
                if outbound.readableBytes > 0 { try? tls.send(&outbound, output: &sealed) }
                tls.shutdown(output: &sealed)
            }
            outbound.clear()
        }
        if pendingOutboundBytes == 0 {
            close()
            return
        }
        // Written now rather than at the end of the turn: by the time the caller's close()
        // returns, what the socket could take is with the kernel, which delivers it even if
        // the process exits next.
        closeWhenFlushed = true
        if !wantsWrite { flushNow() }
        guard fd >= 0 else { return }
        drainTimer = loop.schedule(after: timeout) { [self] in
            drainTimer = nil
            close()
        }
    }

    /// A handshake that failed on the peer's first bytes because they are not TLS at all (a
    /// plaintext client, an HTTP request): the error says what they are, and the peer gets a
    /// fatal `protocol_version` alert (OpenSSL sends none for a first record that is not
    /// TLS), so a plaintext client can tell that it reached a TLS port.
    private func notTLS(_ error: TetherError, opening: ArraySlice<UInt8>) -> TetherError {
        // TLS that went wrong otherwise, or HTTP, which OpenSSL names itself ("http request").
        guard !opening.isEmpty, ForeignProtocol.recognize(opening) == nil else { return error }
        if sealed.readableBytes == 0 { sealed.writeBytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 70]) }
        let what = "bytes that are not TLS (\(hexBytes(opening.prefix(8))))"
        return TetherError(code: error.code, message: "\(error.message): \(remoteAddress) sent \(what) instead of a TLS handshake: a peer without TLS?", underlying: error)
    }

    /// Fails after one try at sending what the TLS session left to send: the alert that
    /// tells the peer why.
    private func failSendingAlert(_ error: TetherError) {
        if fd >= 0, sealed.readableBytes > 0 {
            _ = Self.send(&sealed, to: fd)
        }
        fail(error)
    }

    private func fail(_ error: TetherError) {
        let delegate = self.delegate
        close()
        delegate?.channelClosed(self, error: error)
    }
}

