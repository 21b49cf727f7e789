/// One unit of the wire protocol: a type, a serial and a payload.
///
/// In the ``Profile/seed`` profile a frame is a 12-byte big-endian header
/// `type: UInt32 | serial: UInt32 | length: UInt32` followed by `length` bytes of payload.
/// Profiles whose header carries more (a version, a content type, addresses) put those
/// values in ``fields``; profiles with a checksum say in ``integrity`` whether it verified.
public struct Frame: Sendable, Hashable, CustomStringConvertible {
    /// What the frame is: a heartbeat, a notification or a request/response, by profile rules.
    public var type: UInt32
    /// Matches a response to its request; numbers heartbeats and, optionally, pushes.
    public var serial: UInt32
    /// The content bytes (UTF-8 JSON by convention in the seed profile), decompressed when
    /// the profile compresses bodies.
    public var payload: [UInt8]
    /// Header fields other than type, serial and length, by the names the profile's
    /// ``FrameLayout`` gives them: `version`, `contentType`, `destination`…
    ///
    /// Decoding fills in every named field of the layout. Encoding takes each named field
    /// from here, and the layout's default for any that is missing. Empty in the seed profile.
    public var fields: [String: UInt64]
    /// Whether the frame's checksum verified, in profiles that carry one.
    public var integrity: FrameIntegrity
    /// Bytes the decoder discarded before this frame while looking for its start marker:
    /// garbage on the line, or a damaged frame. Always 0 in profiles without resynchronisation.
    public var skippedBytes: Int

    /// Creates a frame.
    ///
    /// - Parameters:
    ///   - type: The frame type.
    ///   - serial: The serial number.
    ///   - payload: The content bytes.
    ///   - fields: Values for the profile's named header fields.
    public init(type: UInt32, serial: UInt32 = 0, payload: [UInt8] = [], fields: [String: UInt64] = [:]) {
        self.type = type
        self.serial = serial
        self.payload = payload
        self.fields = fields
        self.integrity = .unchecked
        self.skippedBytes = 0
    }

    /// `frame 0x402 serial 7, 12 bytes`.
    public var description: String {
        "frame \(hex(type)) serial \(serial), \(payload.count) bytes"
    }
}

/// What became of a frame's checksum.
public enum FrameIntegrity: Sendable, Hashable {
    /// The profile carries no checksum, or the frame was not decoded.
    case unchecked
    /// The checksum on the wire matches the one computed.
    case verified
    /// The checksum did not match, and the profile delivers such frames rather than
    /// rejecting them (``FrameLayout/ChecksumMismatch/report``).
    case failed
}
