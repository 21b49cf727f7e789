/// A description of a wire format, from which Tether builds a correct, bounded ``FrameCodec``.
///
/// Most binary protocols put a fixed header before each body: a start marker, a type, a
/// serial, a version, a length, perhaps a checksum. Describe that header field by field
/// with ``header(_:lengthIncludes:lengthAdjustment:checksum:compression:resynchronizes:maximumSkippedBytes:impliedType:)``,
/// or describe a text protocol whose frames end with a delimiter with
/// ``delimited(by:messageType:heartbeatLine:heartbeatType:)``. A ``Profile`` made with
/// ``Profile/init(name:layout:heartbeatType:correlation:replyFields:classify:)`` then has a codec that handles partial and coalesced reads, rejects an oversize length
/// before it waits for the bytes, verifies checksums, inflates compressed bodies with a
/// hard limit and, for formats with a start marker, resynchronises after garbage.
///
/// ```swift
/// // version u16 | functionCode u16 | compressed u8 | length u16, big-endian
/// let layout = FrameLayout.header([
///     .version(width: 2),
///     .type(width: 2),
///     .value("compressed", width: 1),
///     .length(width: 2),
/// ], compression: .init(flagField: "compressed"))
/// ```
public struct FrameLayout: Sendable, Hashable {
    /// One field of a frame header.
    public struct Field: Sendable, Hashable {
        /// What a header field holds.
        package enum Role: Sendable, Hashable {
            /// The frame type (``Frame/type``); at most 4 bytes.
            case type
            /// The serial that matches a response to its request (``Frame/serial``); at most 4 bytes.
            case serial
            /// The length of the frame, from which the decoder knows where it ends.
            case length
            /// A value carried in ``Frame/fields`` under the field's name, with the value
            /// written when a frame does not set it.
            case value(default: UInt64)
            /// A constant, such as a start marker: written as is, and checked when decoding.
            case constant(UInt64)
            /// Where the checksum goes when ``Checksum/placement`` is ``Checksum/Placement/header``;
            /// its width is the algorithm's.
            case checksum
            /// Bytes written as zeros and ignored when decoding.
            case reserved
        }

        /// The field's name: the key in ``Frame/fields`` for value fields, and the name used in messages.
        package var name: String
        /// Size on the wire in bytes: 1, 2, 4 or 8 (a checksum field takes its algorithm's width).
        package var width: Int
        /// Byte order on the wire.
        package var endianness: FrameBuffer.Endianness
        /// What the field holds.
        package var role: Role

        /// Creates a field.
        ///
        /// - Parameters:
        ///   - name: The field's name.
        ///   - width: Size on the wire in bytes: 1, 2, 4 or 8.
        ///   - endianness: Byte order on the wire.
        ///   - role: What the field holds.
        package init(name: String, width: Int, endianness: FrameBuffer.Endianness = .big, role: Role) {
            self.name = name
            self.width = width
            self.endianness = endianness
            self.role = role
        }

        /// The frame type.
        ///
        /// - Parameters:
        ///   - width: 1, 2 or 4 bytes.
        ///   - endianness: Byte order on the wire.
        /// - Returns: The field.
        public static func type(width: Int = 4, endianness: FrameBuffer.Endianness = .big) -> Field {
            Field(name: "type", width: width, endianness: endianness, role: .type)
        }

        /// The serial.
        ///
        /// - Parameters:
        ///   - width: 1, 2 or 4 bytes. A narrower field makes serials wrap sooner.
        ///   - endianness: Byte order on the wire.
        /// - Returns: The field.
        public static func serial(width: Int = 4, endianness: FrameBuffer.Endianness = .big) -> Field {
            Field(name: "serial", width: width, endianness: endianness, role: .serial)
        }

        /// The length; what it counts is set by the layout's `lengthIncludes` and `lengthAdjustment`.
        ///
        /// - Parameters:
        ///   - width: 1, 2, 4 or 8 bytes.
        ///   - endianness: Byte order on the wire.
        /// - Returns: The field.
        public static func length(width: Int = 4, endianness: FrameBuffer.Endianness = .big) -> Field {
            Field(name: "length", width: width, endianness: endianness, role: .length)
        }

