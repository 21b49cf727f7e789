/// What a ``FrameChannel`` tells the actor that owns it: a ``Connection`` or a ``Peer``.
///
/// Every requirement runs isolated to the owner, on the loop's thread: the channel enters
/// the owner's isolation once per batch of bytes, then calls these synchronously.
protocol FrameChannelOwner: Actor {
    /// New bytes arrived: the owner enters its isolation (it runs on the channel's loop) and
    /// calls ``FrameChannel/decodeRead(_:)``. A requirement of the concrete owner, rather
    /// than code of the channel, so that the decode loop is specialized for the owner and
    /// its per-frame calls are direct.
    nonisolated func channelRead(_ channel: FrameChannel<Self>)
    /// Whether the owner takes another frame now; `false` leaves the rest in the buffer
    /// until ``FrameChannel/decodeBuffered(_:)`` is called again (a server peer at its limit
    /// of requests).
    func channelAcceptsFrames(_ channel: FrameChannel<Self>) -> Bool
    /// A frame arrived.
    func channel(_ channel: FrameChannel<Self>, received frame: Frame)
    /// A batch of bytes has been decoded as far as it goes; `decoded` says whether it gave
    /// a frame, `afterRead` whether new bytes started it. Not called once the channel closed.
    func channelDecoded(_ channel: FrameChannel<Self>, decoded: Bool, afterRead: Bool)
    /// The channel ended by itself, for `error`: the peer closed, the transport failed, the
    /// bytes did not decode, the TLS handshake timed out. Called once, and last.
    func channel(_ channel: FrameChannel<Self>, closed error: TetherError)
    /// The pending bytes fell to the ``FrameChannel/writableThreshold``.
    func channelWritable(_ channel: FrameChannel<Self>)
    /// The TLS handshake finished.
    func channelSecured(_ channel: FrameChannel<Self>)
    /// A large frame moved on: see ``ChannelSettings/progress``.
    func channel(_ channel: FrameChannel<Self>, progress: TransferProgress)
}

extension FrameChannelOwner {
    /// Owners that do not follow progress hear nothing of it.
    func channel(_ channel: FrameChannel<Self>, progress: TransferProgress) {}
}

