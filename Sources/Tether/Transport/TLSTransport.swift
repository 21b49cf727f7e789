/// TLS as a layer over any ``ByteTransport``: ciphertext below, plaintext above.
///
/// The transport below reads ciphertext into its inbound buffer (the loop's second shared
/// buffer, ``EventLoop/sealedReadBuffer``, lent for the read); the session takes all of it
/// at once and appends the plaintext to this layer's inbound buffer. Plaintext written
/// above is encrypted at the end of the loop turn into the outbound buffer below, which is
/// flushed right after. The layer reports the finished handshake
/// (``ByteTransportHandler/transportSecured()``), waits a bounded time for the server's
/// verdict on a client certificate (TLS 1.3), ends on the peer's close_notify, sends
/// close_notify when closed gracefully, and answers a peer that sends no TLS at all with a
/// `protocol_version` alert and an error that says what it sent. Loop thread only.
final class TLSTransport: TransportLayer, ByteTransportHandler, Flushable, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only on `loop`'s thread.

    let loop: EventLoop
    /// The transport that carries the ciphertext.
    let base: any ByteTransport
    /// The session that encrypts and decrypts.
    let session: any TLSSession
    let buffers = TransportBuffers()
    var handler: (any ByteTransportHandler)?
    /// Set once the peer's close_notify arrived.
    private var peerSentCloseNotify = false
    /// Set while the session waits for the server's verdict on our certificate.
    private var verdictTimer: LoopTimer?
    /// The pending bytes at which the handler wants to hear that writing may go on.
    var writableThreshold: Int? {
        didSet { base.writableThreshold = writableThreshold }
    }

    /// Layers `session` over `base`, whose buffers must be made with `sealed: true`.
    ///
    /// - Parameters:
    ///   - base: The transport below; this layer becomes its handler.
    ///   - session: The TLS session, not started yet.
    ///   - loop: The loop that drives both.
    init(over base: any ByteTransport, session: any TLSSession, loop: EventLoop) {
        precondition(base.buffers.sealed, "the transport below TLS must lend the loop's sealed read buffer")
        self.base = base
        self.session = session
        self.loop = loop
        buffers.below = base.buffers
        base.handler = self
    }

    var isOpen: Bool { base.isOpen }
    var security: (any TLSSession)? { session }
    var holdsPartialInput: Bool { session.isEstablished && session.holdsPartialRecord }

    func start() throws(TetherError) {
        try base.start()
        do {
            try session.start(output: &base.buffers.outbound)
        } catch {
            close()
            throw error
        }
        base.scheduleFlush()
    }

    // MARK: Reading


    /// Ciphertext arrived below: all of it goes through the session, the plaintext into
    /// this layer's inbound buffer.
    func transportRead() {
        let sealed = base.buffers
        let count = sealed.inbound.readableBytes
        let borrowed = buffers.borrowInbound(from: loop)
        let plaintextBefore = buffers.inbound.readableBytes
        let wasEstablished = session.isEstablished
        // The peer's first bytes, kept to explain a handshake that fails on them.
        let opening = !wasEstablished && base.bytesRead == count ? sealed.inbound.readableBytesView.prefix(64) : []
        do {
            if try session.receive(&sealed.inbound, plaintext: &buffers.inbound, output: &sealed.outbound) == .closed {
                peerSentCloseNotify = true
            }
        } catch {
            sealed.inbound.clear()
            buffers.settleInbound(borrowed: borrowed, on: loop)
            failSendingAlert(notTLS(error, opening: opening))
            return
        }
        sealed.inbound.clear()
        if sealed.outbound.readableBytes > 0 || (!wasEstablished && session.isEstablished && buffers.outbound.readableBytes > 0) {
            scheduleFlush()
        }
        if !wasEstablished && session.isEstablished {
            secured()
        } else if let wait = session.pendingVerdict, verdictTimer == nil {
            verdictTimer = loop.schedule(after: wait) { [self] in
                verdictTimer = nil
                // The verdict may have arrived after this turn's readiness check.
                readPending()
                guard isOpen, !session.isEstablished, session.pendingVerdict != nil else { return }
                session.establishWithoutVerdict()
                if buffers.outbound.readableBytes > 0 { scheduleFlush() }
                secured()
            }
        }
        // Once established, bytes that only add to a record still count as a read: the
        // layer above sees that part of a unit is under way (``holdsPartialInput``).
        if isOpen, buffers.inbound.readableBytes > plaintextBefore || session.isEstablished {
            handler?.transportRead()
        }
        buffers.settleInbound(borrowed: borrowed, on: loop)
        if isOpen, peerSentCloseNotify {
            closeReporting(TetherError(code: .peerClosed, message: "peer \(remoteAddress) closed the connection"))
        }
    }

    /// The handshake finished: the handler hears it.
    private func secured() {
        if let verdictTimer { loop.cancel(verdictTimer) }
        verdictTimer = nil
        handler?.transportSecured()
    }

    /// The transport below ended: at its end of stream without a close_notify, the
    /// session says what that means (a handshake cut short, a stream perhaps truncated).
    func transportClosed(_ error: TetherError) {
        var reason = error
        if error.code == .peerClosed && !peerSentCloseNotify { reason = session.endOfStreamError() }
        closeReporting(reason)
    }

    func transportSecured() {}

    // MARK: Writing

    func scheduleFlush() {
        if isOpen { buffers.scheduleFlush(of: self, on: loop) }
    }

    func flushAfterTurn() {
        buffers.flushScheduled = false
        flush()
    }

    /// Encrypts the pending plaintext (once established) and flushes the transport below.
    func flush() {
        guard isOpen else { return }
        if session.isEstablished && buffers.outbound.readableBytes > 0 {
            do {
                try session.send(&buffers.outbound, output: &base.buffers.outbound)
            } catch {
                closeReporting(error)
                return
            }
            buffers.outbound.shrinkIfIdle(keeping: TransportBuffers.idleBufferLimit)
        }
        base.flush()
    }

    func transportWritable() {
        relayWritable(from: base)
    }

    // MARK: Closing

    func close() {
        if let verdictTimer { loop.cancel(verdictTimer) }
        verdictTimer = nil
        handler = nil
        base.close()
    }

    /// Encrypts the pending plaintext and a close_notify, then lets the transport below
    /// flush and close. Plaintext written before a handshake that never finished is dropped.
    func closeAfterFlush(timeout: Duration) {
        guard isOpen else { return }
        if let verdictTimer { loop.cancel(verdictTimer) }
        verdictTimer = nil
        handler = nil
        if session.isEstablished {
            if buffers.outbound.readableBytes > 0 { try? session.send(&buffers.outbound, output: &base.buffers.outbound) }
            session.shutdown(output: &base.buffers.outbound)
        }
        buffers.outbound.clear()
        base.closeAfterFlush(timeout: timeout)
    }

    /// A handshake that failed on the peer's first bytes because they are not TLS at all (a
    /// plaintext client, an HTTP request): the error says what they are, and the peer gets a
    /// fatal `protocol_version` alert (OpenSSL sends none for a first record that is not
    /// TLS), so a plaintext client can tell that it reached a TLS port.
    private func notTLS(_ error: TetherError, opening: ArraySlice<UInt8>) -> TetherError {
        if case .httpRequest(let line)? = ForeignProtocol.recognize(opening) {
            // A plaintext HTTP client: a ws:// WebSocket client, or a browser with http://.
            // It reads HTTP, so it is told in HTTP, as web servers tell one on their TLS port.
            if base.buffers.outbound.readableBytes == 0 {
                let body = "This port speaks TLS: connect with wss:// (or https://), not ws:// (or http://).\n"
                let text = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
                base.buffers.outbound.writeBytes(Array(text.utf8))
            }
            return TetherError(code: error.code, message: "\(error.message): \(remoteAddress) sent a plaintext HTTP request (\"\(line)\"), not a TLS handshake: a ws:// or http:// client on a port with TLS?", underlying: error)
        }
        // TLS that went wrong otherwise.
        guard !opening.isEmpty, ForeignProtocol.recognize(opening) == nil else { return error }
        if base.buffers.outbound.readableBytes == 0 { base.buffers.outbound.writeBytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 70]) }
        let what = "bytes that are not TLS (\(hexBytes(opening.prefix(8))))"
        return TetherError(code: error.code, message: "\(error.message): \(remoteAddress) sent \(what) instead of a TLS handshake: a peer without TLS?", underlying: error)
    }

    /// Fails after one try at sending what the session left to send: the alert that tells
    /// the peer why.
    private func failSendingAlert(_ error: TetherError) {
        let handler = self.handler
        // A write that fails now must not be reported instead of `error`.
        self.handler = nil
        if isOpen, base.buffers.outbound.readableBytes > 0 { base.flush() }
        close()
        handler?.transportClosed(error)
    }

}
