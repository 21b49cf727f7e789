import Testing
@testable import Tether

/// Bytes from hex digits; spaces and `|` separate fields for reading.
func fromHex(_ text: String) -> [UInt8] {
    let digits = Array(text.filter { $0.isHexDigit })
    precondition(digits.count % 2 == 0, "odd number of hex digits")
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
}

/// Encodes frames with a fresh codec of `profile`.
func encoded(_ frames: [Frame], _ profile: Profile, maximum: Int = 1 << 20) throws -> [UInt8] {
    let codec = profile.makeCodec(maximum)
    var buffer = FrameBuffer()
    for frame in frames { try codec.encode(frame, into: &buffer) }
    return Array(buffer.readableBytesView)
}

/// Feeds `chunks` one after the other to a fresh codec of `profile`, decoding after each,
/// then ends the stream.
func decoded(_ chunks: [ArraySlice<UInt8>], _ profile: Profile, maximum: Int = 1 << 20) throws(TetherError) -> [Frame] {
    var codec = profile.makeCodec(maximum)
    var buffer = FrameBuffer()
    var frames: [Frame] = []
    for chunk in chunks {
        buffer.writeBytes(chunk)
        while let frame = try codec.decode(&buffer) { frames.append(frame) }
    }
    while let frame = try codec.decodeLast(&buffer) { frames.append(frame) }
    return frames
}

/// The error a decode of `bytes` ends with.
func decodeError(_ bytes: [UInt8], _ profile: Profile, maximum: Int = 1 << 20) -> TetherError? {
    do {
        _ = try decoded([bytes[...]], profile, maximum: maximum)
        return nil
    } catch {
        return error
    }
}

