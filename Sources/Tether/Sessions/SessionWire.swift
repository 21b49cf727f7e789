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
        /// The epoch of the mailbox history `lastSequence` belongs to, as the last welcome
        /// said; absent when the client knows none (a first connection, an older client).
        var epoch: String?
        /// Whether the client's app is behind on pushes: the server begins the session
        /// holding them (see ``flowSignal(holding:)``); absent means `false`.
        var hold: Bool?
        /// The client puts chunked frames back together (``FrameChunk``) and sends its own
        /// large frames in chunks of this many payload bytes once the welcome says the
        /// server understands them too; absent from a client that does neither.
        var chunkBytes: Int?
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
        /// The epoch of the mailbox history the sequences belong to; absent when the store
        /// does not tell.
        var epoch: String?
        /// The server understands chunked frames and sends its large frames in chunks of
        /// this many payload bytes; present only when the hello said the client does too.
        var chunkBytes: Int?
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
        /// What the server's check said when it rejected the hello, without the words
        /// around it in ``error``; absent for other refusals and from older servers.
        var reason: String?
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

    /// A flow signal on the acknowledgement type, `{"hold":true}` or `{"hold":false}`: the
    /// client's app fell behind on pushes, so the server should keep them in the mailbox
    /// rather than write them, or it caught up and the server may write them again. A server
    /// that does not know it reads an acknowledgement of nothing.
    static func flowSignal(holding: Bool) -> [UInt8] {
        Array((holding ? "{\"hold\":true}" : "{\"hold\":false}").utf8)
    }

    /// What a frame of the acknowledgement type says: how far the client acknowledges, and
    /// whether it asks the server to hold or release its pushes; each `nil` when absent.
    static func acknowledgement(_ payload: [UInt8]) -> (through: UInt64?, hold: Bool?) {
        guard let value = try? JSONValue(parsing: payload) else { return (nil, nil) }
        var through: UInt64?
        if case .int(let number)? = value["through"], number >= 0 { through = UInt64(number) }
        var hold: Bool?
        if case .bool(let flag)? = value["hold"] { hold = flag }
        return (through, hold)
    }
}

/// Where a resuming client's replay starts, and what it lost: the server's side of a hello.
struct ResumePlan: Hashable, Sendable {
    /// The highest sequence the server has given the client.
    var lastSequence: UInt64
    /// Everything after this is replayed.
    var resumeAfter: UInt64
    var gap: SessionWire.Gap?
    /// The epoch of the mailbox's history, for the welcome.
    var epoch: String?
    /// Whether the client's sequence belongs to another history of the mailbox than the
    /// store's (the epochs differ): nothing the client has counts in this one.
    var historyReplaced = false

    /// - Parameters:
    ///   - clientSequence: The last sequence the client says it has.
    ///   - clientEpoch: The epoch of the history that sequence belongs to, if the client knows it.
    ///   - summary: What the client's mailbox holds.
    init(clientSequence: UInt64, clientEpoch: String? = nil, summary: MailboxSummary) {
        lastSequence = summary.lastSequence
        epoch = summary.epoch
        let floor = min(summary.firstAvailable - 1, summary.lastSequence)
        if let clientEpoch, let epoch = summary.epoch, clientEpoch != epoch {
            // The history the client resumes from is gone (the mailbox was removed, or the
            // store wiped or replaced): it starts this one where the mailbox starts, with no
            // gap, since none of its sequences is of this history.
            historyReplaced = true
            resumeAfter = floor
        } else if clientSequence > summary.lastSequence {
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

    /// How far the acknowledgement in a hello applies to the mailbox: not past the client's
    /// sequence nor the mailbox's, and not at all when the client's history was replaced (its
    /// sequences number other pushes).
    ///
    /// - Parameters:
    ///   - acknowledged: What the hello says the client acknowledged.
    ///   - clientSequence: The last sequence the hello says the client has.
    /// - Returns: The sequence to acknowledge in the mailbox through; 0 for none.
    func acknowledgement(_ acknowledged: UInt64, clientSequence: UInt64) -> UInt64 {
        historyReplaced ? 0 : min(acknowledged, clientSequence, lastSequence)
    }

    func welcome(for clientID: String) -> SessionWire.Welcome {
        SessionWire.Welcome(accepted: true, clientID: clientID, lastSequence: lastSequence, resumeAfter: resumeAfter, gap: gap, epoch: epoch)
    }
}
