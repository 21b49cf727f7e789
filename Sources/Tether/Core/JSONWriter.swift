/// Writes a ``JSONValue`` as UTF-8 JSON text: members sorted by the bytes of their names,
/// no white space, slashes not escaped.
///
/// It keeps what is left to write on a stack of its own, so its cost grows with the size of
/// the value and nothing else, and a value nested however deep is written, never replaced.
enum JSONWriter {
    /// What is left to write, the next item last.
    private enum Item {
        case value(JSONValue)
        case byte(UInt8)
        case name(String)
    }

    /// Appends the JSON text of `value` to `output`.
    ///
    /// - Parameters:
    ///   - value: The value to write. A number that is not finite is written as `null`.
    ///   - output: The bytes to append to.
    static func write(_ value: JSONValue, into output: inout [UInt8]) {
        var pending: [Item] = [.value(value)]
        while let item = pending.popLast() {
            switch item {
            case .byte(let byte):
                output.append(byte)
            case .name(let name):
                writeString(name, into: &output)
                output.append(UInt8(ascii: ":"))
            case .value(let value):
                switch value {
                case .null: output.append(contentsOf: "null".utf8)
                case .bool(let flag): output.append(contentsOf: (flag ? "true" : "false").utf8)
                case .int(let number): output.append(contentsOf: String(number).utf8)
                case .double(let number): writeDouble(number, into: &output)
                case .string(let text): writeString(text, into: &output)
                case .array(let elements):
                    output.append(UInt8(ascii: "["))
                    pending.append(.byte(UInt8(ascii: "]")))
                    for index in elements.indices.reversed() {
                        pending.append(.value(elements[index]))
                        if index > elements.startIndex { pending.append(.byte(UInt8(ascii: ","))) }
                    }
                case .object(let members):
                    output.append(UInt8(ascii: "{"))
                    pending.append(.byte(UInt8(ascii: "}")))
                    let names = members.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
                    for index in names.indices.reversed() {
                        pending.append(.value(members[names[index]]!))
                        pending.append(.name(names[index]))
                        if index > names.startIndex { pending.append(.byte(UInt8(ascii: ","))) }
                    }
                }
            }
        }
    }

    /// The shortest text that reads back as the same number; a whole number without `.0`.
    private static func writeDouble(_ number: Double, into output: inout [UInt8]) {
        guard number.isFinite else {
            output.append(contentsOf: "null".utf8)
            return
        }
        var text = number.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        output.append(contentsOf: text.utf8)
    }

    private static func writeString(_ text: String, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            var clean = 0  // bytes not yet copied that need no escape
            for (index, byte) in bytes.enumerated() {
                let escape: UInt8?
                switch byte {
                case UInt8(ascii: "\""): escape = UInt8(ascii: "\"")
                case UInt8(ascii: "\\"): escape = UInt8(ascii: "\\")
                case 0x0A: escape = UInt8(ascii: "n")
                case 0x0D: escape = UInt8(ascii: "r")
                case 0x09: escape = UInt8(ascii: "t")
                case 0x08: escape = UInt8(ascii: "b")
                case 0x0C: escape = UInt8(ascii: "f")
                case ..<0x20: escape = UInt8(ascii: "u")
                default: continue
                }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[clean..<index]))
                clean = index + 1
                output.append(UInt8(ascii: "\\"))
                output.append(escape!)
                if escape == UInt8(ascii: "u") {
                    output.append(UInt8(ascii: "0"))
                    output.append(UInt8(ascii: "0"))
                    output.append(hexDigit(byte >> 4))
                    output.append(hexDigit(byte & 0xF))
                }
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[clean...]))
        }
        output.append(UInt8(ascii: "\""))
    }

    /// The lowercase hex digit for `value` (0…15).
    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }
}
