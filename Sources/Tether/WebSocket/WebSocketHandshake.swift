/// The opening handshake of RFC 6455: an HTTP/1.1 `GET` with `Upgrade: websocket` from the
/// client, `101 Switching Protocols` from the server, and the key and accept values that
/// prove both ends speak WebSocket.
package enum WebSocketHandshake {
    /// The GUID of RFC 6455 that the accept value hashes with the key.
    static let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// The `Sec-WebSocket-Accept` value for a `Sec-WebSocket-Key`:
    /// base64(SHA-1(key + GUID)).
    ///
    /// - Parameter key: The client's key, as sent.
    /// - Returns: The value the server must answer with.
    package static func accept(forKey key: String) -> String {
        Base64.encode(SHA1.hash(Array((key + guid).utf8)))
    }

    /// A fresh client key: 16 random bytes, base64.
    static func makeKey() -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64.encode((0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }

    // MARK: Client

    /// The client's upgrade request.
    ///
    /// - Parameters:
    ///   - path: The request target, starting with `/`.
    ///   - host: The `Host` header's value.
    ///   - key: The `Sec-WebSocket-Key`.
    ///   - headers: Extra fields from the configuration (a bearer token, say).
    /// - Returns: The request's bytes.
    package static func request(path: String, host: String, key: String, headers: TetherHTTPHeaders) -> [UInt8] {
        var text = "GET \(path) HTTP/1.1\r\nHost: \(host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        text += "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n"
        for field in headers { text += "\(field.name): \(field.value)\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }

    /// Checks the server's answer to the upgrade request.
    ///
    /// - Parameters:
    ///   - head: The response head without its final blank line.
    ///   - body: The first line of what follows the head, if anything does: a refusal
    ///     says why there, and the error quotes it.
    ///   - key: The key the request sent.
    ///   - peer: The server, for the message.
    /// - Throws: ``TetherError`` with ``TetherError/Code/protocolError`` that quotes the status
    ///   line of anything but a valid `101` answer.
    static func checkResponse(_ head: String, body: String? = nil, key: String, peer: String) throws(TetherError) {
        let (start, fields) = parseHead(head)
        let parts = start.split(separator: " ", maxSplits: 2)
        func refuse(_ why: String) -> TetherError {
            let says = body.map { ", and says: \($0)" } ?? ""
            return TetherError(code: .protocolError, message: "\(peer) refused the WebSocket upgrade: \(why) (status line \"\(start)\")\(says)")
        }
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1] == "101" else {
            throw refuse("it did not answer 101 Switching Protocols")
        }
        guard fields.values(for: "Upgrade").contains(where: { hasToken($0, "websocket") }) else {
            throw refuse("no Upgrade: websocket header")
        }
        guard fields.values(for: "Connection").contains(where: { hasToken($0, "upgrade") }) else {
            throw refuse("no Connection: Upgrade header")
        }
        let expected = accept(forKey: key)
        guard let answer = fields["Sec-WebSocket-Accept"], answer == expected else {
            throw refuse("Sec-WebSocket-Accept is \(fields["Sec-WebSocket-Accept"].map { "\"\($0)\"" } ?? "missing"), expected \"\(expected)\"")
        }
    }

    // MARK: Server

    /// What a server makes of an upgrade request: the `101` answer, or a refusal.
    package enum Verdict: Equatable {
        /// Upgrade: the bytes of the `101` answer.
        case accept([UInt8])
        /// Refuse: the bytes of the HTTP answer, and what was wrong.
        case refuse([UInt8], String)
    }

    /// Checks a client's upgrade request and answers it.
    ///
    /// - Parameters:
    ///   - head: The request head without its final blank line.
    ///   - path: The path the server serves; `nil` accepts any.
    ///   - allowedOrigins: The `Origin` values accepted; `nil` accepts any, and a request
    ///     without `Origin` (not a browser) is always accepted.
    /// - Returns: The answer to send.
    package static func answer(_ head: String, path: String?, allowedOrigins: [String]?) -> Verdict {
        let (start, fields) = parseHead(head)
        let parts = start.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            return refusal(400, "Bad Request", "not an HTTP/1.1 request line: \"\(start.prefix(80))\"")
        }
        guard parts[0] == "GET" else {
            return refusal(400, "Bad Request", "method \(parts[0].prefix(16)), not GET")
        }
        if let path, parts[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) != path {
            return refusal(404, "Not Found", "path \(parts[1].prefix(80)), not \(path)")
        }
        guard fields.values(for: "Upgrade").contains(where: { hasToken($0, "websocket") }),
              fields.values(for: "Connection").contains(where: { hasToken($0, "upgrade") })
        else {
            return refusal(400, "Bad Request", "no Upgrade: websocket and Connection: Upgrade headers")
        }
        guard fields["Sec-WebSocket-Version"] == "13" else {
            let version = fields["Sec-WebSocket-Version"].map { "\($0.prefix(16))" } ?? "missing"
            return refusal(426, "Upgrade Required", "Sec-WebSocket-Version \(version), not 13", extra: "Sec-WebSocket-Version: 13\r\n")
        }
        guard let key = fields["Sec-WebSocket-Key"], Base64.decode(key)?.count == 16 else {
            return refusal(400, "Bad Request", "Sec-WebSocket-Key is not 16 bytes in base64")
        }
        if let allowedOrigins, let origin = fields["Origin"], !allowedOrigins.contains(origin) {
            return refusal(403, "Forbidden", "origin \(origin.prefix(80)) is not allowed")
        }
        let text = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(accept(forKey: key))\r\n\r\n"
        return .accept(Array(text.utf8))
    }

    /// A short HTTP answer that closes the connection.
    private static func refusal(_ status: Int, _ phrase: String, _ why: String, extra: String = "") -> Verdict {
        let body = "WebSocket upgrade refused: \(why)\n"
        let text = "HTTP/1.1 \(status) \(phrase)\r\n\(extra)Content-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        return .refuse(Array(text.utf8), "\(status) \(phrase): \(why)")
    }

    // MARK: Parsing

    /// The end of an HTTP head (the index after `\r\n\r\n`) in `bytes`, if it is there.
    static func endOfHead(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 3..<bytes.count where bytes[index] == 0x0A {
            if bytes[index - 1] == 0x0D, bytes[index - 2] == 0x0A, bytes[index - 3] == 0x0D { return index + 1 }
        }
        return nil
    }

    /// The start line and the header fields of a head (without its blank line).
    static func parseHead(_ head: String) -> (String, TetherHTTPHeaders) {
        var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let start = lines.isEmpty ? "" : String(lines.removeFirst())
        var fields = TetherHTTPHeaders()
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].trimmingSpaces
            guard !name.isEmpty else { continue }
            fields.add(name: String(name), value: String(line[line.index(after: colon)...].trimmingSpaces))
        }
        return (start, fields)
    }

    /// Whether a comma-separated header value holds `token`, in any case.
    static func hasToken(_ value: String, _ token: String) -> Bool {
        value.split(separator: ",").contains { $0.trimmingSpaces.lowercased() == token }
    }
}

