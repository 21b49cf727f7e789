import Testing
import TetherTLS
import TetherTesting
@testable import Tether

/// Runs a server with a WebSocket port (path `/tether`) for the duration of `body`, which
/// gets the server and the `ws://` endpoint.
func withWebSocketServer<T: Sendable>(
    configure: (inout ServerConfiguration) -> Void = { _ in },
    handlers: (Server) -> Void = echoHandlers,
    _ body: @escaping @Sendable (Server, Endpoint) async throws -> T
) async throws -> T {
    try await withServer(configure: { configuration in
        configuration.webSocket = WebSocketServerConfiguration(port: 0, path: "/tether")
        configure(&configuration)
    }, handlers: handlers) { server, _ in
        let address = try await bounded("the WebSocket port") { try await server.webSocketAddress() }
        return try await body(server, Endpoint(host: address.ipAddress, port: address.port, webSocketPath: "/tether"))
    }
}

/// Runs a server on `network` (`server:9000`) with a WebSocket port of its own
/// (`server:8080`, path `/tether`) for the duration of `body`, which gets the server and the
/// `ws://` endpoint: WebSocket over the in-memory network, on its manual clock.
func withWebSocketServer<T: Sendable>(
    on network: TestNetwork,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    handlers: (Server) -> Void = echoHandlers,
    _ body: (Server, Endpoint) async throws -> T
) async throws -> T {
    try await withNetworkServer(on: network, configure: { configuration in
        configuration.handshakeTimeout = nil
        configuration.idleTimeout = nil
        configuration.webSocket = WebSocketServerConfiguration(port: 8080, path: "/tether")
        configure(&configuration)
    }, handlers: handlers) { server, _ in
        let address = try await bounded("the WebSocket port") { try await server.webSocketAddress() }
        #expect(address.port == 8080)
        return try await body(server, Endpoint(host: "server", port: 8080, webSocketPath: "/tether"))
    }
}

/// A raw client's upgrade request for `/tether`, with `lines` replacing the defaults.
func upgradeRequest(key: String = "dGhlIHNhbXBsZSBub25jZQ==", version: String = "13", extra: [String] = []) -> [UInt8] {
    let lines = ["GET /tether HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: \(key)", "Sec-WebSocket-Version: \(version)"] + extra
    return Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)
}

