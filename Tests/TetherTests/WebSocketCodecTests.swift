import Testing
@_spi(Fuzzing) @testable import Tether

/// One frame's bytes, written by hand so the tests can break any rule.
private func rawFrame(
    fin: Bool = true,
    rsv: UInt8 = 0,
    opcode: UInt8,
    mask: UInt32? = nil,
    payload: [UInt8],
    lengthBytes: [UInt8]? = nil
) -> [UInt8] {
    var bytes: [UInt8] = [(fin ? 0x80 : 0) | rsv << 4 | opcode]
    let maskBit: UInt8 = mask == nil ? 0 : 0x80
    if let lengthBytes {
        bytes.append(maskBit | (lengthBytes.count == 2 ? 126 : 127))
        bytes += lengthBytes
    } else if payload.count < 126 {
        bytes.append(maskBit | UInt8(payload.count))
    } else if payload.count <= 0xFFFF {
        bytes += [maskBit | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
    } else {
        bytes.append(maskBit | 127)
        bytes += (0..<8).map { UInt8(truncatingIfNeeded: UInt64(payload.count) >> UInt64(56 - 8 * $0)) }
    }
    guard let mask else { return bytes + payload }
    let key: [UInt8] = [UInt8(mask >> 24), UInt8((mask >> 16) & 0xFF), UInt8((mask >> 8) & 0xFF), UInt8(mask & 0xFF)]
    return bytes + key + payload.enumerated().map { $0.element ^ key[$0.offset % 4] }
}

/// Everything a reader makes of `bytes`: the events, the data, and the failure that stopped it.
private func readAll(
    _ bytes: [UInt8],
    server: Bool = true,
    maximum: Int = 1 << 20
) -> (events: [WebSocketEvent], data: [UInt8], failure: WebSocketFailure?, left: Int) {
    var reader = WebSocketReader(expectsMasked: server, maximumMessageSize: maximum)
    var input = FrameBuffer(bytes: bytes)
    var data = FrameBuffer()
    var events: [WebSocketEvent] = []
    do {
        while let event = try reader.next(&input, data: &data) { events.append(event) }
    } catch {
        return (events, Array(data.readableBytesView), error, input.readableBytes)
    }
    return (events, Array(data.readableBytesView), nil, input.readableBytes)
}

@Suite("WebSocket frames")
struct WebSocketCodecTests {
    @Test("a masked binary frame from a client is unmasked; the writer's frames read back both ways")
    func maskingBothWays() {
        let payload = (0..<300).map { UInt8($0 & 0xFF) }
        let read = readAll(rawFrame(opcode: 2, mask: 0x1234_5678, payload: payload))
        #expect(read.events == [.data(300)])
        #expect(read.data == payload)
        #expect(read.failure == nil)

        var masked = FrameBuffer()
        WebSocketWriter.write(.binary, payload, maskKey: 0xA1B2_C3D4, into: &masked)
        #expect(Array(masked.readableBytesView) == rawFrame(opcode: 2, mask: 0xA1B2_C3D4, payload: payload))
        #expect(readAll(Array(masked.readableBytesView), server: true).data == payload)

        var plain = FrameBuffer()
        WebSocketWriter.write(.binary, payload, maskKey: nil, into: &plain)
        #expect(Array(plain.readableBytesView) == rawFrame(opcode: 2, payload: payload))
        #expect(readAll(Array(plain.readableBytesView), server: false).data == payload)

        let big = [UInt8](repeating: 7, count: 70_000)
        var large = FrameBuffer()
        WebSocketWriter.write(.binary, big, maskKey: nil, into: &large)
        #expect(Array(large.readableBytesView.prefix(10)) == [0x82, 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70])
        #expect(readAll(Array(large.readableBytesView), server: false).data == big)
    }

    @Test("a masked frame written behind unsent bytes that make the buffer compact or grow is masked over exactly its payload")
    func maskingAfterTheBufferMoves() {
        let payload = (0..<40).map { UInt8($0 + 1) }
        let unsent = [UInt8](repeating: 0xEE, count: 10)
        // Compacts: 30 bytes already sent lie before the 10 unsent ones, with room behind.
        var compacting = FrameBuffer()
        compacting.writeBytes([UInt8](repeating: 0xDD, count: 30) + unsent)
        compacting.moveReaderIndex(forwardBy: 30)
        // Grows: the storage is full of unsent bytes.
        var growing = FrameBuffer()
        growing.writeBytes(unsent)
        for var output in [compacting, growing] {
            WebSocketWriter.write(.binary, payload, maskKey: 0xA1B2_C3D4, into: &output)
            #expect(Array(output.readableBytesView) == unsent + rawFrame(opcode: 2, mask: 0xA1B2_C3D4, payload: payload))
        }
    }

    @Test("a server rejects an unmasked frame and a client a masked one, with 1002")
    func maskRules() {
        let unmasked = readAll(rawFrame(opcode: 2, payload: [1, 2, 3]), server: true)
        #expect(unmasked.failure?.code == 1002)
        #expect(unmasked.failure?.reason == "a client frame that is not masked")
        let masked = readAll(rawFrame(opcode: 2, mask: 1, payload: [1, 2, 3]), server: false)
        #expect(masked.failure?.code == 1002)
        #expect(masked.data.isEmpty)
    }

    @Test("frames split at every byte boundary give the same events and data")
    func everySplit() {
        let stream = rawFrame(fin: false, opcode: 2, mask: 0xDEAD_BEEF, payload: Array(0..<200))
            + rawFrame(opcode: 9, mask: 0x0102_0304, payload: [9, 9])
            + rawFrame(opcode: 0, mask: 0xCAFE_F00D, payload: Array(repeating: 5, count: 70))
        let whole = readAll(stream)
        #expect(whole.events == [.data(200), .ping([9, 9]), .data(70)])
        for split in 1..<stream.count {
            var reader = WebSocketReader(expectsMasked: true, maximumMessageSize: 1 << 20)
            var input = FrameBuffer(bytes: stream[..<split])
            var data = FrameBuffer()
            var events: [WebSocketEvent] = []
            while let event = try! reader.next(&input, data: &data) { events.append(event) }
            input.writeBytes(stream[split...])
            while let event = try! reader.next(&input, data: &data) { events.append(event) }
            #expect(events == whole.events, "split at \(split)")
            #expect(Array(data.readableBytesView) == whole.data, "split at \(split)")
            #expect(input.isEmpty)
        }
    }

    @Test("reserved bits and reserved opcodes end with 1002")
    func reserved() {
        for rsv: UInt8 in [1, 2, 4] {
            #expect(readAll(rawFrame(rsv: rsv, opcode: 2, mask: 1, payload: [1])).failure?.code == 1002)
        }
        for opcode: UInt8 in [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
            let read = readAll(rawFrame(opcode: opcode, mask: 1, payload: [1]))
            #expect(read.failure?.code == 1002, "opcode \(opcode)")
        }
    }

    @Test("control frames over 125 bytes or fragmented end with 1002")
    func controlRules() {
        let long = readAll(rawFrame(opcode: 9, mask: 1, payload: Array(repeating: 0, count: 126)))
        #expect(long.failure == WebSocketFailure(1002, "a ping frame of 126 bytes (at most 125)"))
        #expect(readAll(rawFrame(fin: false, opcode: 0xA, mask: 1, payload: [])).failure?.code == 1002)
        #expect(readAll(rawFrame(fin: false, opcode: 8, mask: 1, payload: [])).failure?.code == 1002)
        #expect(readAll(rawFrame(opcode: 9, mask: 1, payload: Array(repeating: 1, count: 125))).events == [.ping(Array(repeating: 1, count: 125))])
    }

    @Test("a 64-bit length with the top bit set is 1002, a length over the limit 1009 before any payload arrives, non-minimal lengths 1002")
    func lengths() {
        let topBit = readAll(rawFrame(opcode: 2, mask: 1, payload: [], lengthBytes: [0x80, 0, 0, 0, 0, 0, 0, 1]))
        #expect(topBit.failure == WebSocketFailure(1002, "64-bit length with its top bit set"))
        // Only the header: the reader decides on it without waiting for 2^40 bytes.
        let lying = readAll([0x82, 0xFF, 0, 0, 1, 0, 0, 0, 0, 0], maximum: 1 << 20)
        #expect(lying.failure?.code == 1009)
        let over = readAll(rawFrame(opcode: 2, mask: 1, payload: Array(repeating: 0, count: 1001)), maximum: 1000)
        #expect(over.failure?.code == 1009)
        #expect(over.data.isEmpty)
        #expect(readAll(rawFrame(opcode: 2, mask: 1, payload: Array(repeating: 0, count: 1000)), maximum: 1000).events == [.data(1000)])
        #expect(readAll(rawFrame(opcode: 2, mask: 1, payload: [1, 2, 3], lengthBytes: [0, 3])).failure?.code == 1002)
        #expect(readAll(rawFrame(opcode: 2, mask: 1, payload: [1], lengthBytes: [0, 0, 0, 0, 0, 0, 0, 1])).failure?.code == 1002)
        // Incomplete headers wait.
        #expect(readAll([0x82, 0xFE, 0]).events.isEmpty)
        #expect(readAll([0x82, 0xFE, 0]).failure == nil)
    }

    @Test("fragments are reassembled up to the maximum message size, with control frames between them; 1009 beyond it")
    func fragmentation() {
        let message = rawFrame(fin: false, opcode: 2, mask: 7, payload: Array(repeating: 1, count: 600))
            + rawFrame(opcode: 0xA, mask: 8, payload: [4])
            + rawFrame(fin: false, opcode: 0, mask: 9, payload: Array(repeating: 2, count: 300))
            + rawFrame(opcode: 0, mask: 10, payload: Array(repeating: 3, count: 100))
        let read = readAll(message, maximum: 1000)
        #expect(read.events == [.data(600), .pong([4]), .data(300), .data(100)])
        #expect(read.data == Array(repeating: 1, count: 600) + Array(repeating: 2, count: 300) + Array(repeating: 3, count: 100))
        #expect(read.failure == nil)
        // One byte more in the last fragment: the message is over the limit.
        let tooBig = rawFrame(fin: false, opcode: 2, mask: 7, payload: Array(repeating: 1, count: 600))
            + rawFrame(opcode: 0, mask: 10, payload: Array(repeating: 3, count: 401))
        let failed = readAll(tooBig, maximum: 1000)
        #expect(failed.events == [.data(600)])
        #expect(failed.failure?.code == 1009)
        // Each message starts the count again.
        let two = rawFrame(opcode: 2, mask: 1, payload: Array(repeating: 1, count: 1000)) + rawFrame(opcode: 2, mask: 1, payload: Array(repeating: 1, count: 1000))
        #expect(readAll(two, maximum: 1000).events == [.data(1000), .data(1000)])
    }

    @Test("a continuation with nothing to continue, or a new message inside a fragmented one, is 1002")
    func continuationRules() {
        #expect(readAll(rawFrame(opcode: 0, mask: 1, payload: [1])).failure?.code == 1002)
        let interleaved = rawFrame(fin: false, opcode: 2, mask: 1, payload: [1]) + rawFrame(opcode: 2, mask: 1, payload: [2])
        #expect(readAll(interleaved).failure == WebSocketFailure(1002, "a new binary message inside a fragmented one"))
    }

    @Test("a text message is 1003: Tether is carried in binary messages only")
    func text() {
        let read = readAll(rawFrame(opcode: 1, mask: 1, payload: Array("hello".utf8)))
        #expect(read.failure == WebSocketFailure(1003, "a text message: Tether is carried in binary messages only"))
        #expect(read.data.isEmpty)
    }

    @Test("close frames: code and reason read; one byte, a code that may not be sent, or a reason that is not UTF-8 fail")
    func closeFrames() {
        #expect(readAll(rawFrame(opcode: 8, mask: 1, payload: WebSocketWriter.closePayload(code: 1000, reason: "bye"))).events == [.close(code: 1000, reason: "bye")])
        #expect(readAll(rawFrame(opcode: 8, mask: 1, payload: [])).events == [.close(code: nil, reason: "")])
        #expect(readAll(rawFrame(opcode: 8, mask: 1, payload: [3])).failure?.code == 1002)
        #expect(readAll(rawFrame(opcode: 8, mask: 1, payload: [0x03, 0xED])).failure?.code == 1002)  // 1005
        #expect(readAll(rawFrame(opcode: 8, mask: 1, payload: [0x03, 0xE8, 0xFF, 0xFE])).failure?.code == 1007)
        #expect(readAll(rawFrame(opcode: 8, mask: 1, payload: [0x0F, 0xA0])).events == [.close(code: 4000, reason: "")])
        let long = WebSocketWriter.closePayload(code: 1002, reason: String(repeating: "é", count: 100))
        #expect(long.count == 124)
    }
}

@Suite("WebSocket fuzz invariants")
struct WebSocketFuzzInvariantTests {
    @Test("the fuzz target's invariants hold for every corpus seed, every truncation of it, and every seed with one byte flipped")
    func seeds() {
        for seed in WebSocketFuzzing.seeds() {
            for end in 0...seed.bytes.count {
                #expect(WebSocketFuzzing.check(Array(seed.bytes[..<end])) == nil, "\(seed.name) cut at \(end)")
            }
            for index in seed.bytes.indices {
                var flipped = seed.bytes
                flipped[index] ^= 0xFF
                #expect(WebSocketFuzzing.check(flipped) == nil, "\(seed.name) flipped at \(index)")
            }
        }
    }
}

@Suite("WebSocket handshake")
struct WebSocketHandshakeTests {
    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String($0, radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()
    }

    @Test("SHA-1 matches the FIPS 180 vectors")
    func sha1() {
        #expect(hex(SHA1.hash([])) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(hex(SHA1.hash(Array("abc".utf8))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(hex(SHA1.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))) == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        #expect(hex(SHA1.hash([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    @Test("base64 round-trips and rejects what is not base64")
    func base64() {
        #expect(Base64.encode(Array("f".utf8)) == "Zg==")
        #expect(Base64.encode(Array("fo".utf8)) == "Zm8=")
        #expect(Base64.encode(Array("foobar".utf8)) == "Zm9vYmFy")
        for count in 0..<40 {
            let bytes = (0..<count).map { UInt8(($0 * 37 + 11) & 0xFF) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
        #expect(Base64.decode("Zg=") == nil)
        #expect(Base64.decode("Z===") == nil)
        #expect(Base64.decode("Zm9v!mFy") == nil)
    }

    @Test("the RFC 6455 example key gives its accept value")
    func rfcExample() {
        #expect(WebSocketHandshake.accept(forKey: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    private func request(_ lines: [String]) -> String {
        (["GET /tether HTTP/1.1", "Host: example.com"] + lines).joined(separator: "\r\n")
    }

    private let valid = ["Upgrade: websocket", "Connection: keep-alive, Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]

    @Test("a server answers a valid upgrade with 101 and the accept value, and refuses the rest with 400, 403, 404 or 426")
    func serverVerdicts() {
        let accepted = WebSocketHandshake.answer(request(valid), path: "/tether", allowedOrigins: nil)
        #expect(accepted == .accept(Array("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n".utf8)))
        func status(_ head: String, path: String? = "/tether", origins: [String]? = nil) -> String {
            guard case .refuse(let bytes, _) = WebSocketHandshake.answer(head, path: path, allowedOrigins: origins) else { return "101" }
            return String(String(decoding: bytes, as: UTF8.self).split(separator: "\r\n")[0])
        }
        #expect(status(request(valid.dropLast() + ["Sec-WebSocket-Version: 8"])) == "HTTP/1.1 426 Upgrade Required")
        #expect(status(request(valid.dropLast())) == "HTTP/1.1 426 Upgrade Required")
        #expect(status(request(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: c2hvcnQ=", "Sec-WebSocket-Version: 13"])) == "HTTP/1.1 400 Bad Request")
        #expect(status(request(Array(valid.dropFirst()))) == "HTTP/1.1 400 Bad Request")
        #expect(status("POST" + request(valid).dropFirst(3)) == "HTTP/1.1 400 Bad Request")
        #expect(status(request(valid), path: "/other") == "HTTP/1.1 404 Not Found")
        #expect(status(request(valid), path: nil) == "101")
        #expect(status(request(valid + ["Origin: https://evil.example"]), origins: ["https://app.example"]) == "HTTP/1.1 403 Forbidden")
        #expect(status(request(valid + ["Origin: https://app.example"]), origins: ["https://app.example"]) == "101")
        #expect(status(request(valid), origins: ["https://app.example"]) == "101")
    }

    @Test("a client accepts only 101 with the right tokens and accept value, and quotes the status line otherwise")
    func clientCheck() throws {
        let key = "dGhlIHNhbXBsZSBub25jZQ=="
        try WebSocketHandshake.checkResponse("HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\nconnection: upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", key: key, peer: "p")
        do {
            try WebSocketHandshake.checkResponse("HTTP/1.1 200 OK\r\nContent-Length: 0", key: key, peer: "127.0.0.1:1")
            Issue.record("a 200 answer was accepted")
        } catch {
            #expect(error.code == .protocolError)
            #expect(error.message == "127.0.0.1:1 refused the WebSocket upgrade: it did not answer 101 Switching Protocols (status line \"HTTP/1.1 200 OK\")")
        }
        do {
            try WebSocketHandshake.checkResponse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAA", key: key, peer: "p")
            Issue.record("a wrong accept value was accepted")
        } catch {
            #expect(error.message.contains("Sec-WebSocket-Accept is \"AAAA\", expected \"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\""))
        }
        let request = String(decoding: WebSocketHandshake.request(path: "/t", host: "h:1", key: key, headers: ["Authorization": "Bearer x"]), as: UTF8.self)
        #expect(request == "GET /t HTTP/1.1\r\nHost: h:1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer x\r\n\r\n")
    }

    @Test("ws:// and wss:// URLs parse into WebSocket endpoints")
    func urls() {
        #expect(Endpoint(webSocket: "ws://127.0.0.1:8080/tether") == Endpoint(host: "127.0.0.1", port: 8080, webSocketPath: "/tether"))
        #expect(Endpoint(webSocket: "ws://example.com") == Endpoint(host: "example.com", port: 80, webSocketPath: "/"))
        #expect(Endpoint(webSocket: "ws://[::1]:9/a?b=c") == Endpoint(host: "::1", port: 9, webSocketPath: "/a?b=c"))
        #expect(Endpoint(webSocket: "wss://example.com/")?.webSocketSecure == true)
        #expect(Endpoint(webSocket: "http://example.com/") == nil)
        #expect(Endpoint(webSocket: "ws://host:99999/") == nil)
        #expect(Endpoint(host: "127.0.0.1", port: 8080, webSocketPath: "/tether").description == "ws://127.0.0.1:8080/tether")
    }
}
