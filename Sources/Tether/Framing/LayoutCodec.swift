/// A validated ``FrameLayout``, with every offset worked out once.
enum CompiledLayout {
    case header(CompiledHeader)
    case delimited(FrameLayout.Delimited)

    init(_ layout: FrameLayout) throws(TetherError) {
        switch layout.framing {
        case .header(let header): self = .header(try CompiledHeader(header))
        case .delimited(let delimited):
            func invalid(_ message: String) -> TetherError {
                TetherError(code: .invalidArgument, message: "invalid frame layout: \(message)")
            }
            guard !delimited.delimiter.isEmpty else { throw invalid("the delimiter is empty") }
            if let line = delimited.heartbeatLine {
                guard firstIndex(of: delimited.delimiter, in: line) == nil else {
                    throw invalid("the heartbeat line contains the delimiter")
                }
                guard delimited.heartbeatType != delimited.messageType else {
                    throw invalid("the heartbeat type and the message type are both \(hex(delimited.messageType))")
                }
            }
            self = .delimited(delimited)
        }
    }
}

/// Where one header field sits.
struct FieldSlot: Sendable {
    var offset: Int
    var width: Int
    var endianness: FrameBuffer.Endianness

    /// The field's value in `raw`, whose first byte is the header's first.
    func load(from raw: UnsafeRawBufferPointer, at start: Int) -> UInt64 {
        let at = start + offset
        switch width {
        case 1:
            return UInt64(raw[at])
        case 2:
            let wire = raw.loadUnaligned(fromByteOffset: at, as: UInt16.self)
            return UInt64(endianness == .big ? UInt16(bigEndian: wire) : UInt16(littleEndian: wire))
        case 4:
            let wire = raw.loadUnaligned(fromByteOffset: at, as: UInt32.self)
            return UInt64(endianness == .big ? UInt32(bigEndian: wire) : UInt32(littleEndian: wire))
        default:
            let wire = raw.loadUnaligned(fromByteOffset: at, as: UInt64.self)
            return endianness == .big ? UInt64(bigEndian: wire) : UInt64(littleEndian: wire)
        }
    }

    /// The largest value the field holds.
    var maximum: UInt64 { width >= 8 ? .max : (1 << UInt64(width * 8)) - 1 }
}

extension FrameBuffer {
    /// Appends `value` as a `width`-byte integer; the caller has checked that it fits.
    mutating func writeInteger(_ value: UInt64, width: Int, endianness: FrameBuffer.Endianness) {
        switch width {
        case 1: writeInteger(UInt8(truncatingIfNeeded: value))
        case 2: writeInteger(UInt16(truncatingIfNeeded: value), endianness: endianness)
        case 4: writeInteger(UInt32(truncatingIfNeeded: value), endianness: endianness)
        default: writeInteger(value, endianness: endianness)
        }
    }
}

struct CompiledHeader: Sendable {
    struct Value: Sendable {
        var name: String
        var slot: FieldSlot
        var defaultValue: UInt64
    }

    struct Constant: Sendable {
        var name: String
        var slot: FieldSlot
        var value: UInt64
    }

    /// Each field in wire order, as the encoder writes it.
    enum Step: Sendable {
        case type(FieldSlot)
        case serial(FieldSlot)
        case length(FieldSlot)
        case value(Int)
        case constant(FieldSlot, UInt64)
        case zeros(Int)
    }

    var steps: [Step] = []
    var headerLength = 0
    var trailerLength = 0
    var length = FieldSlot(offset: 0, width: 0, endianness: .big)
    /// What the length field counts beyond the body: header, trailer, adjustment.
    var lengthOverhead = 0
    var type: FieldSlot?
    var serial: FieldSlot?
    var impliedType: UInt32 = 0x401
    var values: [Value] = []
    var constants: [Constant] = []
    var checksum: FrameLayout.Checksum?
    /// Offset of the checksum in the header, when it is there.
    var checksumOffset: Int?
    var compression: FrameLayout.Compression?
    /// Index in ``values`` of the compression flag's field.
    var flagIndex: Int?
    var resynchronizes = false
    /// The start marker's bytes on the wire, when resynchronising.
    var marker: [UInt8] = []
    var maximumSkippedBytes = 0

