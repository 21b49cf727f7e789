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
}

extension ChannelDelegate {
    func channelWritable(_ channel: SocketChannel) {}
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
    private(set) var fd: Int32
    /// Bytes received and not yet decoded. Empty and without storage between reads unless
    /// it holds part of a frame.
    var inbound = FrameBuffer()
    var outbound = FrameBuffer(capacity: 0)
    var delegate: (any ChannelDelegate)?
    let maximumOutboundBytes: Int
    /// Bytes read from and written to the socket so far, for metrics.
    private(set) var bytesRead = 0
    private(set) var bytesWritten = 0
    /// When set, the delegate hears ``ChannelDelegate/channelWritable(_:)`` once the bytes
    /// waiting to be written fall to this many or fewer.
    var writableThreshold: Int?
    private var flushScheduled = false
    private var wantsWrite = false
    private var closeWhenFlushed = false
    private var drainTimer: LoopTimer?

    /// Storage a drained buffer keeps; above it, the storage is released, so a burst of
    /// large frames does not pin memory for the life of the connection, while a connection
    /// that keeps sending large frames does not reallocate for each one.
    static let idleBufferLimit = 16 << 20

    /// Takes ownership of a connected descriptor and registers it for reading.
    init(fd: Int32, remoteAddress: SocketAddress, loop: EventLoop, noDelay: Bool, maximumOutboundBytes: Int) throws(TetherError) {
        loop.preconditionInLoop()
        self.fd = fd
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
            Syscall.closeDescriptor(fd)
            self.fd = -1
            throw TetherError(code: .systemCall, message: "cannot watch the socket of \(remoteAddress): \(error)")
        }
    }

    deinit {
        if fd >= 0 { Syscall.closeDescriptor(fd) }
    }

    // MARK: Reading

    func handleReadiness(_ event: ReadinessEvent) {
        if event.writable && wantsWrite { flushNow() }
        if event.readable && fd >= 0 { readNow() }
    }

    /// Reads what the socket holds now, outside the loop's readiness events: a timer that is
    /// about to declare the peer silent calls it first, since bytes may have arrived after
    /// this turn's readiness check.
    func readPending() {
        if fd >= 0 { readNow() }
    }

    private func readNow() {
        // A channel that has never held part of a frame owns no buffer: it borrows the loop's.
        let borrowed = inbound.capacity == 0
        if borrowed { swap(&inbound, &loop.readBuffer) }
        defer { settleInbound(borrowed: borrowed) }
        var gotBytes = false
        var closeError: TetherError?
        for _ in 0..<4 {
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
                    closeError = TetherError(code: .peerClosed, message: "peer \(remoteAddress) closed the connection")
                    break
                }
                if count == 0 { break }
                gotBytes = true
                bytesRead += count
                if !full { break }
            } catch {
                closeError = socketError(error, doing: "reading from")
                break
            }
        }
        if gotBytes { delegate?.channelRead(self) }
        if let closeError, fd >= 0 { fail(closeError) }
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
        if outbound.readableBytes + frame.payload.count > maximumOutboundBytes && outbound.readableBytes > 0 {
            throw TetherError(
                code: .outboundBufferFull,
                message: "\(outbound.readableBytes) bytes are waiting to be written to \(remoteAddress), over the \(describeBytes(maximumOutboundBytes)) limit"
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
        while outbound.readableBytes > 0 {
            let result: IOResult<Int>
            do {
                result = try outbound.withReadableBytes { (bytes) throws(Errno) -> IOResult<Int> in
                    try Syscall.sendBytes(fd, bytes.baseAddress!, bytes.count)
                }
            } catch {
                fail(socketError(error, doing: "writing to"))
                return
            }
            switch result {
            case .processed(let count):
                outbound.moveReaderIndex(forwardBy: count)
                bytesWritten += count
            case .wouldBlock:
                setWriteInterest(true)
                notifyIfWritable()
                return
            }
        }
        outbound.shrinkIfIdle(keeping: Self.idleBufferLimit)
        setWriteInterest(false)
        if closeWhenFlushed {
            close()
            return
        }
        notifyIfWritable()
    }

    /// Bytes encoded and not yet written.
    var pendingOutboundBytes: Int { outbound.readableBytes }

    private func notifyIfWritable() {
        guard let threshold = writableThreshold, outbound.readableBytes <= threshold, fd >= 0 else { return }
        writableThreshold = nil
        delegate?.channelWritable(self)
    }

    private func setWriteInterest(_ enabled: Bool) {
        guard enabled != wantsWrite, fd >= 0 else { return }
        wantsWrite = enabled
        try? loop.reregister(fd, interest: enabled ? [.read, .write] : .read)
    }

    // MARK: Closing

    /// Closes at once; pending outbound bytes are discarded. Does not call the delegate.
    func close() {
        guard fd >= 0 else { return }
        if let drainTimer { loop.cancel(drainTimer) }
        drainTimer = nil
        loop.deregister(fd)
        Syscall.closeDescriptor(fd)
        fd = -1
        delegate = nil
    }

    /// Writes what is pending, then closes; closes anyway after `timeout` if the peer does not
    /// read. Does not call the delegate.
    func closeAfterFlush(timeout: Duration) {
        guard fd >= 0 else { return }
        delegate = nil
        if outbound.readableBytes == 0 {
            close()
        } else {
            closeWhenFlushed = true
            scheduleFlush()
            drainTimer = loop.schedule(after: timeout) { [self] in
                drainTimer = nil
                close()
            }
        }
    }

    private func fail(_ error: TetherError) {
        let delegate = self.delegate
        close()
        delegate?.channelClosed(self, error: error)
    }
}