/// Frames over a byte transport: the one framed channel of a client ``Connection`` and of a
/// server ``Peer``.
///
/// It owns the codec, and frames are encoded and decoded here only, above the transport
/// seam (``ByteTransport``). It decodes every complete frame of each batch of bytes the
/// transport delivers, and at the end of the stream decodes what is left as the last frames
/// (``FrameCodec/decodeLast(_:)``) or says where it was cut short. A failure to decode ends
/// the channel with an error that names the peer's address, or, for bytes of HTTP or TLS,
/// says what they are (a server answers an HTTP request with a `400` first). It writes with a
/// bound on the bytes waiting to be written, arranges one flush per loop turn, counts bytes,
/// ends a TLS handshake that takes too long, and closes exactly once: after ``close()`` or
/// after it reported the end to its owner, it calls nothing more.
///
/// Generic over its owner so that the per-frame calls are direct; the transport is reached
/// once per batch. Loop thread only.
final class FrameChannel<Owner: FrameChannelOwner>: ByteTransportHandler, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only on `loop`'s thread; Sendable so the
    // owner's isolated code can hold it.

    typealias Role = ChannelRole

    let loop: EventLoop
    /// The transport; replaced once at most, by the one a sniffing first layer hands over
    /// (``transportReplaced(by:)``).
    @exclusivity(unchecked) private(set) var transport: any ByteTransport
    /// The transport's buffers, reached directly on the per-frame path.
    @exclusivity(unchecked) private(set) var buffers: TransportBuffers
    /// The peer's address: the transport's, not copied, so an idle connection keeps it once.
    var remoteAddress: TetherSocketAddress { transport.remoteAddress }
    /// This end's address, when it has one.
    var localAddress: TetherSocketAddress? { transport.localAddress }
    @exclusivity(unchecked) private(set) var codec: any FrameCodec
    /// What every channel of the same client or server shares.
    let settings: ChannelSettings
    var role: Role { settings.role }
    var profileName: String { settings.profileName }
    var maximumOutboundBytes: Int { settings.maximumOutboundBytes }
    /// Hears frames and events until the channel closes.
    @exclusivity(unchecked) private(set) var owner: Owner?
    /// Open until ``close()``, ``closeAfterFlush()`` or the end reported to the owner.
    @exclusivity(unchecked) private(set) var isOpen = true
    private(set) var isReadingPaused = false
    private var handshakeTimer: LoopTimer?
    /// What waits on the writes and follows large frames; made by the first that does, so
    /// that a connection that never does keeps one reference.
    @exclusivity(unchecked) var tracking: ChannelTracking?
    /// Set once the peer said it understands chunks: large frames wait here and go out a
    /// chunk at a time (FrameChannel+Chunks.swift).
    @exclusivity(unchecked) var chunkSender: ChunkSender?
    /// Set once this end said it understands chunks: puts the peer's chunked frames together.
    @exclusivity(unchecked) var chunkAssembler: ChunkAssembler?

    /// A channel over `transport`; ``start(owner:tlsHandshakeTimeout:)`` begins it.
    ///
    /// - Parameters:
    ///   - transport: The byte transport, not started yet; the channel owns it.
    ///   - loop: The loop that drives the transport; the caller is on its thread.
    ///   - codec: Encodes and decodes the frames.
    ///   - role: Client or server.
    ///   - profileName: The profile's name, for errors.
    ///   - maximumOutboundBytes: The bound on bytes waiting to be written.
    ///   - drainTimeout: How long a graceful close waits for the peer to take what is pending.
    convenience init(
        transport: any ByteTransport,
        loop: EventLoop,
        codec: any FrameCodec,
        role: Role,
        profileName: String,
        maximumOutboundBytes: Int,
        drainTimeout: Duration
    ) {
        let settings = ChannelSettings(role: role, profileName: profileName, maximumOutboundBytes: maximumOutboundBytes, drainTimeout: drainTimeout)
        self.init(transport: transport, loop: loop, codec: codec, settings: settings)
    }

    /// A channel over `transport` with settings shared by the channels of one client or
    /// server; ``start(owner:tlsHandshakeTimeout:)`` begins it.
    ///
    /// - Parameters:
    ///   - transport: The byte transport, not started yet; the channel owns it.
    ///   - loop: The loop that drives the transport; the caller is on its thread.
    ///   - codec: Encodes and decodes the frames.
    ///   - settings: Role, profile name, outbound bound and drain timeout.
    init(transport: any ByteTransport, loop: EventLoop, codec: any FrameCodec, settings: ChannelSettings) {
        self.transport = transport
        self.buffers = transport.buffers
        self.loop = loop
        self.codec = codec
        self.settings = settings
        transport.handler = self
    }

    /// Starts the transport and, with TLS, the timer that ends a handshake not finished
    /// within `tlsHandshakeTimeout`.
    ///
    /// - Parameters:
    ///   - owner: Hears frames and events from now on.
    ///   - tlsHandshakeTimeout: The bound on the TLS handshake, when the transport has TLS.
    /// - Throws: ``TetherError`` when the transport cannot start; the channel is closed then.
    func start(owner: Owner, tlsHandshakeTimeout: Duration?) throws(TetherError) {
        self.owner = owner
        do {
            try transport.start()
        } catch {
            close()
            throw error
        }
        guard let security = transport.security, let timeout = tlsHandshakeTimeout else { return }
        handshakeTimer = loop.schedule(after: timeout) { [self] in
            handshakeTimer = nil
            guard isOpen, !security.isEstablished else { return }
            // The last flight may have arrived after this turn's readiness check.
            transport.readPending()
            guard isOpen, !security.isEstablished else { return }
            fail(security.handshakeTimeoutError(after: timeout), graceful: false)
        }
    }

    // MARK: Reading

    func transportRead() {
        guard isOpen, let owner else { return }
        owner.channelRead(self)
    }

    /// Decodes and hands over the frames of the bytes just read.
    ///
    /// - Parameter owner: The owner, in its isolation.
    func decodeRead(_ owner: isolated Owner) {
        decode(owner, afterRead: true)
    }

    /// Decodes and hands over the frames waiting in the buffer, as long as the owner takes
    /// them: for an owner that stopped taking frames and takes them again.
    ///
    /// - Parameter owner: The owner, in its isolation.
    func decodeBuffered(_ owner: isolated Owner) {
        decode(owner, afterRead: false)
    }

    private func decode(_ owner: isolated Owner, afterRead: Bool) {
        var decoded = false
        do {
            while isOpen, owner.channelAcceptsFrames(self) {
                var frame: Frame
                let size: Int
                if let large = buffers.large, large.incoming != nil {
                    // A body in its own storage comes before anything read after it.
                    guard let body = large.takeCompleteBody(), let header = tracking?.largeFrame else { break }
                    tracking?.largeFrame = nil
                    frame = header.frame
                    frame.payload = body
                    size = header.headerLength + body.count
                } else {
                    let consumed = buffers.inbound.consumedTotal
                    guard let next = try codec.decode(&buffers.inbound) else { break }
                    frame = next
                    size = buffers.inbound.consumedTotal - consumed
                }
                if frame.type == FrameChunk.frameType, chunkAssembler != nil {
                    guard let whole = try assemble(frame) else { continue }
                    frame = whole
                    if settings.progress != nil { finishReceiveProgress(frame, size: frame.payload.count) }
                } else if tracking?.receiveProgress != nil || size >= settings.largeFrameSize {
                    finishReceiveProgress(frame, size: size)
                }
                decoded = true
                owner.channel(self, received: frame)
            }
        } catch {
            let (reason, answered) = undecodable(error)
            end(owner, reason, graceful: answered || writeCloseNotice(for: reason))
            return
        }
        guard isOpen else { return }
        if buffers.carriesLargePayloads && !buffers.inbound.isEmpty { divertLargeBody() }
        if let progress = settings.progress { measureReceiveProgress(progress) }
        owner.channelDecoded(self, decoded: decoded, afterRead: afterRead)
    }

    /// Moves the body of the frame that starts the inbound buffer into storage of its own
    /// when it is large and an eighth of it has arrived (``LargePayloads``): the transport
    /// then reads the rest of it straight into the array the frame hands over, and the
    /// channel keeps the frame's header. Only when nothing waits before it. After every
    /// decode of a transport that carries large payloads, which tells it of the bytes after
    /// each read that filled its space.
    private func divertLargeBody() {
        let inbound = buffers.inbound
        guard isOpen, buffers.large?.incoming == nil, inbound.readableBytes >= LargePayloads.threshold / LargePayloads.arrivedFraction,
              let split = codec as? any SplitFrameCodec,
              let (frame, headerLength, bodyLength) = split.header(in: inbound),
              bodyLength >= LargePayloads.threshold
        else { return }
        let arrived = inbound.readableBytes - headerLength
        guard arrived < bodyLength, arrived * LargePayloads.arrivedFraction >= bodyLength else { return }
        let body = inbound.withReadableBytes { raw in
            IncomingBody(length: bodyLength, start: UnsafeRawBufferPointer(rebasing: raw[headerLength...]))
        }
        tracked.largeFrame = (frame, headerLength)
        buffers.largePayloads.incoming = body
        buffers.inbound.moveReaderIndex(forwardBy: inbound.readableBytes)
    }

    func transportClosed(_ error: TetherError) {
        guard isOpen, let owner else { return }
        onLoop(loop, owner, (self, error), Self.transportEnded)
    }

    private static func transportEnded(_ owner: isolated Owner, _ event: (channel: FrameChannel, error: TetherError)) {
        event.channel.transportEnded(owner, event.error)
    }

    /// The transport closed by itself. On a clean end of stream the codec decides what the
    /// remaining bytes are: last frames to hand over, or a truncated one.
    private func transportEnded(_ owner: isolated Owner, _ error: TetherError) {
        var reason = error
        if error.code == .peerClosed {
            do throws(TetherError) {
                if let large = buffers.large, let body = large.incoming, let header = tracking?.largeFrame {
                    large.incoming = nil
                    tracking?.largeFrame = nil
                    guard body.isComplete else {
                        throw TetherError(
                            code: .truncatedFrame,
                            message: "stream ended inside a frame: \(header.headerLength + body.received) bytes of an incomplete frame"
                        )
                    }
                    var frame = header.frame
                    frame.payload = body.bytes
                    owner.channel(self, received: frame)
                }
                while isOpen, let frame = try codec.decodeLast(&buffers.inbound) {
                    owner.channel(self, received: frame)
                }
            } catch let truncated {
                reason = undecodable(truncated, underlying: error).error
            }
        } else if role == .client, let foreign = ForeignProtocol.recognize(buffers.inbound.readableBytesView) {
            // Reset after an answer in another protocol (a TLS alert, an HTTP error page).
            let explanation = foreign.clientExplanation(peer: remoteAddress.description, profile: profileName, secured: transport.security != nil)
            reason = TetherError(code: .protocolError, message: explanation, underlying: error)
        }
        end(owner, reason, graceful: false)
    }

    /// Reads what has arrived, outside the loop's readiness events: for a timer about to
    /// declare the peer silent. Frames it completes are handed over before it returns.
    func readPending() {
        transport.readPending()
    }

    /// Stops reading: what the peer sends waits in the transport below. Bytes already
    /// received stay in the buffer.
    func pauseReading() {
        guard !isReadingPaused, isOpen else { return }
        isReadingPaused = true
        transport.pauseReading()
    }

    /// Reads again after ``pauseReading()``.
    func resumeReading() {
        guard isReadingPaused, isOpen else { return }
        isReadingPaused = false
        transport.resumeReading()
    }

    /// Whether part of a frame has been received and not the rest: bytes that do not make a
    /// whole frame, or, with TLS, part of a record.
    var holdsPartialInput: Bool {
        !buffers.inbound.isEmpty || buffers.large?.incoming != nil || chunkAssembler?.current != nil || transport.holdsPartialInput
    }

    /// Bytes received and not decoded yet: in the inbound buffer, or of a large frame
    /// being received into its own storage.
    var bufferedInboundBytes: Int {
        let assembled = chunkAssembler?.receivedBytes ?? 0
        guard let body = buffers.large?.incoming else { return assembled + buffers.inbound.readableBytes }
        return assembled + (tracking?.largeFrame?.headerLength ?? 0) + body.received + buffers.inbound.readableBytes
    }

    // MARK: Writing

    /// Encodes `frame` and arranges a flush at the end of this loop turn.
    ///
    /// - Parameter frame: The frame.
    /// - Throws: ``TetherError`` when the channel is closed
    ///   (``TetherError/Code/notConnected``), the bytes waiting to be written are over
    ///   the limit (``TetherError/Code/outboundBufferFull``), or the codec cannot encode
    ///   the frame.
    func write(_ frame: Frame) throws(TetherError) {
        try checkRoom(forPayload: frame.payload.count)
        if let sender = chunkSender, waitsForChunks(frame, sender) {
            guard frame.payload.count <= settings.limits.maximumPayloadLength else {
                throw .payloadOverLimit(type: frame.type, bytes: frame.payload.count, limit: settings.limits.maximumPayloadLength)
            }
            queueForChunks(frame, sender)
            return
        }
        try encode(frame)
    }

    /// Encodes `frame` into the outbound buffer, following its progress, and arranges a
    /// flush at the end of this loop turn.
    func encode(_ frame: Frame) throws(TetherError) {
        let start = mayReportProgress(of: frame) ? buffers.writeMark : nil
        if frame.payload.count >= LargePayloads.threshold, buffers.carriesLargePayloads,
           let split = codec as? any SplitFrameCodec, try split.encodeHeader(of: frame, into: &buffers.outbound) {
            buffers.attach(frame.payload)
        } else {
            try codec.encode(frame, into: &buffers.outbound)
        }
        if let start { followProgress(of: frame, from: start) }
        if !buffers.flushScheduled { transport.scheduleFlush() }
    }

    /// Writes the bytes a codec of this channel's profile made for a frame whose payload
    /// has `payloadCount` bytes, with the checks of ``write(_:)``: for a frame encoded once
    /// and sent to many channels.
    ///
    /// - Parameters:
    ///   - bytes: The encoded frame.
    ///   - payloadCount: Its payload's length, which the outbound bound counts.
    /// - Throws: ``TetherError`` as ``write(_:)`` does.
    func writeEncoded(_ bytes: [UInt8], payloadCount: Int) throws(TetherError) {
        try checkRoom(forPayload: payloadCount)
        buffers.outbound.writeBytes(bytes)
        if !buffers.flushScheduled { transport.scheduleFlush() }
    }

    /// Throws unless the channel is open and a payload of `count` bytes may be added to
    /// what waits to be written: below the bound, or into an empty buffer.
    private func checkRoom(forPayload count: Int) throws(TetherError) {
        guard isOpen else {
            throw TetherError(code: .notConnected, message: "the connection with \(remoteAddress) is closed")
        }
        let pending = pendingOutboundBytes
        if pending + count > maximumOutboundBytes && pending > 0 {
            throw TetherError(
                code: .outboundBufferFull,
                message: "\(pending) bytes are waiting to be written to \(remoteAddress), over the \(describeBytes(maximumOutboundBytes)) limit"
            )
        }
    }

    /// Bytes encoded and not yet written.
    var pendingOutboundBytes: Int { buffers.pendingOutboundBytes + (chunkSender?.waitingBytes ?? 0) }

    /// When set, the owner hears ``FrameChannelOwner/channelWritable(_:)`` once the bytes
    /// waiting to be written fall to this many or fewer; cleared first.
    var writableThreshold: Int? {
        get { chunkSender?.heldThreshold ?? transport.writableThreshold }
        set {
            if let sender = chunkSender, sender.hasQueue, newValue != nil {
                // The transport hears of it once the chunks have all gone below.
                sender.heldThreshold = newValue
                transport.writableThreshold = nil
            } else {
                chunkSender?.heldThreshold = nil
                transport.writableThreshold = newValue
            }
        }
    }

    func transportWritable() {
        guard isOpen, let owner else { return }
        onLoop(loop, owner, self, Self.writable)
    }

    private static func writable(_ owner: isolated Owner, _ channel: FrameChannel) {
        owner.channelWritable(channel)
    }

    /// The first layer (``ProtocolSniffer``) decided what the peer speaks and took itself
    /// out: the channel reads from and writes to `replacement` from now on, with no layer
    /// between. Bytes read and written so far are in `replacement`'s buffers.
    ///
    /// - Parameter replacement: The transport below the sniffer, or a WebSocket layer over it.
    func transportReplaced(by replacement: any ByteTransport) {
        transport = replacement
        buffers = replacement.buffers
    }

    // MARK: Security

    func transportSecured() {
        if let handshakeTimer { loop.cancel(handshakeTimer) }
        handshakeTimer = nil
        guard isOpen, let owner else { return }
        onLoop(loop, owner, self, Self.secured)
    }

    private static func secured(_ owner: isolated Owner, _ channel: FrameChannel) {
        owner.channelSecured(channel)
    }

    /// Whether the channel runs over TLS.
    var isSecured: Bool { transport.security != nil }

    /// What the TLS handshake settled, once it has.
    var tlsDetails: TLSDetails? { transport.security?.details }

    // MARK: Counting

    /// Bytes received from and sent to the peer, where they cross the wire.
    var bytesRead: Int { transport.bytesRead }
    /// See ``bytesRead``.
    var bytesWritten: Int { transport.bytesWritten }
    /// Of ``bytesWritten``, those the peer has acknowledged (``ByteTransport/bytesDelivered``).
    var bytesDelivered: Int { transport.bytesDelivered }

    // MARK: Closing

    /// Closes at once; pending bytes are dropped. Calls the owner no more. Idempotent.
    func close() {
        guard markClosed() else { return }
        transport.close()
    }

    /// Writes what is pending (with TLS, then a close_notify), then closes; closes anyway
    /// after the drain timeout. Calls the owner no more. Idempotent.
    func closeAfterFlush() {
        // The rest of a frame under way in chunks goes before the end.
        writeAllChunks()
        guard markClosed() else { return }
        transport.closeAfterFlush(timeout: settings.drainTimeout)
    }

    private func markClosed() -> Bool {
        guard isOpen else { return false }
        isOpen = false
        owner = nil
        if let handshakeTimer { loop.cancel(handshakeTimer) }
        handshakeTimer = nil
        endWriteWaits()
        chunkSender?.drop()
        return true
    }

    /// Closes and tells the owner why; the owner hears nothing after this.
    private func end(_ owner: isolated Owner, _ reason: TetherError, graceful: Bool) {
        guard isOpen else { return }
        if graceful { closeAfterFlush() } else { close() }
        owner.channel(self, closed: reason)
    }

    /// Ends the channel for `reason` from outside the owner's isolation (a timer).
    private func fail(_ reason: TetherError, graceful: Bool) {
        guard isOpen, let owner else { return }
        onLoop(loop, owner, (self, reason), Self.failed)
    }

    private static func failed(_ owner: isolated Owner, _ event: (channel: FrameChannel, error: TetherError)) {
        event.channel.end(owner, event.error, graceful: false)
    }
}
