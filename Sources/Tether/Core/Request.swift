public import Foundation

/// A request: a type and content, sent with ``Connection/request(_:timeout:)``.
///
/// The connection gives it a fresh serial; the response comes back with the same type and
/// serial. On a server, handlers receive the request with its ``serial`` set.
public struct Request: Sendable, Hashable {
    /// The request type; above `0x400` in the seed profile.
    public var type: UInt32
    /// The content bytes.
    public var payload: [UInt8]
    /// The serial the request travelled with. Set on a server; ignored when sending. In a
    /// profile without serials on the wire, a server numbers each type's requests 1, 2, 3…
    public var serial: UInt32
    /// Values for the profile's named header fields (``Frame/fields``); fields left out take
    /// the layout's defaults. On a server, the fields the request arrived with.
    public var fields: [String: UInt64]
    /// On a server, whether the request's checksum verified, in profiles that carry one.
    public var integrity: FrameIntegrity

    /// Creates a request with raw content.
    ///
    /// - Parameters:
    ///   - type: The request type.
    ///   - payload: The content bytes.
    ///   - fields: Values for the profile's named header fields.
    public init(type: UInt32, payload: [UInt8] = [], fields: [String: UInt64] = [:]) {
        self.type = type
        self.payload = payload
        self.serial = 0
        self.fields = fields
        self.integrity = .unchecked
    }

    /// Creates a request whose content is a JSON value.
    ///
    /// - Parameters:
    ///   - type: The request type.
    ///   - json: The content, written with literals: `["hello": "world"]`.
    public init(type: UInt32, json: JSONValue) {
        self.init(type: type, payload: json.encoded)
    }

    /// Creates a request whose content is an `Encodable` value as JSON.
    ///
    /// With no `encoder`, the content is Foundation's `JSONEncoder` defaults, with members
    /// sorted: `Date` is a number of seconds since 1 January 2001 (`.deferredToDate`),
    /// `Data` a Base64 string, property names are kept as written (`.useDefaultKeys`), a
    /// NaN or infinite `Double` is refused (`.throw`); members are sorted by the UTF-8
    /// bytes of their names, with no white space and `/` not escaped. A ``JSONValue`` is
    /// written by Tether's own writer in the same form, a number that is not finite as
    /// `null`. Pass an encoder for other strategies, as peers written in other languages
    /// often expect (`.iso8601` dates, `.convertToSnakeCase` keys); it is used as it is,
    /// its output formatting included.
    ///
    /// - Parameters:
    ///   - type: The request type.
    ///   - value: The value to encode.
    ///   - encoder: The encoder to write the JSON with; `nil` for the defaults above.
    /// - Throws: ``TetherError`` with ``TetherError/Code/encodingFailed`` when the encoder
    ///   refuses the value, with the encoder's reason and where in the value.
    public init<T: Encodable>(type: UInt32, encoding value: T, encoder: JSONEncoder? = nil) throws(TetherError) {
        self.init(type: type, payload: try JSONCoding.encode(value, with: encoder))
    }

    /// Creates a request whose content is a plain dictionary as JSON.
    ///
    /// - Parameters:
    ///   - type: The request type.
    ///   - jsonObject: A dictionary of JSON-compatible values (`String`, numbers, `Bool`, arrays, dictionaries, `NSNull`).
    /// - Throws: ``TetherError`` with ``TetherError/Code/encodingFailed`` when it is not valid JSON.
    public init(type: UInt32, jsonObject: [String: Any]) throws(TetherError) {
        self.init(type: type, payload: try JSONCoding.serialize(jsonObject))
    }

    init(frame: Frame) {
        self.type = frame.type
        self.payload = frame.payload
        self.serial = frame.serial
        self.fields = frame.fields
        self.integrity = frame.integrity
    }

    /// The content parsed as JSON, or `nil` when it is empty or not JSON.
    public var json: JSONValue? { payload.isEmpty ? nil : try? JSONValue(parsing: payload) }

    /// The content as UTF-8 text: a line, in the ``Profile/lines`` profile.
    public var text: String { String(decoding: payload, as: UTF8.self) }

    /// The content decoded from JSON.
    ///
    /// With no `decoder`, Tether's own parser reads the text and the value is decoded with
    /// `JSONDecoder`'s default strategies: RFC 8259 text nested at most
    /// ``JSONValue/defaultMaximumDepth`` deep, no `NaN` or `Infinity`, a repeated member
    /// name keeping its last value; `Date` from a number of seconds since 1 January 2001,
    /// `Data` from a Base64 string, member names matched as written. Pass a decoder for
    /// other strategies (`.iso8601` dates, `.convertFromSnakeCase` keys): it reads the text
    /// itself, with Foundation's parser and its own depth limit.
    ///
    /// - Parameters:
    ///   - type: The type to decode.
    ///   - decoder: The decoder to read the JSON with; `nil` for the defaults above.
    /// - Returns: The decoded value.
    /// - Throws: ``TetherError`` with ``TetherError/Code/decodingFailed`` when the content is
    ///   not JSON or not of the shape of `T`; the message names the request type, the type
    ///   asked for, what was expected and found, and where (`at items[2].name`).
    public func decode<T: Decodable>(_ type: T.Type, decoder: JSONDecoder? = nil) throws(TetherError) -> T {
        try JSONCoding.decode(T.self, from: payload, what: "request \(hex(self.type)) content", with: decoder)
    }
}