@Suite("Frame layouts and the seed profiles")
struct FrameLayoutTests {
    static let json = Array(#"{}"#.utf8)

    /// Frames each profile can carry, for round trips and splits.
    static func sample(for profile: Profile) -> [Frame] {
        switch profile.name {
        case "seed":
            return [Frame(type: 0x402, serial: 1, payload: json), Frame(type: 0x1, serial: 9), Frame(type: 0x2, payload: [0, 255])]
        case "seed-extended":
            return [
                Frame(type: 0x402, serial: 1, payload: json, fields: ["version": 1, "contentType": 2]),
                Frame(type: 0x1, serial: 9, fields: ["version": 1, "contentType": 0]),
                Frame(type: 0x2, payload: Array(repeating: 7, count: 300), fields: ["version": 3, "contentType": 0]),
            ]
        case "marker":
            return [
                Frame(type: 0x401, payload: Array("hi".utf8), fields: ["destination": 1, "source": 2]),
                Frame(type: 0x401, payload: [0x7E, 0x7E, 0x00], fields: ["destination": 0xFFFF, "source": 0]),
                Frame(type: 0x401, fields: ["destination": 3, "source": 4]),
            ]
        case "compact":
            return [
                Frame(type: 0x402, payload: json, fields: ["version": 1, "compressed": 0]),
                Frame(type: 0x402, payload: Array(#"{"text":"\#(String(repeating: "hello ", count: 200))"}"#.utf8), fields: ["version": 1, "compressed": 0]),
                Frame(type: 0x1, fields: ["version": 2, "compressed": 0]),
            ]
        default:
            return [Frame(type: 0x401, payload: Array("GET /a".utf8)), Frame(type: 0x401), Frame(type: 0x401, payload: Array("x\ry\nz".utf8))]
        }
    }

    // MARK: Golden vectors, written from the seeds' descriptions

    @Test("the seed layout writes the same bytes as SeedCodec")
    func seedLayout() throws {
        let profile = try Profile(name: "seed-layout", layout: .seed, heartbeatType: 0x1, classify: Profile.seedKind(of:))
        let frame = Frame(type: 0x402, serial: 7, payload: Self.json)
        let golden = fromHex("00000402 | 00000007 | 00000002 | 7b7d")
        #expect(try encoded([frame], profile) == golden)
        #expect(try encoded([frame], .seed) == golden)
        #expect(try decoded([golden[...]], profile) == [frame])
        #expect(profile.correlation == .bySerial)
    }

    @Test("seed-extended: type, version, serial, content type, SHA-256 of the body, length")
    func seedExtendedGolden() throws {
        let frame = Frame(type: 0x402, serial: 7, payload: Self.json, fields: ["version": 1, "contentType": 1])
        let golden = fromHex("""
            00000402 | 00000001 | 00000007 | 00000001 |
            44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a | 00000002 | 7b7d
            """)
        #expect(try encoded([frame], .seedExtended) == golden)
        var expected = frame
        expected.integrity = .verified
        #expect(try decoded([golden[...]], .seedExtended) == [expected])
        #expect(FrameLayout.seedExtended().headerLength == 52)
    }

    @Test("marker: 0x7E, destination, source, length, body, CRC-16 of header and body")
    func markerGolden() throws {
        let frame = Frame(type: 0x401, payload: Array("hi".utf8), fields: ["destination": 0x0102, "source": 0x0304])
        let golden = fromHex("7e | 0102 | 0304 | 0002 | 6869 | b164")
        #expect(try encoded([frame], .marker) == golden)
        var expected = frame
        expected.integrity = .verified
        #expect(try decoded([golden[...]], .marker) == [expected])
        #expect(FrameLayout.marker.headerLength == 7)
    }

    @Test("compact: version, function code, compressed flag, length; a zlib body inflates")
    func compactGolden() throws {
        let plain = Frame(type: 0x402, payload: Self.json, fields: ["version": 1, "compressed": 0])
        #expect(try encoded([plain], .compact) == fromHex("0001 | 0402 | 00 | 0002 | 7b7d"))
        // zlib.compress(b'{"text":"' + b'hello ' * 100 + b'"}', 9)
        let stream = fromHex("78daab562a49ad2851b252ca48cdc9c95718254749ea924ab5007a96dfd0")
        let wire = fromHex("0001 | 0403 | 01 | 001e") + stream
        let frames = try decoded([wire[...]], .compact)
        #expect(frames.count == 1)
        #expect(frames.first?.type == 0x403)
        #expect(frames.first?.payload == Array(#"{"text":""#.utf8) + Array(String(repeating: "hello ", count: 100).utf8) + Array(#""}"#.utf8))
        // The payload handed on is inflated: the flag describes the wire only.
        #expect(frames.first?.fields == ["version": 1, "compressed": 0])
        #expect(FrameLayout.compact.headerLength == 7)
    }

    @Test("lines: the bytes before each \\r\\n")
    func linesGolden() throws {
        let wire = Array("PING\r\nGET /x\r\n\r\n".utf8)
        #expect(try decoded([wire[...]], .lines) == [
            Frame(type: 0x401, payload: Array("PING".utf8)),
            Frame(type: 0x401, payload: Array("GET /x".utf8)),
            Frame(type: 0x401),
        ])
        #expect(try encoded([Frame(type: 0x401, payload: Array("OK".utf8))], .lines) == Array("OK\r\n".utf8))
        let beating = try Profile.lines(delimiter: [0x0A], heartbeatLine: Array("PING".utf8))
        #expect(try decoded([Array("PING\nPONG\n".utf8)[...]], beating) == [Frame(type: 0x1), Frame(type: 0x401, payload: Array("PONG".utf8))])
        #expect(try encoded([Frame(type: 0x1, serial: 5)], beating) == Array("PING\n".utf8))
    }

    // MARK: Round trips and splits, every profile

    @Test("every profile round trips its frames", arguments: Profile.builtIn.map(\.name))
    func roundTrip(name: String) throws {
        let profile = try #require(Profile.named(name))
        let frames = Self.sample(for: profile)
        let back = try decoded([try encoded(frames, profile)[...]], profile)
        #expect(back.map(\.type) == frames.map(\.type))
        #expect(back.map(\.payload) == frames.map(\.payload))
        #expect(back.map(\.fields) == frames.map(\.fields))
        if profile.correlation == .bySerial { #expect(back.map(\.serial) == frames.map(\.serial)) }
        #expect(back.allSatisfy { $0.integrity == (profile.layout?.checksum == nil ? .unchecked : .verified) })
    }

    @Test("every split of a three-frame stream, and byte by byte, gives the same frames", arguments: Profile.builtIn.map(\.name))
    func everySplit(name: String) throws {
        let profile = try #require(Profile.named(name))
        let stream = try encoded(Self.sample(for: profile), profile)
        let whole = try decoded([stream[...]], profile)
        #expect(whole.count == 3)
        for cut in 0...stream.count {
            #expect(try decoded([stream[..<cut], stream[cut...]], profile) == whole, "split at \(cut)")
        }
        #expect(try decoded(stream.indices.map { stream[$0...$0] }, profile) == whole)
    }

    @Test("a frame cut short at the end of the stream is reported as truncated", arguments: Profile.builtIn.map(\.name))
    func truncated(name: String) throws {
        let profile = try #require(Profile.named(name))
        let stream = try encoded([Self.sample(for: profile)[0]], profile)
        let error = decodeError(Array(stream.dropLast()), profile)
        #expect(error?.code == .truncatedFrame)
    }

    // MARK: Checksums

    @Test("seed-extended: a body that does not match its SHA-256 is delivered marked failed, or rejected")
    func badSHA() throws {
        var wire = try encoded([Frame(type: 0x402, serial: 3, payload: Self.json)], .seedExtended)
        wire[wire.count - 1] ^= 0x01
        let frames = try decoded([wire[...]], .seedExtended)
        #expect(frames.map(\.integrity) == [.failed])
        #expect(frames.first?.payload == Array("{|".utf8))
        let strict = Profile.seedExtended(onChecksumMismatch: .reject)
        let error = decodeError(wire, strict)
        #expect(error?.code == .protocolError)
        #expect(error?.message == "SHA-256 mismatch in a frame of 2 bytes: 0x44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a on the wire, 0x\(sha256Hex("{|")) computed")
    }

    @Test("marker: a damaged frame is skipped, counted in the next frame's skippedBytes")
    func badCRC() throws {
        let frames = Self.sample(for: .marker)
        var first = try encoded([frames[0]], .marker)
        first[7] ^= 0xFF
        let second = try encoded([frames[2]], .marker)
        let back = try decoded([(first + second)[...]], .marker)
        #expect(back.count == 1)
        #expect(back.first?.fields == frames[2].fields)
        #expect(back.first?.skippedBytes == first.count)
    }

    @Test("a CRC-32 over the whole frame in the header, little-endian fields")
    func headerCRC32() throws {
        let layout = FrameLayout.header(
            [.constant("magic", 0xCAFE, width: 2, endianness: .little), .type(width: 2, endianness: .little), .checksum, .length(width: 4, endianness: .little)],
            checksum: .init(.crc32, coverage: .frame, placement: .header)
        )
        let profile = try Profile(name: "crc32", layout: layout, heartbeatType: nil, classify: { _ in .message })
        let wire = try encoded([Frame(type: 0x1234, payload: Array("123456789".utf8))], profile)
        #expect(Array(wire[0..<4]) == [0xFE, 0xCA, 0x34, 0x12])
        #expect(Array(wire[8..<12]) == [9, 0, 0, 0])
        var summer = Checksummer(.crc32)
        var covered = Array(wire[0..<4]) + Array(wire[8...])
        covered.withUnsafeBytes { summer.update($0) }
        #expect(Array(wire[4..<8]) == summer.finalize())
        covered[0] = 0
        #expect(try decoded([wire[...]], profile).first?.integrity == .verified)
        var damaged = wire
        damaged[2] ^= 1
        #expect(decodeError(damaged, profile)?.message.hasPrefix("CRC-32 mismatch in a frame of 9 bytes: 0x") == true)
        damaged = wire
        damaged[0] = 0
        #expect(decodeError(damaged, profile)?.message == "bad magic: expected 0xcafe, found 0xca00 at byte 0 of the header")
    }

    // MARK: Seed 001's six receive states

    @Test("marker: whole frame, no header, header not first, short header, short body, more than one frame")
    func sixStates() throws {
        let frames = Self.sample(for: .marker)
        let one = try encoded([frames[0]], .marker)
        let two = try encoded([frames[2]], .marker)
        var codec = Profile.marker.makeCodec(1 << 20)
        // 1. A whole frame.
        var buffer = FrameBuffer(bytes: one)
        #expect(try codec.decode(&buffer)?.payload == frames[0].payload)
        #expect(buffer.readableBytes == 0)
        // 2. No header: nothing comes out, and nothing is consumed until a marker shows up.
        buffer = FrameBuffer(bytes: Array("garbage".utf8))
        #expect(try codec.decode(&buffer) == nil)
        #expect(buffer.readableBytes == 7)
        // 3. The header is not at index 0: resynchronise on the marker, report the skip.
        buffer.writeBytes(one)
        let resynced = try codec.decode(&buffer)
        #expect(resynced?.payload == frames[0].payload)
        #expect(resynced?.skippedBytes == 7)
        #expect(buffer.readableBytes == 0)
        // 4. Fewer bytes than a header: wait.
        buffer = FrameBuffer(bytes: one[0..<5])
        #expect(try codec.decode(&buffer) == nil)
        #expect(buffer.readableBytes == 5)
        // 5. A header whose body has not all arrived: wait.
        buffer.writeBytes(one[5..<8])
        #expect(try codec.decode(&buffer) == nil)
        buffer.writeBytes(one[8...])
        #expect(try codec.decode(&buffer)?.skippedBytes == 0)
        // 6. More than one frame: split off the first, keep the rest.
        buffer = FrameBuffer(bytes: one + two + one[0..<3])
        #expect(try codec.decode(&buffer)?.fields == frames[0].fields)
        #expect(try codec.decode(&buffer)?.fields == frames[2].fields)
        #expect(try codec.decode(&buffer) == nil)
        #expect(buffer.readableBytes == 3)
    }

    @Test("marker: a false marker inside garbage, and garbage with no marker beyond the limit")
    func falseMarkers() throws {
        let frame = Self.sample(for: .marker)[0]
        let one = try encoded([frame], .marker)
        // 0x7E followed by bytes that make a length too big, then the real frame.
        let garbage: [UInt8] = [0x7E, 0, 0, 0, 0, 0xFF, 0xFF, 0x7E, 0x7E, 1]
        let back = try decoded([(garbage + one)[...]], .marker, maximum: 1024)
        #expect(back.map(\.payload) == [frame.payload])
        #expect(back.first?.skippedBytes == garbage.count)
        let flood = Array(repeating: UInt8(0x41), count: 70_000)
        let error = decodeError(flood, .marker)
        #expect(error?.code == .protocolError)
        #expect(error?.message == "no frame start (0x7e) in 70000 bytes, over the 64 KiB that may be skipped")
        let tail = decodeError(Array("junk".utf8), .marker)
        #expect(tail?.message == "stream ended after 4 bytes that hold no frame")
    }

    // MARK: Limits

    @Test("an oversize length is rejected from the header alone, before the body arrives")
    func oversize() throws {
        var header = try encoded([Frame(type: 0x402, serial: 1)], .seedExtended)
        header.replaceSubrange(48..<52, with: [0xFF, 0xFF, 0xFF, 0xFF])
        let error = decodeError(header, .seedExtended)
        #expect(error?.code == .frameTooLarge)
        #expect(error?.message == "frame length 4294967295 exceeds the 1 MiB limit")
        let compact = decodeError(fromHex("0001 0402 00 ffff"), .compact, maximum: 1024)
        #expect(compact?.message == "frame length 65535 exceeds the 1 KiB limit")
        let line = decodeError(Array(repeating: UInt8(ascii: "a"), count: 1030), .lines, maximum: 1024)
        #expect(line?.code == .frameTooLarge)
        #expect(line?.message == "no \\r\\n in 1030 bytes: a line is limited to 1 KiB")
        #expect(throws: TetherError.self) {
            // Bytes that do not compress, so the body stays over the 2-byte length.
            var state: UInt32 = 1
            let noise = (0..<70_000).map { _ in
                state = state &* 1_664_525 &+ 1_013_904_223
                return UInt8(truncatingIfNeeded: state >> 24)
            }
            _ = try encoded([Frame(type: 0x402, payload: noise)], .compact, maximum: 1 << 20)
        }
    }

    @Test("compact: a large body is compressed on the wire, a small one is not")
    func compression() throws {
        let frames = Self.sample(for: .compact)
        let big = try encoded([frames[1]], .compact)
        #expect(big[4] == 1)
        #expect(big.count < frames[1].payload.count / 4)
        let small = try encoded([frames[0]], .compact)
        #expect(small[4] == 0)
        #expect(try decoded([big[...]], .compact).first?.payload == frames[1].payload)
    }

    @Test("compact: a zip bomb ends the stream at the inflate limit, without inflating it all")
    func zipBomb() async throws {
        // Compressing 32 MiB takes a while: off the cooperative threads, which timing tests share.
        let bomb = try await offThread {
            try [UInt8](repeating: 0, count: 32 << 20).withUnsafeBytes { try Deflate.compress($0, level: 9) }
        }
        #expect(bomb.count < 65_535)
        var wire = fromHex("0001 0402 01")
        wire += [UInt8(bomb.count >> 8), UInt8(bomb.count & 0xFF)] + bomb
        let error = decodeError(wire, .compact, maximum: 1 << 20)
        #expect(error?.code == .frameTooLarge)
        #expect(error?.message.hasPrefix("frame 0x402: ") == true)
        #expect(error?.message.contains("1 MiB") == true)
        var garbled = fromHex("0001 0402 01 0004")
        garbled += [1, 2, 3, 4]
        #expect(decodeError(garbled, .compact)?.code == .protocolError)
    }

    // MARK: Layout rules

    @Test("layouts that cannot work are refused with the reason")
    func invalidLayouts() {
        func reason(_ layout: FrameLayout) -> String? {
            do { try layout.validate(); return nil } catch { return error.message }
        }
        #expect(reason(.header([.type()])) == "invalid frame layout: it has no length field")
        #expect(reason(.header([.type(width: 3), .length()])) == "invalid frame layout: field type is 3 bytes wide; a field is 1, 2, 4 or 8")
        #expect(reason(.header([.type(width: 8), .length()])) == "invalid frame layout: the type field is 8 bytes; a type is at most 4")
        #expect(reason(.header([.length(), .checksum])) == "invalid frame layout: it has a checksum field but no checksum placed in the header")
        #expect(reason(.header([.length()], checksum: .init(.crc16, placement: .header))) == "invalid frame layout: the checksum goes in the header, but the header has no checksum field")
        #expect(reason(.header([.type(), .length()], resynchronizes: true)) == "invalid frame layout: a layout that resynchronises must start with a marker")
        #expect(reason(.header([.length()], compression: .init(flagField: "zip"))) == "invalid frame layout: the compression flag field zip is not a value field of the layout")
        #expect(reason(.header([.marker(0x1FF), .length()])) == "invalid frame layout: the constant 0x1ff of field marker does not fit in 1 byte")
        #expect(reason(.delimited(by: [])) == "invalid frame layout: the delimiter is empty")
        #expect(throws: TetherError.self) {
            _ = try Profile(name: "x", layout: .header([.type(), .length()]), heartbeatType: nil, correlation: .bySerial, classify: { _ in .message })
        }
    }

