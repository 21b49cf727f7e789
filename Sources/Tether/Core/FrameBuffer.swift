extension FrameBuffer {
    /// Byte order of a multi-byte integer on the wire.
    public enum Endianness: Sendable, Hashable {
        /// Most significant byte first: network byte order.
        case big
        /// Least significant byte first.
        case little
    }
}

/// A growable byte buffer with a reader and a writer index.
///
/// Codecs decode frames from the readable bytes, consuming what they read, and encode
/// frames by appending after them. Connections keep
/// one buffer per direction and reuse it for the life of the connection, so reading and
/// writing frames does not allocate a buffer per frame.
public struct FrameBuffer: Sendable {
    var storage: [UInt8]
    /// Index of the first readable byte.
    package private(set) var readerIndex: Int
    /// Index one past the last readable byte; where the next write lands.
    package private(set) var writerIndex: Int
    /// Bytes consumed since the buffer was made: read, skipped or cleared. With
    /// ``readableBytes`` it gives how many were ever written (``writtenTotal``): how far a
    /// byte written now is from the start of the stream.
    package private(set) var consumedTotal = 0

    /// Creates an empty buffer.
    ///
    /// - Parameter capacity: Bytes to reserve up front.
    public init(capacity: Int = 0) {
        storage = Memory.zeroedBytes(capacity)
        readerIndex = 0
        writerIndex = 0
    }

    /// Creates a buffer whose readable bytes are `bytes`.
    ///
    /// - Parameter bytes: The initial readable bytes.
    public init<Bytes: Collection<UInt8>>(bytes: Bytes) {
        storage = Array(bytes)
        readerIndex = 0
        writerIndex = storage.count
    }

    /// How many bytes can be read.
    public var readableBytes: Int { writerIndex - readerIndex }

    /// Whether no bytes can be read.
    public var isEmpty: Bool { readerIndex == writerIndex }

    /// Bytes written since the buffer was made, minus any discarded unread.
    package var writtenTotal: Int { consumedTotal + readableBytes }

    /// The readable bytes, as a copy.
    public var readableBytesView: ArraySlice<UInt8> { storage[readerIndex..<writerIndex] }

    // MARK: Reading