/// A response: the type and serial of its request, and content.
///
/// An error answer is still a response, carrying JSON such as `{"error": "unknown type 0x999"}`;
/// ``errorMessage`` reads it.
public struct Response: Sendable, Hashable {
    /// The type of the request this answers.
    public var type: UInt32
    /// The serial of the request this answers.
    public var serial: UInt32
    /// The content bytes.
    public var payload: [UInt8]
    /// The profile's named header fields (``Frame/fields``). On a server, fields set here win
    /// over those the profile derives from the request (``Profile/replyFields``).
    public var fields: [String: UInt64]
    /// Whether the response's checksum verified, in profiles that carry one.
    public var integrity: FrameIntegrity
    /// Set on ``noReply``: the server sends nothing for the request.
    var isNoReply = false

    /// Creates a response with raw content. On a server, leave `type` and `serial` at 0
    /// and they are copied from the request.
    ///
    /// - Parameters:
    ///   - type: The request's type, or 0 to copy it.
    ///   - serial: The request's serial, or 0 to copy it.
    ///   - payload: The content bytes.
    ///   - fields: Values for the profile's named header fields.
    public init(type: UInt32 = 0, serial: UInt32 = 0, payload: [UInt8] = [], fields: [String: UInt64] = [:]) {
        self.type = type
        self.serial = serial
        self.payload = payload
        self.fields = fields
        self.integrity = .unchecked
    }

    /// Creates a response whose content is a JSON value.
    ///
    /// - Parameter json: The content, written with literals: `["ok": true]`.
    public init(json: JSONValue) {
        self.init(payload: json.encoded)
    }

    /// Creates a response whose content is an `Encodable` value as JSON.
    ///
    /// With no `encoder`, the content is Foundation's `JSONEncoder` defaults, with members
    /// sorted: `Date` is a number of seconds since 1 January 2001 (`.deferredToDate`),
    /// `Data` a Base64 string, property names are kept as written (`.useDefaultKeys`), a
    /// NaN or infinite `Double` is refused (`.throw`); members are sorted by the UTF-8
    /// bytes of their names, with no white space and `/` not escaped. A ``JSONValue`` is
    /// written by Tether's own writer in the same form, a number that is not finite as
    /// `null`. Pass an encoder for other strategies, as peers written in other languages
    /// often expect (`.iso8601` dates, `.convertToSnakeCase` keys); it is used as it is,
    /// its output formatting included.
    ///
    /// - Parameters:
    ///   - value: The value to encode.
    ///   - encoder: The encoder to write the JSON with; `nil` for the defaults above.
    /// - Throws: ``TetherError`` with ``TetherError/Code/encodingFailed`` when the encoder
    ///   refuses the value, with the encoder's reason and where in the value.
    public init<T: Encodable>(encoding value: T, encoder: JSONEncoder? = nil) throws(TetherError) {
        self.init(payload: try JSONCoding.encode(value, with: encoder))
    }

    /// Creates an error response: `{"error": message}`.
    ///
    /// - Parameter message: What went wrong.
    /// - Returns: The response.
    public static func error(_ message: String) -> Response {
        Response(json: ["error": .string(message)])
    }

    init(frame: Frame) {
        self.type = frame.type
        self.serial = frame.serial
        self.payload = frame.payload
        self.fields = frame.fields
        self.integrity = frame.integrity
    }

    /// The content parsed as JSON, or `nil` when it is empty or not JSON.
    public var json: JSONValue? { payload.isEmpty ? nil : try? JSONValue(parsing: payload) }

    /// The content as a plain dictionary.
    ///
    /// - Returns: The JSON object.
    /// - Throws: ``TetherError`` with ``TetherError/Code/decodingFailed`` when it is not a JSON object.
    public func jsonObject() throws(TetherError) -> [String: Any] {
        try JSONCoding.deserialize(payload, what: "response \(hex(type)) serial \(serial) content")
    }

    /// The content decoded from JSON.
    ///
    /// With no `decoder`, Tether's own parser reads the text and the value is decoded with
    /// `JSONDecoder`'s default strategies: RFC 8259 text nested at most
    /// ``JSONValue/defaultMaximumDepth`` deep, no `NaN` or `Infinity`, a repeated member
    /// name keeping its last value; `Date` from a number of seconds since 1 January 2001,
    /// `Data` from a Base64 string, member names matched as written. Pass a decoder for
    /// other strategies (`.iso8601` dates, `.convertFromSnakeCase` keys): it reads the text
    /// itself, with Foundation's parser and its own depth limit.
    ///
    /// - Parameters:
    ///   - type: The type to decode.
    ///   - decoder: The decoder to read the JSON with; `nil` for the defaults above.
    /// - Returns: The decoded value.
    /// - Throws: ``TetherError`` with ``TetherError/Code/decodingFailed`` when the content is
    ///   not JSON or not of the shape of `T`; the message names the request type and serial,
    ///   the type asked for, what was expected and found, and where (`at items[2].name`).
    public func decode<T: Decodable>(_ type: T.Type, decoder: JSONDecoder? = nil) throws(TetherError) -> T {
        try JSONCoding.decode(T.self, from: payload, what: "response \(hex(self.type)) serial \(serial) content", with: decoder)
    }

    /// The text of an error answer (`{"error": "…"}`), or `nil` for a normal response.
    public var errorMessage: String? {
        guard payload.first == UInt8(ascii: "{") else { return nil }
        return json?["error"]?.stringValue
    }

    /// The content as UTF-8 text.
    public var text: String { String(decoding: payload, as: UTF8.self) }
}
