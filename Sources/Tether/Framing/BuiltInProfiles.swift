extension FrameLayout {
    /// The seed format as a layout: `type u32 | serial u32 | length u32`, big-endian.
    /// ``Profile/seed`` uses the seed codec, which writes the same bytes.
    package static let seed = FrameLayout.header([.type(), .serial(), .length()])

    /// The seed's richer format: `type u32 | version u32 | serial u32 | contentType u32 |
    /// checksum (SHA-256 of the body, 32 bytes) | length u32`, big-endian: a 52-byte header.
    ///
    /// - Parameter onMismatch: What a decoder does with a frame whose checksum does not match.
    /// - Returns: The layout.
    package static func seedExtended(onChecksumMismatch onMismatch: ChecksumMismatch = .report) -> FrameLayout {
        .header(
            [.type(), .version(width: 4), .serial(), .contentType(width: 4), .checksum, .length()],
            checksum: Checksum(.sha256, coverage: .body, placement: .header, onMismatch: onMismatch)
        )
    }

    /// A framed format with a start marker and addresses: `marker u8 (0x7E) | destination u16 |
    /// source u16 | length u16` (a 7-byte header), the body, then a CRC-16 of header and body.
    ///
    /// The decoder resynchronises: garbage before a marker, a false marker or a damaged frame
    /// is skipped up to the next marker, and the count is reported in ``Frame/skippedBytes``.
    package static let marker = FrameLayout.header(
        [.marker(0x7E), .value("destination", width: 2), .value("source", width: 2), .length(width: 2)],
        checksum: Checksum(.crc16, coverage: .frame, placement: .trailer, onMismatch: .resynchronize),
        resynchronizes: true
    )

    /// A compact format with a compressed flag: `version u16 | functionCode u16 | compressed u8 |
    /// length u16`, big-endian (a 7-byte header), a JSON body, zlib-compressed when the flag is 1.
    package static let compact = FrameLayout.header(
        [.version(width: 2), .type(width: 2), .value("compressed", width: 1), .length(width: 2)],
        compression: Compression(flagField: "compressed", threshold: 256)
    )
}

extension Profile {
    /// The seed's richer format (a ``FrameLayout``): each frame
    /// carries a version, a content type and a SHA-256 of its body. A frame whose checksum
    /// does not match is delivered with ``Frame/integrity`` set to ``FrameIntegrity/failed``.
    /// Types, serials and heartbeats as in ``seed``.
    public static let seedExtended = seedExtended(onChecksumMismatch: .report)

    /// The seed's richer format, with a choice of what happens to a frame whose checksum does
    /// not match: delivered and marked (``FrameLayout/ChecksumMismatch/report``), or the end
    /// of the connection (``FrameLayout/ChecksumMismatch/reject``).
    ///
    /// - Parameter onMismatch: What a decoder does with a frame whose checksum does not match.
    /// - Returns: The profile, named `seed-extended`.
    public static func seedExtended(onChecksumMismatch onMismatch: FrameLayout.ChecksumMismatch) -> Profile {
        // The layout is a constant known to be valid.
        try! Profile(name: "seed-extended", layout: .seedExtended(onChecksumMismatch: onMismatch), heartbeatType: 0x1, classify: seedKind(of:))
    }

    /// Marker-framed frames with addresses and a CRC-16 trailer (a ``FrameLayout``).
    ///
    /// The format has no type and no serial: every frame is a request or a response, and a
    /// server answers in order. It has no heartbeats and no pushes. A response goes from the
    /// request's destination to its source: the server swaps the two addresses.
    public static let marker = try! Profile(
        name: "marker",
        layout: .marker,
        heartbeatType: nil,
        replyFields: { fields in
            var reply = fields
            reply["destination"] = fields["source"]
            reply["source"] = fields["destination"]
            return reply
        },
        classify: { $0 == 0x401 ? .message : .invalid }
    )

    /// A compact 7-byte header with a function code and zlib compression (a ``FrameLayout``).
    ///
    /// Function codes follow the seed's ranges (`0x1` heartbeat, `0x2…0x400` pushes, above
    /// `0x400` requests). The format has no serial: a server answers the requests of each
    /// function code in order. Bodies of 256 bytes or more are compressed when that makes
    /// them smaller; a body may be at most 65,535 bytes on the wire.
    public static let compact = try! Profile(name: "compact", layout: .compact, heartbeatType: 0x1, classify: seedKind(of:))

    /// Text lines ending in `\r\n` (``FrameLayout/delimited(by:messageType:heartbeatLine:heartbeatType:)``).
    ///
    /// Every line is a request or a response (type `0x401`), answered in order. No heartbeats
    /// and no pushes; ``lines(delimiter:heartbeatLine:)`` makes a variant with a heartbeat line.
    public static let lines = try! lines(delimiter: [0x0D, 0x0A], heartbeatLine: nil)

    /// Text lines ending in `delimiter`, optionally with a heartbeat line.
    ///
    /// - Parameters:
    ///   - delimiter: The bytes that end every line.
    ///   - heartbeatLine: A line that is a heartbeat, answered with the same line; `nil` for none.
    /// - Returns: The profile, named `lines`.
    /// - Throws: ``TetherError`` with ``TetherError/Code/invalidArgument`` when the delimiter
    ///   is empty or the heartbeat line contains it.
    public static func lines(delimiter: [UInt8], heartbeatLine: [UInt8]?) throws(TetherError) -> Profile {
        try Profile(
            name: "lines",
            layout: .delimited(by: delimiter, heartbeatLine: heartbeatLine),
            heartbeatType: heartbeatLine == nil ? nil : 0x1,
            classify: { type in
                switch type {
                case 0x401: .message
                case 0x1 where heartbeatLine != nil: .heartbeat
                default: .invalid
                }
            }
        )
    }
}
