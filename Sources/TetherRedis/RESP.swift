// RESP2, the protocol Redis and Valkey speak: commands as arrays of bulk strings, replies
// as one of five kinds.

/// One reply from the server.
enum RESPValue: Sendable, Hashable {
    /// `+OK`.
    case simple(String)
    /// `-ERR …`: the command failed; the connection is fine.
    case error(String)
    /// `:42`.
    case integer(Int64)
    /// `$3 abc`, or `nil` for `$-1`.
    case bulk([UInt8]?)
    /// `*2 …`, or `nil` for `*-1`.
    case array([RESPValue]?)

    /// The reply as text, for messages.
    var text: String? {
        switch self {
        case .simple(let text), .error(let text): text
        case .bulk(let bytes?): String(decoding: bytes, as: UTF8.self)
        case .integer(let value): String(value)
        default: nil
        }
    }

    /// The reply as an integer: an integer, or a bulk string of digits.
    var integer: Int64? {
        switch self {
        case .integer(let value): value
        case .bulk(let bytes?): Int64(String(decoding: bytes, as: UTF8.self))
        default: nil
        }
    }

    /// The elements of an array reply.
    var elements: [RESPValue]? {
        if case .array(let elements?) = self { return elements }
        return nil
    }

    /// The bytes of a bulk reply.
    var bytes: [UInt8]? {
        if case .bulk(let bytes?) = self { return bytes }
        return nil
    }
}

/// Encodes commands.
enum RESPEncoder {
    /// Appends `arguments` as one command: an array of bulk strings.
    static func append(_ arguments: [[UInt8]], to output: inout [UInt8]) {
        output.append(UInt8(ascii: "*"))
        output.append(contentsOf: String(arguments.count).utf8)
        output.append(contentsOf: [0x0D, 0x0A])
        for argument in arguments {
            output.append(UInt8(ascii: "$"))
            output.append(contentsOf: String(argument.count).utf8)
            output.append(contentsOf: [0x0D, 0x0A])
            output.append(contentsOf: argument)
            output.append(contentsOf: [0x0D, 0x0A])
        }
    }
}

/// The bounds of what a reply may make the client hold.
struct RESPLimits: Sendable {
    /// The most bytes of one bulk string.
    var maximumBulkBytes: Int
    /// The most elements of one array.
    var maximumElements: Int
    /// The deepest nesting of arrays.
    var maximumDepth: Int = 8
}

/// Decodes replies from bytes as they arrive.
enum RESPDecoder {
    /// What one attempt to decode found.
    enum Outcome: Equatable {
        /// A reply, and how many bytes it took.
        case value(RESPValue, consumed: Int)
        /// Not all of it arrived: at least this many bytes in all are needed first.
        case incomplete(needed: Int)
        /// The bytes are not RESP, or pass a bound: why, naming the offset.
        case invalid(String)
    }

    private struct Failure: Error {
        var outcome: Outcome
    }

    /// Decodes the reply at the start of `bytes`.
    static func decode(_ bytes: UnsafeRawBufferPointer, limits: RESPLimits) -> Outcome {
        var offset = 0
        do {
            let value = try decodeValue(bytes, at: &offset, limits: limits, depth: 0)
            return .value(value, consumed: offset)
        } catch {
            return error.outcome
        }
    }

    /// The line that starts at `offset`, without its CRLF; moves past it.
    private static func line(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(Failure) -> Substring {
        var index = offset
        // A line longer than this (a number, a status) is not RESP from a sane server.
        let limit = min(bytes.count, offset + 64 * 1024)
        while index + 1 < limit {
            if bytes[index] == 0x0D, bytes[index + 1] == 0x0A {
                let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[offset..<index]), as: UTF8.self)
                offset = index + 2
                return Substring(text)
            }
            index += 1
        }
        if limit < bytes.count { throw Failure(outcome: .invalid("a reply line at byte \(offset) is longer than 64 KiB")) }
        throw Failure(outcome: .incomplete(needed: bytes.count + 1))
    }

    private static func number(_ text: Substring, at offset: Int) throws(Failure) -> Int {
        guard let value = Int(text) else { throw Failure(outcome: .invalid("\"\(text.prefix(40))\" at byte \(offset) is not a number")) }
        return value
    }

    private static func decodeValue(_ bytes: UnsafeRawBufferPointer, at offset: inout Int, limits: RESPLimits, depth: Int) throws(Failure) -> RESPValue {
        guard offset < bytes.count else { throw Failure(outcome: .incomplete(needed: offset + 1)) }
        let start = offset
        let kind = bytes[offset]
        offset += 1
        switch kind {
        case UInt8(ascii: "+"):
            return .simple(String(try line(bytes, at: &offset)))
        case UInt8(ascii: "-"):
            return .error(String(try line(bytes, at: &offset)))
        case UInt8(ascii: ":"):
            let text = try line(bytes, at: &offset)
            guard let value = Int64(text) else { throw Failure(outcome: .invalid("the integer \"\(text.prefix(40))\" at byte \(start) is not one")) }
            return .integer(value)
        case UInt8(ascii: "$"):
            let count = try number(try line(bytes, at: &offset), at: start)
            if count == -1 { return .bulk(nil) }
            guard count >= 0, count <= limits.maximumBulkBytes else {
                throw Failure(outcome: .invalid("a bulk string of \(count) bytes at byte \(start) is beyond the limit of \(limits.maximumBulkBytes) (RedisConfiguration.maximumReplyBytes)"))
            }
            let end = offset + count + 2
            guard end <= bytes.count else { throw Failure(outcome: .incomplete(needed: end)) }
            guard bytes[end - 2] == 0x0D, bytes[end - 1] == 0x0A else {
                throw Failure(outcome: .invalid("the bulk string at byte \(start) does not end with CRLF after its \(count) bytes"))
            }
            let value = [UInt8](UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)]))
            offset = end
            return .bulk(value)
        case UInt8(ascii: "*"):
            let count = try number(try line(bytes, at: &offset), at: start)
            if count == -1 { return .array(nil) }
            guard count >= 0, count <= limits.maximumElements else {
                throw Failure(outcome: .invalid("an array of \(count) elements at byte \(start) is beyond the limit of \(limits.maximumElements)"))
            }
            guard depth < limits.maximumDepth else {
                throw Failure(outcome: .invalid("arrays nested deeper than \(limits.maximumDepth) at byte \(start)"))
            }
            var elements: [RESPValue] = []
            elements.reserveCapacity(min(count, 1024))
            for _ in 0..<count {
                elements.append(try decodeValue(bytes, at: &offset, limits: limits, depth: depth + 1))
            }
            return .array(elements)
        default:
            throw Failure(outcome: .invalid("byte \(start) is 0x\(String(kind, radix: 16)), which starts no RESP reply"))
        }
    }
}
