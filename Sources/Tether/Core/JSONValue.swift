import Foundation

/// A JSON value: what the seed protocol carries as content.
///
/// Write it with literals (`["hello": "world", "count": 3]`), read it with subscripts
/// (`reply.json?["echo"]?["hello"]?.stringValue`). For your own types, use `Codable`
/// with ``Request/init(type:encoding:encoder:)`` and ``Response/decode(_:decoder:)``.
public enum JSONValue: Sendable, Hashable, Codable, CustomStringConvertible {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A whole number that fits in an `Int`.
    case int(Int)
    /// Any other number. One that is not finite (infinity, NaN) is written as `null`.
    case double(Double)
    /// A string.
    case string(String)
    /// An array, in order.
    case array([JSONValue])
    /// An object: members by name. Encoded with its keys sorted.
    case object([String: JSONValue])

    /// The most arrays and objects that parsed JSON text may have open at once: 512.
    ///
    /// Parsing costs time in proportion to the length of the text, however it nests; this
    /// limit bounds the depth of what it builds. Text nested deeper is refused with a
    /// ``TetherError/Code/decodingFailed`` error that names the limit and the byte offset.
    public static let defaultMaximumDepth = 512

    /// Parses UTF-8 JSON text (RFC 8259).
    ///
    /// The whole text must be one value, with optional white space around it. A whole
    /// number that fits in an `Int` becomes ``int(_:)``, even when written with a fraction or
    /// an exponent (`1.0`, `1e3`); other numbers become ``double(_:)``; a member name given
    /// twice keeps its last value. The time it takes grows with the length of the text only.
    ///
    /// - Parameters:
    ///   - bytes: The JSON text.
    ///   - maximumDepth: The most arrays and objects that may be open at once;
    ///     ``defaultMaximumDepth`` unless given.
    /// - Throws: ``TetherError`` with ``TetherError/Code/decodingFailed`` when it is not JSON,
    ///   is not UTF-8, has a number out of the range of `Double`, or nests deeper than
    ///   `maximumDepth`; the message says what and at which byte.
    public init<Bytes: Collection<UInt8>>(parsing bytes: Bytes, maximumDepth: Int = JSONValue.defaultMaximumDepth) throws(TetherError) {
        let parsed = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(TetherError) in try JSONParser.parse(buffer, maximumDepth: maximumDepth) }
        }
        if let parsed {
            self = try parsed.get()
        } else {
            let copy = Array(bytes)
            self = try copy.withUnsafeBufferPointer { buffer throws(TetherError) in
                try JSONParser.parse(buffer, maximumDepth: maximumDepth)
            }
        }
    }

    /// The UTF-8 JSON text of this value: members sorted by the bytes of their names, no
    /// white space. A number that is not finite is written as `null`; nothing else is ever
    /// replaced, however deep the value nests.
    public var encoded: [UInt8] {
        var output: [UInt8] = []
        JSONWriter.write(self, into: &output)
        return output
    }

    /// A short textual form, for logs and messages.
    public var description: String { String(decoding: encoded, as: UTF8.self) }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// Decodes whatever JSON value the decoder holds: `null`, a Boolean, a whole number
    /// (as ``int(_:)`` when it fits in an `Int`), any other number, a string, an array or
    /// an object.
    ///
    /// - Parameter decoder: The decoder to read from.
    /// - Throws: The decoder's `DecodingError` when the value is none of these.
    public init(from decoder: any Decoder) throws {
        if let decoder = decoder as? JSONValueDecoder {
            // Content of requests, responses and frames: already parsed, taken as it is.
            self = decoder.value
            return
        }
        if decoder.codingPath.count >= JSONValue.defaultMaximumDepth {
            throw DecodingError.dataCorrupted(.init(
                codingPath: decoder.codingPath,
                debugDescription: "JSON nested deeper than \(JSONValue.defaultMaximumDepth) levels"
            ))
        }
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// Encodes the value as the JSON it stands for.
    ///
    /// - Parameter encoder: The encoder to write to.
    /// - Throws: The encoder's `EncodingError`, if it refuses the value.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value):
            if value.isFinite { try container.encode(value) } else { try container.encodeNil() }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The member `key` of an object, or `nil`.
    ///
    /// - Parameter key: The member's name.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The element at `index` of an array, or `nil`.
    ///
    /// - Parameter index: The element's position, from 0; one out of range gives `nil`.
    public subscript(index: Int) -> JSONValue? {
        if case .array(let elements) = self, elements.indices.contains(index) { return elements[index] }
        return nil
    }

    /// The string, if this is a string.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The integer, if this is a whole number.
    public var intValue: Int? {
        switch self {
        case .int(let value): value
        case .double(let value) where value.rounded() == value && abs(value) < 9e15: Int(value)
        default: nil
        }
    }

    /// The number, if this is a number.
    public var doubleValue: Double? {
        switch self {
        case .int(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }

    /// The Boolean, if this is `true` or `false`.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The members, if this is an object.
    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The elements, if this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    /// ``null``, written `nil`.
    ///
    /// - Parameter nilLiteral: Nothing: the literal `nil`.
    public init(nilLiteral: ()) { self = .null }

    /// ``bool(_:)``, written `true` or `false`.
    ///
    /// - Parameter value: The literal.
    public init(booleanLiteral value: Bool) { self = .bool(value) }

    /// ``int(_:)``, written as a whole number: `3`.
    ///
    /// - Parameter value: The literal.
    public init(integerLiteral value: Int) { self = .int(value) }

    /// ``double(_:)``, written with a fraction or an exponent: `0.5`, `1e3`.
    ///
    /// - Parameter value: The literal.
    public init(floatLiteral value: Double) { self = .double(value) }

    /// ``string(_:)``, written as a string literal.
    ///
    /// - Parameter value: The literal.
    public init(stringLiteral value: String) { self = .string(value) }

    /// ``array(_:)``, written as an array literal: `[1, "two", nil]`.
    ///
    /// - Parameter elements: The elements, in order.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }

    /// ``object(_:)``, written as a dictionary literal: `["hello": "world"]`. When a key
    /// appears more than once, the last value wins.
    ///
    /// - Parameter elements: The members, as name and value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

/// JSON helpers shared by ``Request``, ``Response`` and ``Frame``.
package enum JSONCoding {
    /// `value` as JSON: with `encoder` when given, otherwise a ``JSONValue`` by
    /// ``JSONWriter`` and anything else by ``JSONValue/encoder``.
    static func encode<T: Encodable>(_ value: T, with encoder: JSONEncoder? = nil) throws(TetherError) -> [UInt8] {
        if encoder == nil, let value = value as? JSONValue { return value.encoded }
        do {
            return Array(try (encoder ?? JSONValue.encoder).encode(value))
        } catch {
            throw TetherError(code: .encodingFailed, message: "cannot encode \(T.self) as JSON: \(error)")
        }
    }

    /// `T` from the JSON `payload`, parsed by ``JSONParser``: for the other modules of the
    /// package, which do not see Foundation's decoder through this one.
    package static func decode<T: Decodable>(_ type: T.Type, from payload: [UInt8], what: String) throws(TetherError) -> T {
        try decode(type, from: payload, what: what, with: nil)
    }

    /// `T` from the JSON `payload`: with `decoder` when given, otherwise parsed by
    /// ``JSONParser`` and decoded by ``JSONValueDecoder``. `what` names the content in errors.
    static func decode<T: Decodable>(_ type: T.Type, from payload: [UInt8], what: String, with decoder: JSONDecoder? = nil) throws(TetherError) -> T {
        if let decoder {
            do {
                return try decoder.decode(T.self, from: Data(payload))
            } catch {
                throw TetherError(code: .decodingFailed, message: "cannot decode \(what) as \(T.self): \(describe(decodingError: error))")
            }
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: payload)
        } catch {
            throw TetherError(code: .decodingFailed, message: "cannot decode \(what) as \(T.self): \(error.message)")
        }
        do {
            return try JSONValueDecoder.decode(T.self, from: value)
        } catch {
            throw TetherError(code: .decodingFailed, message: "cannot decode \(what) as \(T.self): \(describe(decodingError: error))")
        }
    }

    static func serialize(_ object: [String: Any]) throws(TetherError) -> [UInt8] {
        guard JSONSerialization.isValidJSONObject(object) else {
            throw TetherError(code: .encodingFailed, message: "dictionary is not a valid JSON object")
        }
        do {
            return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
        } catch {
            throw TetherError(code: .encodingFailed, message: "cannot encode dictionary as JSON: \(error)")
        }
    }

    static func deserialize(_ payload: [UInt8], what: String) throws(TetherError) -> [String: Any] {
        do {
            guard let object = try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any] else {
                throw TetherError(code: .decodingFailed, message: "\(what) is not a JSON object")
            }
            return object
        } catch let error as TetherError {
            throw error
        } catch {
            throw TetherError(code: .decodingFailed, message: "\(what) is not valid JSON: \(error)")
        }
    }
}

extension Frame {
    /// The payload parsed as JSON, or `nil` if it is empty or not JSON.
    public var json: JSONValue? {
        payload.isEmpty ? nil : try? JSONValue(parsing: payload)
    }

}
