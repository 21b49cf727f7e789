/// A piece of a large frame, so that small frames can travel between the pieces: a
/// heartbeat, an acknowledgement or a small response waits behind one chunk, not behind the
/// whole frame.
///
/// A chunk is a message frame of type `0xFFFFFFFE` (``frameType``) whose serial and header
/// fields are those of the frame it carries a piece of, and whose payload is a one-byte
/// marker, then, in the first chunk only, the frame's type and payload length (4 and 8 bytes,
/// big-endian), then the piece:
///
/// ```
/// first:  0x01 | 0x02 (last) | type: UInt32 | length: UInt64 | bytes…
/// others: 0x00 | 0x02 (last) | bytes…
/// ```
///
/// The chunks of one frame follow each other in order, and one frame's chunks end before the
/// next chunked frame begins; other frames may come between them. Both ends must have said
/// that they understand chunks (the session hello and welcome carry it,
/// ``SessionWire/Hello/chunkBytes``): a peer that has not said so gets every frame whole.
/// Only profiles that carry a ``CloseNotice`` carry chunks (``carried(by:)``).
struct FrameChunk: Equatable, Sendable {
    /// The frame type of a chunk.
    static let frameType: UInt32 = 0xFFFF_FFFE
    /// The marker bit of a frame's first chunk.
    static let firstFlag: UInt8 = 0x01
    /// The marker bit of a frame's last chunk.
    static let lastFlag: UInt8 = 0x02
    /// The bytes before the piece in a first chunk.
    static let firstPrefixLength = 13
    /// The bytes before the piece in the other chunks.
    static let prefixLength = 1

    /// Whether `profile` has room for chunks: it matches responses by serial, so a chunk's
    /// serial is never taken for a response's, and their type is a message in it.
    ///
    /// - Parameter profile: The connection's profile.
    /// - Returns: Whether large frames may travel in chunks in it.
    static func carried(by profile: Profile) -> Bool {
        profile.correlation == .bySerial && profile.classify(frameType) == .message
    }

    /// The bytes before the piece in the chunk of a `frame` that starts at `offset` and
    /// carries `count` bytes: the marker, and in the first chunk the type and length.
    static func prefix(of frame: Frame, at offset: Int, count: Int) -> [UInt8] {
        let first = offset == 0
        var bytes: [UInt8] = [(first ? firstFlag : 0) | (offset + count == frame.payload.count ? lastFlag : 0)]
        guard first else { return bytes }
        bytes.reserveCapacity(firstPrefixLength)
        for index in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: frame.type >> (24 - 8 * index))) }
        let length = UInt64(frame.payload.count)
        for index in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: length >> (56 - 8 * index))) }
        return bytes
    }

    /// The chunk of `frame`'s payload that starts at `offset` and holds up to `size` bytes.
    ///
    /// - Parameters:
    ///   - frame: The frame being sent in chunks.
    ///   - offset: Where the piece starts in the payload.
    ///   - size: The most payload bytes a chunk carries.
    /// - Returns: The chunk frame, and the payload bytes it carries.
    static func chunk(of frame: Frame, at offset: Int, size: Int) -> (frame: Frame, count: Int) {
        let count = min(size, frame.payload.count - offset)
        let head = Self.prefix(of: frame, at: offset, count: count)
        let prefix = head.count
        let payload = [UInt8](unsafeUninitializedCapacity: prefix + count) { buffer, initialized in
            for index in 0..<prefix { buffer[index] = head[index] }
            frame.payload.withUnsafeBytes { source in
                UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[prefix...])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: source[offset..<(offset + count)]))
            }
            initialized = prefix + count
        }
        return (Frame(type: frameType, serial: frame.serial, payload: payload, fields: frame.fields), count)
    }
}

/// Puts a frame that arrives in chunks back together, with bounds on what a peer can make it
/// hold: the frame's declared length is checked against the payload limit before anything is
/// kept, and storage grows with the bytes that arrive, never to the declared length at once.
struct ChunkAssembler {
    /// The frame being put together: its header, the bytes so far, and the length declared.
    struct Assembly {
        var frame: Frame
        var declared: Int
    }

    /// The frame gets its final storage once this fraction (1 in `n`) of it has arrived: a
    /// peer that declares a large frame and sends little of it makes it hold at most eight
    /// times what it sent, and the bytes of a frame that does arrive are copied once.
    static let reservedFraction = 8
    /// The largest payload a frame put together may have.
    let maximumPayloadLength: Int
    /// The frame under way, if any.
    private(set) var current: Assembly?

