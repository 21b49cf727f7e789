import Synchronization
import Tether

/// The seed demo service that `tether serve` and `tether demo` run.
///
/// In a profile with the seed's types (seed, seed-extended, compact):
/// - `0x402` echo: answers `{"echo": <request content>}`.
/// - `0x404` delayed echo: `{"delay_ms": n}` waits `n` ms (at most 10 s), then answers
///   like `0x402`. Lets several requests be answered out of order.
/// - `0x407` counting: each run of its handler adds one to a counter the server keeps, and
///   answers `{"runs": n}`; with a session and an idempotency key, a repeat of the key is
///   answered without a run, so the count shows it.
/// - Heartbeats (`0x1`) are acked by the library; a type with no handler is answered with
///   `{"error": "unknown type 0x…"}` by the library.
///
/// In a profile whose only request type is `0x401` (marker, lines):
/// - text lines: answers each line with `echo: <line>`.
/// - otherwise: answers `{"echo": <request content>}`; the profile sets the reply's header
///   fields (marker swaps destination and source).
enum SeedService {
    /// The echo request type.
    static let echoType: UInt32 = 0x402
    /// The delayed echo request type.
    static let delayedEchoType: UInt32 = 0x404
    /// The counting request type.
    static let countingType: UInt32 = 0x407
    /// The one request type of the profiles without types (marker, lines).
    static let messageType: UInt32 = 0x401
    /// What the answer to a line starts with, before the line.
    static let linePrefix = "echo: "
    /// The notification type pushed by default.
    static let pushType: UInt32 = 0x2
    /// The longest delay a `0x404` request may ask for.
    static let maximumDelay = 10_000

    /// Registers the handlers for `profile` on `server`.
    static func install(on server: Server, profile: Profile = .seed) {
        guard profile.kind(of: echoType) == .message else {
            if profile.layout?.delimiter != nil {
                server.handle(type: messageType) { request, _ in
                    Response(payload: Array((linePrefix + request.text).utf8))
                }
            } else {
                server.handle(type: messageType) { request, _ in
                    Response(json: ["echo": try content(of: request)])
                }
            }
            return
        }
        server.handle(type: echoType) { request, _ in
            Response(json: ["echo": try content(of: request)])
        }
        let runs = Mutex(0)
        server.handle(type: countingType) { _, _ in
            Response(json: ["runs": .int(runs.withLock { count in
                count += 1
                return count
            })])
        }
        server.handle(type: delayedEchoType) { request, _ in
            guard let delay = request.json?["delay_ms"]?.intValue, (0...maximumDelay).contains(delay) else {
                return .error("0x404 needs {\"delay_ms\": 0…\(maximumDelay)}")
            }
            try await Task.sleep(for: .milliseconds(delay))
            return Response(json: ["echo": try content(of: request)])
        }
    }

    /// The request content as JSON: itself when it parses, a string when it is text that
    /// does not look like JSON, `null` when empty.
    ///
    /// - Throws: ``TetherError`` when the content starts like a JSON array or object but
    ///   cannot be parsed (it is malformed, or nested deeper than the parser allows): the
    ///   client gets that error as its answer, never a value that is not what it sent.
    static func content(of request: Request) throws(TetherError) -> JSONValue {
        if request.payload.isEmpty { return .null }
        do {
            return try JSONValue(parsing: request.payload)
        } catch {
            let first = request.payload.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
            if first == UInt8(ascii: "[") || first == UInt8(ascii: "{") { throw error }
            return .string(String(decoding: request.payload, as: UTF8.self))
        }
    }

    /// Push number `sequence`: serial `sequence`, content `{"seq": n, "time": "…"}`.
    static func push(type: UInt32, sequence: UInt32, time: String) -> Frame {
        let content: JSONValue = ["seq": .int(Int(sequence)), "time": .string(time)]
        return Frame(type: type, serial: sequence, payload: content.encoded)
    }
}