extension Substring {
    /// Without spaces and tabs at either end.
    fileprivate var trimmingSpaces: Substring {
        var result = self
        while let first = result.first, first == " " || first == "\t" { result = result.dropFirst() }
        while let last = result.last, last == " " || last == "\t" { result = result.dropLast() }
        return result
    }
}

/// SHA-1 (FIPS 180-4), for the accept value only: the handshake needs it, and nothing here
/// relies on it for security.
package enum SHA1 {
    /// The 20-byte digest of `message`.
    ///
    /// - Parameter message: The bytes to hash.
    /// - Returns: The digest.
    package static func hash(_ message: [UInt8]) -> [UInt8] {
        var h: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
        var padded = message
        padded.append(0x80)
        while padded.count % 64 != 56 { padded.append(0) }
        let bits = UInt64(message.count) &* 8
        for shift in stride(from: 56, through: 0, by: -8) { padded.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        var w = [UInt32](repeating: 0, count: 80)
        for chunk in stride(from: 0, to: padded.count, by: 64) {
            for i in 0..<16 {
                let j = chunk + i * 4
                w[i] = UInt32(padded[j]) << 24 | UInt32(padded[j + 1]) << 16 | UInt32(padded[j + 2]) << 8 | UInt32(padded[j + 3])
            }
            for i in 16..<80 { w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotatedLeft(1) }
            var (a, b, c, d, e) = h
            for i in 0..<80 {
                let f: UInt32
                let k: UInt32
                switch i {
                case 0..<20: (f, k) = ((b & c) | (~b & d), 0x5A82_7999)
                case 20..<40: (f, k) = (b ^ c ^ d, 0x6ED9_EBA1)
                case 40..<60: (f, k) = ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
                default: (f, k) = (b ^ c ^ d, 0xCA62_C1D6)
                }
                let temp = a.rotatedLeft(5) &+ f &+ e &+ k &+ w[i]
                (e, d, c, b, a) = (d, c, b.rotatedLeft(30), a, temp)
            }
            h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e)
        }
        return [h.0, h.1, h.2, h.3, h.4].flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> UInt32(24 - 8 * $0)) } }
    }
}

extension UInt32 {
    fileprivate func rotatedLeft(_ count: UInt32) -> UInt32 { self << count | self >> (32 - count) }
}

/// Base64 with the standard alphabet and padding (RFC 4648), for the handshake's values.
package enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// `bytes` in base64.
    ///
    /// - Parameter bytes: The bytes.
    /// - Returns: The text, padded with `=`.
    package static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let count = min(3, bytes.count - index)
            var group = UInt32(bytes[index]) << 16
            if count > 1 { group |= UInt32(bytes[index + 1]) << 8 }
            if count > 2 { group |= UInt32(bytes[index + 2]) }
            for position in 0..<4 {
                out.append(position <= count ? alphabet[Int((group >> UInt32(18 - 6 * position)) & 0x3F)] : UInt8(ascii: "="))
            }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of padded base64 text, or `nil` when it is not that.
    ///
    /// - Parameter text: The text.
    /// - Returns: The bytes, or `nil`.
    package static func decode(_ text: String) -> [UInt8]? {
        let characters = Array(text.utf8)
        guard characters.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        var index = 0
        while index < characters.count {
            var group: UInt32 = 0
            var padding = 0
            for position in 0..<4 {
                let character = characters[index + position]
                if character == UInt8(ascii: "=") {
                    guard index + 4 == characters.count, position >= 2 else { return nil }
                    padding += 1
                    group <<= 6
                    continue
                }
                guard padding == 0, let value = alphabet.firstIndex(of: character) else { return nil }
                group = group << 6 | UInt32(value)
            }
            out.append(UInt8(group >> 16))
            if padding < 2 { out.append(UInt8((group >> 8) & 0xFF)) }
            if padding < 1 { out.append(UInt8(group & 0xFF)) }
            index += 4
        }
        return out
    }
}