    init(maximumPayloadLength: Int) {
        self.maximumPayloadLength = maximumPayloadLength
    }

    /// Payload bytes of the frame under way received so far.
    var receivedBytes: Int { current?.frame.payload.count ?? 0 }

    /// Takes one chunk.
    ///
    /// - Parameter chunk: A frame of type ``FrameChunk/frameType``.
    /// - Returns: The whole frame when `chunk` was its last, otherwise `nil`.
    /// - Throws: ``TetherError`` with ``TetherError/Code/protocolError`` for a chunk that does
    ///   not follow the rules (a first chunk while a frame is under way, a chunk with no frame
    ///   under way, more bytes than declared, fewer at the end), or
    ///   ``TetherError/Code/frameTooLarge`` for a frame declared over the payload limit.
    mutating func take(_ chunk: Frame) throws(TetherError) -> Frame? {
        let payload = chunk.payload
        guard let marker = payload.first, marker & ~(FrameChunk.firstFlag | FrameChunk.lastFlag) == 0 else {
            throw TetherError(code: .protocolError, message: "a frame chunk (serial \(chunk.serial)) has no valid marker byte")
        }
        var assembly: Assembly
        let start: Int
        if marker & FrameChunk.firstFlag != 0 {
            if let current {
                throw TetherError(
                    code: .protocolError,
                    message: "a chunked frame (serial \(chunk.serial)) began before frame \(hex(current.frame.type)) serial \(current.frame.serial) finished"
                )
            }
            guard payload.count >= FrameChunk.firstPrefixLength else {
                throw TetherError(code: .protocolError, message: "the first chunk of a frame (serial \(chunk.serial)) is \(payload.count) bytes, shorter than its 13-byte prefix")
            }
            var type: UInt32 = 0
            for index in 1...4 { type = type << 8 | UInt32(payload[index]) }
            var length: UInt64 = 0
            for index in 5...12 { length = length << 8 | UInt64(payload[index]) }
            guard length <= UInt64(maximumPayloadLength) else {
                throw TetherError(
                    code: .frameTooLarge,
                    message: "chunked frame \(hex(type)) serial \(chunk.serial) declares \(length) bytes, over the \(describeBytes(maximumPayloadLength)) limit"
                )
            }
            guard type != FrameChunk.frameType else {
                throw TetherError(code: .protocolError, message: "a chunked frame (serial \(chunk.serial)) declares the chunk type itself")
            }
            assembly = Assembly(frame: Frame(type: type, serial: chunk.serial, fields: chunk.fields), declared: Int(length))
            start = FrameChunk.firstPrefixLength
        } else {
            guard let current else {
                throw TetherError(code: .protocolError, message: "a frame chunk (serial \(chunk.serial)) continues no chunked frame")
            }
            guard current.frame.serial == chunk.serial else {
                throw TetherError(
                    code: .protocolError,
                    message: "a frame chunk of serial \(chunk.serial) came inside frame \(hex(current.frame.type)) serial \(current.frame.serial)"
                )
            }
            assembly = current
            start = FrameChunk.prefixLength
            self.current = nil
        }
        let count = payload.count - start
        guard assembly.frame.payload.count + count <= assembly.declared else {
            throw TetherError(
                code: .protocolError,
                message: "chunked frame \(hex(assembly.frame.type)) serial \(assembly.frame.serial) carries more than the \(assembly.declared) bytes it declared"
            )
        }
        if assembly.frame.payload.isEmpty {
            // Room for twice what arrived, up to the declared length: storage follows the bytes.
            assembly.frame.payload.reserveCapacity(min(assembly.declared, max(count * 2, 1)))
        }
        if assembly.frame.payload.capacity < assembly.declared, (assembly.frame.payload.count + count) * Self.reservedFraction >= assembly.declared {
            // An eighth has arrived: the frame's final storage, so the rest is copied once.
            assembly.frame.payload.reserveCapacity(assembly.declared)
        }
        payload.withUnsafeBytes { raw in assembly.frame.payload.append(contentsOf: raw[start...]) }
        if marker & FrameChunk.lastFlag != 0 {
            guard assembly.frame.payload.count == assembly.declared else {
                throw TetherError(
                    code: .protocolError,
                    message: "chunked frame \(hex(assembly.frame.type)) serial \(assembly.frame.serial) ended after \(assembly.frame.payload.count) of the \(assembly.declared) bytes it declared"
                )
            }
            return assembly.frame
        }
        current = assembly
        return nil
    }
}