    init(_ header: FrameLayout.Header) throws(TetherError) {
        func invalid(_ message: String) -> TetherError {
            TetherError(code: .invalidArgument, message: "invalid frame layout: \(message)")
        }
        guard !header.fields.isEmpty else { throw invalid("it has no fields") }
        var offset = 0
        var lengthSlot: FieldSlot?
        var names = Set<String>()
        for field in header.fields {
            var width = field.width
            if field.role == .checksum {
                guard let checksum = header.checksum, checksum.placement == .header else {
                    throw invalid("it has a checksum field but no checksum placed in the header")
                }
                guard checksumOffset == nil else { throw invalid("it has two checksum fields") }
                width = checksum.algorithm.width
                checksumOffset = offset
                steps.append(.zeros(width))
                offset += width
                continue
            }
            if field.role == .reserved {
                guard width > 0 else { throw invalid("the reserved field has width \(width)") }
                steps.append(.zeros(width))
                offset += width
                continue
            }
            guard [1, 2, 4, 8].contains(width) else {
                throw invalid("field \(field.name) is \(width) bytes wide; a field is 1, 2, 4 or 8")
            }
            let slot = FieldSlot(offset: offset, width: width, endianness: field.endianness)
            switch field.role {
            case .type:
                guard type == nil else { throw invalid("it has two type fields") }
                guard width <= 4 else { throw invalid("the type field is \(width) bytes; a type is at most 4") }
                type = slot
                steps.append(.type(slot))
            case .serial:
                guard serial == nil else { throw invalid("it has two serial fields") }
                guard width <= 4 else { throw invalid("the serial field is \(width) bytes; a serial is at most 4") }
                serial = slot
                steps.append(.serial(slot))
            case .length:
                guard lengthSlot == nil else { throw invalid("it has two length fields") }
                lengthSlot = slot
                steps.append(.length(slot))
            case .value(let defaultValue):
                guard names.insert(field.name).inserted else { throw invalid("two fields are named \(field.name)") }
                guard defaultValue <= slot.maximum else {
                    throw invalid("the default \(defaultValue) of field \(field.name) does not fit in \(counted(width, "byte"))")
                }
                steps.append(.value(values.count))
                values.append(Value(name: field.name, slot: slot, defaultValue: defaultValue))
            case .constant(let value):
                guard value <= slot.maximum else {
                    throw invalid("the constant \(hex(value)) of field \(field.name) does not fit in \(counted(width, "byte"))")
                }
                constants.append(Constant(name: field.name, slot: slot, value: value))
                steps.append(.constant(slot, value))
            case .checksum, .reserved:
                break
            }
            offset += width
        }
        guard let lengthSlot else { throw invalid("it has no length field") }
        length = lengthSlot
        headerLength = offset
        impliedType = header.impliedType
        if let checksum = header.checksum {
            if checksum.placement == .header {
                guard checksumOffset != nil else { throw invalid("the checksum goes in the header, but the header has no checksum field") }
            } else {
                trailerLength = checksum.algorithm.width
            }
            if checksum.onMismatch == .resynchronize, !header.resynchronizes {
                throw invalid("a checksum mismatch can resynchronise only in a layout that resynchronises")
            }
            self.checksum = checksum
        }
        lengthOverhead = header.lengthAdjustment
        if header.lengthIncludes.contains(.header) { lengthOverhead += headerLength }
        if header.lengthIncludes.contains(.trailer) { lengthOverhead += trailerLength }
        if let compression = header.compression {
            guard let index = values.firstIndex(where: { $0.name == compression.flagField }) else {
                throw invalid("the compression flag field \(compression.flagField) is not a value field of the layout")
            }
            guard compression.flagMask != 0, compression.flagMask <= values[index].slot.maximum else {
                throw invalid("the compression flag mask \(hex(compression.flagMask)) does not fit field \(compression.flagField)")
            }
            guard (-1...9).contains(compression.level) else { throw invalid("zlib level \(compression.level) is not -1…9") }
            guard compression.threshold >= 0 else { throw invalid("the compression threshold is negative") }
            flagIndex = index
            self.compression = compression
        }
        if header.resynchronizes {
            guard let first = constants.first, first.slot.offset == 0 else {
                throw invalid("a layout that resynchronises must start with a marker")
            }
            guard header.maximumSkippedBytes > 0 else { throw invalid("maximumSkippedBytes must be positive") }
            var bytes = FrameBuffer()
            bytes.writeInteger(first.value, width: first.slot.width, endianness: first.slot.endianness)
            marker = Array(bytes.readableBytesView)
            resynchronizes = true
            maximumSkippedBytes = header.maximumSkippedBytes
        }
    }
}

