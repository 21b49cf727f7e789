import Foundation
import Testing
@testable import Tether

/// A push in the shape peers written in other languages use: ISO 8601 dates, snake_case keys.
private struct PriceChange: Codable, Equatable, Sendable {
    var symbol: String
    var lastPrice: Double
    var changedAt: Date
}

private let change = PriceChange(symbol: "ACME", lastPrice: 101.5, changedAt: Date(timeIntervalSince1970: 1_700_000_000))

/// ISO 8601 dates, snake_case keys, members sorted.
private func peerEncoder() -> JSONEncoder {
    let encoder = JSONEncoder()
    encoder.dateEncodingStrategy = .iso8601
    encoder.keyEncodingStrategy = .convertToSnakeCase
    encoder.outputFormatting = [.sortedKeys]
    return encoder
}

private func peerDecoder() -> JSONDecoder {
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .iso8601
    decoder.keyDecodingStrategy = .convertFromSnakeCase
    return decoder
}

@Suite("Codable content with the default and with custom JSON strategies")
struct CodableContentTests {
    @Test("a frame encoded with ISO 8601 dates and snake_case keys has exactly the bytes those strategies give")
    func pushBytes() throws {
        let frame = try Frame(type: 0x501, encoding: change, encoder: peerEncoder())
        #expect(frame.type == 0x501)
        #expect(frame.serial == 0)
        #expect(frame.text == #"{"changed_at":"2023-11-14T22:13:20Z","last_price":101.5,"symbol":"ACME"}"#)
    }

    @Test("the defaults: dates as seconds since 2001, Data as Base64, names as written, members sorted by their bytes, no escaped slash")
    func defaultBytes() throws {
        struct Sample: Codable, Equatable {
            var zeta = 1
            var Alpha = 2
            var lastPrice = 0.5
            var at = Date(timeIntervalSinceReferenceDate: 12.5)
            var data = Data([1, 2, 3])
            var path = "a/b"
        }
        let expected = #"{"Alpha":2,"at":12.5,"data":"AQID","lastPrice":0.5,"path":"a/b","zeta":1}"#
        #expect(try Frame(type: 0x501, encoding: Sample()).text == expected)
        #expect(String(decoding: try Request(type: 0x402, encoding: Sample()).payload, as: UTF8.self) == expected)
        #expect(try Response(encoding: Sample()).text == expected)
        #expect(try Frame(type: 0x501, encoding: Sample()).decode(Sample.self) == Sample())
    }

    @Test("the default encoder refuses a number that is not finite, naming the type and where")
    func nonFiniteRefused() throws {
        struct Reading: Codable { var value: Double }
        let error = try #require(throws: TetherError.self) { try Frame(type: 0x501, encoding: Reading(value: .nan)) }
        #expect(error.code == .encodingFailed)
        #expect(error.message.hasPrefix("cannot encode Reading as JSON"))
        #expect(error.message.contains("value"))
        // A JSONValue keeps writing it as null, as it always has.
        #expect(try Frame(type: 0x501, encoding: JSONValue.double(.infinity)).text == "null")
        // With a strategy for it, the encoder writes it.
        let encoder = JSONEncoder()
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        #expect(try Frame(type: 0x501, encoding: Reading(value: .nan), encoder: encoder).text == #"{"value":"nan"}"#)
    }

    @Test("custom strategies round-trip through a frame, a request and a response")
    func roundTrips() throws {
        let encoder = peerEncoder()
        let decoder = peerDecoder()
        #expect(try Frame(type: 0x501, encoding: change, encoder: encoder).decode(PriceChange.self, decoder: decoder) == change)
        let request = try Request(type: 0x410, encoding: change, encoder: encoder)
        #expect(String(decoding: request.payload, as: UTF8.self).contains(#""last_price":101.5"#))
        #expect(try request.decode(PriceChange.self, decoder: decoder) == change)
        let response = try Response(encoding: change, encoder: encoder)
        #expect(try response.decode(PriceChange.self, decoder: decoder) == change)
        // Seconds since 1970 with camelCase keys, the other way round.
        let epoch = JSONEncoder()
        epoch.dateEncodingStrategy = .secondsSince1970
        let fromEpoch = JSONDecoder()
        fromEpoch.dateDecodingStrategy = .secondsSince1970
        let frame = try Frame(type: 0x501, encoding: change, encoder: epoch)
        #expect(frame.json?["changedAt"] == .int(1_700_000_000))
        #expect(try frame.decode(PriceChange.self, decoder: fromEpoch) == change)
    }

