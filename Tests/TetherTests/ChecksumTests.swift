import Testing
@testable import Tether

@Suite("Checksums")
struct ChecksumTests {
    static let algorithms: [ChecksumAlgorithm] = [.crc16, .crc32, .sha256]

    /// The checksum of `bytes` fed in one update.
    static func checksum(_ algorithm: ChecksumAlgorithm, _ bytes: [UInt8]) -> [UInt8] {
        checksum(algorithm, pieces: [bytes[...]])
    }

    /// The checksum of `pieces` fed one update each, in order.
    static func checksum(_ algorithm: ChecksumAlgorithm, pieces: [ArraySlice<UInt8>]) -> [UInt8] {
        var checksummer = Checksummer(algorithm)
        for piece in pieces {
            piece.withUnsafeBytes { checksummer.update($0) }
        }
        return checksummer.finalize()
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    static let check = Array("123456789".utf8)

    @Test("CRC-16/CCITT-FALSE of \"123456789\" is 0x29B1, big-endian on the wire")
    func crc16Check() {
        #expect(Self.checksum(.crc16, Self.check) == [0x29, 0xB1])
        #expect(Self.checksum(.crc16, []) == [0xFF, 0xFF])
        #expect(Self.checksum(.crc16, (0...255).map { UInt8($0) }) == [0x3F, 0xBD])
    }

    @Test("CRC-32 of \"123456789\" is 0xCBF43926, big-endian on the wire")
    func crc32Check() {
        #expect(Self.checksum(.crc32, Self.check) == [0xCB, 0xF4, 0x39, 0x26])
        #expect(Self.checksum(.crc32, []) == [0, 0, 0, 0])
        #expect(Self.checksum(.crc32, (0...255).map { UInt8($0) }) == [0x29, 0x05, 0x8C, 0x73])
    }

    @Test("SHA-256 of the FIPS 180-4 example messages", arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        ),
    ])
    func sha256Vectors(message: String, digest: String) {
        #expect(Self.hex(Self.checksum(.sha256, Array(message.utf8))) == digest)
    }

    @Test("SHA-256 of one million 'a', in one update and in a thousand")
    func sha256Million() {
        let digest = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        #expect(Self.hex(Self.checksum(.sha256, million)) == digest)
        let pieces = stride(from: 0, to: million.count, by: 1000).map { million[$0..<$0 + 1000] }
        #expect(Self.hex(Self.checksum(.sha256, pieces: pieces)) == digest)
    }

    @Test("SHA-256 pads correctly at every length around a block boundary", arguments: [
        (55, "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59"),
        (56, "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562"),
        (57, "2fe741af801cc238602ac0ec6a7b0c3a8a87c7fc7d7f02a3fe03d1c12eac4d8f"),
        (63, "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488"),
        (64, "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108"),
        (65, "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781"),
        (119, "da18797ed7c3a777f0847f429724a2d8cd5138e6ed2895c3fa1a6d39d18f7ec6"),
        (120, "f52b23db1fbb6ded89ef42a23ce0c8922c45f25c50b568a93bf1c075420bbb7c"),
        (128, "471fb943aa23c511f6f72f8d1652d9c880cfa392ad80503120547703e56a2be5"),
    ])
    func sha256Padding(length: Int, digest: String) {
        let message = (0..<length).map { UInt8(truncatingIfNeeded: $0) }
        #expect(Self.hex(Self.checksum(.sha256, message)) == digest)
    }

    @Test("every split point of a 200-byte input gives the same checksum", arguments: algorithms)
    func everySplit(algorithm: ChecksumAlgorithm) {
        var random = SplitMix(seed: 0xC4EC_5000)
        let input = (0..<200).map { _ in UInt8.random(in: 0...255, using: &random) }
        let whole = Self.checksum(algorithm, input)
        #expect(whole.count == algorithm.width)
        for cut in 0...input.count {
            #expect(Self.checksum(algorithm, pieces: [input[..<cut], input[cut...]]) == whole, "split at \(cut)")
        }
        for first in stride(from: 0, through: input.count, by: 3) {
            for second in stride(from: first, through: input.count, by: 13) {
                let pieces = [input[..<first], input[first..<second], input[second...]]
                #expect(Self.checksum(algorithm, pieces: pieces) == whole, "splits at \(first) and \(second)")
            }
        }
        let bytes = input.indices.map { input[$0...$0] }
        #expect(Self.checksum(algorithm, pieces: bytes) == whole, "one byte at a time")
    }

    @Test("finalize starts the checksummer over", arguments: algorithms)
    func finalizeResets(algorithm: ChecksumAlgorithm) {
        var checksummer = Checksummer(algorithm)
        Self.check.withUnsafeBytes { checksummer.update($0) }
        let first = checksummer.finalize()
        Self.check.withUnsafeBytes { checksummer.update($0) }
        #expect(checksummer.finalize() == first)
        #expect(checksummer.finalize() == Self.checksum(algorithm, []))
    }

    @Test("widths and descriptions")
    func widthsAndDescriptions() {
        #expect(ChecksumAlgorithm.crc16.width == 2)
        #expect(ChecksumAlgorithm.crc32.width == 4)
        #expect(ChecksumAlgorithm.sha256.width == 32)
        #expect(ChecksumAlgorithm.crc16.description == "CRC-16")
        #expect(ChecksumAlgorithm.crc32.description == "CRC-32")
        #expect(ChecksumAlgorithm.sha256.description == "SHA-256")
        #expect("\(ChecksumAlgorithm.sha256)" == "SHA-256")
        #expect(Set(Self.algorithms).count == 3)
        #expect(ChecksumAlgorithm.crc32 == .crc32 && ChecksumAlgorithm.crc32 != .crc16)
    }
}
