/// Parses UTF-8 JSON text (RFC 8259) into a ``JSONValue`` in one pass.
///
/// The parser keeps its open arrays and objects on a stack of its own rather than on the
/// thread's call stack, so its cost grows with the length of the text and nothing else, and
/// a document nested deeper than `maximumDepth` is refused at the byte where it goes too
/// deep, before anything past it is read.
struct JSONParser {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var offset = 0
    private let maximumDepth: Int

    private init(bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    /// Parses `bytes` as one JSON value, with optional white space around it.
    ///
    /// - Parameters:
    ///   - bytes: The JSON text.
    ///   - maximumDepth: The most arrays and objects that may be open at once.
    /// - Returns: The value.
    /// - Throws: ``TetherError`` with ``TetherError/Code/decodingFailed`` that names what is
    ///   wrong and the byte offset where it was found.
    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) throws(TetherError) -> JSONValue {
        var parser = JSONParser(bytes: bytes, maximumDepth: max(0, maximumDepth))
        return try parser.parseDocument()
    }

    private mutating func parseDocument() throws(TetherError) -> JSONValue {
        // The open containers, innermost last. Arrays and objects being filled live in
        // stacks of their own so that adding to one mutates it in place.
        var open: [Bool] = []  // true: an array, false: an object
        var arrays: [[JSONValue]] = []
        var objects: [[String: JSONValue]] = []
        var keys: [String] = []
        skipWhitespace()
        while true {
            // A value starts here: a scalar, or a container that is empty or opens.
            var value: JSONValue
            switch try peek(expecting: "a value") {
            case UInt8(ascii: "["):
                try enter(depth: open.count)
                offset += 1
                skipWhitespace()
                if try peek(expecting: "a value or ]") == UInt8(ascii: "]") {
                    offset += 1
                    value = .array([])
                } else {
                    open.append(true)
                    arrays.append([])
                    continue
                }
            case UInt8(ascii: "{"):
                try enter(depth: open.count)
                offset += 1
                skipWhitespace()
                if try peek(expecting: "a member name or }") == UInt8(ascii: "}") {
                    offset += 1
                    value = .object([:])
                } else {
                    keys.append(try parseMemberName())
                    open.append(false)
                    objects.append([:])
                    continue
                }
            default:
                value = try parseScalar()
            }
            // The value is complete: it goes into the innermost open container, which
            // either expects another element or closes (and is then complete in turn).
            while true {
                skipWhitespace()
                guard let isArray = open.last else {
                    guard offset == bytes.count else { throw failure("unexpected \(describeByte()) after the JSON value") }
                    return value
                }
                if isArray {
                    arrays[arrays.count - 1].append(value)
                    let separator = try next(expecting: ", or ]")
                    if separator == UInt8(ascii: "]") {
                        open.removeLast()
                        value = .array(arrays.removeLast())
                        continue
                    }
                    guard separator == UInt8(ascii: ",") else {
                        offset -= 1
                        throw failure("expected , or ] in an array, found \(describeByte())")
                    }
                    skipWhitespace()
                } else {
                    objects[objects.count - 1][keys.removeLast()] = value
                    let separator = try next(expecting: ", or }")
                    if separator == UInt8(ascii: "}") {
                        open.removeLast()
                        value = .object(objects.removeLast())
                        continue
                    }
                    guard separator == UInt8(ascii: ",") else {
                        offset -= 1
                        throw failure("expected , or } in an object, found \(describeByte())")
                    }
                    skipWhitespace()
                    keys.append(try parseMemberName())
                }
                break
            }
        }
    }

    /// Refuses one more open container when `depth` are open already.
    private func enter(depth: Int) throws(TetherError) {
        if depth >= maximumDepth {
            throw failure("JSON nested deeper than \(maximumDepth) levels")
        }
    }

    /// `"name"`, white space, `:` and white space.
    private mutating func parseMemberName() throws(TetherError) -> String {
        guard try peek(expecting: "a member name") == UInt8(ascii: "\"") else {
            throw failure("expected a member name in quotes, found \(describeByte())")
        }
        let name = try parseString()
        skipWhitespace()
        guard try next(expecting: ":") == UInt8(ascii: ":") else {
            offset -= 1
            throw failure("expected : after a member name, found \(describeByte())")
        }
        skipWhitespace()
        return name
    }

    private mutating func parseScalar() throws(TetherError) -> JSONValue {
        let byte = bytes[offset]
        switch byte {
        case UInt8(ascii: "\""):
            return .string(try parseString())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try parseNumber()
        default:
            throw failure("expected a value, found \(describeByte())")
        }
    }

    private mutating func literal(_ word: StaticString) throws(TetherError) {
        let count = word.utf8CodeUnitCount
        let matches = bytes.count - offset >= count && word.withUTF8Buffer { expected in
            (0..<count).allSatisfy { bytes[offset + $0] == expected[$0] }
        }
        guard matches else { throw failure("expected a value, found \(describeByte())") }
        offset += count
    }

    // MARK: Numbers