    /// Reads an integer `offset` bytes past the reader index without consuming it.
    ///
    /// - Parameters:
    ///   - offset: Distance from the reader index.
    ///   - type: The integer type to read.
    ///   - endianness: Byte order on the wire.
    /// - Returns: The integer, or `nil` if the buffer does not hold enough bytes.
    public func peekInteger<T: FixedWidthInteger>(at offset: Int, as type: T.Type = T.self, endianness: FrameBuffer.Endianness = .big) -> T? {
        let start = readerIndex + offset
        guard offset >= 0, start + MemoryLayout<T>.size <= writerIndex else { return nil }
        let raw = storage.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: start, as: T.self) }
        return endianness == .big ? T(bigEndian: raw) : T(littleEndian: raw)
    }

    /// Reads and consumes an integer.
    ///
    /// - Parameters:
    ///   - type: The integer type to read.
    ///   - endianness: Byte order on the wire.
    /// - Returns: The integer, or `nil` (consuming nothing) if the buffer does not hold enough bytes.
    public mutating func readInteger<T: FixedWidthInteger>(as type: T.Type = T.self, endianness: FrameBuffer.Endianness = .big) -> T? {
        guard let value = peekInteger(at: 0, as: T.self, endianness: endianness) else { return nil }
        readerIndex += MemoryLayout<T>.size
        consumedTotal += MemoryLayout<T>.size
        return value
    }

    /// Reads and consumes `count` bytes.
    ///
    /// - Parameter count: How many bytes to read.
    /// - Returns: The bytes, or `nil` (consuming nothing) if fewer are readable.
    public mutating func readBytes(_ count: Int) -> [UInt8]? {
        guard count >= 0, count <= readableBytes else { return nil }
        let bytes = Array(storage[readerIndex..<readerIndex + count])
        readerIndex += count
        consumedTotal += count
        return bytes
    }

    /// Reads `count` bytes `offset` bytes past the reader index without consuming them.
    ///
    /// - Parameters:
    ///   - offset: Distance from the reader index.
    ///   - count: How many bytes.
    /// - Returns: The bytes, or `nil` if the buffer does not hold them.
    public func peekBytes(at offset: Int, count: Int) -> ArraySlice<UInt8>? {
        guard offset >= 0, count >= 0, readerIndex + offset + count <= writerIndex else { return nil }
        return storage[(readerIndex + offset)..<(readerIndex + offset + count)]
    }

    /// Consumes `count` readable bytes without looking at them.
    ///
    /// - Parameter count: How many bytes to skip; at most ``readableBytes``.
    public mutating func moveReaderIndex(forwardBy count: Int) {
        precondition(count >= 0 && count <= readableBytes, "cannot skip \(count) of \(readableBytes) readable bytes")
        readerIndex += count
        consumedTotal += count
        if readerIndex == writerIndex {
            readerIndex = 0
            writerIndex = 0
        }
    }

    /// Calls `body` with the readable bytes.
    ///
    /// - Parameter body: A closure that reads the bytes from ``readerIndex`` up to the end of
    ///   what was written. The pointer is valid only while it runs, and reading does not
    ///   consume anything.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    package func withReadableBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = storage.withUnsafeBytes { raw in
            let slice = UnsafeRawBufferPointer(rebasing: raw[readerIndex..<writerIndex])
            do throws(E) { return .success(try body(slice)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    // MARK: Writing

    /// Appends an integer.
    ///
    /// - Parameters:
    ///   - value: The integer.
    ///   - endianness: Byte order on the wire.
    public mutating func writeInteger<T: FixedWidthInteger>(_ value: T, endianness: FrameBuffer.Endianness = .big) {
        let size = MemoryLayout<T>.size
        reserveWritable(size)
        let wire = endianness == .big ? value.bigEndian : value.littleEndian
        let offset = writerIndex
        storage.withUnsafeMutableBytes { $0.storeBytes(of: wire, toByteOffset: offset, as: T.self) }
        writerIndex += size
    }

    /// Appends bytes.
    ///
    /// - Parameter bytes: The bytes to append.
    public mutating func writeBytes<Bytes: Collection<UInt8>>(_ bytes: Bytes) {
        let count = bytes.count
        guard count > 0 else { return }
        reserveWritable(count)
        let offset = writerIndex
        storage.withUnsafeMutableBufferPointer { buffer in
            let written: Void? = bytes.withContiguousStorageIfAvailable { source in
                UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: buffer[offset..<offset + count])).copyMemory(from: UnsafeRawBufferPointer(source))
            }
            if written == nil {
                var index = offset
                for byte in bytes {
                    buffer[index] = byte
                    index += 1
                }
            }
        }
        writerIndex += count
    }

    /// Appends `count` zero bytes.
    mutating func writeZeros(_ count: Int) {
        guard count > 0 else { return }
        reserveWritable(count)
        let offset = writerIndex
        storage.withUnsafeMutableBytes { raw in
            _ = UnsafeMutableRawBufferPointer(rebasing: raw[offset..<offset + count]).initializeMemory(as: UInt8.self, repeating: 0)
        }
        writerIndex += count
    }

    /// Overwrites an integer already written at absolute index `index`.
    ///
    /// - Parameters:
    ///   - value: The integer.
    ///   - index: Absolute index in the buffer, at most `writerIndex - size`.
    ///   - endianness: Byte order on the wire.
    package mutating func setInteger<T: FixedWidthInteger>(_ value: T, at index: Int, endianness: FrameBuffer.Endianness = .big) {
        precondition(index >= readerIndex && index + MemoryLayout<T>.size <= writerIndex, "setInteger outside the written bytes")
        let wire = endianness == .big ? value.bigEndian : value.littleEndian
        storage.withUnsafeMutableBytes { $0.storeBytes(of: wire, toByteOffset: index, as: T.self) }
    }

    /// Makes room for at least `count` more bytes after the writer index, compacting or growing.
    ///
    /// Growing allocates the new storage once and copies only the readable bytes to its front,
    /// so it also compacts.
    /// Drops what was written after `index`, a writer index read earlier with no
    /// compaction since (after ``reserveWritable(_:)`` for all that came after it): for an
    /// encoder that fails part way through a frame.
    package mutating func discardWritten(after index: Int) {
        precondition(index >= readerIndex && index <= writerIndex, "cannot discard back to \(index): readable bytes are \(readerIndex)..<\(writerIndex)")
        writerIndex = index
    }

    mutating func reserveWritable(_ count: Int) {
        if storage.count - writerIndex >= count { return }
        let readable = readableBytes
        // Compact only when it moves no more bytes than it frees; otherwise grow. Compacting
        // whenever there is room would move every queued byte on each append: quadratic
        // when many large frames wait to be written.
        if readerIndex >= readable && storage.count - readable >= count {
            compact()
            return
        }
        var capacity = Swift.max(storage.count, 64)
        while capacity - readable < count { capacity *= 2 }
        var grown = Memory.zeroedBytes(capacity)
        if readable > 0 {
            let from = readerIndex
            grown.withUnsafeMutableBytes { target in
                storage.withUnsafeBytes { source in
                    target.baseAddress!.copyMemory(from: source.baseAddress! + from, byteCount: readable)
                }
            }
        }
        storage = grown
        readerIndex = 0
        writerIndex = readable
    }

    /// Moves the readable bytes to the front of the storage.
    mutating func compact() {
        guard readerIndex > 0 else { return }
        let count = readableBytes
        if count > 0 {
            let from = readerIndex
            storage.withUnsafeMutableBytes { raw in
                let base = raw.baseAddress!
                (base).copyMemory(from: base + from, byteCount: count)
            }
        }
        readerIndex = 0
        writerIndex = count
    }

    /// Empties the buffer, keeping its storage.
    package mutating func clear() {
        consumedTotal += readableBytes
        readerIndex = 0
        writerIndex = 0
    }

    /// Lets `body` write up to `count` bytes into spare storage after the writer index, then
    /// advances the writer index by what `body` returns. Used by socket reads.
    package mutating func withWritableSpace<E: Error>(
        minimum count: Int,
        _ body: (UnsafeMutableRawBufferPointer) throws(E) -> Int
    ) throws(E) -> Int {
        if readerIndex == writerIndex {
            readerIndex = 0
            writerIndex = 0
        }
        reserveWritable(count)
        let offset = writerIndex
        let result: Result<Int, E> = storage.withUnsafeMutableBytes { raw in
            let space = UnsafeMutableRawBufferPointer(rebasing: raw[offset...])
            do throws(E) { return .success(try body(space)) } catch { return .failure(error) }
        }
        let written = try result.get()
        writerIndex += written
        return written
    }

    /// Capacity of the storage, for tests and limits.
    var capacity: Int { storage.count }

    /// Drops storage above `limit` once drained, so one huge frame does not pin memory
    /// forever. The buffer starts again empty and grows on demand; nothing is allocated here.
    mutating func shrinkIfIdle(keeping limit: Int) {
        if readerIndex == writerIndex && storage.count > limit {
            storage = []
            readerIndex = 0
            writerIndex = 0
        }
    }
}
