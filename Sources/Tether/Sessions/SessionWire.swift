import Foundation

/// The JSON bodies of the session frames.
enum SessionWire {
    /// Client to server, first on every connection.
    struct Hello: Codable, Hashable {
        var clientID: String
        var token: String?
        /// Where the client's replay starts.
        var lastSequence: UInt64
        /// What the client's app has acknowledged: the mailbox may delete up to it.
        var acknowledged: UInt64?
    }

    /// Server to client, the answer to an accepted hello.
    struct Welcome: Codable, Hashable {
        var accepted: Bool
        var clientID: String
        /// The highest sequence the server has given this client.
        var lastSequence: UInt64
        /// The server replays everything after this.
        var resumeAfter: UInt64
        var gap: Gap?
    }

    struct Gap: Codable, Hashable {
        var first: UInt64
        var last: UInt64
        var reason: String
    }

    /// The answer to a hello the server would not take.
    struct Refusal: Codable, Hashable {
        var error: String
        /// `true`: the client may not retry (bad credentials); `false`: a passing failure.
        var rejected: Bool
    }

    static let maximumClientIDLength = 256

    static func encode(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // These types always encode.
        return (try? Array(encoder.encode(value))) ?? []
    }

    static func decode<T: Decodable>(_ type: T.Type, from payload: [UInt8]) -> T? {
        try? JSONDecoder().decode(type, from: Data(payload))
    }

    /// An acknowledgement body, `{"through":N}`, written by hand: it goes out often.
    static func acknowledgement(through sequence: UInt64) -> [UInt8] {
        Array("{\"through\":\(sequence)}".utf8)
    }

    static func acknowledged(_ payload: [UInt8]) -> UInt64? {
        guard let value = try? JSONValue(parsing: payload), let through = value["through"] else { return nil }
        if case .int(let number) = through, number >= 0 { return UInt64(number) }
        return nil
    }
}

/// Where a resuming client's replay starts, and what it lost: the server's side of a hello.
struct ResumePlan: Hashable, Sendable {
    /// The highest sequence the server has given the client.
    var lastSequence: UInt64
    /// Everything after this is replayed.
    var resumeAfter: UInt64
    var gap: SessionWire.Gap?

    /// - Parameters:
    ///   - clientSequence: The last sequence the client says it has.
    ///   - summary: What the client's mailbox holds.
    init(clientSequence: UInt64, summary: MailboxSummary) {
        lastSequence = summary.lastSequence
        let floor = min(summary.firstAvailable - 1, summary.lastSequence)
        if clientSequence > summary.lastSequence {
            // The client has seen more than the server ever gave: the store was replaced.
            resumeAfter = floor
        } else if clientSequence < floor {
            resumeAfter = floor
            let reason = summary.lostThrough > clientSequence ? summary.lossReason ?? .overflow : .acknowledged
            gap = SessionWire.Gap(first: clientSequence + 1, last: floor, reason: reason.rawValue)
        } else {
            resumeAfter = clientSequence
        }
    }

    func welcome(for clientID: String) -> SessionWire.Welcome {
        SessionWire.Welcome(accepted: true, clientID: clientID, lastSequence: lastSequence, resumeAfter: resumeAfter, gap: gap)
    }
}