        /// A named value carried in ``Frame/fields``.
        ///
        /// - Parameters:
        ///   - name: The key in ``Frame/fields``.
        ///   - width: 1, 2, 4 or 8 bytes.
        ///   - endianness: Byte order on the wire.
        ///   - defaultValue: Written when a frame does not set the field.
        /// - Returns: The field.
        public static func value(_ name: String, width: Int, endianness: FrameBuffer.Endianness = .big, default defaultValue: UInt64 = 0) -> Field {
            Field(name: name, width: width, endianness: endianness, role: .value(default: defaultValue))
        }

        /// A protocol version, carried in ``Frame/fields`` as `version`.
        ///
        /// - Parameters:
        ///   - width: 1, 2, 4 or 8 bytes.
        ///   - endianness: Byte order on the wire.
        ///   - defaultValue: The version written when a frame does not set one.
        /// - Returns: The field.
        public static func version(width: Int, endianness: FrameBuffer.Endianness = .big, default defaultValue: UInt64 = 1) -> Field {
            .value("version", width: width, endianness: endianness, default: defaultValue)
        }

        /// A content type, carried in ``Frame/fields`` as `contentType`.
        ///
        /// - Parameters:
        ///   - width: 1, 2, 4 or 8 bytes.
        ///   - endianness: Byte order on the wire.
        ///   - defaultValue: The content type written when a frame does not set one.
        /// - Returns: The field.
        public static func contentType(width: Int, endianness: FrameBuffer.Endianness = .big, default defaultValue: UInt64 = 0) -> Field {
            .value("contentType", width: width, endianness: endianness, default: defaultValue)
        }

        /// Flag bits, carried in ``Frame/fields`` as `flags`; ``Compression`` can own one of them.
        ///
        /// - Parameters:
        ///   - width: 1, 2, 4 or 8 bytes.
        ///   - endianness: Byte order on the wire.
        /// - Returns: The field.
        public static func flags(width: Int, endianness: FrameBuffer.Endianness = .big) -> Field {
            .value("flags", width: width, endianness: endianness, default: 0)
        }

        /// A start marker: a constant that begins every frame. With `resynchronizes` the
        /// decoder looks for it after garbage.
        ///
        /// - Parameters:
        ///   - value: The marker.
        ///   - width: 1, 2, 4 or 8 bytes.
        ///   - endianness: Byte order on the wire.
        /// - Returns: The field.
        public static func marker(_ value: UInt64, width: Int = 1, endianness: FrameBuffer.Endianness = .big) -> Field {
            Field(name: "marker", width: width, endianness: endianness, role: .constant(value))
        }

        /// A constant checked on every frame, such as a magic number.
        ///
        /// - Parameters:
        ///   - name: A name for messages.
        ///   - value: The constant.
        ///   - width: 1, 2, 4 or 8 bytes.
        ///   - endianness: Byte order on the wire.
        /// - Returns: The field.
        public static func constant(_ name: String, _ value: UInt64, width: Int, endianness: FrameBuffer.Endianness = .big) -> Field {
            Field(name: name, width: width, endianness: endianness, role: .constant(value))
        }

        /// The place of a checksum in the header (``Checksum/Placement/header``).
        public static var checksum: Field {
            Field(name: "checksum", width: 0, role: .checksum)
        }

        /// Padding: written as zeros, ignored when read.
        ///
        /// - Parameter width: Bytes of padding.
        /// - Returns: The field.
        public static func reserved(width: Int) -> Field {
            Field(name: "reserved", width: width, role: .reserved)
        }
    }

    /// What the length field counts besides the body.
    public struct LengthCoverage: OptionSet, Sendable, Hashable {
        /// The raw value.
        public var rawValue: UInt8
        /// Creates a set from its raw value.
        ///
        /// - Parameter rawValue: The raw value.
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// The length counts the header too.
        public static let header = LengthCoverage(rawValue: 1)
        /// The length counts a checksum trailer too.
        public static let trailer = LengthCoverage(rawValue: 2)
    }

    /// What a decoder does with a frame whose checksum does not match.
    public enum ChecksumMismatch: Sendable, Hashable {
        /// End the connection with a protocol error that names the frame and both values.
        case reject
        /// Deliver the frame with ``Frame/integrity`` set to ``FrameIntegrity/failed``.
        case report
        /// Treat the frame as damaged: skip its start marker and look for the next one. The
        /// bytes count in the next frame's ``Frame/skippedBytes``. Needs a resynchronising layout.
        case resynchronize
    }

    /// A checksum each frame carries.
    public struct Checksum: Sendable, Hashable {
        /// Which bytes the checksum covers.
        public enum Coverage: Sendable, Hashable {
            /// The body as it is on the wire (compressed, when it is).
            case body
            /// The header (without the checksum field itself) and the body.
            case frame
        }

