import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import SeedNIO

/// The fan-out request: `rounds: UInt32 | size: UInt32`, big-endian.
enum FanOut {
    static func parse(_ payload: [UInt8]) -> (rounds: Int, size: Int)? {
        guard payload.count == 8 else { return nil }
        let rounds = payload[0..<4].reduce(0) { $0 << 8 | Int($1) }
        let size = payload[4..<8].reduce(0) { $0 << 8 | Int($1) }
        return size <= SeedFrame.maximumPayloadLength ? (rounds, size) : nil
    }
}

/// Every open channel of the NIO server, for broadcasts.
final class ChannelRegistry: Sendable {
    private let channels = NIOLockedValueBox([ObjectIdentifier: any Channel]())

    func add(_ channel: any Channel) {
        channels.withLockedValue { $0[ObjectIdentifier(channel)] = channel }
    }

    func remove(_ channel: any Channel) {
        channels.withLockedValue { _ = $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    /// Pushes `rounds` copies of `frame` to every channel: one task per event loop and
    /// round, which writes to each of that loop's channels and flushes them.
    func broadcast(_ frame: ByteBuffer, rounds: Int) {
        let byLoop = Dictionary(grouping: channels.withLockedValue { Array($0.values) }) { ObjectIdentifier($0.eventLoop) }
        for _ in 0..<rounds {
            for channels in byLoop.values {
                channels[0].eventLoop.execute {
                    for channel in channels { channel.write(frame, promise: nil) }
                    for channel in channels { channel.flush() }
                }
            }
        }
    }
}

/// Echoes every frame, requests and heartbeats alike, with the same type and serial.
///
/// ChannelHandler style: one `context.write` per frame as it is decoded, one `flush` when
/// the read burst ends.
final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = SeedFrame
    typealias OutboundOut = ByteBuffer

    private let registry: ChannelRegistry

    init(registry: ChannelRegistry) {
        self.registry = registry
    }

    func channelActive(context: ChannelHandlerContext) {
        registry.add(context.channel)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        registry.remove(context.channel)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        if frame.type == 0x403 {
            fanOut(context: context, frame: frame)
            return
        }
        context.writeSeedFrame(type: frame.type, serial: frame.serial, payload: frame.payload)
    }

    private func fanOut(context: ChannelHandlerContext, frame: SeedFrame) {
        guard let bytes = frame.payload.getBytes(at: frame.payload.readerIndex, length: frame.payload.readableBytes),
              let (rounds, size) = FanOut.parse(bytes)
        else {
            context.close(promise: nil)
            return
        }
        var notification = context.channel.allocator.buffer(capacity: SeedFrame.headerLength + size)
        notification.writeSeedHeader(type: 0x2, serial: 0, length: size)
        notification.writeRepeatingByte(0x62, count: size)
        registry.broadcast(notification, rounds: rounds)
        context.writeSeedFrame(type: frame.type, serial: frame.serial, payload: ByteBuffer())
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
/// - Parameters:
///   - port: The port on 127.0.0.1.
///   - tls: PEM files of the certificate chain and key, to serve TLS with NIOSSL.
/// - Returns: The bound port.
func startNIOServer(port: Int, tls: (certificate: String, key: String)? = nil) async throws -> (any Channel, Int) {
    let registry = ChannelRegistry()
    let sslContext = try tls.map { files in
        let chain = try NIOSSLCertificate.fromPEMFile(files.certificate).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(file: files.key, format: .pem)
        return try NIOSSLContext(configuration: .makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key)))
    }
    let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .serverChannelOption(.backlog, value: 4096)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
        .childChannelOption(.maxMessagesPerRead, value: 16)
        .childChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                if let sslContext {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                }
                try channel.pipeline.syncOperations.addHandlers(
                    ByteToMessageHandler(SeedFrameDecoder()),
                    EchoHandler(registry: registry)
                )
            }
        }
    let channel = try await bootstrap.bind(host: "127.0.0.1", port: port).get()
    return (channel, channel.localAddress?.port ?? port)
}
