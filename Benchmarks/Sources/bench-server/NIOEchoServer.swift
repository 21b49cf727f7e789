import NIOCore
import NIOPosix
import SeedNIO

/// Echoes every frame, requests and heartbeats alike, with the same type and serial.
///
/// ChannelHandler style: one `context.write` per frame as it is decoded, one `flush` when
/// the read burst ends.
final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = SeedFrame
    typealias OutboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        context.writeSeedFrame(type: frame.type, serial: frame.serial, payload: frame.payload)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Serves the seed echo protocol with SwiftNIO until the process is killed.
///
/// - Parameter port: The port on 127.0.0.1.
/// - Returns: The bound port.
func startNIOServer(port: Int) async throws -> (any Channel, Int) {
    let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .serverChannelOption(.backlog, value: 4096)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
        .childChannelOption(.maxMessagesPerRead, value: 16)
        .childChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandlers(
                    ByteToMessageHandler(SeedFrameDecoder()),
                    EchoHandler()
                )
            }
        }
    let channel = try await bootstrap.bind(host: "127.0.0.1", port: port).get()
    return (channel, channel.localAddress?.port ?? port)
}
