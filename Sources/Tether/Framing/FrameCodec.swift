/// Turns a byte stream into frames and frames into bytes.
///
/// A codec is pure value code with no I/O. ``decode(_:)`` is called with everything
/// received so far; it returns one complete frame and consumes its bytes, or returns `nil`
/// and consumes nothing when the buffer does not yet hold a whole frame. It is called again
/// and again until it returns `nil`, so one read that holds many frames yields them all,
/// and a frame split across many reads is returned once its last byte arrives.
///
/// A decoder must reject a declared length above its limit *before* it waits for or
/// allocates that many bytes.
public protocol FrameCodec: Sendable {
    /// Decodes the next complete frame from the front of `buffer`.
    ///
    /// - Parameter buffer: Received bytes; the frame's bytes are consumed on success.
    /// - Returns: A frame, or `nil` when more bytes are needed.
    /// - Throws: ``TetherError`` with ``TetherError/Code/protocolError`` or
    ///   ``TetherError/Code/frameTooLarge`` when the bytes cannot be a valid frame.
    mutating func decode(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame?

    /// Called once the peer has closed its side: decodes what remains, or reports a truncated frame.
    ///
    /// - Parameter buffer: The bytes left after the last ``decode(_:)``.
    /// - Returns: A last frame, or `nil` when nothing remains.
    /// - Throws: ``TetherError`` with ``TetherError/Code/truncatedFrame`` when bytes of an
    ///   incomplete frame remain.
    mutating func decodeLast(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame?

    /// Appends the wire form of `frame` to `buffer`.
    ///
    /// The bytes must depend on the frame alone, not on the connection: a server's
    /// ``Server/broadcast(_:)`` encodes a frame once, with a codec of its own, and writes the
    /// same bytes to every peer.
    ///
    /// - Parameters:
    ///   - frame: The frame to encode.
    ///   - buffer: The outbound buffer.
    /// - Throws: ``TetherError`` when the frame cannot be encoded, for example when its
    ///   payload is larger than the format can express.
    func encode(_ frame: Frame, into buffer: inout FrameBuffer) throws(TetherError)
}

extension FrameCodec {
    /// Default: decode once more, then report any bytes left as a truncated frame.
    ///
    /// - Parameter buffer: The bytes left after the last ``decode(_:)``.
    /// - Returns: The frame ``decode(_:)`` finds in them, or `nil` when the buffer is empty.
    /// - Throws: What ``decode(_:)`` throws, or ``TetherError`` with
    ///   ``TetherError/Code/truncatedFrame`` when bytes remain that make no whole frame.
    public mutating func decodeLast(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame? {
        if let frame = try decode(&buffer) { return frame }
        if buffer.readableBytes > 0 {
            throw TetherError(
                code: .truncatedFrame,
                message: "stream ended inside a frame: \(buffer.readableBytes) bytes of an incomplete frame"
            )
        }
        return nil
    }
}

/// The seed wire format: `type: UInt32 | serial: UInt32 | length: UInt32`, big-endian, then `length` bytes.
package struct SeedCodec: FrameCodec {
    /// The size of the header in bytes.
    package static let headerLength = 12

    /// The largest payload accepted or sent, in bytes.
    package var maximumPayloadLength: Int

    /// Creates the codec.
    ///
    /// - Parameter maximumPayloadLength: The largest payload accepted; default 16 MiB.
    package init(maximumPayloadLength: Int = 16 << 20) {
        self.maximumPayloadLength = maximumPayloadLength
    }

    /// Decodes one seed frame from the front of `buffer`, or returns `nil` until a whole frame is there.
    ///
    /// The declared length is checked against ``maximumPayloadLength`` from the header alone.
    ///
    /// - Parameter buffer: Received bytes; the frame's bytes are consumed on success.
    /// - Returns: A frame, or `nil` when more bytes are needed.
    /// - Throws: ``TetherError`` with ``TetherError/Code/frameTooLarge``.
    package mutating func decode(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame? {
        guard let length = buffer.peekInteger(at: 8, as: UInt32.self) else { return nil }
        guard UInt64(length) <= UInt64(maximumPayloadLength) else {
            throw TetherError(
                code: .frameTooLarge,
                message: "frame length \(length) exceeds the \(describeBytes(maximumPayloadLength)) limit"
            )
        }
        let total = Self.headerLength + Int(length)
        guard buffer.readableBytes >= total else { return nil }
        let type = buffer.readInteger(as: UInt32.self)!
        let serial = buffer.readInteger(as: UInt32.self)!
        buffer.moveReaderIndex(forwardBy: 4)
        let payload = length == 0 ? [] : buffer.readBytes(Int(length))!
        return Frame(type: type, serial: serial, payload: payload)
    }

    /// Appends the 12-byte header and the payload of `frame` to `buffer`.
    ///
    /// - Parameters:
    ///   - frame: The frame to encode.
    ///   - buffer: The outbound buffer.
    /// - Throws: ``TetherError`` with ``TetherError/Code/frameTooLarge`` when the payload is over the limit.
    package func encode(_ frame: Frame, into buffer: inout FrameBuffer) throws(TetherError) {
        guard frame.payload.count <= maximumPayloadLength else {
            throw .payloadOverLimit(type: frame.type, bytes: frame.payload.count, limit: maximumPayloadLength)
        }
        buffer.reserveWritable(Self.headerLength + frame.payload.count)
        buffer.writeInteger(frame.type)
        buffer.writeInteger(frame.serial)
        buffer.writeInteger(UInt32(frame.payload.count))
        buffer.writeBytes(frame.payload)
    }
}
