/// The frame a draining server writes to every connected client: "finish what you sent,
/// then reconnect, later or elsewhere".
///
/// It travels as a frame of the profile's heartbeat type with serial 0 and a JSON payload
/// `{"reconnect": "draining", "after_ms": N, "message": "…"}`. Heartbeats themselves carry no
/// payload, so a frame of that type with one is never taken for an ack by a client that
/// knows the notice; a client that does not know it takes it for a stray ack and drops it.
///
/// A profile carries it when it has a heartbeat type and its codec keeps a heartbeat's
/// payload (``carried(by:)`` encodes one and decodes it back): ``Profile/seed``,
/// ``Profile/seedExtended`` and ``Profile/compact``. ``Profile/marker`` and ``Profile/lines``
/// have no heartbeats (and ``Profile/lines(delimiter:heartbeatLine:)`` a heartbeat that is a
/// fixed line with no room for a payload): their clients cannot be told, and a draining
/// server closes their connections as soon as no handler of theirs runs.
struct DrainNotice: Equatable, Sendable {
    /// The value of the `reconnect` key.
    static let marker = "draining"
    /// The longest message a client reads from a notice; longer ones are cut there.
    static let maximumMessageLength = 1_024

    /// How long the client is asked to wait before it reconnects.
    var reconnectAfter: Duration
    /// The server's words, for logs and errors.
    var message: String

    /// A notice.
    ///
    /// - Parameters:
    ///   - reconnectAfter: How long the client should wait before it reconnects.
    ///   - message: The server's words.
    init(reconnectAfter: Duration, message: String) {
        self.reconnectAfter = reconnectAfter
        self.message = message
    }

    /// Reads a notice from a frame of the heartbeat type; `nil` when the frame is a plain
    /// heartbeat (no payload) or something else.
    ///
    /// - Parameter frame: A decoded frame of the profile's heartbeat type.
    init?(_ frame: Frame) {
        guard !frame.payload.isEmpty, frame.payload.first == UInt8(ascii: "{"),
              let json = try? JSONValue(parsing: frame.payload),
              json["reconnect"]?.stringValue == Self.marker else { return nil }
        var milliseconds = 0
        if case .int(let value)? = json["after_ms"], value > 0 { milliseconds = value }
        reconnectAfter = .milliseconds(milliseconds)
        message = String((json["message"]?.stringValue ?? "").prefix(Self.maximumMessageLength))
    }

    /// The frame, of type `heartbeatType`.
    ///
    /// - Parameter heartbeatType: The profile's heartbeat type.
    /// - Returns: The frame.
    func frame(heartbeatType: UInt32) -> Frame {
        let (seconds, attoseconds) = reconnectAfter.components
        let milliseconds = max(0, seconds * 1_000 + attoseconds / 1_000_000_000_000_000)
        let json: JSONValue = .object([
            "reconnect": .string(Self.marker),
            "after_ms": .int(Int(clamping: milliseconds)),
            "message": .string(message),
        ])
        return Frame(type: heartbeatType, serial: 0, payload: json.encoded)
    }

    /// Whether `profile` carries a notice: it has a heartbeat type, and a heartbeat with a
    /// payload comes out of its codec as it went in.
    ///
    /// - Parameter profile: A profile.
    /// - Returns: Whether a client of that profile can be told.
    static func carried(by profile: Profile) -> Bool {
        guard let type = profile.heartbeatType else { return false }
        let sample = DrainNotice(reconnectAfter: .milliseconds(1), message: "drain").frame(heartbeatType: type)
        var buffer = FrameBuffer()
        guard (try? profile.makeCodec(1 << 16).encode(sample, into: &buffer)) != nil else { return false }
        var decoder = profile.makeCodec(1 << 16)
        guard let decoded = try? decoder.decode(&buffer) else { return false }
        return decoded.type == type && DrainNotice(decoded) == DrainNotice(sample)
    }
}
