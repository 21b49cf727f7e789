import CZlib

/// A checksum a frame layout can carry: its algorithm and size on the wire.
public struct ChecksumAlgorithm: Sendable, Hashable, CustomStringConvertible {
    // File-private rather than private only so that Checksummer, below, can switch on it.
    fileprivate enum Kind: Sendable, Hashable {
        case crc16
        case crc32
        case sha256
    }

    fileprivate let kind: Kind

    private init(_ kind: Kind) {
        self.kind = kind
    }

    /// CRC-16/CCITT-FALSE: polynomial 0x1021, initial value 0xFFFF, no reflection, no final XOR; 2 bytes.
    public static let crc16 = ChecksumAlgorithm(.crc16)
    /// CRC-32 as in zlib, Ethernet and PNG (IEEE 802.3, reflected, 0xFFFFFFFF in and out); 4 bytes.
    public static let crc32 = ChecksumAlgorithm(.crc32)
    /// SHA-256 (FIPS 180-4); 32 bytes.
    public static let sha256 = ChecksumAlgorithm(.sha256)

    /// Bytes on the wire: 2, 4 or 32.
    public var width: Int {
        switch kind {
        case .crc16: 2
        case .crc32: 4
        case .sha256: 32
        }
    }

    /// "CRC-16", "CRC-32", "SHA-256".
    public var description: String {
        switch kind {
        case .crc16: "CRC-16"
        case .crc32: "CRC-32"
        case .sha256: "SHA-256"
        }
    }
}

/// Computes a checksum incrementally over one or more byte ranges.
///
/// Splitting the input differently across ``update(_:)`` calls gives the same checksum.
package struct Checksummer: Sendable {
    private let kind: ChecksumAlgorithm.Kind
    /// The running CRC-16 or CRC-32 register.
    private var crc: UInt32
    private var sha: SHA256

    /// A checksummer for `algorithm` that has seen no bytes yet.
    package init(_ algorithm: ChecksumAlgorithm) {
        kind = algorithm.kind
        crc = kind == .crc16 ? UInt32(CRC16.initial) : 0
        sha = SHA256()
    }

    /// Adds `bytes` to the checksum, after everything added before.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        switch kind {
        case .crc16: crc = UInt32(CRC16.update(UInt16(truncatingIfNeeded: crc), bytes))
        case .crc32: crc = CRC32.update(crc, bytes)
        case .sha256: sha.update(bytes)
        }
    }

    /// The checksum as it goes on the wire: CRCs big-endian (width bytes), SHA-256's 32-byte digest.
    ///
    /// The checksummer then starts over, as if just created.
    package mutating func finalize() -> [UInt8] {
        let result: [UInt8] = switch kind {
        case .crc16: [UInt8(truncatingIfNeeded: crc >> 8), UInt8(truncatingIfNeeded: crc)]
        case .crc32: [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: crc >> $0) }
        case .sha256: sha.finalize()
        }
        reset()
        return result
    }

    private mutating func reset() {
        switch kind {
        case .crc16: crc = UInt32(CRC16.initial)
        case .crc32: crc = 0
        case .sha256: sha = SHA256()
        }
    }
}

/// CRC-16/CCITT-FALSE, a byte at a time from a 256-entry table.
private enum CRC16 {
    static let initial: UInt16 = 0xFFFF

    /// The register after shifting each byte value through it, MSB first, polynomial 0x1021.
    static let table: [UInt16] = (0..<256).map { value in
        var crc = UInt16(value) << 8
        for _ in 0..<8 {
            crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
        }
        return crc
    }

    static func update(_ crc: UInt16, _ bytes: UnsafeRawBufferPointer) -> UInt16 {
        table.withUnsafeBufferPointer { table in
            var crc = crc
            for byte in bytes {
                crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)]
            }
            return crc
        }
    }
}

/// CRC-32 from zlib, whose `crc32` is already linked and faster than a table in Swift.
private enum CRC32 {
    static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        // zlib treats a null buffer as a request for the initial value, so an empty range
        // (whose base address may be nil) must not reach it.
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return crc }
        var value = uLong(crc)
        var offset = 0
        while offset < bytes.count {
            let take = min(bytes.count - offset, Int(UInt32.max))
            value = CZlib.crc32(value, base + offset, uInt(take))
            offset += take
        }
        return UInt32(truncatingIfNeeded: value)
    }
}

/// SHA-256 as in FIPS 180-4, without heap allocation: whole 64-byte blocks are hashed
/// straight from the caller's buffer, and only a partial block is copied aside.
private struct SHA256: Sendable {
    private typealias Words = (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32)