extension RawSocket {
    /// Reads an HTTP head (up to its blank line), bounded.
    func readHead() throws -> String {
        var bytes: [UInt8] = []
        while !bytes.suffix(4).elementsEqual([13, 10, 13, 10]) {
            let next = try read(1)
            guard next.count == 1 else { break }
            bytes += next
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Reads one unmasked server frame: its opcode and payload, or `nil` at the end of the stream.
    func readWebSocketFrame() throws -> (opcode: UInt8, payload: [UInt8])? {
        let header = try read(2)
        guard header.count == 2 else { return nil }
        var length = Int(header[1] & 0x7F)
        if length == 126 {
            length = try read(2).reduce(0) { $0 << 8 | Int($1) }
        } else if length == 127 {
            length = try read(8).reduce(0) { $0 << 8 | Int($1) }
        }
        return (header[0] & 0x0F, try read(length))
    }

    /// Upgrades to WebSocket on `/tether` and checks the `101`.
    func upgrade() throws {
        try write(upgradeRequest())
        let head = try readHead()
        guard head.hasPrefix("HTTP/1.1 101 ") else { throw TimedOut(what: "a 101 answer, got \(head)") }
    }
}

/// A masked client frame.
func clientFrame(opcode: UInt8, payload: [UInt8], fin: Bool = true) -> [UInt8] {
    var buffer = FrameBuffer()
    WebSocketWriter.write(WebSocketOpcode(rawValue: opcode) ?? .binary, payload, fin: fin, maskKey: 0x3779_1A2B, into: &buffer)
    return Array(buffer.readableBytesView)
}

@Suite("Tether over WebSocket", .timeLimit(.guarded))
struct WebSocketConnectionTests {
    @Test("four 3 MB requests at once over ws:// on the in-memory network: each comes back whole")
    func largeRequestsUnderBackpressure() async throws {
        try await withTestNetwork { network in
            try await withWebSocketServer(on: network, handlers: { server in
                server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
            }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.use(network) })
                let echoed = try await withThrowingTaskGroup(of: Bool.self) { group in
                    for index in 0..<4 {
                        group.addTask {
                            let payload = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* (index + 3)) }
                            return try await connection.request(Request(type: 0x405, payload: payload)).payload == payload
                        }
                    }
                    return try await group.reduce(into: [Bool]()) { $0.append($1) }
                }
                #expect(echoed == [true, true, true, true])
                #expect(network.links.count == 1)
                await connection.close()
            }
        }
    }

    @Test("a Tether client and server over WebSocket on the in-memory network: requests, a push to the peer and heartbeats on the manual clock")
    func endToEnd() async throws {
        try await withTestNetwork { network in
            try await withWebSocketServer(on: network) { server, endpoint in
                let events = server.events
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.heartbeat.isEnabled = true
                    $0.heartbeat.interval = .milliseconds(50)
                })
                let pushes = connection.notifications
                let heartbeats = connection.heartbeats
                for index in 0..<20 {
                    let reply = try await connection.request(Request(type: 0x402, json: ["n": .int(index)]))
                    #expect(reply.json == ["echo": ["n": .int(index)]])
                }
                // A request larger than one outgoing message (1 MiB) crosses in several.
                let large = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
                server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
                let echoed = try await connection.request(Request(type: 0x405, payload: large))
                #expect(echoed.payload == large)
                let peer = try await firstEvent(events, "the peer") { $0.kind == .peerConnected }
                try await server.push(Frame(type: 0x2, serial: 7, payload: Array("hi".utf8)), to: try #require(peer.peer))
                let pushed = try await collect(1, from: pushes, "the push")
                #expect(pushed[0].type == 0x2)
                #expect(pushed[0].payload == Array("hi".utf8))
                // Two intervals of the network's clock: two heartbeats, each acked.
                await network.advance(by: .milliseconds(50))
                await network.advance(by: .milliseconds(50))
                let beats = try await collect(2, from: heartbeats, "two heartbeats")
                #expect(beats.count == 2)
                #expect(await connection.currentState.phase == .connected)
                await connection.close()
                let gone = try await firstEvent(events, "the peer to leave") { $0.kind == .peerDisconnected }
                #expect(gone.peer == peer.peer)
                // The client's graceful close sent a close frame with 1000.
                #expect(gone.reason?.code == .peerClosed)
                #expect(gone.reason?.message.hasSuffix("closed the WebSocket with 1000 (normal closure)") == true, "\(String(describing: gone.reason))")
            }
        }
    }

    @Test("wss:// on the in-memory network: TLS below WebSocket on both sides, the certificate verified, an echo and a push")
    func secureOverTheTestNetwork() async throws {
        let certificates = try await TestCertificates.shared()
        try await withTestNetwork { network in
            try await withWebSocketServer(on: network, configure: { $0.webSocket?.tls = webSocketServerTLS(certificates) }) { server, endpoint in
                var secure = endpoint
                secure.webSocketSecure = true
                #expect(secure.description == "wss://server:8080/tether")
                let events = server.events
                // The network's host is `server`; the test certificate names `localhost`.
                var options = TLSClientOptions()
                options.handshakeTimeout = eventBound
                options.trustRoots = .file(certificates.caCertificate)
                options.serverName = "localhost"
                let configuration = testConfiguration {
                    $0.use(network)
                    $0.tls = .client(options: options)
                }
                let connection = try await Connection.connect(to: secure, configuration: configuration)
                #expect(await connection.tlsDetails?.version.hasPrefix("TLSv1.") == true)
                let reply = try await connection.request(Request(type: 0x402, json: ["over": "wss"]))
                #expect(reply.json == ["echo": ["over": "wss"]])
                let peer = try await firstEvent(events, "the peer") { $0.kind == .peerConnected }
                #expect(try await firstEvent(events, "the peer secured") { $0.kind == .peerSecured }.tls != nil)
                let pushes = connection.notifications
                try await server.push(Frame(type: 0x2, serial: 1, payload: Array("secret".utf8)), to: try #require(peer.peer))
                #expect(try await collect(1, from: pushes, "the push")[0].payload == Array("secret".utf8))
                await connection.close()
            }
        }
    }

    @Test("a half-sent upgrade ends with handshakeTimeout and a half-sent frame with frameTimeout: the server's own timeouts bound a trickling WebSocket peer")
    func tricklingPeers() async throws {
        // The server's loop runs on a manual clock: its timeouts wait for the test, however
        // busy the machine, while its sockets are real.
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        try await withWebSocketServer(configure: {
            $0.eventLoopGroup = group
            $0.handshakeTimeout = .milliseconds(300)
            $0.frameCompletionTimeout = .milliseconds(300)
            $0.idleTimeout = nil
        }) { server, endpoint in
            let events = server.events
            let plain = Endpoint(host: endpoint.host, port: endpoint.port)
            let upgrading = try RawSocket.connect(to: plain)
            try upgrading.write(Array(upgradeRequest().prefix(40)))
            _ = try await firstEvent(events, "the half-upgraded peer") { $0.kind == .peerConnected }
            await clock.advance(by: .milliseconds(300) - .nanoseconds(1))
            #expect(server.peerCount == 1)
            await clock.advance(by: .nanoseconds(1))
            let first = try await firstEvent(events, "the half-upgraded peer's end") { $0.kind == .peerDisconnected }
            #expect(first.reason?.code == .handshakeTimeout, "\(String(describing: first.reason))")
            #expect(try await upgrading.waitForClose())

            let framing = try RawSocket.connect(to: plain)
            try await offThread { try framing.upgrade() }
            // A request whose frame stops after its first bytes; the request before it is answered.
            let request = seedBytes(type: 0x402, serial: 1, payload: Array("{}".utf8))
            try framing.write(clientFrame(opcode: 2, payload: request) + Array(clientFrame(opcode: 2, payload: request).prefix(3)))
            let answer = try await offThread { try framing.readWebSocketFrame() }
            #expect(answer?.opcode == 0x2)
            await clock.advance(by: .milliseconds(300) - .nanoseconds(1))
            #expect(server.peerCount == 1)
            await clock.advance(by: .nanoseconds(1))
            let second = try await firstEvent(events, "the half-framed peer's end") { $0.kind == .peerDisconnected }
            #expect(second.reason?.code == .frameTimeout, "\(String(describing: second.reason))")
        }
    }

    @Test("a ws:// alternate endpoint on the in-memory network is reached after the TCP endpoint refuses, and requests flow over it")
    func alternateEndpoint() async throws {
        try await withTestNetwork { network in
            // Nothing listens on server:7000: the network refuses the dial, as a host with
            // nothing on the port does.
            let tcp = Endpoint(host: "server", port: 7000)
            try await withWebSocketServer(on: network) { _, endpoint in
                let connection = try await Connection.connect(to: tcp, configuration: testConfiguration {
                    $0.use(network)
                    $0.alternateEndpoints = [endpoint]
                    $0.reconnect = ReconnectPolicy()
                    // The next attempt at once: no time of the network's clock passes.
                    $0.reconnect.initialDelay = .zero
                    $0.reconnect.jitter = 0
                    $0.reconnect.maximumAttempts = 4
                })
                let reply = try await connection.request(Request(type: 0x402, json: ["via": "ws"]))
                #expect(reply.json == ["echo": ["via": "ws"]])
                #expect(await connection.connectReport?.endpoint == endpoint)
                #expect(network.links.count == 1)
                await connection.close()
            }
        }
    }

    @Test("a client's connect fails with the status line when the server answers the upgrade with 200")
    func notUpgraded() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let answering = Task {
            let peer = try await listener.accept()
            _ = try await offThread { try peer.readHead() }
            try peer.write(Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8))
            return try await peer.waitForClose()
        }
        do {
            let connection = try await Connection.connect(to: Endpoint(host: endpoint.host, port: endpoint.port, webSocketPath: "/x"), configuration: testConfiguration())
            await connection.close()
            Issue.record("connected to a server that did not upgrade")
        } catch let error as TetherError {
            #expect(error.code == .protocolError)
            #expect(error.message.contains("refused the WebSocket upgrade: it did not answer 101 Switching Protocols (status line \"HTTP/1.1 200 OK\")"), "\(error.message)")
        }
        #expect(try await bounded("the client to close") { try await answering.value })
    }

    @Test("a client's connect fails with handshakeTimeout when the server never answers the upgrade")
    func upgradeNeverAnswered() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let holding = Task {
            let peer = try await listener.accept()
            return try await peer.waitForClose()
        }
        do {
            let connection = try await Connection.connect(to: Endpoint(host: endpoint.host, port: endpoint.port, webSocketPath: "/x"), configuration: testConfiguration {
                $0.webSocket.handshakeTimeout = .milliseconds(200)
            })
            await connection.close()
            Issue.record("connected without an answer")
        } catch let error as TetherError {
            #expect(error.code == .handshakeTimeout)
            #expect(error.message.contains("did not finish within"), "\(error.message)")
        }
        #expect(try await bounded("the client to close") { try await holding.value })
    }

    @Test("hostile upgrades get 431, 400 and 426 and close; the server keeps serving others")
    func hostileUpgrades() async throws {
        try await withWebSocketServer { _, endpoint in
            let plain = Endpoint(host: endpoint.host, port: endpoint.port)
            let cases: [([UInt8], String)] = [
                (upgradeRequest(extra: ["X-Padding: " + String(repeating: "a", count: 9000)]), "HTTP/1.1 431 Request Header Fields Too Large"),
                (upgradeRequest(key: "c2hvcnQ="), "HTTP/1.1 400 Bad Request"),
                (upgradeRequest(version: "8"), "HTTP/1.1 426 Upgrade Required"),
            ]
            for (request, status) in cases {
                let socket = try RawSocket.connect(to: plain)
                try socket.write(request)
                let head = try await offThread { try socket.readHead() }
                #expect(head.hasPrefix(status + "\r\n"), "\(head)")
                #expect(try await socket.waitForClose())
            }
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let reply = try await connection.request(Request(type: 0x402, json: ["ok": true]))
            #expect(reply.json == ["echo": ["ok": true]])
            await connection.close()
        }
    }

    @Test("bad frames after the upgrade get their close code: unmasked 1002, a lying 64-bit length 1009, text 1003; a ping gets its pong; others are still served")
    func hostileFrames() async throws {
        try await withWebSocketServer { server, endpoint in
            let events = server.events
            let plain = Endpoint(host: endpoint.host, port: endpoint.port)
            let unmasked: [UInt8] = [0x82, 0x03, 1, 2, 3]
            let lying: [UInt8] = [0x82, 0xFF, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 1, 2, 3, 4]
            let cases: [([UInt8], UInt16, TetherError.Code)] = [
                (unmasked, 1002, .protocolError),
                (lying, 1009, .frameTooLarge),
                (clientFrame(opcode: 1, payload: Array("hello".utf8)), 1003, .protocolError),
            ]
            for (bytes, code, errorCode) in cases {
                let socket = try RawSocket.connect(to: plain)
                try await offThread { try socket.upgrade() }
                try socket.write(bytes)
                let frame = try await offThread { try socket.readWebSocketFrame() }
                #expect(frame?.opcode == 0x8)
                let payload = frame?.payload ?? []
                #expect(payload.count >= 2 && UInt16(payload[0]) << 8 | UInt16(payload[1]) == code, "\(payload)")
                #expect(try await socket.waitForClose())
                let gone = try await firstEvent(events, "the peer's end") { $0.kind == .peerDisconnected }
                #expect(gone.reason?.code == errorCode, "\(String(describing: gone.reason))")
            }
            // A ping is answered with the same payload, and a Tether request in a binary
            // message is answered in one.
            let socket = try RawSocket.connect(to: plain)
            try await offThread { try socket.upgrade() }
            try socket.write(clientFrame(opcode: 9, payload: [1, 2, 3]))
            let pong = try await offThread { try socket.readWebSocketFrame() }
            #expect(pong?.opcode == 0xA)
            #expect(pong?.payload == [1, 2, 3])
            // The request split over two fragments.
            let request = seedBytes(type: 0x402, serial: 5, payload: Array("{\"a\":1}".utf8))
            try socket.write(clientFrame(opcode: 2, payload: Array(request.prefix(5)), fin: false) + clientFrame(opcode: 0, payload: Array(request.dropFirst(5))))
            let response = try await offThread { try socket.readWebSocketFrame() }
            #expect(response?.opcode == 0x2)
            var buffer = FrameBuffer(bytes: response?.payload ?? [])
            var codec = SeedCodec()
            let frame = try codec.decode(&buffer)
            #expect(frame?.serial == 5)
            #expect(frame.flatMap { try? JSONValue(parsing: $0.payload) } == ["echo": ["a": 1]])
            // A close from the client is answered with the same code.
            try socket.write(clientFrame(opcode: 8, payload: WebSocketWriter.closePayload(code: 1000, reason: "done")))
            let closing = try await offThread { try socket.readWebSocketFrame() }
            #expect(closing?.opcode == 0x8)
            #expect(closing.map { Array($0.payload.prefix(2)) } == [0x03, 0xE8])
            #expect(try await socket.waitForClose())
            let gone = try await firstEvent(events, "the peer's end") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .peerClosed)
            #expect(gone.reason?.message.contains("closed the WebSocket with 1000 (normal closure): done") == true, "\(String(describing: gone.reason))")
        }
    }
}