/// The codec a header ``FrameLayout`` describes.
struct HeaderCodec: FrameCodec {
    let layout: CompiledHeader
    let maximumPayloadLength: Int
    /// Bytes at the front of the buffer already known not to start a frame: garbage being
    /// skipped while resynchronising. They are consumed with the next frame, so `decode`
    /// returning `nil` never consumes anything, and they are bounded by the layout's
    /// `maximumSkippedBytes`.
    private var skipped = 0
    /// Whether a frame is its header and its body and nothing else: no checksum, no
    /// compression, no trailer, no resynchronisation. Such a frame's large body can be read
    /// into and written from its own storage (``SplitFrameCodec``).
    let isSplit: Bool

    init(layout: CompiledHeader, maximumPayloadLength: Int) {
        self.layout = layout
        self.maximumPayloadLength = maximumPayloadLength
        self.isSplit = layout.checksum == nil && layout.compression == nil && !layout.resynchronizes && layout.trailerLength == 0
    }

    private enum Step {
        case needMore
        case skip(Int)
        case frame(Frame, Int)
    }

    mutating func decode(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame? {
        while true {
            let from = skipped
            let step = try buffer.withReadableBytes { (raw) throws(TetherError) -> Step in
                try examine(raw, at: from)
            }
            switch step {
            case .needMore:
                return nil
            case .skip(let count):
                skipped += count
                if skipped > layout.maximumSkippedBytes {
                    throw TetherError(
                        code: .protocolError,
                        message: "no frame start (\(hexBytes(layout.marker))) in \(skipped) bytes, over the \(describeBytes(layout.maximumSkippedBytes)) that may be skipped"
                    )
                }
            case .frame(var frame, let total):
                buffer.moveReaderIndex(forwardBy: skipped + total)
                frame.skippedBytes = skipped
                skipped = 0
                return frame
            }
        }
    }

    mutating func decodeLast(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame? {
        if let frame = try decode(&buffer) { return frame }
        if layout.resynchronizes {
            // No more bytes will come: a marker whose frame cannot complete was a false one.
            // Look past it for a frame that is whole.
            while skipped < buffer.readableBytes {
                skipped += 1
                if let frame = try decode(&buffer) { return frame }
            }
        }
        guard buffer.readableBytes > 0 else { return nil }
        if skipped == buffer.readableBytes {
            throw TetherError(code: .truncatedFrame, message: "stream ended after \(skipped) bytes that hold no frame")
        }
        let garbage = skipped > 0 ? " after \(skipped) skipped bytes" : ""
        throw TetherError(
            code: .truncatedFrame,
            message: "stream ended inside a frame: \(buffer.readableBytes - skipped) bytes of an incomplete frame\(garbage)"
        )
    }

    /// Looks at the bytes from `start`: a whole frame, a need for more bytes, or bytes to skip.
    private func examine(_ raw: UnsafeRawBufferPointer, at start: Int) throws(TetherError) -> Step {
        let available = raw.count - start
        if layout.resynchronizes {
            let marker = layout.marker
            guard let found = firstIndex(of: marker, in: UnsafeRawBufferPointer(rebasing: raw[start...])) else {
                // Keep a tail that could be the first bytes of a marker.
                let skip = available - (marker.count - 1)
                return skip > 0 ? .skip(skip) : .needMore
            }
            if found > 0 { return .skip(found) }
        }
        guard available >= layout.headerLength else { return .needMore }
        for constant in layout.constants {
            let found = constant.slot.load(from: raw, at: start)
            if found != constant.value {
                if layout.resynchronizes { return .skip(1) }
                throw TetherError(
                    code: .protocolError,
                    message: "bad \(constant.name): expected \(hex(constant.value)), found \(hex(found)) at byte \(constant.slot.offset) of the header"
                )
            }
        }
        let declared = layout.length.load(from: raw, at: start)
        let body = declared > UInt64(Int32.max) ? Int.max : Int(declared) - layout.lengthOverhead
        if body < 0 {
            if layout.resynchronizes { return .skip(1) }
            throw TetherError(
                code: .protocolError,
                message: "length field says \(declared), less than the \(layout.lengthOverhead) bytes of header and trailer it counts"
            )
        }
        if body > maximumPayloadLength {
            if layout.resynchronizes { return .skip(1) }
            let shown = body == .max ? String(declared) : String(body)
            throw TetherError(
                code: .frameTooLarge,
                message: "frame length \(shown) exceeds the \(describeBytes(maximumPayloadLength)) limit"
            )
        }
        let total = layout.headerLength + body + layout.trailerLength
        guard available >= total else { return .needMore }
        let bodyStart = start + layout.headerLength
        let bodyBytes = UnsafeRawBufferPointer(rebasing: raw[bodyStart..<bodyStart + body])

        var integrity = FrameIntegrity.unchecked
        if let checksum = layout.checksum {
            let onWire = layout.checksumOffset.map { start + $0 } ?? bodyStart + body
            let width = checksum.algorithm.width
            let expected = UnsafeRawBufferPointer(rebasing: raw[onWire..<onWire + width])
            let computed = checksumOf(header: UnsafeRawBufferPointer(rebasing: raw[start..<bodyStart]), body: bodyBytes)
            if computed.elementsEqual(expected) {
                integrity = .verified
            } else {
                switch checksum.onMismatch {
                case .resynchronize:
                    return .skip(1)
                case .report:
                    integrity = .failed
                case .reject:
                    throw TetherError(
                        code: .protocolError,
                        message: "\(checksum.algorithm) mismatch in a frame of \(body) bytes: \(hexBytes(expected)) on the wire, \(hexBytes(computed)) computed"
                    )
                }
            }
        }

        var (frame, compressed) = headerFrame(raw, at: start)
        let type = frame.type
        let payload: [UInt8]
        if compressed, let compression = layout.compression {
            do {
                payload = try Deflate.inflate(bodyBytes, limit: compression.maximumInflatedLength ?? maximumPayloadLength)
            } catch {
                throw TetherError(code: error.code, message: "frame \(hex(type)): \(error.message)", underlying: error)
            }
        } else {
            payload = Array(bodyBytes)
        }
        frame.payload = payload
        frame.integrity = integrity
        return .frame(frame, total)
    }

    /// The frame the header at `start` describes, without its payload, and whether its
    /// compression flag is set.
    private func headerFrame(_ raw: UnsafeRawBufferPointer, at start: Int) -> (frame: Frame, compressed: Bool) {
        let type = layout.type.map { UInt32(truncatingIfNeeded: $0.load(from: raw, at: start)) } ?? layout.impliedType
        let serial = layout.serial.map { UInt32(truncatingIfNeeded: $0.load(from: raw, at: start)) } ?? 0
        var fields: [String: UInt64] = [:]
        var compressed = false
        if !layout.values.isEmpty {
            fields.reserveCapacity(layout.values.count)
            for (index, value) in layout.values.enumerated() {
                var found = value.slot.load(from: raw, at: start)
                if index == layout.flagIndex, let compression = layout.compression {
                    // The payload handed on is inflated: the flag describes only the wire.
                    compressed = found & compression.flagMask != 0
                    found &= ~compression.flagMask
                }
                fields[value.name] = found
            }
        }
        return (Frame(type: type, serial: serial, fields: fields), compressed)
    }

    /// The checksum of a frame whose header and body are given, by the layout's coverage.
    private func checksumOf(header: UnsafeRawBufferPointer, body: UnsafeRawBufferPointer) -> [UInt8] {
        guard let checksum = layout.checksum else { return [] }
        var summer = Checksummer(checksum.algorithm)
        if checksum.coverage == .frame {
            if let offset = layout.checksumOffset {
                summer.update(UnsafeRawBufferPointer(rebasing: header[..<offset]))
                summer.update(UnsafeRawBufferPointer(rebasing: header[(offset + checksum.algorithm.width)...]))
            } else {
                summer.update(header)
            }
        }
        summer.update(body)
        return summer.finalize()
    }

    func encode(_ frame: Frame, into buffer: inout FrameBuffer) throws(TetherError) {
        var compressedBody: [UInt8]?
        if let compression = layout.compression, frame.payload.count >= compression.threshold {
            let inflatedLimit = compression.maximumInflatedLength ?? maximumPayloadLength
            guard frame.payload.count <= inflatedLimit else {
                throw .payloadOverLimit(type: frame.type, bytes: frame.payload.count, limit: inflatedLimit)
            }
            let packed = try frame.payload.withUnsafeBytes { raw in
                Result { () throws(TetherError) in try Deflate.compress(raw, level: compression.level) }
            }.get()
            if packed.count < frame.payload.count { compressedBody = packed }
        }
        let bodyLength = compressedBody?.count ?? frame.payload.count
        let declared = try declaredLength(ofBody: bodyLength, frameType: frame.type)
        let total = layout.headerLength + bodyLength + layout.trailerLength
        buffer.reserveWritable(total)
        let start = buffer.writerIndex
        do {
            try writeHeader(of: frame, declared: declared, compressed: compressedBody != nil, into: &buffer)
        } catch {
            // Nothing of a frame that cannot be encoded may stay: the next would follow it.
            buffer.discardWritten(after: start)
            throw error
        }
        if let compressedBody {
            buffer.writeBytes(compressedBody)
        } else {
            buffer.writeBytes(frame.payload)
        }
        buffer.writeZeros(layout.trailerLength)
        if let checksum = layout.checksum {
            let headerLength = layout.headerLength
            let sum = buffer.storage.withUnsafeBytes { raw in
                checksumOf(
                    header: UnsafeRawBufferPointer(rebasing: raw[start..<start + headerLength]),
                    body: UnsafeRawBufferPointer(rebasing: raw[start + headerLength..<start + headerLength + bodyLength])
                )
            }
            let at = start + (layout.checksumOffset ?? headerLength + bodyLength)
            buffer.storage.withUnsafeMutableBytes { raw in
                UnsafeMutableRawBufferPointer(rebasing: raw[at..<at + checksum.algorithm.width]).copyBytes(from: sum)
            }
        }
    }

    /// Appends the header's fields in wire order, the length field saying `declared`.
    private func writeHeader(of frame: Frame, declared: Int, compressed: Bool, into buffer: inout FrameBuffer) throws(TetherError) {
        func fits(_ value: UInt64, _ slot: FieldSlot, _ what: String) throws(TetherError) {
            guard value <= slot.maximum else {
                throw TetherError(
                    code: .encodingFailed,
                    message: "frame \(hex(frame.type)): \(what) \(value) does not fit a \(slot.width)-byte field"
                )
            }
        }
        for step in layout.steps {
            switch step {
            case .type(let slot):
                try fits(UInt64(frame.type), slot, "type")
                buffer.writeInteger(UInt64(frame.type), width: slot.width, endianness: slot.endianness)
            case .serial(let slot):
                try fits(UInt64(frame.serial), slot, "serial")
                buffer.writeInteger(UInt64(frame.serial), width: slot.width, endianness: slot.endianness)
            case .length(let slot):
                buffer.writeInteger(UInt64(declared), width: slot.width, endianness: slot.endianness)
            case .value(let index):
                let field = layout.values[index]
                var value = frame.fields[field.name] ?? field.defaultValue
                if index == layout.flagIndex, let compression = layout.compression {
                    value &= ~compression.flagMask
                    if compressed { value |= compression.flagMask }
                }
                try fits(value, field.slot, field.name)
                buffer.writeInteger(value, width: field.slot.width, endianness: field.slot.endianness)
            case .constant(let slot, let value):
                buffer.writeInteger(value, width: slot.width, endianness: slot.endianness)
            case .zeros(let count):
                buffer.writeZeros(count)
            }
        }
    }
}

extension HeaderCodec: SplitFrameCodec {
    func header(in buffer: FrameBuffer) -> (frame: Frame, headerLength: Int, bodyLength: Int)? {
        guard isSplit, buffer.readableBytes >= layout.headerLength else { return nil }
        return buffer.withReadableBytes { raw -> (frame: Frame, headerLength: Int, bodyLength: Int)? in
            for constant in layout.constants where constant.slot.load(from: raw, at: 0) != constant.value { return nil }
            let declared = layout.length.load(from: raw, at: 0)
            guard declared <= UInt64(Int32.max) else { return nil }
            let body = Int(declared) - layout.lengthOverhead
            guard body >= 0, body <= maximumPayloadLength else { return nil }
            return (headerFrame(raw, at: 0).frame, layout.headerLength, body)
        }
    }

    /// The value of the length field for a body of `bodyLength` bytes, once the body is
    /// within the payload limit and the value fits the field.
    private func declaredLength(ofBody bodyLength: Int, frameType: UInt32) throws(TetherError) -> Int {
        guard bodyLength <= maximumPayloadLength else {
            throw .payloadOverLimit(type: frameType, bytes: bodyLength, limit: maximumPayloadLength)
        }
        let declared = bodyLength + layout.lengthOverhead
        guard declared >= 0, UInt64(declared) <= layout.length.maximum else {
            throw TetherError(
                code: .frameTooLarge,
                message: "frame \(hex(frameType)) payload of \(bodyLength) bytes does not fit a \(layout.length.width)-byte length field"
            )
        }
        return declared
    }

    func encodeHeader(of frame: Frame, bodyLength: Int, into buffer: inout FrameBuffer) throws(TetherError) -> Bool {
        guard isSplit else { return false }
        let declared = try declaredLength(ofBody: bodyLength, frameType: frame.type)
        buffer.reserveWritable(layout.headerLength)
        let start = buffer.writerIndex
        do {
            try writeHeader(of: frame, declared: declared, compressed: false, into: &buffer)
        } catch {
            buffer.discardWritten(after: start)
            throw error
        }
        return true
    }
}

/// The codec a delimited ``FrameLayout`` describes.
struct DelimitedCodec: FrameCodec {
    let layout: FrameLayout.Delimited
    let maximumLineLength: Int
    /// Bytes at the front of the buffer already searched without finding a delimiter, so a
    /// long line arriving in many reads is scanned once.
    private var searched = 0

    init(layout: FrameLayout.Delimited, maximumLineLength: Int) {
        self.layout = layout
        self.maximumLineLength = maximumLineLength
    }

    mutating func decode(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame? {
        let delimiter = layout.delimiter
        let from = max(0, searched - (delimiter.count - 1))
        let found = buffer.withReadableBytes { raw in
            firstIndex(of: delimiter, in: UnsafeRawBufferPointer(rebasing: raw[from...])).map { $0 + from }
        }
        guard let end = found else {
            searched = buffer.readableBytes
            if searched > maximumLineLength + delimiter.count - 1 {
                throw TetherError(
                    code: .frameTooLarge,
                    message: "no \(describeDelimiter) in \(searched) bytes: a line is limited to \(describeBytes(maximumLineLength))"
                )
            }
            return nil
        }
        guard end <= maximumLineLength else {
            throw TetherError(
                code: .frameTooLarge,
                message: "line of \(end) bytes exceeds the \(describeBytes(maximumLineLength)) limit"
            )
        }
        searched = 0
        let line = buffer.readBytes(end) ?? []
        buffer.moveReaderIndex(forwardBy: delimiter.count)
        if let heartbeat = layout.heartbeatLine, line == heartbeat {
            return Frame(type: layout.heartbeatType)
        }
        return Frame(type: layout.messageType, payload: line)
    }

    func encode(_ frame: Frame, into buffer: inout FrameBuffer) throws(TetherError) {
        if let heartbeat = layout.heartbeatLine {
            if frame.type == layout.heartbeatType {
                buffer.writeBytes(heartbeat)
                buffer.writeBytes(layout.delimiter)
                return
            }
            guard frame.payload != heartbeat else {
                throw TetherError(code: .encodingFailed, message: "a line that is the heartbeat line cannot be sent as frame \(hex(frame.type))")
            }
        }
        guard frame.payload.count <= maximumLineLength else {
            throw TetherError(
                code: .frameTooLarge,
                message: "line of \(frame.payload.count) bytes exceeds the \(describeBytes(maximumLineLength)) limit"
            )
        }
        let inside = frame.payload.withUnsafeBytes { firstIndex(of: layout.delimiter, in: $0) }
        if let inside {
            throw TetherError(code: .encodingFailed, message: "a line cannot contain its delimiter: \(describeDelimiter) at byte \(inside)")
        }
        buffer.reserveWritable(frame.payload.count + layout.delimiter.count)
        buffer.writeBytes(frame.payload)
        buffer.writeBytes(layout.delimiter)
    }

    private var describeDelimiter: String {
        layout.delimiter == [0x0D, 0x0A] ? "\\r\\n" : layout.delimiter == [0x0A] ? "\\n" : hexBytes(layout.delimiter)
    }
}

/// Where `needle` first occurs in `haystack`.
func firstIndex(of needle: [UInt8], in haystack: UnsafeRawBufferPointer) -> Int? {
    guard let first = needle.first, haystack.count >= needle.count else { return nil }
    let last = haystack.count - needle.count
    var from = 0
    while let index = Memory.firstIndex(of: first, in: haystack, from: from), index <= last {
        var k = 1
        while k < needle.count, haystack[index + k] == needle[k] { k += 1 }
        if k == needle.count { return index }
        from = index + 1
    }
    return nil
}

/// Where `needle` first occurs in `haystack`.
func firstIndex(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
    haystack.withUnsafeBytes { firstIndex(of: needle, in: $0) }
}

/// `0x7E 0x7E`, for messages.
func hexBytes<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
    var text = "0x"
    for byte in bytes {
        let digits = String(byte, radix: 16)
        text += digits.count == 1 ? "0" + digits : digits
    }
    return text
}
