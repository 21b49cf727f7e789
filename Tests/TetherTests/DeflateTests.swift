import Testing
@testable import Tether

@Suite("Deflate", .timeLimit(.guarded))
struct DeflateTests {
    static func compress(_ bytes: [UInt8], level: Int32 = -1) throws -> [UInt8] {
        try bytes.withUnsafeBytes { try Deflate.compress($0, level: level) }
    }

    static func inflate(_ bytes: [UInt8], limit: Int = 16 << 20) throws -> [UInt8] {
        try bytes.withUnsafeBytes { try Deflate.inflate($0, limit: limit) }
    }

    /// Inflates `bytes`, which must fail, and returns the error.
    static func inflateError(_ bytes: [UInt8], limit: Int = 16 << 20) -> TetherError? {
        #expect(throws: TetherError.self) { _ = try inflate(bytes, limit: limit) }
    }

    static func bytes(hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16)! }
    }

    /// Deterministic "random" bytes, eight from each draw of a seeded generator.
    static func noise(count: Int, seed: UInt64) -> [UInt8] {
        var random = SplitMix(seed: seed)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count {
            withUnsafeBytes(of: random.next().littleEndian) { bytes.append(contentsOf: $0) }
        }
        return Array(bytes.prefix(count))
    }

    static let text = Array("Tether frame body: compressed by zlib, inflated by Tether.".utf8)

    @Test("round trips at every level", arguments: [-1, 0, 1, 6, 9] as [Int32])
    func roundTrips(level: Int32) throws {
        let inputs: [[UInt8]] = [
            [],
            [0x2A],
            Self.text,
            Self.noise(count: 1 << 20, seed: 0xDEF1_A7E0),
            Array(repeating: Array("abcabcabd".utf8), count: 100_000).flatMap { $0 },
        ]
        for input in inputs {
            let compressed = try Self.compress(input, level: level)
            #expect(compressed.count >= 8, "a zlib stream has a 2-byte header and a 4-byte check")
            #expect(try Self.inflate(compressed, limit: input.count) == input, "\(input.count) bytes")
        }
    }

    @Test("repetitive input shrinks, random input barely grows")
    func ratios() throws {
        let repetitive = Array(repeating: Array("hello ".utf8), count: 100_000).flatMap { $0 }
        #expect(try Self.compress(repetitive).count < repetitive.count / 100)
        let random = Self.noise(count: 1 << 20, seed: 7)
        #expect(try Self.compress(random).count < random.count + random.count / 500 + 64)
        #expect(try Self.compress(random, level: 0).count > random.count)
    }

    @Test("empty input compresses to a valid stream that inflates to nothing")
    func emptyStream() throws {
        let compressed = try Self.compress([])
        #expect(compressed.first == 0x78)
        #expect(try Self.inflate(compressed, limit: 0) == [])
        #expect(try Self.inflate(Self.bytes(hex: "789c030000000001"), limit: 0) == [])
    }

    @Test("golden vectors: level 9 output inflates back, and streams from another zlib inflate")
    func goldenVectors() throws {
        let hello = Array("hello hello hello hello".utf8)
        let ours = try Self.compress(hello, level: 9)
        #expect(Array(ours.prefix(2)) == [0x78, 0xDA], "level 9 header")
        #expect(try Self.inflate(ours, limit: 64) == hello)
        // zlib.compress(b"hello hello hello hello", 9) in Python.
        #expect(try Self.inflate(Self.bytes(hex: "78dacb48cdc9c957c8402701680308b1"), limit: 64) == hello)
        // zlib.compress(b"Tether frame body: compressed by zlib, inflated by Tether.") in Python.
        let python = Self.bytes(hex: "789c0b492dc9482d52482b4acc4d5548ca4fa9b45248cecf2d284a2d2e4e4d5148aa54a8cac94cd251c8cc4bcb492c81888480b5e8010073d81509")
        #expect(try Self.inflate(python, limit: 1024) == Self.text)
    }

    @Test("a limit of exactly the inflated size passes; one byte less is too large", arguments: [0, 1, 63, 64, 65, 1000, (1 << 20) + 1])
    func limitBoundary(size: Int) throws {
        let input = Self.noise(count: size, seed: UInt64(size))
        let compressed = try Self.compress(input)
        #expect(try Self.inflate(compressed, limit: size) == input)
        guard size > 0 else { return }
        let error = Self.inflateError(compressed, limit: size - 1)
        #expect(error?.code == .frameTooLarge)
        #expect(error?.message == "compressed body inflates past the \(describeBytes(size - 1)) limit")
    }

    @Test("the size limit is named the way other limits are")
    func limitMessage() throws {
        let compressed = try Self.compress(Self.noise(count: (1 << 20) + 1, seed: 3))
        #expect(Self.inflateError(compressed, limit: 1 << 20)?.message == "compressed body inflates past the 1 MiB limit")
    }

    @Test("a zip bomb stops at the limit instead of inflating in full")
    func zipBomb() async throws {
        // A second of zlib work: off the cooperative threads, which timing tests share.
        let (bomb, error, full) = try await offThread {
            let bomb = try Self.compress([UInt8](repeating: 0, count: 64 << 20), level: 9)
            // The same stream inflates in full with room for it.
            return (bomb, Self.inflateError(bomb, limit: 16 << 20), try Self.inflate(bomb, limit: 64 << 20).count)
        }
        #expect(bomb.count < 128 << 10)
        #expect(error?.code == .frameTooLarge)
        #expect(error?.message == "compressed body inflates past the 16 MiB limit")
        #expect(full == 64 << 20)
    }

    @Test("a corrupt header is a protocol error that says what zlib said")
    func corruptHeader() throws {
        var stream = try Self.compress(Self.text)
        stream[0] ^= 0x01
        let error = Self.inflateError(stream)
        #expect(error?.code == .protocolError)
        #expect(error?.message == "cannot inflate the compressed body: incorrect header check")
    }

    @Test("a wrong check value is a protocol error")
    func corruptCheck() throws {
        var stream = try Self.compress(Self.text)
        stream[stream.count - 1] ^= 0xFF
        let error = Self.inflateError(stream)
        #expect(error?.code == .protocolError)
        #expect(error?.message == "cannot inflate the compressed body: incorrect data check")
    }

    @Test("corrupt deflate data is a protocol error")
    func corruptData() {
        // A header, then a block with the reserved block type 3.
        let error = Self.inflateError([0x78, 0x9C, 0x07, 0x00])
        #expect(error?.code == .protocolError)
        #expect(error?.message == "cannot inflate the compressed body: invalid block type")
    }

    @Test("a stream cut short anywhere is a protocol error")
    func truncated() throws {
        let stream = try Self.compress(Self.noise(count: 5000, seed: 11))
        for length in [0, 1, 2, 3, stream.count / 2, stream.count - 4, stream.count - 1] {
            let error = Self.inflateError(Array(stream.prefix(length)))
            #expect(error?.code == .protocolError, "\(length) of \(stream.count) bytes")
            #expect(error?.message == "cannot inflate the compressed body: the stream ends early", "\(length) of \(stream.count) bytes")
        }
    }

    @Test("bytes after the end of the stream are a protocol error")
    func trailingGarbage() throws {
        let stream = try Self.compress(Self.text)
        let three = Self.inflateError(stream + [1, 2, 3])
        #expect(three?.code == .protocolError)
        #expect(three?.message == "cannot inflate the compressed body: 3 bytes follow the end of the stream")
        #expect(Self.inflateError(stream + [0])?.message == "cannot inflate the compressed body: 1 byte follows the end of the stream")
        #expect(Self.inflateError(stream + stream)?.code == .protocolError, "two streams back to back")
    }

    @Test("a stream that needs a preset dictionary is a protocol error")
    func presetDictionary() {
        // zlib.compressobj(zdict=b"hello world") over b"hello world hello" in Python.
        let error = Self.inflateError(Self.bytes(hex: "78bb1a0b045dcb403015c06c003b200691"))
        #expect(error?.code == .protocolError)
        #expect(error?.message == "cannot inflate the compressed body: the stream needs a preset dictionary")
    }

    @Test("a level outside -1...9 is an invalid argument", arguments: [-2, 10, 100] as [Int32])
    func badLevel(level: Int32) {
        let error = #expect(throws: TetherError.self) { _ = try Self.compress(Self.text, level: level) }
        #expect(error?.code == .invalidArgument)
    }
}
