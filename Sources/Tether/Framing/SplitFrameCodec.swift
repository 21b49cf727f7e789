/// A codec whose frames are a header that declares the body's length, then the body, and
/// nothing after it: the form that lets a large body be read straight into its payload's
/// array and written from it (``LargePayloads``).
///
/// Conforming codecs keep no state between frames, so a copy of one answers as well as
/// the channel's own.
protocol SplitFrameCodec: FrameCodec {
    /// The frame whose header starts `buffer`, without its payload, with the header's length
    /// and the body's; `nil` when the header is not all there, is not valid (``decode(_:)``
    /// says why), or declares more than the maximum payload length.
    ///
    /// - Parameter buffer: Received bytes, from the start of a frame.
    /// - Returns: The header's frame and lengths, or `nil`.
    func header(in buffer: FrameBuffer) -> (frame: Frame, headerLength: Int, bodyLength: Int)?

    /// Appends the header of `frame`, whose payload is to be sent right after it from its
    /// own storage; appends nothing and returns `false` when this frame cannot go that way.
    ///
    /// - Parameters:
    ///   - frame: The frame.
    ///   - buffer: The outbound buffer.
    /// - Returns: Whether the header was appended.
    /// - Throws: What ``encode(_:into:)`` throws for the same frame.
    func encodeHeader(of frame: Frame, bodyLength: Int, into buffer: inout FrameBuffer) throws(TetherError) -> Bool
}

extension SplitFrameCodec {
    /// The header of `frame` for its own payload.
    func encodeHeader(of frame: Frame, into buffer: inout FrameBuffer) throws(TetherError) -> Bool {
        try encodeHeader(of: frame, bodyLength: frame.payload.count, into: &buffer)
    }
}

extension SeedCodec: SplitFrameCodec {
    func header(in buffer: FrameBuffer) -> (frame: Frame, headerLength: Int, bodyLength: Int)? {
        guard let length = buffer.peekInteger(at: 8, as: UInt32.self), UInt64(length) <= UInt64(maximumPayloadLength) else { return nil }
        let frame = Frame(type: buffer.peekInteger(at: 0)!, serial: buffer.peekInteger(at: 4)!)
        return (frame, Self.headerLength, Int(length))
    }

    func encodeHeader(of frame: Frame, bodyLength: Int, into buffer: inout FrameBuffer) throws(TetherError) -> Bool {
        guard bodyLength <= maximumPayloadLength else {
            throw .payloadOverLimit(type: frame.type, bytes: bodyLength, limit: maximumPayloadLength)
        }
        buffer.reserveWritable(Self.headerLength)
        buffer.writeInteger(frame.type)
        buffer.writeInteger(frame.serial)
        buffer.writeInteger(UInt32(bodyLength))
        return true
    }
}
