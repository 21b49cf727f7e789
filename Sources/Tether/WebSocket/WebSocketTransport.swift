/// How one end of a WebSocket connection is set up: its role in the handshake and its
/// bounds.
struct WebSocketLayerOptions: Sendable {
    enum Role: Sendable {
        /// Sends the upgrade request for `path` with `Host: host` and the extra headers.
        case client(path: String, host: String, headers: TetherHTTPHeaders)
        /// Answers upgrade requests for `path` (any when `nil`) from the allowed origins.
        case server(path: String?, allowedOrigins: [String]?)
    }

    var role: Role
    /// The largest message accepted (1009 beyond it).
    var maximumMessageSize: Int
    /// The largest HTTP head of the handshake accepted.
    var maximumHeadSize: Int
    /// How long the handshake may take; `nil` leaves it to the layer above.
    var handshakeTimeout: Duration?
    /// How long a close waits for the peer to take the close frame.
    var drainTimeout: Duration

    var isClient: Bool {
        if case .client = role { return true }
        return false
    }
}

/// WebSocket (RFC 6455) as a layer over a TCP transport: the opening handshake, then the
/// bytes of the layer above carried in binary messages.
///
/// A client sends its upgrade request at ``start()`` and holds what the layer above writes
/// until the server's `101` has been checked, then reports the handshake as finished
/// (``ByteTransportHandler/transportSecured()``). A server reads the request (bounded in
/// size; the peer's handshake timeout bounds its time), answers `101`, or answers `400`,
/// `403`, `404` or `426` with a short body and ends. Once open, each flush sends what the
/// layer above wrote as binary messages of at most ``maximumOutgoingMessage`` bytes (masked
/// by a client with a random key per frame); binary payloads received are appended to the
/// inbound buffer as they complete, pings are answered with pongs, and a close is answered
/// with a close carrying the same code before the transport ends with an error that names
/// the code and reason. A frame that breaks the protocol or a bound is answered with a close
/// carrying 1002, 1003, 1007 or 1009 and ends this connection only. Loop thread only.
final class WebSocketTransport: TransportLayer, ByteTransportHandler, Flushable, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only on `loop`'s thread.

    /// The largest binary message sent: the layer above's bytes are cut into messages of
    /// this size, so a peer with a smaller maximum message size still takes a large frame.
    static let maximumOutgoingMessage = 1 << 20

    /// The most bytes that may wait to be written below for a ping to be answered at once.
    ///
    /// Past it, a ping is not answered yet: only the latest one is kept (RFC 6455, section
    /// 5.5.3, allows answering the most recent ping only), and its pong is written once what
    /// waits below has drained to this bound. A peer that pings and never reads therefore
    /// makes this end hold at most this many bytes of pongs, plus one held back.
    static let maximumPendingControlBytes = 64 << 10

    private enum Phase {
        /// Waiting for the other end's handshake; a client holds the key it sent.
        case handshaking(key: String?)
        case open
        /// A close frame was sent or received; nothing more is read or written.
        case closing
    }

    let loop: EventLoop
    let base: any ByteTransport
    let options: WebSocketLayerOptions
    let buffers: TransportBuffers
    var handler: (any ByteTransportHandler)?
    private var phase: Phase
    private var reader: WebSocketReader
    private var handshakeTimer: LoopTimer?
    private var closed = false
    private var random = SystemRandomNumberGenerator()
    /// The payload of the latest ping not answered yet, while too much waits below to answer
    /// it (``maximumPendingControlBytes``).
    private var heldPong: [UInt8]?

    var writableThreshold: Int? {
        didSet { watchBase() }
    }

    /// Asks the transport below to say when it has drained to the layer above's threshold,
    /// or to the control bound while a pong is held back, whichever is lower.
    private func watchBase() {
        guard heldPong != nil else {
            base.writableThreshold = writableThreshold
            return
        }
        base.writableThreshold = min(writableThreshold ?? .max, Self.maximumPendingControlBytes)
    }

    /// Layers WebSocket over `base`.
    ///
    /// Over a socket made with `sealed: true` (it borrows the loop's second read buffer, as
    /// below TLS), this layer's inbound borrows the loop's plain read buffer during a read.
    /// Over a transport that borrows the plain read buffer itself (TLS plaintext, for
    /// `wss://`; a socket whose first bytes were sniffed), it borrows the loop's third
    /// buffer (``EventLoop/layerReadBuffer``) instead: the bytes it decodes from are in the
    /// plain one, lent to the layer below until the read ends.
    ///
    /// - Parameters:
    ///   - base: The transport below; this layer becomes its handler.
    ///   - options: Role and bounds.
    ///   - loop: The loop that drives both.
    init(over base: any ByteTransport, options: WebSocketLayerOptions, loop: EventLoop) {
        precondition(!base.buffers.layered, "WebSocket does not run over another WebSocket layer")
        buffers = TransportBuffers(layered: !base.buffers.sealed)
        self.base = base
        self.options = options
        self.loop = loop
        self.phase = .handshaking(key: nil)
        self.reader = WebSocketReader(expectsMasked: !options.isClient, maximumMessageSize: options.maximumMessageSize)
        buffers.below = base.buffers
        base.handler = self
    }

    var isOpen: Bool { !closed && base.isOpen }
    /// The TLS session below, for `wss://`; `nil` over a plain socket.
    var security: (any TLSSession)? { base.security }
    var holdsPartialInput: Bool { !base.buffers.inbound.isEmpty || reader.isInsideMessage || base.holdsPartialInput }

    func start() throws(TetherError) {
        try base.start()
        startAboveStartedBase()
    }

    /// Begins over a transport below that has already started (a socket whose first bytes
    /// were read to tell WebSocket from Tether frames): a client sends its upgrade request,
    /// and the handshake timer starts.
    func startAboveStartedBase() {
        if case .client(let path, let host, let headers) = options.role {
            let key = WebSocketHandshake.makeKey()
            phase = .handshaking(key: key)
            base.buffers.outbound.writeBytes(WebSocketHandshake.request(path: path, host: host, key: key, headers: headers))
            base.scheduleFlush()
        }
        if let timeout = options.handshakeTimeout {
            handshakeTimer = loop.schedule(after: timeout) { [self] in
                handshakeTimer = nil
                guard isOpen, case .handshaking = phase else { return }
                base.readPending()
                guard isOpen, case .handshaking = phase else { return }
                // Over TLS the timer covers both handshakes: say which one stalled.
                let stage = base.security.map { $0.isEstablished ? "the WebSocket handshake" : "the TLS handshake (before the WebSocket upgrade)" } ?? "the WebSocket handshake"
                end(TetherError(code: .handshakeTimeout, message: "\(stage) with \(remoteAddress) did not finish within \(describe(timeout))"), closeCode: nil)
            }
        }
    }

    // MARK: Reading


    /// Bytes arrived below: the handshake's head first, then frames.
    func transportRead() {
        guard isOpen else { return }
        if case .handshaking(let key) = phase {
            guard handshake(key: key) else { return }
        }
        guard case .open = phase else { return }
        let borrowed = buffers.borrowInbound(from: loop)
        let before = buffers.inbound.readableBytes
        let consumedBefore = base.buffers.inbound.consumedTotal
        var ending: (TetherError, UInt16?)?
        var answered = false
        do throws(WebSocketFailure) {
            while ending == nil, let event = try reader.next(&base.buffers.inbound, data: &buffers.inbound) {
                switch event {
                case .data:
                    break
                case .ping(let payload):
                    if answer(ping: payload) { answered = true }
                case .pong:
                    break
                case .close(let code, let reason):
                    ending = (peerClosed(code: code, reason: reason), code ?? 0)
                }
            }
        } catch {
            ending = (failure(error), error.code)
        }
        if answered { base.scheduleFlush() }
        // What arrived before a close or a bad frame is still handed over. Every frame read
        // counts as a read for the layer above too, with or without data (a ping, an empty
        // fragment): the peer is active, as over TCP. So does part of a frame: the layer
        // above sees that a unit is under way (``holdsPartialInput``), from its first byte.
        if buffers.inbound.readableBytes > before
            || (ending == nil && (base.buffers.inbound.consumedTotal != consumedBefore || !base.buffers.inbound.isEmpty)) {
            handler?.transportRead()
        }
        if ending != nil { base.buffers.inbound.clear() }
        buffers.settleInbound(borrowed: borrowed, on: loop)
        if let (error, code) = ending, isOpen {
            // An echo of a close without a code carries none (code 0 here).
            end(error, closeCode: code)
        }
    }

    /// Reads the handshake's HTTP head from the bytes below. Returns whether the
    /// connection is open now.
    private func handshake(key: String?) -> Bool {
        let inbound = base.buffers.inbound
        if case .server(let path, _) = options.role, ProtocolSniffer.verdict(inbound.readableBytesView) == .frames {
            // Not `GET `: no upgrade can follow, so the peer hears why now rather than at
            // the handshake timeout.
            refuseNonUpgrade(path: path)
            return false
        }
        let headEnd = inbound.withReadableBytes { WebSocketHandshake.endOfHead($0) }
        guard let headEnd else {
            if inbound.readableBytes > options.maximumHeadSize { refuseOversizedHead() }
            return false
        }
        guard headEnd <= options.maximumHeadSize else {
            refuseOversizedHead()
            return false
        }
        let head = String(decoding: inbound.readableBytesView.prefix(headEnd - 4), as: UTF8.self)
        base.buffers.inbound.moveReaderIndex(forwardBy: headEnd)
        switch options.role {
        case .client:
            do throws(TetherError) {
                try WebSocketHandshake.checkResponse(head, body: refusalLine(), key: key ?? "", peer: "\(remoteAddress)")
            } catch {
                end(error, closeCode: nil)
                return false
            }
            opened()
            handler?.transportSecured()
            guard isOpen else { return false }
            // Frames the server sent right after its answer.
            return true
        case .server(let path, let allowedOrigins):
            switch WebSocketHandshake.answer(head, path: path, allowedOrigins: allowedOrigins) {
            case .accept(let response):
                base.buffers.outbound.writeBytes(response)
                opened()
                return true
            case .refuse(let response, let why):
                base.buffers.outbound.writeBytes(response)
                end(TetherError(code: .protocolError, message: "refused the WebSocket upgrade of \(remoteAddress): \(why)"), closeCode: nil)
                return false
            }
        }
    }

    /// The first line after the head, when the answer is not a `101` and has a body: what
    /// a server says about its refusal. Nothing is taken from the buffer.
    private func refusalLine() -> String? {
        let rest = base.buffers.inbound.readableBytesView
        guard !rest.isEmpty else { return nil }
        let line = rest.prefix { $0 != 0x0D && $0 != 0x0A }.prefix(160)
        guard !line.isEmpty else { return nil }
        return String(decoding: line.map { (0x20...0x7E).contains($0) ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
    }

    /// The handshake is done: frames flow, and what the layer above held goes out.
    private func opened() {
        phase = .open
        if let handshakeTimer { loop.cancel(handshakeTimer) }
        handshakeTimer = nil
        flush()
    }

    /// The peer's first bytes are not `GET `: a Tether client that dialed this port
    /// without `ws://`, or a `wss://` client on a port without TLS. It gets a `400` whose
    /// body names what this port speaks (a Tether client shows that line), and the error
    /// says what arrived.
    private func refuseNonUpgrade(path: String?) {
        let opening = base.buffers.inbound.readableBytesView.prefix(8)
        let scheme = base.security == nil ? "ws" : "wss"
        let place = path ?? "/"
        let body = "This port speaks WebSocket: connect with \(scheme)://HOST:PORT\(place), not plain Tether frames.\n"
        let text = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        base.buffers.outbound.writeBytes(Array(text.utf8))
        let what: String = switch ForeignProtocol.recognize(opening) {
        case .tlsHandshake?: "a TLS handshake (a wss:// client on a port without TLS?)"
        case .some(let foreign): "\(foreign.name) (\(hexBytes(opening)))"
        case nil: "bytes \(hexBytes(opening)) (Tether frames without ws://?)"
        }
        base.buffers.inbound.clear()
        end(TetherError(code: .protocolError, message: "refused \(remoteAddress) on the WebSocket port: its first bytes, \(what), are not a WebSocket upgrade (GET \(place))"), closeCode: nil)
    }

    private func refuseOversizedHead() {
        let limit = options.maximumHeadSize
        if options.isClient {
            end(TetherError(code: .protocolError, message: "\(remoteAddress) answered the WebSocket upgrade with a head over \(limit) bytes"), closeCode: nil)
            return
        }
        let body = "WebSocket upgrade refused: request head over \(limit) bytes\n"
        let text = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        base.buffers.outbound.writeBytes(Array(text.utf8))
        end(TetherError(code: .frameTooLarge, message: "refused the WebSocket upgrade of \(remoteAddress): 431, a request head over \(limit) bytes"), closeCode: nil)
    }

    /// The error for the peer's close frame.
    private func peerClosed(code: UInt16?, reason: String) -> TetherError {
        let said = code.map { "\($0) (\(WebSocketCloseCode.name($0)))" } ?? "no code"
        let why = reason.isEmpty ? "" : ": \(reason)"
        let normal = code == nil || code == WebSocketCloseCode.normal || code == WebSocketCloseCode.goingAway
        return TetherError(code: normal ? .peerClosed : .protocolError, message: "\(remoteAddress) closed the WebSocket with \(said)\(why)")
    }

    /// The error for a frame that broke the protocol or a bound.
    private func failure(_ failure: WebSocketFailure) -> TetherError {
        let code: TetherError.Code = failure.code == WebSocketCloseCode.messageTooBig ? .frameTooLarge : .protocolError
        return TetherError(
            code: code,
            message: "\(remoteAddress) sent \(failure.reason); closed the WebSocket with \(failure.code) (\(WebSocketCloseCode.name(failure.code)))"
        )
    }

    /// The transport below ended without a close frame.
    func transportClosed(_ error: TetherError) {
        guard !closed else { return }
        if case .handshaking = phase, error.code == .peerClosed {
            // A TLS port that met a ws:// client often just closes: say what that may mean.
            let hint = options.isClient && base.security == nil && base.bytesRead == 0 ? " without a word: does it speak TLS (wss://)?" : ""
            closeReporting(TetherError(code: .peerClosed, message: "\(remoteAddress) closed the connection during the WebSocket handshake\(hint)"))
            return
        }
        closeReporting(error)
    }

    /// The TLS handshake below finished (`wss://`). A server reports it at once, as a TLS
    /// peer does; a client reports the end of its handshake once the upgrade is answered.
    func transportSecured() {
        if !options.isClient, isOpen { handler?.transportSecured() }
    }

    /// Answers a ping with a pong when at most ``maximumPendingControlBytes`` wait to be
    /// written below; otherwise keeps it, in place of any older one held, until they have
    /// drained that far. Returns whether a pong was written.
    private func answer(ping payload: [UInt8]) -> Bool {
        if heldPong == nil, base.buffers.pendingOutboundBytes <= Self.maximumPendingControlBytes {
            WebSocketWriter.write(.pong, payload, maskKey: maskKey(), into: &base.buffers.outbound)
            return true
        }
        let watching = heldPong != nil
        heldPong = payload
        if !watching { watchBase() }
        return false
    }

    /// The bytes below have drained to the control bound: the held pong goes out.
    private func writeHeldPong() {
        guard let payload = heldPong, isOpen, case .open = phase,
              base.buffers.pendingOutboundBytes <= Self.maximumPendingControlBytes else { return }
        heldPong = nil
        WebSocketWriter.write(.pong, payload, maskKey: maskKey(), into: &base.buffers.outbound)
        base.scheduleFlush()
    }

    // MARK: Writing

    /// A client's masking key for the next frame; `nil` on a server.
    private func maskKey() -> UInt32? {
        options.isClient ? UInt32.random(in: .min ... .max, using: &random) : nil
    }

    func scheduleFlush() {
        if isOpen { buffers.scheduleFlush(of: self, on: loop) }
    }

    func flushAfterTurn() {
        buffers.flushScheduled = false
        flush()
    }

    /// Frames what the layer above wrote (once open) and flushes the transport below.
    func flush() {
        guard isOpen else { return }
        if case .open = phase { frameOutbound() }
        base.flush()
    }

    /// Moves the bytes of the layer above into binary messages below.
    private func frameOutbound() {
        while buffers.outbound.readableBytes > 0 {
            let count = min(buffers.outbound.readableBytes, Self.maximumOutgoingMessage)
            let key = maskKey()
            buffers.outbound.withReadableBytes { bytes in
                WebSocketWriter.write(.binary, UnsafeRawBufferPointer(rebasing: bytes[0..<count]), maskKey: key, into: &base.buffers.outbound)
            }
            buffers.outbound.moveReaderIndex(forwardBy: count)
        }
        buffers.outbound.shrinkIfIdle(keeping: TransportBuffers.idleBufferLimit)
    }

    func transportWritable() {
        writeHeldPong()
        relayWritable(from: base)
        // The relay may have set a threshold of its own below: keep the lower one.
        if heldPong != nil, isOpen { base.writableThreshold = min(base.writableThreshold ?? .max, Self.maximumPendingControlBytes) }
    }

    // MARK: Closing

    func close() {
        guard !closed else { return }
        closed = true
        if let handshakeTimer { loop.cancel(handshakeTimer) }
        handshakeTimer = nil
        handler = nil
        base.close()
    }

    /// Sends what is pending and a close frame with 1000, then lets the transport below
    /// flush and close. Bytes written before the handshake finished are dropped.
    func closeAfterFlush(timeout: Duration) {
        guard isOpen else { return }
        if case .open = phase {
            frameOutbound()
            WebSocketWriter.write(.close, WebSocketWriter.closePayload(code: WebSocketCloseCode.normal, reason: ""), maskKey: maskKey(), into: &base.buffers.outbound)
        }
        buffers.outbound.clear()
        closed = true
        phase = .closing
        if let handshakeTimer { loop.cancel(handshakeTimer) }
        handshakeTimer = nil
        handler = nil
        base.closeAfterFlush(timeout: timeout)
    }

    /// Ends for `error`: sends a close frame with `closeCode` when it is set (0: one
    /// without a code, the echo of such a close) and the connection is open, lets the
    /// transport below flush what it holds (an HTTP answer, the close) and close, and
    /// tells the handler.
    private func end(_ error: TetherError, closeCode: UInt16?) {
        guard !closed else { return }
        let handler = self.handler
        if let closeCode, case .open = phase {
            let payload = closeCode == 0 ? [] : WebSocketWriter.closePayload(code: closeCode, reason: error.message)
            WebSocketWriter.write(.close, payload, maskKey: maskKey(), into: &base.buffers.outbound)
        }
        phase = .closing
        closed = true
        if let handshakeTimer { loop.cancel(handshakeTimer) }
        handshakeTimer = nil
        self.handler = nil
        buffers.outbound.clear()
        base.closeAfterFlush(timeout: options.drainTimeout)
        handler?.transportClosed(error)
    }
}
