import BenchCore
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import SeedNIO

/// The SwiftNIO client over WebSocket, in ChannelHandler style like ``NIOHandlerClient``.
///
/// Each channel starts as an HTTP/1.1 client that sends `GET path` with the upgrade headers
/// of `NIOWebSocketClientUpgrader`; once the `101` is checked, the HTTP handlers make way
/// for NIO's WebSocket frame codec and ``WebSocketClosedLoopHandler``. Seed frames ride in
/// binary messages: the K first requests in one message, then the requests that answer a
/// read burst's responses in one message written in `channelReadComplete`, masked with a
/// random key as RFC 6455 requires of a client.
enum NIOWebSocketClient {
    static func run(_ load: Load) async throws -> (Stats, Window) {
        guard let path = load.webSocketPath else { preconditionFailure("NIOWebSocketClient needs a WebSocket path") }
        let collector = Collector()
        let host = load.port == 80 ? load.host : "\(load.host):\(load.port)"
        var channels: [any Channel] = []
        for _ in 0..<load.connections {
            let upgraded = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: Void.self)
            let bootstrap = ClientBootstrap(group: upgraded.futureResult.eventLoop)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelOption(.maxMessagesPerRead, value: 16)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let upgrader = NIOWebSocketClientUpgrader(
                            maxFrameSize: seedWebSocketMaximumFrameSize,
                            automaticErrorHandling: true,
                            upgradePipelineHandler: { channel, _ in
                                channel.eventLoop.makeCompletedFuture {
                                    // The HTTP handlers are gone; the request's handler goes too,
                                    // before any WebSocket frame reaches it.
                                    channel.pipeline.syncOperations.removeHandler(name: UpgradeRequestHandler.name, promise: nil)
                                    var payload = channel.allocator.buffer(capacity: load.size)
                                    payload.writeRepeatingByte(0x61, count: load.size)
                                    try channel.pipeline.syncOperations.addHandler(
                                        WebSocketClosedLoopHandler(inFlight: load.inFlight, payload: payload, collector: collector)
                                    )
                                    upgraded.succeed()
                                }
                            }
                        )
                        try channel.pipeline.syncOperations.addHTTPClientHandlers(
                            leftOverBytesStrategy: .forwardBytes,
                            withClientUpgrade: (upgraders: [upgrader], completionHandler: { _ in })
                        )
                        try channel.pipeline.syncOperations.addHandler(
                            UpgradeRequestHandler(path: path, host: host, upgraded: upgraded),
                            name: UpgradeRequestHandler.name
                        )
                    }
                }
            let channel = try await bootstrap.connect(host: load.host, port: load.port).get()
            channel.closeFuture.whenComplete { _ in
                upgraded.fail(ChannelError.ioOnClosedChannel)
            }
            try await upgraded.futureResult.get()
            channels.append(channel)
        }
        let window = Window(warmup: load.warmup, duration: load.duration)
        let watchdog = Watchdog(window: window)
        for channel in channels {
            channel.pipeline.fireUserInboundEventTriggered(NIOHandlerClient.Start(window: window))
        }
        for channel in channels {
            try await channel.closeFuture.get()
        }
        watchdog.disarm()
        return (collector.total, window)
    }
}

/// Sends the upgrade request once the connection is up, and fails `upgraded` when the
/// server answers with anything but `101`. Removed from the pipeline by the upgrade.
final class UpgradeRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    static let name = "seed-upgrade-request"

    private let path: String
    private let host: String
    private let upgraded: EventLoopPromise<Void>

    init(path: String, host: String, upgraded: EventLoopPromise<Void>) {
        self.path = path
        self.host = host
        self.upgraded = upgraded
    }

    func channelActive(context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: host)
        headers.add(name: "Content-Length", value: "0")
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)
        context.write(Self.wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(Self.wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // An HTTP response reaches here only when the server did not upgrade.
        if case .head(let head) = Self.unwrapInboundIn(data) {
            upgraded.fail(WebSocketUpgradeRefused(status: head.status.code))
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        upgraded.fail(error)
        context.close(promise: nil)
    }
}

/// The server answered the upgrade request with something other than `101`.
struct WebSocketUpgradeRefused: Error, CustomStringConvertible {
    var status: UInt
    var description: String { "the server answered the WebSocket upgrade with \(status)" }
}

/// The closed loop of ``ClosedLoopHandler`` over WebSocket frames.
///
/// Responses are decoded from the payloads of binary and continuation frames through one
/// accumulator; each answers with its slot's next request, appended to one outbound
/// message that is written, masked, and flushed in `channelReadComplete`.
final class WebSocketClosedLoopHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let inFlight: Int
    private let payload: ByteBuffer
    private let collector: Collector
    private var window: Window?
    private var sentAt: [UInt64]
    private var outstanding = 0
    private var stopping = false
    private var reported = false
    private var stats = Stats()
    private var accumulator = SeedAccumulator()
    private var requests: ByteBuffer?

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
        writeRequests(context: context)
        context.flush()
    }

    private func send(context: ChannelHandlerContext, serial: UInt32) {
        sentAt[Int(serial &- 1) % inFlight] = monotonicNanoseconds()
        outstanding += 1
        if requests == nil {
            requests = context.channel.allocator.webSocketMessageBuffer(capacity: inFlight * (SeedFrame.headerLength + payload.readableBytes))
        }
        requests!.writeSeedFrame(type: 0x402, serial: serial, payload: payload)
    }

    private func writeRequests(context: ChannelHandlerContext) {
        guard let message = requests else { return }
        requests = nil
        context.write(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: message)), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        switch frame.opcode {
        case .binary, .continuation:
            accumulator.append(frame.seedPayload)
            do {
                while let response = try accumulator.next() {
                    received(context: context, response)
                }
            } catch {
                stats.fail("\(error)")
                context.close(promise: nil)
            }
        case .ping:
            context.write(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.seedPayload)), promise: nil)
        case .connectionClose:
            stats.fail("the server closed the WebSocket")
            context.writeAndFlush(Self.wrapOutboundOut(frame.closeEcho(maskKey: .random()))).whenComplete { [channel = context.channel] _ in
                channel.close(promise: nil)
            }
        default:
            break
        }
    }

    private func received(context: ChannelHandlerContext, _ frame: SeedFrame) {
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
            send(context: context, serial: frame.serial &+ UInt32(inFlight))
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        writeRequests(context: context)
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

    /// Every response is in: a close frame with 1000, then the connection ends.
    private func finish(context: ChannelHandlerContext) {
        report()
        var code = context.channel.allocator.buffer(capacity: 2)
        code.write(webSocketErrorCode: .normalClosure)
        context.writeAndFlush(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: code))).whenComplete { [channel = context.channel] _ in
            channel.close(promise: nil)
        }
    }

    private func report() {
        guard !reported else { return }
        reported = true
        collector.add(stats)
    }
}
