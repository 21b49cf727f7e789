import BenchCore
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import SeedNIO

/// The SwiftNIO client in ChannelHandler style: pure event-loop code, no async.
///
/// Each channel keeps K requests in flight in K slots; slot `s` uses serials
/// `s + 1, s + 1 + K, s + 1 + 2K, …`, so a response finds its send time without a
/// dictionary. A response is answered from `channelRead` by the slot's next request, and
/// everything written during a read burst is flushed once, in `channelReadComplete`.
enum NIOHandlerClient {
    /// Sent through each pipeline once every connection is up: start the closed loop.
    struct Start: Sendable {
        var window: Window
    }

    static func run(_ load: Load) async throws -> (Stats, Window) {
        let collector = Collector()
        let sslContext = try load.tlsCA.map { ca in
            var configuration = NIOSSL.TLSConfiguration.makeClientConfiguration()
            configuration.trustRoots = .file(ca)
            return try NIOSSLContext(configuration: configuration)
        }
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelOption(.maxMessagesPerRead, value: 16)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    var payload = channel.allocator.buffer(capacity: load.size)
                    payload.writeRepeatingByte(0x61, count: load.size)
                    if let sslContext {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: "localhost"))
                    }
                    try channel.pipeline.syncOperations.addHandlers(
                        ByteToMessageHandler(SeedFrameDecoder()),
                        ClosedLoopHandler(inFlight: load.inFlight, payload: payload, collector: collector)
                    )
                }
            }
        var channels: [any Channel] = []
        for _ in 0..<load.connections {
            channels.append(try await bootstrap.connect(host: load.host, port: load.port).get())
        }
        let window = Window(warmup: load.warmup, duration: load.duration)
        let watchdog = Watchdog(window: window)
        for channel in channels {
            channel.pipeline.fireUserInboundEventTriggered(Start(window: window))
        }
        for channel in channels {
            try await channel.closeFuture.get()
        }
        watchdog.disarm()
        return (collector.total, window)
    }
}

/// Gathers each channel's stats when it finishes.
final class Collector: Sendable {
    private let stats = NIOLockedValueBox(Stats())

    func add(_ part: Stats) {
        stats.withLockedValue { $0.merge(part) }
    }

    var total: Stats { stats.withLockedValue { $0 } }
}

final class ClosedLoopHandler: ChannelInboundHandler {
    typealias InboundIn = SeedFrame
    typealias OutboundOut = ByteBuffer

    private let inFlight: Int
    private let payload: ByteBuffer
    private let collector: Collector
    private var window: Window?
    private var sentAt: [UInt64]
    private var outstanding = 0
    private var stopping = false
    private var reported = false
    private var stats = Stats()

    init(inFlight: Int, payload: ByteBuffer, collector: Collector) {
        self.inFlight = inFlight
        self.payload = payload
        self.collector = collector
        self.sentAt = [UInt64](repeating: 0, count: inFlight)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let start = event as? NIOHandlerClient.Start else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        window = start.window
        for slot in 0..<inFlight {
            send(context: context, serial: UInt32(slot + 1))
        }
        context.flush()
    }

    private func send(context: ChannelHandlerContext, serial: UInt32) {
        sentAt[Int(serial &- 1) % inFlight] = monotonicNanoseconds()
        outstanding += 1
        context.writeSeedFrame(type: 0x402, serial: serial, payload: payload)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        guard let window else { return }
        let received = monotonicNanoseconds()
        outstanding -= 1
        if frame.type != 0x402 || frame.payload.readableBytes != payload.readableBytes {
            stats.fail("response serial \(frame.serial): type \(frame.type), \(frame.payload.readableBytes) payload bytes")
        }
        stats.record(sent: sentAt[Int(frame.serial &- 1) % inFlight], received: received, in: window)
        if received >= window.end { stopping = true }
        if stopping {
            if outstanding == 0 { finish(context: context) }
        } else {
            // Same slot, next serial; wraps after 4 billion requests on one connection.
            send(context: context, serial: frame.serial &+ UInt32(inFlight))
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !reported {
            stats.fail("connection closed with \(outstanding) requests in flight")
            report()
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        stats.fail("\(error)")
        context.close(promise: nil)
    }

    private func finish(context: ChannelHandlerContext) {
        report()
        context.close(promise: nil)
    }

    private func report() {
        guard !reported else { return }
        reported = true
        collector.add(stats)
    }
}
