@testable import Tether

/// What a ``ChannelProbe`` heard from its framed channel.
enum ProbeEvent: Sendable, Equatable {
    case frame(Frame)
    case closed(TetherError.Code, String)
    case writable
    case secured
}

/// The owner of one ``FrameChannel`` in tests without sockets: it runs on the channel's
/// loop, records every event in order, and counts any that come after the channel closed.
actor ChannelProbe: FrameChannelOwner {
    nonisolated let loop: EventLoop
    nonisolated let events: AsyncStream<ProbeEvent>
    private nonisolated let feed: AsyncStream<ProbeEvent>.Continuation
    private(set) var channel: FrameChannel<ChannelProbe>?
    /// While `false`, frames stay in the channel's buffer (as a server peer at its limit).
    var accepting = true
    /// Events heard after the channel closed or reported its end: must stay 0.
    private(set) var lateEvents = 0
    private(set) var closedEvents = 0
    private var ended = false

    nonisolated var unownedExecutor: UnownedSerialExecutor {
        loop.serialExecutor.asUnownedSerialExecutor()
    }

    init(loop: EventLoop) {
        self.loop = loop
        (events, feed) = AsyncStream.makeStream()
    }

    /// Makes and starts a channel over `transport` with the seed profile.
    func attach(
        _ transport: any ByteTransport,
        role: FrameChannel<ChannelProbe>.Role = .client,
        profile: Profile = .seed,
        maximumOutboundBytes: Int = 1 << 20,
        tlsHandshakeTimeout: Duration? = nil
    ) throws(TetherError) {
        let channel = FrameChannel<ChannelProbe>(
            transport: transport,
            loop: loop,
            codec: profile.makeCodec(1 << 20),
            role: role,
            profileName: profile.name,
            maximumOutboundBytes: maximumOutboundBytes,
            drainTimeout: .seconds(5)
        )
        try channel.start(owner: self, tlsHandshakeTimeout: tlsHandshakeTimeout)
        self.channel = channel
    }

    /// Makes and starts a channel over a TCP transport on the connected, nonblocking socket
    /// `descriptor`, which it owns from now on.
    func attachTCP(
        descriptor: Int32,
        role: FrameChannel<ChannelProbe>.Role = .server,
        maximumPayloadLength: Int = 1 << 20,
        maximumOutboundBytes: Int = 1 << 20
    ) throws(TetherError) {
        let transport = TCPTransport(
            socket: Socket(adopting: descriptor),
            remoteAddress: (try? Syscall.peerAddress(descriptor)) ?? TetherSocketAddress(ipAddress: "127.0.0.1", port: 0)!,
            loop: loop,
            noDelay: true
        )
        let channel = FrameChannel<ChannelProbe>(
            transport: transport,
            loop: loop,
            codec: SeedCodec(maximumPayloadLength: maximumPayloadLength),
            role: role,
            profileName: "seed",
            maximumOutboundBytes: maximumOutboundBytes,
            drainTimeout: .seconds(5)
        )
        try channel.start(owner: self, tlsHandshakeTimeout: nil)
        self.channel = channel
    }

    /// A wait of ``waitUntilRead(_:)``: the count it waits for.
    private var readWaiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

    /// Returns once the channel has read `count` bytes in all: at once when it has, else
    /// when a read takes it there or the channel ends. Bound it with `bounded`.
    func waitUntilRead(_ count: Int) async {
        if readPendingCount() >= count || ended || channel == nil { return }
        await withCheckedContinuation { readWaiters.append((count, $0)) }
    }

    /// Resumes the waits the bytes read so far satisfy, or all of them once the channel ended.
    private func resumeReadWaiters() {
        guard !readWaiters.isEmpty else { return }
        let read = channel?.bytesRead ?? 0
        let due = readWaiters.filter { ended || $0.count <= read }
        readWaiters.removeAll { ended || $0.count <= read }
        for waiter in due { waiter.continuation.resume() }
    }

    /// Reads what has arrived now, and returns the bytes the channel has read in all.
    func readPendingCount() -> Int {
        channel?.readPending()
        return channel?.bytesRead ?? 0
    }

    /// The length of the storage of the large body being received, if there is one.
    var largeBodyStorage: Int? { channel?.buffers.large?.incoming?.bytes.count }

    /// Whether payloads wait to be sent from their own arrays.
    var sendsLargePayloads: Bool { channel?.buffers.hasLargeOutgoing ?? false }

    /// Bytes waiting in the channel's inbound buffer.
    var bufferedInboundBytes: Int { channel?.bufferedInboundBytes ?? 0 }

    func setAccepting(_ accepting: Bool) {
        self.accepting = accepting
        if accepting, let channel { channel.decodeBuffered(self) }
    }

    /// Writes `frames` in this loop turn; returns how many were taken and the error that
    /// stopped the rest, if any.
    func write(_ frames: [Frame]) -> (written: Int, error: TetherError?) {
        guard let channel else { return (0, nil) }
        for (index, frame) in frames.enumerated() {
            do {
                try channel.write(frame)
            } catch {
                return (index, error)
            }
        }
        return (frames.count, nil)
    }

    func pauseReading() { channel?.pauseReading() }

    func resumeReading() { channel?.resumeReading() }

    func setWritableThreshold(_ threshold: Int?) { channel?.writableThreshold = threshold }

    func close() {
        ended = true
        channel?.close()
    }

    /// Closes after flushing (with TLS, a close_notify goes last).
    func closeGracefully() {
        ended = true
        channel?.closeAfterFlush()
    }

    var tlsDetails: TLSDetails? { channel?.tlsDetails }

    var pendingOutboundBytes: Int { channel?.pendingOutboundBytes ?? 0 }
    var bytesRead: Int { channel?.bytesRead ?? 0 }
    var bytesWritten: Int { channel?.bytesWritten ?? 0 }
    var remoteAddress: String { channel?.remoteAddress.description ?? "" }

    private func record(_ event: ProbeEvent) {
        if ended { lateEvents += 1 }
        feed.yield(event)
    }

    // MARK: FrameChannelOwner

    nonisolated func channelRead(_ channel: FrameChannel<ChannelProbe>) {
        onLoop(loop, self, channel) { (probe: isolated ChannelProbe, channel: FrameChannel<ChannelProbe>) in channel.decodeRead(probe) }
    }

    func channelAcceptsFrames(_ channel: FrameChannel<ChannelProbe>) -> Bool { accepting }

    func channel(_ channel: FrameChannel<ChannelProbe>, received frame: Frame) {
        record(.frame(frame))
    }

    func channelDecoded(_ channel: FrameChannel<ChannelProbe>, decoded: Bool, afterRead: Bool) {
        if ended { lateEvents += 1 }
        resumeReadWaiters()
    }

    func channel(_ channel: FrameChannel<ChannelProbe>, closed error: TetherError) {
        closedEvents += 1
        record(.closed(error.code, error.message))
        ended = true
        resumeReadWaiters()
    }

    func channelWritable(_ channel: FrameChannel<ChannelProbe>) {
        record(.writable)
    }

    func channelSecured(_ channel: FrameChannel<ChannelProbe>) {
        record(.secured)
    }
}

/// The raw end of an in-memory pair, for tests that send bytes no codec would make: keeps
/// what it receives and hears the end.
final class ByteSink: ByteTransportHandler, @unchecked Sendable {
    // @unchecked Sendable: the fields are behind the lock; the handler methods run on the loop.
    private let state = Lock<(bytes: [UInt8], end: TetherError?)>(([], nil))
    let transport: InMemoryTransport
    private let ended: AsyncStream<Void>.Continuation
    let endings: AsyncStream<Void>

    init(_ transport: InMemoryTransport) {
        self.transport = transport
        (endings, ended) = AsyncStream.makeStream()
        transport.handler = self
    }

    var bytes: [UInt8] { state.withLock { $0.bytes } }
    var end: TetherError? { state.withLock { $0.end } }

    func transportRead() {
        let received = Array(transport.buffers.inbound.readableBytesView)
        transport.buffers.inbound.clear()
        state.withLock { $0.bytes += received }
    }

    func transportClosed(_ error: TetherError) {
        state.withLock { $0.end = error }
        ended.yield()
        ended.finish()
    }

    func transportWritable() {}
    func transportSecured() {}
}
