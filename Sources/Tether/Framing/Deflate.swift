import CZlib

/// zlib (RFC 1950) compression of frame bodies, with a hard limit on inflated size.
package enum Deflate {
    /// Compresses `bytes` into a zlib stream at `level` (0...9, or -1 for zlib's default).
    ///
    /// Empty input gives a valid stream that inflates to nothing.
    ///
    /// - Throws: ``TetherError/Code/invalidArgument`` for a level outside -1...9.
    package static func compress(_ bytes: UnsafeRawBufferPointer, level: Int32 = -1) throws(TetherError) -> [UInt8] {
        guard level >= -1, level <= 9 else {
            throw TetherError(code: .invalidArgument, message: "compression level \(level) is not -1 or 0 to 9")
        }
        // zlib keeps the stream's address in its state and checks it on every call, so the
        // stream lives at a fixed address rather than in a Swift variable.
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        defer { stream.deallocate() }
        let started = tether_deflate_init(stream, level)
        guard started == Z_OK else { throw failure(started, stream, starting: "compression") }
        defer { deflateEnd(stream) }

        // deflateBound is enough room for the whole stream in one call, so the loop below
        // normally runs once; it loops only for input longer than zlib's 32-bit counts.
        var output = Memory.zeroedBytes(Int(clamping: deflateBound(stream, uLong(bytes.count))))
        var consumed = 0
        var produced = 0
        while true {
            feed(stream, from: bytes, consumed: &consumed)
            if produced == output.count { grow(&output, to: max(64, output.count * 2)) }
            let flush = consumed == bytes.count ? Z_FINISH : Z_NO_FLUSH
            let (status, written) = run(stream, into: &output, at: produced) { CZlib.deflate($0, flush) }
            produced += written
            switch status {
            case Z_STREAM_END:
                trim(&output, to: produced)
                return output
            case Z_OK, Z_BUF_ERROR:
                continue
            default:
                throw failure(status, stream, starting: nil)
            }
        }
    }

    /// Inflates a zlib stream, producing at most `limit` bytes.
    ///
    /// The output grows in steps as the stream inflates and never beyond `limit + 1` bytes,
    /// so a small stream that would inflate to gigabytes (a "zip bomb") costs at most the
    /// limit in memory and the time to inflate that much.
    ///
    /// - Parameters:
    ///   - bytes: One complete zlib stream and nothing after it.
    ///   - limit: The most bytes the stream may inflate to.
    /// - Throws: ``TetherError/Code/frameTooLarge`` when the stream inflates past `limit`;
    ///   ``TetherError/Code/protocolError`` when it is corrupt, ends early, or is followed
    ///   by more bytes.
    package static func inflate(_ bytes: UnsafeRawBufferPointer, limit: Int) throws(TetherError) -> [UInt8] {
        precondition(limit >= 0, "inflate limit \(limit) is negative")
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        defer { stream.deallocate() }
        let started = tether_inflate_init(stream)
        guard started == Z_OK else { throw failure(started, stream, starting: "decompression") }
        defer { inflateEnd(stream) }

        // One byte past the limit is room enough to tell that the stream goes past it.
        let capacity = limit == Int.max ? limit : limit + 1
        let (estimate, overflow) = bytes.count.multipliedReportingOverflow(by: 4)
        var output = Memory.zeroedBytes(overflow ? capacity : min(capacity, estimate &+ 64))
        var consumed = 0
        var produced = 0
        while true {
            feed(stream, from: bytes, consumed: &consumed)
            if produced == output.count {
                guard output.count < capacity else { throw tooLarge(limit) }
                let doubled = output.count > capacity / 2 ? capacity : output.count * 2
                grow(&output, to: min(capacity, max(64, doubled)))
            }
            let (status, written) = run(stream, into: &output, at: produced) { CZlib.inflate($0, Z_NO_FLUSH) }
            produced += written
            switch status {
            case Z_STREAM_END:
                guard produced <= limit else { throw tooLarge(limit) }
                let trailing = Int(stream.pointee.avail_in) + (bytes.count - consumed)
                guard trailing == 0 else {
                    throw corrupt("\(trailing) \(trailing == 1 ? "byte follows" : "bytes follow") the end of the stream")
                }
                trim(&output, to: produced)
                return output
            case Z_OK, Z_BUF_ERROR:
                // Output room is always offered, so no progress with all the input read
                // means the stream stopped before its end.
                if stream.pointee.avail_in == 0, consumed == bytes.count, produced < output.count {
                    throw corrupt("the stream ends early")
                }
            case Z_NEED_DICT:
                throw corrupt("the stream needs a preset dictionary")
            case Z_DATA_ERROR:
                throw corrupt(zlibMessage(stream) ?? "the data is corrupt")
            default:
                throw failure(status, stream, starting: nil)
            }
        }
    }

    /// Points zlib's output at `output[produced...]`, runs `step`, and says what it returned
    /// and how many bytes it wrote.
    private static func run(
        _ stream: UnsafeMutablePointer<z_stream>,
        into output: inout [UInt8],
        at produced: Int,
        _ step: (UnsafeMutablePointer<z_stream>) -> Int32
    ) -> (status: Int32, written: Int) {
        output.withUnsafeMutableBufferPointer { buffer in
            let room = UInt32(min(buffer.count - produced, Int(UInt32.max)))
            stream.pointee.next_out = buffer.baseAddress! + produced
            stream.pointee.avail_out = room
            let status = step(stream)
            let written = Int(room - stream.pointee.avail_out)
            stream.pointee.next_out = nil
            stream.pointee.avail_out = 0
            return (status, written)
        }
    }

    /// zlib's input pointer for `bytes[offset...]`; zlib only reads through it.
    /// Hands zlib the next part of `bytes` once it has taken the last: at most `UInt32.max`
    /// bytes at a time, zlib's counts being 32-bit.
    private static func feed(_ stream: UnsafeMutablePointer<z_stream>, from bytes: UnsafeRawBufferPointer, consumed: inout Int) {
        guard stream.pointee.avail_in == 0, consumed < bytes.count else { return }
        let take = min(bytes.count - consumed, Int(UInt32.max))
        stream.pointee.next_in = mutableBytes(bytes, at: consumed)
        stream.pointee.avail_in = UInt32(take)
        consumed += take
    }

    private static func mutableBytes(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UnsafeMutablePointer<UInt8>? {
        guard let base = bytes.baseAddress else { return nil }
        return UnsafeMutablePointer(mutating: (base + offset).assumingMemoryBound(to: UInt8.self))
    }

    /// Grows `bytes` to exactly `count` bytes, zero-filled, in an allocation of exactly that
    /// size rather than the doubling an array append would pick, so the inflate limit bounds
    /// the allocation.
    private static func grow(_ bytes: inout [UInt8], to count: Int) {
        var grown = Memory.zeroedBytes(count)
        grown.withUnsafeMutableBytes { target in
            bytes.withUnsafeBytes { source in
                target.baseAddress!.copyMemory(from: source.baseAddress!, byteCount: source.count)
            }
        }
        bytes = grown
    }

    /// Cuts `bytes` to its first `count`, copying them into an array of their own when
    /// keeping the larger allocation would waste more than an eighth of it.
    private static func trim(_ bytes: inout [UInt8], to count: Int) {
        let unused = bytes.count - count
        if unused > 4096, unused > bytes.count / 8 {
            bytes = Array(bytes[..<count])
        } else {
            bytes.removeSubrange(count...)
        }
    }

    private static func zlibMessage(_ stream: UnsafeMutablePointer<z_stream>) -> String? {
        stream.pointee.msg.map { String(cString: $0) }
    }

    private static func tooLarge(_ limit: Int) -> TetherError {
        TetherError(code: .frameTooLarge, message: "compressed body inflates past the \(describeBytes(limit)) limit")
    }

    private static func corrupt(_ reason: String) -> TetherError {
        TetherError(code: .protocolError, message: "cannot inflate the compressed body: \(reason)")
    }

    /// An error for a zlib status that means zlib itself failed (no memory, a bad stream
    /// state), not that the input was bad.
    private static func failure(_ status: Int32, _ stream: UnsafeMutablePointer<z_stream>, starting: String?) -> TetherError {
        let reason = switch status {
        case Z_MEM_ERROR: "out of memory"
        case Z_VERSION_ERROR: "the zlib library is incompatible with the headers built against"
        default: zlibMessage(stream) ?? "zlib error \(status)"
        }
        if let starting { return TetherError(code: .systemCall, message: "cannot start zlib \(starting): \(reason)") }
        return TetherError(code: .systemCall, message: "zlib failed: \(reason)")
    }
}