        /// Where the checksum is.
        public enum Placement: Sendable, Hashable {
            /// In the header, at the layout's ``Field/checksum`` field.
            case header
            /// After the body.
            case trailer
        }

        /// The algorithm, which also sets the width on the wire.
        package var algorithm: ChecksumAlgorithm
        /// Which bytes it covers.
        package var coverage: Coverage
        /// Where it is.
        package var placement: Placement
        /// What a decoder does when it does not match.
        package var onMismatch: ChecksumMismatch

        /// Creates a checksum description.
        ///
        /// - Parameters:
        ///   - algorithm: The algorithm.
        ///   - coverage: Which bytes it covers.
        ///   - placement: Where it is.
        ///   - onMismatch: What a decoder does when it does not match.
        public init(_ algorithm: ChecksumAlgorithm, coverage: Coverage = .body, placement: Placement = .trailer, onMismatch: ChecksumMismatch = .reject) {
            self.algorithm = algorithm
            self.coverage = coverage
            self.placement = placement
            self.onMismatch = onMismatch
        }
    }

    /// zlib compression of bodies, announced by a flag bit in a header field.
    public struct Compression: Sendable, Hashable {
        /// The value field holding the flag.
        package var flagField: String
        /// The flag's bits in that field.
        package var flagMask: UInt64
        /// Bodies of at least this many bytes are compressed, when that makes them smaller.
        package var threshold: Int
        /// The zlib level, 1 (fastest) to 9 (smallest), or -1 for zlib's default (6).
        package var level: Int32
        /// The most bytes a compressed body may inflate to; `nil` uses the codec's
        /// maximum payload length. A body that would inflate past it ends the connection
        /// with ``TetherError/Code/frameTooLarge`` before that memory is used.
        package var maximumInflatedLength: Int?

        /// Creates a compression description.
        ///
        /// - Parameters:
        ///   - flagField: The value field holding the flag.
        ///   - flagMask: The flag's bits in that field.
        ///   - threshold: The smallest body that is compressed.
        ///   - level: The zlib level, or -1 for the default.
        ///   - maximumInflatedLength: The limit on inflated bodies; `nil` for the maximum payload length.
        public init(flagField: String, flagMask: UInt64 = 1, threshold: Int = 512, level: Int32 = -1, maximumInflatedLength: Int? = nil) {
            self.flagField = flagField
            self.flagMask = flagMask
            self.threshold = threshold
            self.level = level
            self.maximumInflatedLength = maximumInflatedLength
        }
    }

    enum Framing: Sendable, Hashable {
        case header(Header)
        case delimited(Delimited)
    }

    struct Header: Sendable, Hashable {
        var fields: [Field]
        var lengthIncludes: LengthCoverage
        var lengthAdjustment: Int
        var checksum: Checksum?
        var compression: Compression?
        var resynchronizes: Bool
        var maximumSkippedBytes: Int
        var impliedType: UInt32
    }

    struct Delimited: Sendable, Hashable {
        var delimiter: [UInt8]
        var messageType: UInt32
        var heartbeatLine: [UInt8]?
        var heartbeatType: UInt32
    }

    let framing: Framing

    /// A header-and-body format.
    ///
    /// The decoder reads the header, takes the body's length from the length field, and
    /// checks that length against its limit before it waits for the body.
    ///
    /// - Parameters:
    ///   - fields: The header fields, in wire order. Exactly one is a ``Field/length(width:endianness:)``.
    ///   - lengthIncludes: What the length counts besides the body.
    ///   - lengthAdjustment: A constant added to the length on the wire beyond that, for formats
    ///     whose length counts something else (it may be negative).
    ///   - checksum: A checksum each frame carries.
    ///   - compression: zlib compression of bodies, announced by a flag.
    ///   - resynchronizes: After bytes that are not a frame (a wrong marker, a length that cannot
    ///     be, a damaged frame), skip to the next start marker instead of ending the connection.
    ///     Needs a ``Field/marker(_:width:endianness:)`` as the first field.
    ///   - maximumSkippedBytes: With `resynchronizes`, how many bytes may be skipped in a row
    ///     before the connection ends with a protocol error.
    ///   - impliedType: The ``Frame/type`` of decoded frames when the header has no type field.
    /// - Returns: The layout.
    public static func header(
        _ fields: [Field],
        lengthIncludes: LengthCoverage = [],
        lengthAdjustment: Int = 0,
        checksum: Checksum? = nil,
        compression: Compression? = nil,
        resynchronizes: Bool = false,
        maximumSkippedBytes: Int = 64 << 10,
        impliedType: UInt32 = 0x401
    ) -> FrameLayout {
        FrameLayout(framing: .header(Header(
            fields: fields,
            lengthIncludes: lengthIncludes,
            lengthAdjustment: lengthAdjustment,
            checksum: checksum,
            compression: compression,
            resynchronizes: resynchronizes,
            maximumSkippedBytes: maximumSkippedBytes,
            impliedType: impliedType
        )))
    }

