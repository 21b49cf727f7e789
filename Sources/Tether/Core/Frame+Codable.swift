public import Foundation

extension Frame {
    /// Creates a frame whose payload is an `Encodable` value as JSON: a push for
    /// ``Peer/push(_:)`` or ``Server/broadcast(_:)``, or a frame for ``Connection/send(_:)``.
    ///
    /// With no `encoder`, the payload is written as ``Request/init(type:encoding:encoder:)``
    /// writes content: Foundation's `JSONEncoder` defaults, with members sorted. `Date` is a
    /// number of seconds since 1 January 2001 (`.deferredToDate`), `Data` a Base64 string,
    /// property names are kept as written (`.useDefaultKeys`), a NaN or infinite `Double`
    /// is refused (`.throw`); members are sorted by the UTF-8 bytes of their names, with no
    /// white space and `/` not escaped. A ``JSONValue`` is written by Tether's own writer
    /// in the same form, a number that is not finite as `null`. Pass an encoder for other
    /// strategies, as peers written in other languages often expect (`.iso8601` dates,
    /// `.convertToSnakeCase` keys); it is used as it is, its output formatting included.
    ///
    /// ```swift
    /// let encoder = JSONEncoder()
    /// encoder.dateEncodingStrategy = .iso8601
    /// encoder.keyEncodingStrategy = .convertToSnakeCase
    /// try peer.push(Frame(type: 0x501, encoding: priceChange, encoder: encoder))
    /// ```
    ///
    /// - Parameters:
    ///   - type: The frame type: a notification type for a push.
    ///   - serial: The serial number; 0 for a push that the profile or session numbers.
    ///   - value: The value to encode.
    ///   - encoder: The encoder to write the JSON with; `nil` for the defaults above.
    ///   - fields: Values for the profile's named header fields.
    /// - Throws: ``TetherError`` with ``TetherError/Code/encodingFailed`` when the encoder
    ///   refuses the value, with the encoder's reason and where in the value.
    public init<T: Encodable>(
        type: UInt32,
        serial: UInt32 = 0,
        encoding value: T,
        encoder: JSONEncoder? = nil,
        fields: [String: UInt64] = [:]
    ) throws(TetherError) {
        self.init(type: type, serial: serial, payload: try JSONCoding.encode(value, with: encoder), fields: fields)
    }

    /// The payload decoded as `T` from JSON: a push's content, say.
    ///
    /// With no `decoder`, Tether's own parser reads the text and the value is decoded with
    /// `JSONDecoder`'s default strategies, as for ``Response/decode(_:decoder:)``: RFC 8259
    /// text nested at most ``JSONValue/defaultMaximumDepth`` deep, no `NaN` or `Infinity`, a
    /// repeated member name keeping its last value; `Date` from a number of seconds since
    /// 1 January 2001, `Data` from a Base64 string, member names matched as written. Pass a
    /// decoder for other strategies (`.iso8601` dates, `.convertFromSnakeCase` keys): it
    /// reads the text itself, with Foundation's parser and its own depth limit.
    ///
    /// - Parameters:
    ///   - type: The type to decode.
    ///   - decoder: The decoder to read the JSON with; `nil` for the defaults above.
    /// - Returns: The decoded value.
    /// - Throws: ``TetherError`` with ``TetherError/Code/decodingFailed`` when the payload is
    ///   not JSON or not of the shape of `T`. The message names the frame type, the type
    ///   asked for, what was expected and found, and where: `cannot decode frame 0x501
    ///   content as PriceChange: expected a number, found a string at price`.
    public func decode<T: Decodable>(_ type: T.Type, decoder: JSONDecoder? = nil) throws(TetherError) -> T {
        try JSONCoding.decode(T.self, from: payload, what: "frame \(hex(self.type)) content", with: decoder)
    }
}
