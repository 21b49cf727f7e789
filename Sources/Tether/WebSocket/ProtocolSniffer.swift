/// The first layer of a connection accepted on a main port shared with WebSocket
/// (``WebSocketServerConfiguration/sharesMainPort``): it reads the first four bytes the
/// peer sends (after TLS, when the port has it) and then takes itself out of the stack.
///
/// Exactly `GET ` makes the connection a WebSocket peer: a ``WebSocketTransport`` goes
/// over the transport below and reads the upgrade request from the same bytes. Anything
/// else makes it a Tether peer: the framed channel above is handed the transport below
/// directly, with every byte read so far still in its inbound buffer, so the frame decoder
/// sees the stream from its first byte and, once decided, nothing stands between the
/// channel and the socket. The decision is made as soon as a byte differs from `GET `, and
/// waits for at most four bytes; the peer's handshake timeout
/// (``ServerConfiguration/handshakeTimeout``) bounds how long it waits for them.
///
/// What the layer above writes before the decision (a push sent as the peer connects) is
/// held here, in order, and handed to the chosen transport: as the first bytes of the
/// stream for Tether frames, or as the first binary messages after the `101` for WebSocket.
/// The server writes nothing of its own before the peer's first bytes, apart from its TLS
/// handshake, which runs below this layer. Loop thread only.
final class ProtocolSniffer: TransportLayer, ByteTransportHandler, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only on `loop`'s thread.

    /// The bytes a WebSocket upgrade request starts with.
    static let upgradePrefix: [UInt8] = Array("GET ".utf8)

    let loop: EventLoop
    let base: any ByteTransport
    /// How a WebSocket peer's upgrade is answered.
    let webSocket: WebSocketLayerOptions
    /// What the layer above writes before the decision; its inbound stays empty, since the
    /// bytes read are kept below.
    let buffers: TransportBuffers
    var handler: (any ByteTransportHandler)?
    private var closed = false
    var writableThreshold: Int? {
        didSet { base.writableThreshold = writableThreshold }
    }

    /// Puts the sniffer over `base`, whose buffers lend the loop's plain read buffer (TLS
    /// plaintext, or a socket made with `sealed: false`), so that the channel can take it
    /// over as it is.
    ///
    /// - Parameters:
    ///   - base: The transport below, not started; this layer becomes its handler.
    ///   - webSocket: The options of a WebSocket peer.
    ///   - loop: The loop that drives both.
    init(over base: any ByteTransport, webSocket: WebSocketLayerOptions, loop: EventLoop) {
        precondition(!base.buffers.sealed && !base.buffers.layered, "a sniffer goes over a transport that frames can run over directly")
        self.base = base
        self.webSocket = webSocket
        self.loop = loop
        buffers = TransportBuffers()
        buffers.below = base.buffers
        base.handler = self
    }

    var isOpen: Bool { !closed && base.isOpen }
    var security: (any TLSSession)? { base.security }
    var holdsPartialInput: Bool { !base.buffers.inbound.isEmpty || base.holdsPartialInput }

    /// How many bytes have arrived while the decision waits, for the error of a peer that
    /// never sends enough.
    var bytesWaiting: Int { base.buffers.inbound.readableBytes }

    func start() throws(TetherError) {
        try base.start()
    }

    // MARK: Reading


    /// Bytes arrived below: decides once they differ from `GET ` or match all of it.
    func transportRead() {
        guard isOpen else { return }
        switch Self.verdict(base.buffers.inbound.readableBytesView) {
        case .undecided:
            return
        case .frames:
            handOverToFrames()
        case .webSocket:
            handOverToWebSocket()
        }
    }

    /// What the first bytes of a stream make it.
    enum Verdict: Equatable {
        /// Fewer than four bytes, all matching `GET `: wait for more.
        case undecided
        /// Tether frames.
        case frames
        /// A WebSocket upgrade request.
        case webSocket
    }

    /// What `bytes`, the first bytes of a stream, make it.
    ///
    /// - Parameter bytes: The bytes received so far.
    /// - Returns: `.webSocket` for `GET ` (and whatever follows), `.frames` once a byte of
    ///   the first four differs from it, `.undecided` before that.
    static func verdict(_ bytes: ArraySlice<UInt8>) -> Verdict {
        for (offset, byte) in bytes.prefix(upgradePrefix.count).enumerated() where byte != upgradePrefix[offset] {
            return .frames
        }
        return bytes.count >= upgradePrefix.count ? .webSocket : .undecided
    }

    /// Tether frames: the channel above runs over the transport below from now on, with
    /// what it wrote so far first in line.
    private func handOverToFrames() {
        guard let channel = handler else { return }
        closed = true
        handler = nil
        let held = buffers.outbound.readableBytes
        if held > 0 {
            base.buffers.outbound.writeBytes(buffers.outbound.readableBytesView)
            buffers.outbound.clear()
        }
        base.handler = channel
        channel.transportReplaced(by: base)
        base.writableThreshold = writableThreshold
        if held > 0 { base.scheduleFlush() }
        channel.transportRead()
    }

    /// A WebSocket upgrade: a WebSocket layer goes over the transport below, holding what
    /// the channel wrote until the upgrade is answered, and reads the request.
    private func handOverToWebSocket() {
        guard let channel = handler else { return }
        closed = true
        handler = nil
        let layer = WebSocketTransport(over: base, options: webSocket, loop: loop)
        if buffers.outbound.readableBytes > 0 {
            layer.buffers.outbound.writeBytes(buffers.outbound.readableBytesView)
            buffers.outbound.clear()
        }
        layer.handler = channel
        channel.transportReplaced(by: layer)
        layer.writableThreshold = writableThreshold
        layer.startAboveStartedBase()
        layer.transportRead()
    }

    /// The transport below ended before the decision.
    func transportClosed(_ error: TetherError) {
        guard !closed else { return }
        closeReporting(error)
    }

    /// The TLS handshake below finished: the channel hears it, as over plain TLS.
    func transportSecured() {
        guard isOpen else { return }
        handler?.transportSecured()
    }

    // MARK: Writing

    /// Held until the decision.
    func scheduleFlush() {}

    /// Flushes what the transport below holds of its own (a TLS handshake); what the layer
    /// above wrote waits for the decision.
    func flush() {
        if isOpen { base.flush() }
    }

    func transportWritable() {
        relayWritable(from: base)
    }

    // MARK: Closing

    func close() {
        guard !closed else { return }
        closed = true
        handler = nil
        base.close()
    }

    /// Closes: what the layer above wrote before the decision is dropped, since the peer's
    /// protocol is not known; the transport below flushes its own bytes (TLS close_notify).
    func closeAfterFlush(timeout: Duration) {
        guard !closed else { return }
        closed = true
        handler = nil
        buffers.outbound.clear()
        base.closeAfterFlush(timeout: timeout)
    }
}