    /// A format whose frames end with a delimiter, such as text lines ending in `\r\n`.
    ///
    /// A frame's payload is the bytes before the delimiter. Frames carry no type or serial:
    /// decoded frames get `messageType`, or `heartbeatType` when the line is `heartbeatLine`.
    ///
    /// - Parameters:
    ///   - delimiter: The bytes that end every frame.
    ///   - messageType: The ``Frame/type`` of decoded frames.
    ///   - heartbeatLine: A line that is a heartbeat, answered with the same line; `nil` for none.
    ///   - heartbeatType: The ``Frame/type`` of heartbeat lines.
    /// - Returns: The layout.
    public static func delimited(
        by delimiter: [UInt8] = [0x0D, 0x0A],
        messageType: UInt32 = 0x401,
        heartbeatLine: [UInt8]? = nil,
        heartbeatType: UInt32 = 0x1
    ) -> FrameLayout {
        FrameLayout(framing: .delimited(Delimited(
            delimiter: delimiter,
            messageType: messageType,
            heartbeatLine: heartbeatLine,
            heartbeatType: heartbeatType
        )))
    }

    /// The header fields in wire order; empty for a delimited layout.
    package var fields: [Field] {
        if case .header(let header) = framing { return header.fields }
        return []
    }

    /// The delimiter, for a delimited layout.
    package var delimiter: [UInt8]? {
        if case .delimited(let delimited) = framing { return delimited.delimiter }
        return nil
    }

    /// The header's size in bytes; 0 for a delimited layout.
    package var headerLength: Int {
        guard case .header(let header) = framing else { return 0 }
        return header.fields.reduce(0) { $0 + ($1.role == .checksum ? (header.checksum?.algorithm.width ?? 0) : $1.width) }
    }

    /// The checksum the frames carry, if any.
    package var checksum: Checksum? {
        if case .header(let header) = framing { return header.checksum }
        return nil
    }

    /// The compression of bodies, if any.
    package var compression: Compression? {
        if case .header(let header) = framing { return header.compression }
        return nil
    }

    /// Whether frames carry a serial on the wire.
    package var carriesSerial: Bool { fields.contains { $0.role == .serial } }

    /// Whether frames carry a type on the wire.
    package var carriesType: Bool { fields.contains { $0.role == .type } }

    /// The largest serial the wire can carry: `UInt32.max` for a 4-byte serial field.
    package var maximumSerial: UInt32 {
        guard let field = fields.first(where: { $0.role == .serial }), field.width < 4 else { return .max }
        return UInt32((1 << (field.width * 8)) - 1)
    }

    /// Checks that the layout can work: exactly one length field, widths that exist, names
    /// that are unique, a checksum field exactly when the checksum goes in the header, a
    /// compression flag that names a value field, a marker first when resynchronising.
    ///
    /// - Throws: ``TetherError`` with ``TetherError/Code/invalidArgument`` that says what is wrong.
    package func validate() throws(TetherError) {
        _ = try CompiledLayout(self)
    }

    /// Makes a codec for one connection.
    ///
    /// - Parameter maximumPayloadLength: The largest body accepted or sent, in bytes (for a
    ///   compressed body: on the wire, and inflated unless ``Compression/maximumInflatedLength`` says otherwise).
    /// - Returns: A fresh codec.
    /// - Throws: ``TetherError`` with ``TetherError/Code/invalidArgument`` when the layout is
    ///   not valid (see ``validate()``).
    package func makeCodec(maximumPayloadLength: Int = 16 << 20) throws(TetherError) -> any FrameCodec {
        switch try CompiledLayout(self) {
        case .header(let compiled):
            HeaderCodec(layout: compiled, maximumPayloadLength: maximumPayloadLength)
        case .delimited(let delimited):
            DelimitedCodec(layout: delimited, maximumLineLength: maximumPayloadLength)
        }
    }
}
