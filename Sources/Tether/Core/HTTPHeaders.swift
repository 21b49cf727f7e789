/// Whether a byte may appear in an HTTP token (a method or a header name).
package func isTokenByte(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
        return true
    default:
        return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
    }
}

/// HTTP header fields: an ordered list of names and values, looked up without regard to case.
///
/// A name may appear more than once (`Set-Cookie`, for example); ``subscript(_:)`` reads
/// the first value and ``values(for:)`` all of them.
///
/// ```swift
/// var headers: TetherHTTPHeaders = ["Accept": "application/json"]
/// headers.add(name: "X-Trace", value: "7f3a")
/// headers["accept"]            // "application/json"
/// ```
public struct TetherHTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral, CustomStringConvertible {
    /// One header field.
    public struct Field: Sendable, Hashable {
        /// The field's name, as written.
        public var name: String
        /// The field's value.
        public var value: String

        /// Creates a header field.
        ///
        /// - Parameters:
        ///   - name: The field's name.
        ///   - value: The field's value.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    private var fields: [Field]

    /// Creates an empty set of headers.
    public init() {
        fields = []
    }

    /// Creates headers from name and value pairs, in order.
    ///
    /// - Parameter pairs: The fields, in the order they are sent.
    public init(_ pairs: [(String, String)]) {
        fields = pairs.map { Field(name: $0.0, value: $0.1) }
    }

    /// Creates headers from a dictionary literal, in the literal's order.
    ///
    /// - Parameter elements: The fields, in the order they are sent.
    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// The number of fields, repeated names counted each time.
    public var count: Int { fields.count }

    /// Whether there are no fields.
    public var isEmpty: Bool { fields.isEmpty }

    /// The first value of the named field, compared without regard to case; setting a value
    /// replaces every field of that name, and setting `nil` removes them.
    ///
    /// - Parameter name: The field's name, in any case.
    public subscript(name: String) -> String? {
        get { fields.first { equalsIgnoringCase($0.name, name) }?.value }
        set {
            if let newValue {
                if let index = fields.firstIndex(where: { equalsIgnoringCase($0.name, name) }) {
                    fields[index].value = newValue
                    let tail = fields[(index + 1)...].filter { !equalsIgnoringCase($0.name, name) }
                    fields.replaceSubrange((index + 1)..., with: tail)
                } else {
                    fields.append(Field(name: name, value: newValue))
                }
            } else {
                remove(name: name)
            }
        }
    }

    /// Every value of the named field, in order.
    ///
    /// - Parameter name: The field's name, in any case.
    /// - Returns: The values; empty when there is no such field.
    public func values(for name: String) -> [String] {
        fields.filter { equalsIgnoringCase($0.name, name) }.map(\.value)
    }

    /// Whether a field of this name is present.
    ///
    /// - Parameter name: The field's name, in any case.
    /// - Returns: `true` when at least one field has this name.
    public func contains(name: String) -> Bool {
        fields.contains { equalsIgnoringCase($0.name, name) }
    }

    /// Appends a field, keeping any others of the same name.
    ///
    /// - Parameters:
    ///   - name: The field's name.
    ///   - value: The field's value.
    public mutating func add(name: String, value: String) {
        fields.append(Field(name: name, value: value))
    }

    /// Removes every field of this name.
    ///
    /// - Parameter name: The field's name, in any case.
    public mutating func remove(name: String) {
        fields.removeAll { equalsIgnoringCase($0.name, name) }
    }

    /// Keeps only the fields for which the predicate is true.
    ///
    /// - Parameter isIncluded: Decides, for each field, whether it stays.
    /// - Returns: The fields that stay, in order.
    /// - Throws: Whatever `isIncluded` throws.
    public func filter(_ isIncluded: (Field) throws -> Bool) rethrows -> TetherHTTPHeaders {
        var result = TetherHTTPHeaders()
        result.fields = try fields.filter(isIncluded)
        return result
    }

    /// Iterates over the fields in order.
    ///
    /// - Returns: An iterator over the fields.
    public func makeIterator() -> IndexingIterator<[Field]> {
        fields.makeIterator()
    }

    /// The fields as `Name: value` lines.
    public var description: String {
        fields.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }
}

/// Compares two ASCII names without regard to case, without allocating.
func equalsIgnoringCase(_ lhs: String, _ rhs: String) -> Bool {
    let a = lhs.utf8, b = rhs.utf8
    guard a.count == b.count else { return false }
    for (x, y) in zip(a, b) where x != y {
        let lx = x >= 65 && x <= 90 ? x | 0x20 : x
        let ly = y >= 65 && y <= 90 ? y | 0x20 : y
        if lx != ly { return false }
    }
    return true
}

