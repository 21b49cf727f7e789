public import NIOCore
public import NIOWebSocket

/// The largest WebSocket frame the NIO peers accept, as Tether's default
/// `maximumMessageSize`: a seed frame of the largest payload plus room.
public let seedWebSocketMaximumFrameSize = (16 << 20) + (64 << 10)

/// The room kept in front of an outbound message for its WebSocket header (2 bytes, 8 more
/// for a 64-bit length, 4 for a mask key), so `WebSocketFrameEncoder` prepends the header in
/// place instead of writing it as a buffer of its own.
public let seedWebSocketHeaderRoom = 14

/// Seed frames carried in the payloads of WebSocket messages: a frame may span messages and
/// a message may hold several frames, so payloads are appended to one accumulator and whole
/// frames are taken from its front, as `SeedFrameDecoder` does for a TCP stream.
public struct SeedAccumulator {
    private var buffer: ByteBuffer?

    /// Creates an empty accumulator.
    public init() {}

    /// Appends the payload of a binary or continuation frame. When nothing is pending the
    /// payload itself becomes the accumulator (no copy); otherwise the bytes already taken
    /// are dropped first, so a peer whose messages always end inside a frame does not make
    /// the accumulator grow.
    ///
    /// - Parameter payload: The unmasked payload.
    public mutating func append(_ payload: ByteBuffer) {
        guard var pending = buffer, pending.readableBytes > 0 else {
            buffer = payload
            return
        }
        buffer = nil
        if pending.readerIndex > 0 { pending.discardReadBytes() }
        pending.writeImmutableBuffer(payload)
        buffer = pending
    }

    /// The next whole seed frame, or `nil` until more bytes arrive.
    ///
    /// - Returns: The frame; its payload is a slice of the accumulated bytes.
    /// - Throws: `FrameTooLarge` when a header announces a payload over the limit.
    public mutating func next() throws -> SeedFrame? {
        guard var pending = buffer else { return nil }
        buffer = nil
        defer { buffer = pending.readableBytes > 0 ? pending : nil }
        guard let (type, serial, length) = pending.getMultipleIntegers(at: pending.readerIndex, as: (UInt32, UInt32, UInt32).self) else {
            return nil
        }
        let payloadLength = Int(length)
        guard payloadLength <= SeedFrame.maximumPayloadLength else { throw FrameTooLarge(length: payloadLength) }
        guard pending.readableBytes >= SeedFrame.headerLength + payloadLength else { return nil }
        pending.moveReaderIndex(forwardBy: SeedFrame.headerLength)
        let payload = pending.readSlice(length: payloadLength)!
        return SeedFrame(type: type, serial: serial, payload: payload)
    }
}

extension ByteBufferAllocator {
    /// An empty buffer for the payload of an outbound WebSocket message, with
    /// ``seedWebSocketHeaderRoom`` bytes in front of its reader index for the frame header.
    ///
    /// - Parameter capacity: The payload bytes expected.
    /// - Returns: The buffer.
    @inlinable
    public func webSocketMessageBuffer(capacity: Int) -> ByteBuffer {
        var buffer = self.buffer(capacity: seedWebSocketHeaderRoom + capacity)
        buffer.moveWriterIndex(forwardBy: seedWebSocketHeaderRoom)
        buffer.moveReaderIndex(forwardBy: seedWebSocketHeaderRoom)
        return buffer
    }
}

extension ByteBuffer {
    /// Appends a seed frame: header, then payload.
    ///
    /// - Parameters:
    ///   - type: The frame type.
    ///   - serial: The serial.
    ///   - payload: The payload.
    @inlinable
    public mutating func writeSeedFrame(type: UInt32, serial: UInt32, payload: ByteBuffer) {
        writeSeedHeader(type: type, serial: serial, length: payload.readableBytes)
        writeImmutableBuffer(payload)
    }
}

extension WebSocketFrame {
    /// The payload of a received frame, unmasked if the frame was masked.
    @inlinable
    public var seedPayload: ByteBuffer {
        guard let key = maskKey else { return data }
        var payload = data
        payload.webSocketUnmask(key)
        return payload
    }

    /// The answer to a close frame: a close carrying the same code, or none when it had none.
    ///
    /// - Parameter maskKey: The key for a client's frame; `nil` on a server.
    /// - Returns: The close frame to send.
    public func closeEcho(maskKey: WebSocketMaskingKey?) -> WebSocketFrame {
        var payload = seedPayload
        let code = payload.readSlice(length: 2) ?? ByteBuffer()
        return WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: maskKey, data: code)
    }
}
