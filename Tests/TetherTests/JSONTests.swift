import Foundation
import Testing
@testable import Tether

/// JSON text as the peers send it: parsed in one pass whatever its nesting, refused past the
/// depth limit with an error that says where, and written back exactly.
@Suite("JSON parsing and writing")
struct JSONTests {
    // MARK: Conformance

    @Test("valid JSON text parses to the value it stands for", arguments: [
        ("null", JSONValue.null),
        (" true ", .bool(true)),
        ("\tfalse\r\n", .bool(false)),
        ("0", .int(0)),
        ("-0", .int(0)),
        ("1.0", .int(1)),
        ("1.5e3", .int(1500)),
        ("-12", .int(-12)),
        ("9223372036854775807", .int(.max)),
        ("-9223372036854775808", .int(.min)),
        ("9223372036854775808", .double(9223372036854775808)),
        ("0.5", .double(0.5)),
        ("-2.5E-5", .double(-2.5e-5)),
        ("1e300", .double(1e300)),
        (#""a/b\/\"\\\b\f\n\r\t\u0041\u00e9\ud83d\ude00""#, .string("a/b/\"\\\u{8}\u{c}\n\r\tAé😀")),
        ("\"é😀\"", .string("é😀")),
        ("[]", .array([])),
        ("{}", .object([:])),
        (#"[1, "two", [null], {"a": {}}]"#, .array([.int(1), .string("two"), .array([.null]), .object(["a": .object([:])])])),
        (#"{"a": 1, "a": 2, "b": [true]}"#, .object(["a": .int(2), "b": .array([.bool(true)])])),
    ])
    func parses(text: String, expected: JSONValue) throws {
        #expect(try JSONValue(parsing: Array(text.utf8)) == expected)
    }

    @Test("text that is not JSON is refused with what is wrong and the byte where", arguments: [
        ("", "the JSON text ends where a value was expected at byte 0"),
        ("[1,]", "expected a value, found ']' at byte 3"),
        ("[1 2]", "expected , or ] in an array, found '2' at byte 3"),
        (#"{"a" 1}"#, "expected : after a member name, found '1' at byte 5"),
        ("{1: 2}", "expected a member name in quotes, found '1' at byte 1"),
        (#"{"a": 1"#, "the JSON text ends where , or } was expected at byte 7"),
        ("01", "a number may not start with 0 and more digits at byte 1"),
        ("1.", "expected a digit after the decimal point at byte 2"),
        ("-", "expected a digit in a number at byte 1"),
        ("1e400", "the number 1e400 is out of range at byte 0"),
        ("tru", "expected a value, found 't' at byte 0"),
        ("nulls", "unexpected 's' after the JSON value at byte 4"),
        ("\"abc", "a string is not closed at byte 0"),
        ("\"a\u{1}\"", "a control character must be escaped in a string at byte 2"),
        (#""\x""#, #"\'x' is not an escape at byte 2"#),
        (#""\ud800""#, "a \\u escape of a high surrogate is not followed by a low one at byte 7"),
        (#""\udc00""#, "a \\u escape of a low surrogate has no high one before it at byte 7"),
        (#""\u12g4""#, "a \\u escape needs four hex digits at byte 5"),
    ])
    func refuses(text: String, message: String) {
        #expect {
            try JSONValue(parsing: Array(text.utf8))
        } throws: { error in
            let error = error as? TetherError
            return error?.code == .decodingFailed && error?.message == "content is not valid JSON: \(message)"
        }
    }

    @Test("bytes that are not UTF-8 are refused")
    func notUTF8() {
        #expect(throws: TetherError.self) { try JSONValue(parsing: [0x22, 0xC3, 0x28, 0x22]) }
        #expect(throws: TetherError.self) { try JSONValue(parsing: [0x22, 0x5C, 0x6E, 0xFF, 0x22]) }
    }

    @Test("values are written with sorted names, escapes where JSON needs them, and whole doubles without .0")
    func writes() {
        let value: JSONValue = [
            "b": [1, 2.5, 3.0, 1e22, 2.5e-5, -0.0, .double(.infinity)],
            "a": "q\"\\/\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}é😀",
            "B": nil, "é": true, "e\u{301}x": false, "a10": [:], "a2": [],
        ]
        let text = String(decoding: value.encoded, as: UTF8.self)
        #expect(text == #"{"B":null,"a":"q\"\\/\b\f\n\r\t\u0000\u001f"# + "\u{7f}é😀" + #"","a10":{},"a2":[],"b":[1,2.5,3,1e+22,2.5e-05,-0,null],"# + "\"e\u{301}x\":false,\"é\":true}")
        // What Foundation's sorted-keys encoder writes for the same value, byte for byte.
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let finite: JSONValue = ["b": [1, 2.5, 3.0, 1e22, 2.5e-5, -0.0], "a": "q\"\\/\u{8}\n\u{0}é😀", "a10": [:], "é": true, "e\u{301}x": false]
        #expect(finite.encoded == Array(try! encoder.encode(finite)))
    }

    // MARK: Depth

    @Test("512 levels of arrays or objects parse; the 513th is refused at the byte that opens it")
    func depthLimit() throws {
        for (open, close) in [("[", "]"), (#"{"k":"#, "}")] {
            let deepest = String(repeating: open, count: 512) + "1" + String(repeating: close, count: 512)
            var value = try JSONValue(parsing: Array(deepest.utf8))
            var depth = 0
            while let inner = value.arrayValue?.first ?? value["k"] {
                depth += 1
                value = inner
            }
            #expect(depth == 512)
            #expect(value == 1)

            let tooDeep = String(repeating: open, count: 513) + "1" + String(repeating: close, count: 513)
            #expect {
                try JSONValue(parsing: Array(tooDeep.utf8))
            } throws: { error in
                (error as? TetherError)?.message == "content is not valid JSON: JSON nested deeper than 512 levels at byte \(512 * open.utf8.count)"
            }
        }
        // A caller may allow more, or less.
        let thousand = String(repeating: "[", count: 1000) + String(repeating: "]", count: 1000)
        #expect(throws: TetherError.self) { try JSONValue(parsing: Array(thousand.utf8)) }
        #expect(try JSONValue(parsing: Array(thousand.utf8), maximumDepth: 1000).encoded == Array(thousand.utf8))
        #expect(throws: TetherError.self) { try JSONValue(parsing: Array("[[1]]".utf8), maximumDepth: 1) }
    }

    @Test("a value nested 2,000 deep is written whole, never replaced by null")
    func deepWrite() throws {
        var value: JSONValue = "bottom"
        for level in 0..<2000 { value = level.isMultiple(of: 2) ? [value] : ["k": value] }
        let text = value.encoded
        #expect(text.count == 1000 * 2 + 1000 * 6 + 8)
        #expect(try JSONValue(parsing: text, maximumDepth: 2000) == value)
    }

    @Test("parsing takes time in proportion to the text, not to its depth: a 1 MB document 500 levels deep")
    func linearInDepth() throws {
        // 500 levels, then 250,000 small numbers at the bottom. Parsing that took minutes
        // when every value deep down cost time in proportion to its depth; it takes
        // milliseconds in one pass. The bound only catches that difference.
        let leaves = Array(repeating: "1", count: 250_000).joined(separator: ",")
        let text = Array((String(repeating: "[", count: 500) + leaves + String(repeating: "]", count: 500)).utf8)
        let clock = ContinuousClock()
        let start = clock.now
        let value = try JSONValue(parsing: text)
        let encoded = value.encoded
        let elapsed = clock.now - start
        #expect(encoded == text)
        #expect(elapsed < .seconds(10), "parsing and writing 1 MB took \(elapsed)")
    }

    // MARK: Decodable types

    struct Envelope: Codable, Equatable {
        enum Kind: String, Codable { case note, alert }
        struct Item: Codable, Equatable {
            var name: String
            var count: UInt8
        }
        var kind: Kind
        var items: [Item]
        var extra: JSONValue
        var blob: Data
        var when: Date
        var link: URL
        var ratio: Float
        var missing: String?
        var tags: [String: Int]
        var nothing: Int?
    }

    @Test("Decodable content decodes as JSONDecoder decodes it: nested types, Data as Base64, Date, URL, optionals")
    func decodable() throws {
        let text = #"{"kind": "alert", "items": [{"name": "a", "count": 255}], "extra": {"deep": [1, [2.5]]}, "blob": "AAEC/w==", "when": 12.5, "link": "https://example.com/x?y=1", "ratio": 0.25, "tags": {"a": 1}, "nothing": null}"#
        let frame = Frame(type: 0x20, payload: Array(text.utf8))
        let ours = try frame.decode(Envelope.self)
        let foundation = try JSONDecoder().decode(Envelope.self, from: Data(text.utf8))
        #expect(ours == foundation)
        #expect(ours.extra == ["deep": [1, [2.5]]])
        #expect(ours.blob == Data([0, 1, 2, 255]))
        #expect(ours.nothing == nil && ours.missing == nil)
        // A round trip through the encoder the requests use.
        #expect(try Request(type: 0x402, encoding: ours).decode(Envelope.self) == ours)
    }

    @Test("a value that does not fit its type is refused with what and where", arguments: [
        (#"{"kind": "note", "items": [{"name": "a", "count": 256}]}"#, "the number 256 does not fit in UInt8 at items[0].count"),
        (#"{"kind": "note", "items": [{"count": 1}]}"#, #"no member named "name" at items[0]"#),
        (#"{"kind": "note", "items": {}}"#, "expected an array, found an object at items"),
        (#"{"kind": "other", "items": []}"#, "Cannot initialize Kind from invalid String value other at kind"),
        (#"{"kind": "note", "items": [], "extra": 1, "blob": "!", "when": 1, "link": "x", "ratio": 1, "tags": {}}"#, "the string is not valid Base64 at blob"),
    ])
    func decodableErrors(text: String, message: String) {
        let frame = Frame(type: 0x20, payload: Array(text.utf8))
        #expect {
            try frame.decode(Envelope.self)
        } throws: { error in
            (error as? TetherError)?.message == "cannot decode frame 0x20 content as Envelope: \(message)"
        }
    }

    struct Holder: Decodable {
        var data: JSONValue
    }

    @Test("a JSONValue inside a Decodable type costs time in proportion to the text: 1 MB, 500 levels deep")
    func linearInsideDecodable() throws {
        // Decoded by trial (Bool? Int? …) each value deep down cost time in proportion to its
        // depth; taken from the parsed tree it costs nothing more.
        let leaves = Array(repeating: "1", count: 250_000).joined(separator: ",")
        let text = #"{"data": "# + String(repeating: "[", count: 500) + leaves + String(repeating: "]", count: 500) + "}"
        let clock = ContinuousClock()
        let start = clock.now
        let holder = try Frame(type: 0x20, payload: Array(text.utf8)).decode(Holder.self)
        let elapsed = clock.now - start
        var depth = 0
        var value = holder.data
        while let inner = value[0] {
            depth += 1
            value = inner
        }
        #expect(depth == 500)
        #expect(elapsed < .seconds(10), "decoding 1 MB took \(elapsed)")
        // Nested past the limit, inside a type, it is refused like anywhere else.
        let tooDeep = #"{"data": "# + String(repeating: "[", count: 600) + String(repeating: "]", count: 600) + "}"
        #expect(throws: TetherError.self) { try Frame(type: 0x20, payload: Array(tooDeep.utf8)).decode(Holder.self) }
    }

    // MARK: Over the wire

    @Test("deep requests over a socket: each is echoed exactly or refused with the depth error, never as null", .timeLimit(.guarded))
    func deepOverTheWire() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x402) { request, _ in
                Response(json: ["echo": try request.decode(JSONValue.self)])
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            for depth in [1, 100, 511, 512, 513, 10_000] {
                let text = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
                let reply = try await connection.request(Request(type: 0x402, payload: Array(text.utf8)))
                if depth <= 511 {
                    // The echo adds one level: 512 at most, which the client parses back.
                    let echoed = try reply.decode(JSONValue.self)
                    #expect(echoed["echo"]?.encoded == Array(text.utf8), "depth \(depth)")
                } else if depth == 512 {
                    // The server parses it; its echo is one level deeper than the client takes.
                    #expect(reply.errorMessage == nil)
                    #expect(throws: TetherError.self) { try reply.decode(JSONValue.self) }
                    #expect(try JSONValue(parsing: reply.payload, maximumDepth: 513)["echo"]?.encoded == Array(text.utf8))
                } else {
                    let message = try #require(reply.errorMessage, "depth \(depth): \(reply.text.prefix(80))")
                    #expect(message == "cannot decode request 0x402 content as JSONValue: content is not valid JSON: JSON nested deeper than 512 levels at byte 512")
                }
            }
            await connection.close()
        }
    }

    @Test("tether serve echoes a 511-deep request exactly and answers a 513-deep or malformed one with the error", .timeLimit(.guarded))
    func serveEcho() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        let deep = String(repeating: "[", count: 511) + String(repeating: "]", count: 511)
        let echoed = try await connection.request(Request(type: 0x402, payload: Array(deep.utf8)))
        #expect(try echoed.decode(JSONValue.self)["echo"]?.encoded == Array(deep.utf8))

        let tooDeep = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
        let refused = try await connection.request(Request(type: 0x402, payload: Array(tooDeep.utf8)))
        #expect(refused.errorMessage == "content is not valid JSON: JSON nested deeper than 512 levels at byte 512")

        let malformed = try await connection.request(Request(type: 0x402, payload: Array(#"{"a": [1,]}"#.utf8)))
        #expect(malformed.errorMessage == "content is not valid JSON: expected a value, found ']' at byte 9")

        let text = try await connection.request(Request(type: 0x402, payload: Array("plain words".utf8)))
        #expect(text.json == ["echo": "plain words"])
        await connection.close()
    }
}
