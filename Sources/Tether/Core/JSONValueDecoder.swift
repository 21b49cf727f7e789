import Foundation

/// Decodes `Decodable` types from a parsed ``JSONValue``.
///
/// Used for the content of requests, responses and frames: the text is parsed once by
/// ``JSONParser`` (linear, depth-limited), then decoded from the tree. A ``JSONValue`` inside
/// the type is taken from the tree as it is, with no trial decoding, so the cost stays in
/// proportion to the text however deep it nests. It follows `JSONDecoder`'s default
/// strategies: `Data` as a Base64 string, `Date` as seconds since 2001, `URL` as a string.
struct JSONValueDecoder: Decoder {
    let value: JSONValue
    /// The path to `value`, built into an array only when an error needs it.
    let path: CodingPathNode?

    var codingPath: [any CodingKey] { path?.keys ?? [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try JSONValueDecoder(value: value, path: nil).decodeValue(T.self)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else {
            throw mismatch([String: JSONValue].self, "an object")
        }
        return KeyedDecodingContainer(Keyed<Key>(members: members, path: path))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else {
            throw mismatch([JSONValue].self, "an array")
        }
        return Unkeyed(elements: elements, path: path)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    /// `T` from `value`, with the types `JSONDecoder` treats specially by default.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == JSONValue.self { return value as! T }
        if T.self == Data.self {
            guard case .string(let text) = value else { throw mismatch(Data.self, "a Base64 string") }
            guard let data = Data(base64Encoded: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "the string is not valid Base64"))
            }
            return data as! T
        }
        if T.self == URL.self {
            guard case .string(let text) = value else { throw mismatch(URL.self, "a URL string") }
            guard let url = URL(string: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "the string is not a valid URL"))
            }
            return url as! T
        }
        if T.self == Decimal.self {
            switch value {
            case .int(let number): return Decimal(number) as! T
            case .double(let number): return Decimal(number) as! T
            default: throw mismatch(Decimal.self, "a number")
            }
        }
        return try T(from: self)
    }

    func mismatch(_ type: Any.Type, _ expected: String) -> DecodingError {
        DecodingError.typeMismatch(type, .init(codingPath: codingPath, debugDescription: "expected \(expected), found \(kind)"))
    }

    private var kind: String {
        switch value {
        case .null: "null"
        case .bool: "a Boolean"
        case .int, .double: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    // MARK: Containers

    private struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let members: [String: JSONValue]
        let path: CodingPathNode?

        var codingPath: [any CodingKey] { path?.keys ?? [] }
        var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }

        func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

        private func member(_ key: Key) throws -> JSONValueDecoder {
            guard let value = members[key.stringValue] else {
                throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no member named \"\(key.stringValue)\""))
            }
            return JSONValueDecoder(value: value, path: CodingPathNode(parent: path, key: key))
        }

        func decodeNil(forKey key: Key) throws -> Bool { try member(key).decodeNil() }

        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            try member(key).decodeValue(T.self)
        }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            try member(key).container(keyedBy: NestedKey.self)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try member(key).unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder {
            let key = JSONCodingKey("super")
            return JSONValueDecoder(value: members["super"] ?? .null, path: CodingPathNode(parent: path, key: key))
        }

        func superDecoder(forKey key: Key) throws -> any Decoder {
            JSONValueDecoder(value: members[key.stringValue] ?? .null, path: CodingPathNode(parent: path, key: key))
        }
    }

    private struct Unkeyed: UnkeyedDecodingContainer {
        let elements: [JSONValue]
        let path: CodingPathNode?
        var currentIndex = 0

        init(elements: [JSONValue], path: CodingPathNode?) {
            self.elements = elements
            self.path = path
        }

        var codingPath: [any CodingKey] { path?.keys ?? [] }
        var count: Int? { elements.count }
        var isAtEnd: Bool { currentIndex >= elements.count }

        private mutating func next(_ type: Any.Type) throws -> JSONValueDecoder {
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(type, .init(
                    codingPath: codingPath + [JSONCodingKey(index: currentIndex)],
                    debugDescription: "the array has only \(elements.count) elements"
                ))
            }
            let decoder = JSONValueDecoder(value: elements[currentIndex], path: CodingPathNode(parent: path, key: JSONCodingKey(index: currentIndex)))
            currentIndex += 1
            return decoder
        }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd else { return try next(Never.self).decodeNil() }
            if elements[currentIndex] == .null {
                currentIndex += 1
                return true
            }
            return false
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            try next(T.self).decodeValue(T.self)
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            try next([String: JSONValue].self).container(keyedBy: NestedKey.self)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try next([JSONValue].self).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder {
            try next(JSONValue.self)
        }
    }
}

