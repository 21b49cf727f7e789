// The code of Documentation.docc/WireFormats.md ("Wire Formats and Custom Codecs"), and
// tests that put frames through the article's layout and its hand-written codec.
import Testing
import Tether

// MARK: - Overview

func wireFormatsCompact(endpoint: Endpoint) async throws -> (Connection, Server) {
    var client = ConnectionConfiguration()
    client.profile = .compact
    let connection = try await Connection.connect(to: endpoint, configuration: client)

    let server = Server(configuration: ServerConfiguration(port: 9000, profile: .compact))
    return (connection, server)
}

// MARK: - Describing your own header

func wireFormatsDeviceProfile() throws -> Profile {
    let layout = FrameLayout.header(
        [
            .constant("magic", 0xCAFE, width: 2, endianness: .little),
            .length(width: 4, endianness: .little),
            .type(width: 2, endianness: .little),
            .serial(width: 2, endianness: .little),
            .flags(width: 1),
        ],
        lengthIncludes: [.header, .trailer],
        checksum: .init(.crc32, coverage: .frame, placement: .trailer, onMismatch: .reject)
    )
    let profile = try Profile(
        name: "device",
        layout: layout,
        heartbeatType: 0x1,
        classify: Profile.seedKind(of:)
    )
    return profile
}

// MARK: - Writing a codec by hand

func wireFormatsVarintProfile() -> Profile {
    struct VarintCodec: FrameCodec {
        var maximumPayloadLength: Int

        mutating func decode(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame? {
            var length = 0
            var offset = 0
            while true {
                guard let byte = buffer.peekInteger(at: offset, as: UInt8.self) else { return nil }
                length |= Int(byte & 0x7F) << (7 * offset)
                offset += 1
                if byte & 0x80 == 0 { break }
                guard offset < 4 else {
                    throw TetherError(code: .protocolError, message: "a length prefix longer than 4 bytes")
                }
            }
            guard length <= maximumPayloadLength else {
                throw TetherError(code: .frameTooLarge, message: "frame length \(length) exceeds the limit")
            }
            guard buffer.readableBytes >= offset + length else { return nil }
            buffer.moveReaderIndex(forwardBy: offset)
            return Frame(type: 0x401, payload: buffer.readBytes(length) ?? [])
        }

        func encode(_ frame: Frame, into buffer: inout FrameBuffer) throws(TetherError) {
            var length = frame.payload.count
            while length >= 0x80 {
                buffer.writeInteger(UInt8(length & 0x7F | 0x80))
                length >>= 7
            }
            buffer.writeInteger(UInt8(length))
            buffer.writeBytes(frame.payload)
        }
    }

    let varint = Profile(
        name: "varint",
        heartbeatType: nil,
        correlation: .inOrder,
        makeCodec: { VarintCodec(maximumPayloadLength: $0) },
        classify: { $0 == 0x401 ? .message : .invalid }
    )
    return varint
}

// MARK: - Tests

@Suite struct WireFormatsTests {
    @Test func theDeviceLayoutRoundTripsAFrameAndRejectsACorruptOne() throws {
        let profile = try wireFormatsDeviceProfile()
        #expect(profile.name == "device")
        var codec = profile.makeCodec(1 << 16)

        var buffer = FrameBuffer()
        try codec.encode(Frame(type: 0x402, serial: 7, payload: Array("hello".utf8)), into: &buffer)
        // magic (2) + length (4) + type (2) + serial (2) + flags (1), the body, CRC-32 (4);
        // the length counts all of it.
        #expect(buffer.readableBytes == 11 + 5 + 4)
        #expect(buffer.peekInteger(at: 0, as: UInt16.self, endianness: .little) == 0xCAFE)
        #expect(buffer.peekInteger(at: 2, as: UInt32.self, endianness: .little) == 20)
        var corrupt = FrameBuffer(bytes: buffer.readableBytesView)

        let frame = try #require(try codec.decode(&buffer))
        #expect(frame.type == 0x402)
        #expect(frame.serial == 7)
        #expect(frame.payload == Array("hello".utf8))
        #expect(buffer.readableBytes == 0)

        corrupt.setInteger(UInt8(ascii: "j"), at: 11)
        #expect(throws: TetherError.self) { _ = try codec.decode(&corrupt) }
    }

    @Test func theVarintCodecWaitsForWholeFramesAndChecksTheLength() throws {
        var codec = wireFormatsVarintProfile().makeCodec(1000)
        let payload = [UInt8](repeating: 0x61, count: 300)

        var buffer = FrameBuffer()
        try codec.encode(Frame(type: 0x401, payload: payload), into: &buffer)
        #expect(Array(buffer.readableBytesView.prefix(2)) == [0xAC, 0x02])  // 300, 7 bits at a time

        var partial = FrameBuffer(bytes: buffer.readableBytesView.dropLast())
        #expect(try codec.decode(&partial) == nil)
        #expect(partial.readableBytes == 301)  // nothing consumed

        let frame = try #require(try codec.decode(&buffer))
        #expect(frame.payload == payload)
        #expect(buffer.readableBytes == 0)

        var tooLong = FrameBuffer(bytes: [0xE9, 0x07])  // 1001
        #expect(throws: TetherError.self) { _ = try codec.decode(&tooLong) }
    }
}
