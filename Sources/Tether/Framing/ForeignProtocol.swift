/// Another protocol recognised in bytes that were to be frames: HTTP or TLS, the usual
/// results of a wrong port, a missing or unwanted TLS setting, or a proxy in the way.
///
/// It is consulted only once decoding has failed, so it costs nothing on the hot path,
/// and it turns "frame length 1213486160 exceeds the 16 MiB limit" into a sentence that
/// names the real problem.
enum ForeignProtocol: Equatable {
    /// An HTTP response (`HTTP/1.1 400 Bad Request`), with its first line, and the first
    /// line of its body when the bytes hold one (a server's refusal says why there).
    case httpResponse(String, body: String? = nil)
    /// An HTTP request (`GET / HTTP/1.1`), with its first line.
    case httpRequest(String)
    /// A TLS handshake record: a ClientHello from a client, a ServerHello from a server.
    case tlsHandshake
    /// A TLS alert record, with its description code when the record holds it.
    case tlsAlert(UInt8?)
    /// Another TLS record (change cipher spec, application data).
    case tlsRecord

    private static let methods = ["GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE ", "PRI * HTTP/2"]

    /// Recognises the protocol the first bytes of `bytes` belong to, if it is one of those known.
    ///
    /// - Parameter bytes: The bytes where a frame was expected, from its first byte.
    /// - Returns: The protocol, or `nil` when the bytes look like none of them.
    static func recognize(_ bytes: ArraySlice<UInt8>) -> ForeignProtocol? {
        guard let first = bytes.first else { return nil }
        if bytes.count >= 3, (0x14...0x17).contains(first), bytes[bytes.startIndex + 1] == 0x03,
           bytes[bytes.startIndex + 2] <= 0x04 {
            switch first {
            case 0x16: return .tlsHandshake
            case 0x15: return .tlsAlert(bytes.count >= 7 ? bytes[bytes.startIndex + 6] : nil)
            default: return .tlsRecord
            }
        }
        if startsWith("HTTP/", bytes) {
            let line = firstLine(of: bytes)
            // A body that only repeats the status (`Bad Request`) adds nothing.
            let body = bodyLine(of: bytes).flatMap { line.contains($0) ? nil : $0 }
            return .httpResponse(line, body: body)
        }
        if methods.contains(where: { startsWith($0, bytes) }) { return .httpRequest(firstLine(of: bytes)) }
        return nil
    }

    private static func startsWith(_ prefix: String, _ bytes: ArraySlice<UInt8>) -> Bool {
        let prefix = Array(prefix.utf8)
        return bytes.count >= prefix.count && bytes.prefix(prefix.count).elementsEqual(prefix)
    }

    /// The first line of the body after an HTTP head in `bytes`, up to 160 printable
    /// characters; `nil` when the head is not complete or the body is empty.
    private static func bodyLine(of bytes: ArraySlice<UInt8>) -> String? {
        let end: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A]
        guard let start = bytes.indices.first(where: { bytes[$0...].starts(with: end) }) else { return nil }
        let body = bytes[(start + 4)...]
        let line = body.prefix { $0 != 0x0D && $0 != 0x0A }.prefix(160)
        guard !line.isEmpty else { return nil }
        return String(decoding: line.map { (0x20...0x7E).contains($0) ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
    }

    /// What the bytes are, in a few words: `an HTTP response`, `a TLS alert`.
    var name: String {
        switch self {
        case .httpResponse(let line, _): "an HTTP response (\"\(line)\")"
        case .httpRequest(let line): "an HTTP request (\"\(line)\")"
        case .tlsHandshake: "a TLS handshake"
        case .tlsAlert: "a TLS alert"
        case .tlsRecord: "a TLS record"
        }
    }

    /// The first line, up to 80 printable characters.
    private static func firstLine(of bytes: ArraySlice<UInt8>) -> String {
        let line = bytes.prefix { $0 != 0x0D && $0 != 0x0A }.prefix(80)
        return String(decoding: line.map { (0x20...0x7E).contains($0) ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
    }

    /// The name of a TLS alert description (RFC 8446, section 6).
    static func alertName(_ code: UInt8) -> String {
        switch code {
        case 0: "close_notify"
        case 10: "unexpected_message"
        case 20: "bad_record_mac"
        case 22: "record_overflow"
        case 40: "handshake_failure"
        case 42: "bad_certificate"
        case 48: "unknown_ca"
        case 50: "decode_error"
        case 70: "protocol_version"
        case 80: "internal_error"
        case 112: "unrecognized_name"
        case 116: "certificate_required"
        default: "alert \(code)"
        }
    }

    /// What a connection (the client) tells its user about a peer that speaks this.
    ///
    /// - Parameters:
    ///   - peer: The peer's address.
    ///   - profile: The profile the connection speaks.
    ///   - secured: Whether the connection runs TLS itself.
    /// - Returns: The sentence.
    func clientExplanation(peer: String, profile: String, secured: Bool) -> String {
        switch self {
        case .httpResponse(let line, let body?):
            "the peer \(peer) answered with HTTP (\"\(line)\"), not \(profile) frames, and says: \(body)"
        case .httpResponse(let line, nil):
            "the peer \(peer) answered with HTTP (\"\(line)\"), not \(profile) frames: wrong port, or a web server or proxy in the way?"
        case .httpRequest(let line):
            "the peer \(peer) sent an HTTP request (\"\(line)\"), not \(profile) frames: is it a Tether server?"
        case .tlsAlert(let code):
            "the peer \(peer) seems to speak TLS: it answered with a TLS alert\(code.map { " (\(Self.alertName($0)))" } ?? "")\(secured ? "" : "; does the server need TLS (ConnectionConfiguration.tls)?")"
        case .tlsHandshake, .tlsRecord:
            "the peer \(peer) seems to speak TLS: it sent a TLS record, not \(profile) frames\(secured ? "" : "; does the server need TLS (ConnectionConfiguration.tls)?")"
        }
    }

    /// What a server logs about a peer that speaks this on a port that speaks `profile`.
    ///
    /// - Parameters:
    ///   - peer: The peer's address.
    ///   - profile: The profile the server speaks.
    ///   - secured: Whether the server runs TLS itself.
    /// - Returns: The sentence.
    func serverExplanation(peer: String, profile: String, secured: Bool) -> String {
        switch self {
        case .httpRequest(let line):
            "\(peer) sent an HTTP request (\"\(line)\") to a port that speaks \(profile) frames: an HTTP client on the wrong port?"
        case .httpResponse(let line, _):
            "\(peer) sent an HTTP response (\"\(line)\") to a port that speaks \(profile) frames"
        case .tlsHandshake:
            "\(peer) sent a TLS handshake (a ClientHello)\(secured ? ", not \(profile) frames" : " to a port without TLS: the client expects TLS, and this server has none configured")"
        case .tlsAlert, .tlsRecord:
            "\(peer) sent TLS records to a port that speaks \(profile) frames\(secured ? "" : " without TLS")"
        }
    }

    /// The HTTP answer a server writes to an HTTP request on its port before closing, so a
    /// browser or `curl` shows why instead of an empty reply.
    ///
    /// - Parameter profile: The profile the server speaks.
    /// - Returns: The bytes of a complete `400 Bad Request` response.
    static func httpAnswer(profile: String) -> [UInt8] {
        let body = "This port speaks the Tether \(profile) protocol, not HTTP or WebSocket: connect without ws://.\n"
        let head = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
        return Array((head + body).utf8)
    }
}
