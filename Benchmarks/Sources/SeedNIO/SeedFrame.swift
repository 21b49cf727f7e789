public import NIOCore

/// A frame of the seed protocol as SwiftNIO code holds it: the payload is a slice of the
/// inbound buffer, never copied.
public struct SeedFrame: Sendable {
    /// The frame type: `0x1` heartbeat, `0x402` echo request.
    public var type: UInt32
    /// The serial that matches a response to its request.
    public var serial: UInt32
    /// The payload bytes.
    public var payload: ByteBuffer

    /// Creates a frame.
    ///
    /// - Parameters:
    ///   - type: The frame type.
    ///   - serial: The serial.
    ///   - payload: The payload.
    public init(type: UInt32, serial: UInt32, payload: ByteBuffer) {
        self.type = type
        self.serial = serial
        self.payload = payload
    }

    /// The size of the header: `type | serial | length`, each a big-endian `UInt32`.
    public static let headerLength = 12
    /// The largest payload accepted, as in Tether's default limits.
    public static let maximumPayloadLength = 16 << 20
    /// Payloads larger than this are written as their own buffer (gathered by `writev`)
    /// instead of being copied behind the header.
    public static let copyThreshold = 4096
}

extension ByteBuffer {
    /// Appends the 12-byte seed header.
    ///
    /// - Parameters:
    ///   - type: The frame type.
    ///   - serial: The serial.
    ///   - length: The payload length.
    @inlinable
    public mutating func writeSeedHeader(type: UInt32, serial: UInt32, length: Int) {
        writeMultipleIntegers(type, serial, UInt32(truncatingIfNeeded: length))
    }
}

/// The error that ends a connection whose peer announces a payload over the limit.
public struct FrameTooLarge: Error, CustomStringConvertible {
    /// The announced length.
    public var length: Int
    /// A readable description.
    public var description: String { "frame payload of \(length) bytes is over the limit of \(SeedFrame.maximumPayloadLength)" }
}

/// Decodes seed frames: any number per read, and frames split across reads.
public struct SeedFrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = SeedFrame

    /// Creates the decoder.
    public init() {}

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let (type, serial, length) = buffer.getMultipleIntegers(at: buffer.readerIndex, as: (UInt32, UInt32, UInt32).self) else {
            return .needMoreData
        }
        let payloadLength = Int(length)
        guard payloadLength <= SeedFrame.maximumPayloadLength else { throw FrameTooLarge(length: payloadLength) }
        guard buffer.readableBytes >= SeedFrame.headerLength + payloadLength else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: SeedFrame.headerLength)
        let payload = buffer.readSlice(length: payloadLength)!
        context.fireChannelRead(Self.wrapInboundOut(SeedFrame(type: type, serial: serial, payload: payload)))
        return .continue
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}

extension ChannelHandlerContext {
    /// Writes a frame without flushing: small payloads are copied behind the header into
    /// one buffer, large ones follow it as their own buffer.
    ///
    /// - Parameters:
    ///   - type: The frame type.
    ///   - serial: The serial.
    ///   - payload: The payload.
    @inlinable
    public func writeSeedFrame(type: UInt32, serial: UInt32, payload: ByteBuffer) {
        let length = payload.readableBytes
        if length <= SeedFrame.copyThreshold {
            var buffer = channel.allocator.buffer(capacity: SeedFrame.headerLength + length)
            buffer.writeSeedHeader(type: type, serial: serial, length: length)
            buffer.writeImmutableBuffer(payload)
            write(NIOAny(buffer), promise: nil)
        } else {
            var header = channel.allocator.buffer(capacity: SeedFrame.headerLength)
            header.writeSeedHeader(type: type, serial: serial, length: length)
            write(NIOAny(header), promise: nil)
            write(NIOAny(payload), promise: nil)
        }
    }
}

/// Encodes frames for `NIOAsyncChannel` outbound writers.
public struct SeedFrameEncoder: MessageToByteEncoder {
    public typealias OutboundIn = SeedFrame

    /// Creates the encoder.
    public init() {}

    public func encode(data: SeedFrame, out: inout ByteBuffer) throws {
        out.writeSeedHeader(type: data.type, serial: data.serial, length: data.payload.readableBytes)
        out.writeImmutableBuffer(data.payload)
    }
}
