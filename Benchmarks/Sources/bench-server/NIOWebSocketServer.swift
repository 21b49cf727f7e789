import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import SeedNIO

/// Echoes seed frames carried in WebSocket binary messages.
///
/// The payloads of binary and continuation frames go into one accumulator (a seed frame may
/// span messages, a message may hold several); every whole frame is answered with a frame of
/// the same type, serial and payload, appended to one outbound message that is written and
/// flushed when the read burst ends, as the TCP server flushes once per
/// `channelReadComplete`. Server frames are not masked. Pings are answered with pongs, a
/// close with a close carrying the same code; a text message closes with 1003.
final class WebSocketEchoHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var accumulator = SeedAccumulator()
    private var answers: ByteBuffer?
    private var closing = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        guard !closing else { return }
        switch frame.opcode {
        case .binary, .continuation:
            accumulator.append(frame.seedPayload)
            do {
                while let request = try accumulator.next() {
                    if answers == nil {
                        answers = context.channel.allocator.webSocketMessageBuffer(capacity: 16 * (SeedFrame.headerLength + request.payload.readableBytes))
                    }
                    answers!.writeSeedFrame(type: request.type, serial: request.serial, payload: request.payload)
                }
            } catch {
                close(context: context, code: .messageTooLarge)
            }
        case .ping:
            context.write(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.seedPayload)), promise: nil)
        case .pong:
            break
        case .connectionClose:
            closing = true
            context.writeAndFlush(Self.wrapOutboundOut(frame.closeEcho(maskKey: nil))).whenComplete { [channel = context.channel] _ in
                channel.close(promise: nil)
            }
        default:
            close(context: context, code: .unacceptableData)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if let message = answers {
            answers = nil
            context.write(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, data: message)), promise: nil)
        }
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func close(context: ChannelHandlerContext, code: WebSocketErrorCode) {
        closing = true
        var payload = context.channel.allocator.buffer(capacity: 2)
        payload.write(webSocketErrorCode: code)
        context.writeAndFlush(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload))).whenComplete { [channel = context.channel] _ in
            channel.close(promise: nil)
        }
    }
}

/// Answers a request that was not upgraded (another path, or no upgrade headers) with 404
/// and closes. Removed from the pipeline by an upgrade.
final class NotUpgradedHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    static let name = "seed-not-upgraded"

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = Self.unwrapInboundIn(data) else { return }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: "0")
        headers.add(name: "Connection", value: "close")
        context.write(Self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .notFound, headers: headers))), promise: nil)
        context.writeAndFlush(Self.wrapOutboundOut(.end(nil))).whenComplete { [channel = context.channel] _ in
            channel.close(promise: nil)
        }
    }
}

/// Serves the seed echo protocol over WebSocket with SwiftNIO: an HTTP/1.1 server pipeline
/// that upgrades `GET path` to WebSocket (`NIOWebSocketServerUpgrader`; any other path
/// gets 404), then ``WebSocketEchoHandler``.
///
/// - Parameters:
///   - port: The port on 127.0.0.1; 0 lets the system choose.
///   - path: The request path upgraded.
/// - Returns: The listening channel and its port.
func startNIOWebSocketServer(port: Int, path: String) async throws -> (any Channel, Int) {
    let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .serverChannelOption(.backlog, value: 4096)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
        .childChannelOption(.maxMessagesPerRead, value: 16)
        .childChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                let upgrader = NIOWebSocketServerUpgrader(
                    maxFrameSize: seedWebSocketMaximumFrameSize,
                    automaticErrorHandling: true,
                    shouldUpgrade: { channel, head in
                        channel.eventLoop.makeSucceededFuture(head.uri == path ? HTTPHeaders() : nil)
                    },
                    upgradePipelineHandler: { channel, _ in
                        channel.eventLoop.makeCompletedFuture {
                            channel.pipeline.syncOperations.removeHandler(name: NotUpgradedHandler.name, promise: nil)
                            try channel.pipeline.syncOperations.addHandler(WebSocketEchoHandler())
                        }
                    }
                )
                try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                    withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in })
                )
                try channel.pipeline.syncOperations.addHandler(NotUpgradedHandler(), name: NotUpgradedHandler.name)
            }
        }
    let channel = try await bootstrap.bind(host: "127.0.0.1", port: port).get()
    return (channel, channel.localAddress?.port ?? port)
}