    @Test("a length that counts the header, and a 2-byte serial that wraps at 65,535")
    func lengthCoverage() throws {
        let layout = FrameLayout.header([.length(width: 2), .type(width: 1), .serial(width: 2)], lengthIncludes: .header)
        let profile = try Profile(name: "short", layout: layout, heartbeatType: nil, classify: { _ in .message })
        #expect(profile.maximumSerial == 0xFFFF)
        #expect(profile.correlation == .bySerial)
        let wire = try encoded([Frame(type: 9, serial: 0xFFFF, payload: [1, 2])], profile)
        #expect(wire == fromHex("0007 09 ffff 0102"))
        #expect(try decoded([wire[...]], profile) == [Frame(type: 9, serial: 0xFFFF, payload: [1, 2])])
        #expect(decodeError(fromHex("0003 09 0001"), profile)?.message == "length field says 3, less than the 5 bytes of header and trailer it counts")
        #expect(throws: TetherError.self) { _ = try encoded([Frame(type: 9, serial: 0x1_0000)], profile) }
        var table = RequestTable<Int>(maximumSerial: 2)
        #expect([table.allocate().serial, table.allocate().serial, table.allocate().serial] == [1, 2, 1])
    }

    @Test("lines: a delimiter inside a payload cannot be sent")
    func delimiterInPayload() {
        #expect(throws: TetherError.self) { _ = try encoded([Frame(type: 0x401, payload: Array("a\r\nb".utf8))], .lines) }
    }