    /// A number as the grammar has it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    /// A whole number that fits in an `Int` becomes ``JSONValue/int(_:)``.
    private mutating func parseNumber() throws(TetherError) -> JSONValue {
        let start = offset
        var negative = false
        if bytes[offset] == UInt8(ascii: "-") {
            negative = true
            offset += 1
        }
        guard offset < bytes.count, isDigit(bytes[offset]) else { throw failure("expected a digit in a number") }
        var magnitude: UInt64 = 0
        var overflow = false
        if bytes[offset] == UInt8(ascii: "0") {
            offset += 1
            if offset < bytes.count, isDigit(bytes[offset]) {
                throw failure("a number may not start with 0 and more digits")
            }
        } else {
            while offset < bytes.count, isDigit(bytes[offset]) {
                let (times, o1) = magnitude.multipliedReportingOverflow(by: 10)
                let (plus, o2) = times.addingReportingOverflow(UInt64(bytes[offset] &- UInt8(ascii: "0")))
                magnitude = plus
                overflow = overflow || o1 || o2
                offset += 1
            }
        }
        var whole = true
        if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
            whole = false
            offset += 1
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw failure("expected a digit after the decimal point") }
            while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
            whole = false
            offset += 1
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw failure("expected a digit in the exponent") }
            while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
        }
        if whole, !overflow {
            if !negative, magnitude <= UInt64(Int.max) { return .int(Int(magnitude)) }
            if negative, magnitude <= UInt64(Int.max) + 1 { return .int(magnitude == UInt64(Int.max) + 1 ? .min : -Int(magnitude)) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
        guard let number = Double(text), number.isFinite else {
            offset = start
            throw failure("the number \(text.prefix(40)) is out of range")
        }
        // As before: a whole number written with a fraction or an exponent is still whole.
        if number.rounded() == number, abs(number) < 9.2e18 { return .int(Int(number)) }
        return .double(number)
    }

    private func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    // MARK: Strings

    /// A string, from its opening quote to its closing one.
    private mutating func parseString() throws(TetherError) -> String {
        let opening = offset
        offset += 1
        let start = offset
        // The common case: no escapes, one validation of the bytes as UTF-8.
        while offset < bytes.count {
            let byte = bytes[offset]
            if byte == UInt8(ascii: "\"") {
                let text = try validated(start..<offset)
                offset += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw failure("a control character must be escaped in a string") }
            offset += 1
        }
        guard offset < bytes.count else {
            offset = opening
            throw failure("a string is not closed")
        }
        var unescaped = Array(UnsafeBufferPointer(rebasing: bytes[start..<offset]))
        while true {
            guard offset < bytes.count else {
                offset = opening
                throw failure("a string is not closed")
            }
            let byte = bytes[offset]
            switch byte {
            case UInt8(ascii: "\""):
                offset += 1
                guard let text = String(validating: unescaped, as: UTF8.self) else {
                    offset = opening
                    throw failure("a string is not valid UTF-8")
                }
                return text
            case UInt8(ascii: "\\"):
                offset += 1
                try unescape(into: &unescaped)
            case ..<0x20:
                throw failure("a control character must be escaped in a string")
            default:
                unescaped.append(byte)
                offset += 1
            }
        }
    }

    private func validated(_ range: Range<Int>) throws(TetherError) -> String {
        guard let text = String(validating: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self) else {
            var parser = self
            parser.offset = range.lowerBound - 1
            throw parser.failure("a string is not valid UTF-8")
        }
        return text
    }

    /// The escape after a backslash.
    private mutating func unescape(into text: inout [UInt8]) throws(TetherError) {
        let letter = try next(expecting: "an escape")
        switch letter {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(letter)
        case UInt8(ascii: "b"): text.append(0x08)
        case UInt8(ascii: "f"): text.append(0x0C)
        case UInt8(ascii: "n"): text.append(0x0A)
        case UInt8(ascii: "r"): text.append(0x0D)
        case UInt8(ascii: "t"): text.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try hexQuad())
            if (0xD800...0xDBFF).contains(scalar) {
                // A high surrogate must be followed by an escaped low one.
                guard bytes.count - offset >= 6, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u") else {
                    throw failure("a \\u escape of a high surrogate is not followed by a low one")
                }
                offset += 2
                let low = UInt32(try hexQuad())
                guard (0xDC00...0xDFFF).contains(low) else { throw failure("a \\u escape of a high surrogate is not followed by a low one") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw failure("a \\u escape of a low surrogate has no high one before it")
            }
            guard let unicode = Unicode.Scalar(scalar) else { throw failure("a \\u escape is not a Unicode scalar") }
            text.append(contentsOf: UTF8.encode(unicode)!)
        default:
            offset -= 1
            throw failure("\\\(describeByte()) is not an escape")
        }
    }

    private mutating func hexQuad() throws(TetherError) -> UInt16 {
        guard bytes.count - offset >= 4 else { throw failure("a \\u escape needs four hex digits") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = bytes[offset]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("a \\u escape needs four hex digits")
            }
            value = value << 4 | UInt16(digit)
            offset += 1
        }
        return value
    }

    // MARK: Bytes

    private mutating func skipWhitespace() {
        while offset < bytes.count {
            switch bytes[offset] {
            case 0x20, 0x0A, 0x0D, 0x09: offset += 1
            default: return
            }
        }
    }

    private func peek(expecting what: String) throws(TetherError) -> UInt8 {
        guard offset < bytes.count else { throw failure("the JSON text ends where \(what) was expected") }
        return bytes[offset]
    }

    private mutating func next(expecting what: String) throws(TetherError) -> UInt8 {
        let byte = try peek(expecting: what)
        offset += 1
        return byte
    }

    private func describeByte() -> String {
        guard offset < bytes.count else { return "the end" }
        let byte = bytes[offset]
        if byte >= 0x21 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x\(String(byte, radix: 16, uppercase: true))"
    }

    private func failure(_ message: String) -> TetherError {
        TetherError(code: .decodingFailed, message: "content is not valid JSON: \(message) at byte \(offset)")
    }
}