    @Test("content written with other strategies does not decode with the defaults: the error names the frame, the type, what was found and where")
    func defaultsRefuseOtherStrategies() throws {
        let frame = try Frame(type: 0x501, encoding: change, encoder: peerEncoder())
        let error = try #require(throws: TetherError.self) { try frame.decode(PriceChange.self) }
        #expect(error.code == .decodingFailed)
        #expect(error.message == #"cannot decode frame 0x501 content as PriceChange: no member named "lastPrice""#)
    }

    @Test("a decode of the wrong shape says which content, which type, what was expected and found, and where", arguments: [false, true])
    func wrongShape(custom: Bool) throws {
        struct Quote: Codable { var symbol: String; var prices: [Double] }
        let text = #"{"symbol":"ACME","prices":[1.5,"two"]}"#
        let decoder = custom ? JSONDecoder() : nil
        let frameError = try #require(throws: TetherError.self) {
            try Frame(type: 0x501, payload: Array(text.utf8)).decode(Quote.self, decoder: decoder)
        }
        #expect(frameError.code == .decodingFailed)
        let responseError = try #require(throws: TetherError.self) {
            try Response(type: 0x410, serial: 7, payload: Array(text.utf8)).decode(Quote.self, decoder: decoder)
        }
        let requestError = try #require(throws: TetherError.self) {
            try Request(type: 0x410, payload: Array(text.utf8)).decode(Quote.self, decoder: decoder)
        }
        if custom {
            // Foundation's words, with the path in Tether's form.
            #expect(frameError.message == "cannot decode frame 0x501 content as Quote: Expected to decode Double but found a string instead. at prices[1]")
        } else {
            #expect(frameError.message == "cannot decode frame 0x501 content as Quote: expected a number, found a string at prices[1]")
            #expect(responseError.message == "cannot decode response 0x410 serial 7 content as Quote: expected a number, found a string at prices[1]")
            #expect(requestError.message == "cannot decode request 0x410 content as Quote: expected a number, found a string at prices[1]")
        }
        #expect(responseError.message.hasPrefix("cannot decode response 0x410 serial 7 content as Quote: "))
        #expect(responseError.message.hasSuffix(" at prices[1]"))
        #expect(requestError.message.hasPrefix("cannot decode request 0x410 content as Quote: "))
    }

    @Test("a custom decoder refuses text nested past Foundation's limit with a decodingFailed error, not a crash")
    func customDecoderDepth() throws {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        let error = try #require(throws: TetherError.self) {
            try Frame(type: 0x501, payload: Array(deep.utf8)).decode(JSONValue.self, decoder: JSONDecoder())
        }
        #expect(error.code == .decodingFailed)
        #expect(error.message.hasPrefix("cannot decode frame 0x501 content as JSONValue: "))
    }

    @Test("a push encoded with ISO 8601 dates and snake_case keys is read by a Python peer with its json module", .timeLimit(.guarded))
    func pythonPeerReadsPush() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x410) { _, peer in
                try peer.push(Frame(type: 0x501, encoding: change, encoder: peerEncoder()))
                return Response(json: ["ok": true])
            }
        }) { _, endpoint in
            // The peer asks with one request, reads frames until the push, and prints what
            // its json module and datetime make of it. Its socket times out on its own.
            let script = """
                import datetime, json, socket, struct, sys
                s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=180)
                s.sendall(struct.pack('>III', 0x410, 1, 0))
                def read(n):
                    data = b''
                    while len(data) < n:
                        chunk = s.recv(n - len(data))
                        if not chunk: raise SystemExit('closed')
                        data += chunk
                    return data
                while True:
                    kind, serial, length = struct.unpack('>III', read(12))
                    body = json.loads(read(length))
                    if kind == 0x501: break
                when = datetime.datetime.fromisoformat(body['changed_at'].replace('Z', '+00:00'))
                print('push', hex(kind), serial, sorted(body), body['symbol'], body['last_price'], int(when.timestamp()), flush=True)
                """
            let python = try ChildProcess("python3", ["-u", "-c", script, endpoint.host, String(endpoint.port)])
            defer { python.kill() }
            let output = try await python.waitForOutput(containing: "\n", within: eventBound)
            #expect(output == "push 0x501 0 ['changed_at', 'last_price', 'symbol'] ACME 101.5 1700000000\n")
        }
    }
}