    /// A header with addresses and no checksum: large payloads go out from their own storage
    /// after a header encoded alone (``SplitFrameCodec``).
    static let addressed = try! Profile(
        name: "addressed",
        layout: .header([.marker(0x7E), .value("destination", width: 2), .value("source", width: 2), .type(width: 4), .serial(width: 4), .length(width: 4)]),
        heartbeatType: nil,
        classify: { _ in .message }
    )

    @Test("a field too large for its slot fails the frame and leaves no byte of it behind, so the frames around it still decode", arguments: [(Profile.marker, 16), (Profile.marker, 40_000), (Self.addressed, 16), (Self.addressed, 40_000)])
    func failedEncodingLeavesNothing(profile: Profile, payloadLength: Int) throws {
        let codec = profile.makeCodec(1 << 20)
        var buffer = FrameBuffer()
        let before = Frame(type: 0x401, payload: [1, 2, 3], fields: ["destination": 7, "source": 1])
        try codec.encode(before, into: &buffer)
        let written = buffer.readableBytes
        // destination is a 2-byte field: 70,000 does not fit, after the marker is written.
        let oversized = Frame(type: 0x401, payload: Array(repeating: 9, count: payloadLength), fields: ["destination": 70_000])
        let error = #expect(throws: TetherError.self) { try codec.encode(oversized, into: &buffer) }
        #expect(error?.code == .encodingFailed)
        #expect(buffer.readableBytes == written)
        if let split = codec as? any SplitFrameCodec {
            // The header alone, as a large payload's is written: refused too, or not split.
            _ = try? split.encodeHeader(of: oversized, into: &buffer)
            #expect(buffer.readableBytes == written)
        }
        let after = Frame(type: 0x401, payload: [4, 5], fields: ["destination": 8, "source": 2])
        try codec.encode(after, into: &buffer)
        let frames = try decoded([buffer.readableBytesView[...]], profile)
        #expect(frames.map(\.payload) == [[1, 2, 3], [4, 5]])
        #expect(frames.map { $0.fields["destination"] } == [7, 8])
        #expect(frames.map(\.skippedBytes) == [0, 0])
    }
}

/// SHA-256 of a string as lowercase hex, through the library's own implementation.
private func sha256Hex(_ text: String) -> String {
    var summer = Checksummer(.sha256)
    Array(text.utf8).withUnsafeBytes { summer.update($0) }
    return String(hexBytes(summer.finalize()).dropFirst(2))
}