    private var state: Words = (
        0x6A09_E667, 0xBB67_AE85, 0x3C6E_F372, 0xA54F_F53A,
        0x510E_527F, 0x9B05_688C, 0x1F83_D9AB, 0x5BE0_CD19
    )
    /// Bytes of a block not yet complete; the first `pending` of its 64 are in use.
    private var partial: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private var pending = 0
    /// Bytes hashed so far, modulo 2^64.
    private var length: UInt64 = 0

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard var input = bytes.baseAddress, bytes.count > 0 else { return }
        var remaining = bytes.count
        length &+= UInt64(remaining)
        if pending > 0 {
            let take = min(64 - pending, remaining)
            let offset = pending
            withUnsafeMutableBytes(of: &partial) { block in
                block.baseAddress!.advanced(by: offset).copyMemory(from: input, byteCount: take)
            }
            pending += take
            input += take
            remaining -= take
            guard pending == 64 else { return }
            let block = partial
            withUnsafeBytes(of: block) { Self.hash(&state, $0.baseAddress!, blocks: 1) }
            pending = 0
        }
        let blocks = remaining / 64
        if blocks > 0 {
            Self.hash(&state, input, blocks: blocks)
            input += blocks * 64
            remaining -= blocks * 64
        }
        if remaining > 0 {
            withUnsafeMutableBytes(of: &partial) { block in
                block.baseAddress!.copyMemory(from: input, byteCount: remaining)
            }
            pending = remaining
        }
    }

    /// Pads the message and returns the 32-byte digest.
    mutating func finalize() -> [UInt8] {
        let bits = length &* 8
        // 0x80, then zeros up to 56 bytes into a block, then the length in bits: 9 to 72 bytes.
        let padding = (pending < 56 ? 56 : 120) - pending
        withUnsafeTemporaryAllocation(byteCount: 72, alignment: 8) { buffer in
            buffer.initializeMemory(as: UInt8.self, repeating: 0)
            buffer[0] = 0x80
            buffer.storeBytes(of: bits.bigEndian, toByteOffset: padding, as: UInt64.self)
            update(UnsafeRawBufferPointer(rebasing: buffer[..<(padding + 8)]))
        }
        let words = state
        return [UInt8](unsafeUninitializedCapacity: 32) { digest, count in
            withUnsafeBytes(of: words) { raw in
                for index in 0..<8 {
                    let word = raw.loadUnaligned(fromByteOffset: index * 4, as: UInt32.self)
                    let out = UnsafeMutableRawPointer(digest.baseAddress!)
                    out.storeBytes(of: word.bigEndian, toByteOffset: index * 4, as: UInt32.self)
                }
            }
            count = 32
        }
    }

    private static let k: [UInt32] = [
        0x428A_2F98, 0x7137_4491, 0xB5C0_FBCF, 0xE9B5_DBA5, 0x3956_C25B, 0x59F1_11F1, 0x923F_82A4, 0xAB1C_5ED5,
        0xD807_AA98, 0x1283_5B01, 0x2431_85BE, 0x550C_7DC3, 0x72BE_5D74, 0x80DE_B1FE, 0x9BDC_06A7, 0xC19B_F174,
        0xE49B_69C1, 0xEFBE_4786, 0x0FC1_9DC6, 0x240C_A1CC, 0x2DE9_2C6F, 0x4A74_84AA, 0x5CB0_A9DC, 0x76F9_88DA,
        0x983E_5152, 0xA831_C66D, 0xB003_27C8, 0xBF59_7FC7, 0xC6E0_0BF3, 0xD5A7_9147, 0x06CA_6351, 0x1429_2967,
        0x27B7_0A85, 0x2E1B_2138, 0x4D2C_6DFC, 0x5338_0D13, 0x650A_7354, 0x766A_0ABB, 0x81C2_C92E, 0x9272_2C85,
        0xA2BF_E8A1, 0xA81A_664B, 0xC24B_8B70, 0xC76C_51A3, 0xD192_E819, 0xD699_0624, 0xF40E_3585, 0x106A_A070,
        0x19A4_C116, 0x1E37_6C08, 0x2748_774C, 0x34B0_BCB5, 0x391C_0CB3, 0x4ED8_AA4A, 0x5B9C_CA4F, 0x682E_6FF3,
        0x748F_82EE, 0x78A5_636F, 0x84C8_7814, 0x8CC7_0208, 0x90BE_FFFA, 0xA450_6CEB, 0xBEF9_A3F7, 0xC671_78F2,
    ]

    @inline(__always)
    private static func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 {
        (x &>> n) | (x &<< (32 &- n))
    }

    /// Runs the compression function over `blocks` consecutive 64-byte blocks at `data`.
    private static func hash(_ state: inout Words, _ data: UnsafeRawPointer, blocks: Int) {
        k.withUnsafeBufferPointer { k in
            withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
                var (h0, h1, h2, h3, h4, h5, h6, h7) = state
                var block = data
                for _ in 0..<blocks {
                    for i in 0..<16 {
                        w[i] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: i &* 4, as: UInt32.self))
                    }
                    for i in 16..<64 {
                        let early = w[i &- 15]
                        let late = w[i &- 2]
                        let s0 = rotr(early, 7) ^ rotr(early, 18) ^ (early &>> 3)
                        let s1 = rotr(late, 17) ^ rotr(late, 19) ^ (late &>> 10)
                        w[i] = w[i &- 16] &+ s0 &+ w[i &- 7] &+ s1
                    }
                    var a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7
                    for i in 0..<64 {
                        let s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
                        let choice = (e & f) ^ (~e & g)
                        let t1 = h &+ s1 &+ choice &+ k[i] &+ w[i]
                        let s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
                        let majority = (a & b) ^ (a & c) ^ (b & c)
                        h = g
                        g = f
                        f = e
                        e = d &+ t1
                        d = c
                        c = b
                        b = a
                        a = t1 &+ s0 &+ majority
                    }
                    h0 &+= a
                    h1 &+= b
                    h2 &+= c
                    h3 &+= d
                    h4 &+= e
                    h5 &+= f
                    h6 &+= g
                    h7 &+= h
                    block += 64
                }
                state = (h0, h1, h2, h3, h4, h5, h6, h7)
            }
        }
    }
}
