import CTetherShims

/// Byte-level memory helpers that stay fast without optimization (`memset(3)`).
enum Memory {
    /// A byte array of `count` zeros, filled with `memset` rather than element by element.
    static func zeroedBytes(_ count: Int) -> [UInt8] {
        // For 0 the initializer would hand back the shared empty-array storage and write its
        // count from whichever thread asks: a (harmless) race that TSan rightly reports.
        guard count > 0 else { return [] }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            memset(buffer.baseAddress!, 0, count)
            initialized = count
        }
    }

    /// The offset of the first `byte` in `bytes` at or after `start`, found with `memchr`.
    static func firstIndex(of byte: UInt8, in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard start < bytes.count, let base = bytes.baseAddress else { return nil }
        guard let found = memchr(base + start, Int32(byte), bytes.count - start) else { return nil }
        return UnsafeRawPointer(found) - base
    }
}
