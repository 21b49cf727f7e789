import Foundation

/// A JSON value: what the seed protocol carries as content.
///
/// Write it with literals (`["hello": "world", "count": 3]`), read it with subscripts
/// (`reply.json?["echo"]?["hello"]?.stringValue`). For your own types, use `Codable`
/// with ``Request/init(type:encoding:)`` and ``Response/decode(_:)``.
public enum JSONValue: Sendable, Hashable, Codable, CustomStringConvertible {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// Parses UTF-8 JSON text.
    ///
    /// - Parameter bytes: The JSON text.
    /// - Throws: ``TetherError`` with ``TetherError/Code/decodingFailed`` when it is not JSON.
    public init<Bytes: Collection<UInt8>>(parsing bytes: Bytes) throws(TetherError) {
        do {
            self = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw TetherError(code: .decodingFailed, message: "content is not valid JSON: \(error)")
        }
    }

    /// The UTF-8 JSON text of this value, with sorted keys.
    public var encoded: [UInt8] {
        // Encoding a JSONValue cannot fail except for non-finite doubles, written as null.
        (try? Array(JSONValue.encoder.encode(self))) ?? Array("null".utf8)
    }

    /// A short textual form, for logs and messages.
    public var description: String { String(decoding: encoded, as: UTF8.self) }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    public init(from decoder: any Decoder) throws {
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
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The element at `index` of an array, or `nil`.
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
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

/// JSON helpers shared by ``Request``, ``Response`` and ``Frame``.
enum JSONCoding {
    static func encode<T: Encodable>(_ value: T) throws(TetherError) -> [UInt8] {
        do {
            return Array(try JSONValue.encoder.encode(value))
        } catch {
            throw TetherError(code: .encodingFailed, message: "cannot encode \(T.self) as JSON: \(error)")
        }
    }

    static func decode<T: Decodable>(_ type: T.Type, from payload: [UInt8], what: String) throws(TetherError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(payload))
        } catch {
            throw TetherError(code: .decodingFailed, message: "cannot decode \(what) as \(T.self): \(error)")
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

    /// The payload decoded as `T` from JSON.
    ///
    /// - Parameter type: The type to decode.
    /// - Returns: The decoded value.
    /// - Throws: ``TetherError`` with ``TetherError/Code/decodingFailed``.
    public func decode<T: Decodable>(_ type: T.Type) throws(TetherError) -> T {
        try JSONCoding.decode(T.self, from: payload, what: "frame \(hex(self.type)) content")
    }
}