// MARK: Single values

extension JSONValueDecoder: SingleValueDecodingContainer {
    func decodeNil() -> Bool { value == .null }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch(Bool.self, "a Boolean") }
        return flag
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let text) = value else { throw mismatch(String.self, "a string") }
        return text
    }

    func decode(_ type: Double.Type) throws -> Double {
        switch value {
        case .int(let number): return Double(number)
        case .double(let number): return number
        default: throw mismatch(Double.self, "a number")
        }
    }

    func decode(_ type: Float.Type) throws -> Float {
        let number = try decode(Double.self)
        guard abs(number) <= Double(Float.greatestFiniteMagnitude) else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "the number \(number) does not fit in Float"))
        }
        return Float(number)
    }

    func decode(_ type: Int.Type) throws -> Int { try integer() }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer() }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer() }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer() }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer() }
    func decode(_ type: UInt.Type) throws -> UInt { try integer() }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer() }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer() }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer() }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer() }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(T.self) }

    /// A whole number that fits in `T`.
    private func integer<T: FixedWidthInteger>() throws -> T {
        let whole: T?
        switch value {
        case .int(let number): whole = T(exactly: number)
        case .double(let number): whole = T(exactly: number)
        default: throw mismatch(T.self, "a whole number")
        }
        guard let whole else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "the number \(value) does not fit in \(T.self)"))
        }
        return whole
    }
}

/// One step of a coding path, linked to its parent: a decoder deep in a document holds one
/// reference, not a copy of the whole path.
final class CodingPathNode: Sendable {
    let parent: CodingPathNode?
    let key: JSONCodingKey

    init(parent: CodingPathNode?, key: any CodingKey) {
        self.parent = parent
        self.key = JSONCodingKey(key)
    }

    var keys: [any CodingKey] {
        var keys: [any CodingKey] = []
        var node: CodingPathNode? = self
        while let current = node {
            keys.append(current.key)
            node = current.parent
        }
        return keys.reversed()
    }
}

/// A coding key for paths in errors: a member name or an array index.
struct JSONCodingKey: CodingKey, Sendable {
    let stringValue: String
    let intValue: Int?

    init(_ name: String) {
        stringValue = name
        intValue = nil
    }

    init(index: Int) {
        stringValue = "Index \(index)"
        intValue = index
    }

    init(_ key: any CodingKey) {
        stringValue = key.stringValue
        intValue = key.intValue
    }

    init?(stringValue: String) { self.init(stringValue) }
    init?(intValue: Int) { self.init(index: intValue) }
}

/// A decoding error as one line: what is wrong, and where (`items[2].name`).
func describe(decodingError error: any Error) -> String {
    guard let error = error as? DecodingError else { return String(describing: error) }
    let context: DecodingError.Context
    switch error {
    case .typeMismatch(_, let found), .valueNotFound(_, let found), .keyNotFound(_, let found), .dataCorrupted(let found):
        context = found
    @unknown default:
        return String(describing: error)
    }
    var path = ""
    for key in context.codingPath {
        if let index = key.intValue {
            path += "[\(index)]"
        } else {
            path += path.isEmpty ? key.stringValue : ".\(key.stringValue)"
        }
    }
    var text = context.debugDescription
    if let underlying = context.underlyingError {
        // Foundation's parser says what is wrong with the text here ("too deep", the offset).
        text += " (\(underlying))"
    }
    return path.isEmpty ? text : "\(text) at \(path)"
}
