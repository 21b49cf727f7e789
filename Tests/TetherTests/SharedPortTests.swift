import Testing
import TetherTLS
import TetherTesting
@testable import Tether

/// Runs a server whose main port also takes WebSocket upgrades for `/tether`, with TLS
/// on it when `certificates` are given, for the duration of `body`, which gets the server,
/// the main endpoint and the `ws://` (or `wss://`) endpoint on the same port.
func withSharedPortServer<T: Sendable>(
    tls certificates: TestCertificates? = nil,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: @escaping @Sendable (Server, Endpoint, Endpoint) async throws -> T
) async throws -> T {
    try await withServer(configure: { configuration in
        var webSocket = WebSocketServerConfiguration()
        webSocket.path = "/tether"
        webSocket.sharesMainPort = true
        configuration.webSocket = webSocket
        configuration.tls = certificates.map(webSocketServerTLS)
        configure(&configuration)
    }, handlers: echoHandlers) { server, endpoint in
        var webSocket = Endpoint(host: endpoint.host, port: endpoint.port, webSocketPath: "/tether")
        webSocket.webSocketSecure = certificates != nil
        return try await body(server, endpoint, webSocket)
    }
}

extension ChannelProbe {
    /// The transport the channel runs over now.
    var transportIdentity: ObjectIdentifier? { channel.map { ObjectIdentifier($0.transport) } }
}

@Suite("WebSocket and Tether frames on one port", .timeLimit(.guarded))
struct SharedPortTests {
    @Test("the first four bytes decide: exactly GET and a space is WebSocket, a differing byte is frames at once, fewer matching bytes wait")
    func verdicts() {
        let cases: [([UInt8], ProtocolSniffer.Verdict)] = [
            ([], .undecided),
            (Array("G".utf8), .undecided),
            (Array("GET".utf8), .undecided),
            (Array("GET ".utf8), .webSocket),
            (Array("GET /tether HTTP/1.1".utf8), .webSocket),
            (Array("GET/".utf8), .frames),
            (Array("GEX".utf8), .frames),
            (Array("get ".utf8), .frames),
            ([0x47, 0x00], .frames),
            ([0x00, 0x00, 0x04, 0x02], .frames),
            (seedBytes(type: 0x402, serial: 1), .frames),
        ]
        for (bytes, verdict) in cases {
            #expect(ProtocolSniffer.verdict(bytes[...]) == verdict, "\(bytes)")
        }
    }

    @Test("over an in-memory pair: a frame written before the decision is held, then sent first; the channel then runs over the transport below itself")
    func heldWriteInMemory() async throws {
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let loop = group.next()
        let (a, b) = InMemoryTransport.makePair(on: loop)
        let server = ChannelProbe(loop: loop)
        let options = WebSocketLayerOptions(role: .server(path: nil, allowedOrigins: nil), maximumMessageSize: 1 << 20, maximumHeadSize: 8 << 10, handshakeTimeout: nil, drainTimeout: .seconds(5))
        try await server.attach(ProtocolSniffer(over: b, webSocket: options, loop: loop), role: .server)
        let sink = try await loop.submit { () throws(TetherError) in
            let sink = ByteSink(a)
            try a.start()
            return sink
        }
        let push = Frame(type: 0x2, serial: 1, payload: Array("early".utf8))
        #expect(await server.write([push]).written == 1)
        // A turn later, what the channel wrote would have reached the other end.
        try await loop.submit {}
        #expect(sink.bytes.isEmpty)

        let request = seedBytes(type: 0x402, serial: 9, payload: Array("{}".utf8))
        try await loop.submit {
            a.buffers.outbound.writeBytes(request)
            a.flush()
        }
        let received = try await collect(1, from: server.events, "the request at the server")
        #expect(received == [.frame(Frame(type: 0x402, serial: 9, payload: Array("{}".utf8)))])
        #expect(await server.transportIdentity == ObjectIdentifier(b))
        let reply = Frame(type: 0x402, serial: 9, payload: Array("ok".utf8))
        #expect(await server.write([reply]).written == 1)
        let expected = seedBytes(type: 0x2, serial: 1, payload: Array("early".utf8)) + seedBytes(type: 0x402, serial: 9, payload: Array("ok".utf8))
        try await bounded("both frames at the client") {
            while sink.bytes.count < expected.count { try await loop.submit {} }
        }
        #expect(sink.bytes == expected)
    }

    @Test("one main port serves a Tether client and a WebSocket client, without and with TLS", arguments: [false, true])
    func bothClients(tls: Bool) async throws {
        let certificates = tls ? try await TestCertificates.shared() : nil
        try await withSharedPortServer(tls: certificates) { server, endpoint, webSocket in
            server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
            let events = server.events
            #expect(try await server.webSocketAddress() == server.listeningAddress())
            let configuration = certificates.map { webSocketClientTLS($0) } ?? testConfiguration()
            let tcp = try await Connection.connect(to: endpoint, configuration: configuration)
            let ws = try await Connection.connect(to: webSocket, configuration: configuration)
            for (index, connection) in [tcp, ws].enumerated() {
                let reply = try await connection.request(Request(type: 0x402, json: ["client": .int(index)]))
                #expect(reply.json == ["echo": ["client": .int(index)]])
                let large = (0..<((1 << 20) + 5)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
                let echoed = try await connection.request(Request(type: 0x405, payload: large))
                #expect(echoed.payload == large)
                #expect((await connection.tlsDetails != nil) == tls)
            }
            if tls {
                let secured = try await collect(2, from: events.filter { $0.kind == .peerSecured }, "two secured peers")
                #expect(secured.allSatisfy { $0.tls?.version != nil })
            }
            await ws.close()
            let gone = try await firstEvent(events, "the WebSocket peer to leave") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.message.hasSuffix("closed the WebSocket with 1000 (normal closure)") == true, "\(String(describing: gone.reason))")
            await tcp.close()
        }
    }

    @Test("a push sent before a peer's first byte reaches it first: as the first frame on TCP, as the first message after the 101 on WebSocket")
    func pushBeforeDecision() async throws {
        try await withSharedPortServer { server, endpoint, _ in
            let events = server.events
            let push = Frame(type: 0x2, serial: 3, payload: Array("first".utf8))
            let request = seedBytes(type: 0x402, serial: 4, payload: Array("{\"a\":1}".utf8))

            let tcp = try RawSocket.connect(to: endpoint)
            let tcpPeer = try #require(try await firstEvent(events, "the TCP peer") { $0.kind == .peerConnected }.peer)
            try await server.push(push, to: tcpPeer)
            try tcp.write(request)
            let tcpFirst = try await tcp.readFrame()
            let tcpSecond = try await tcp.readFrame()
            #expect(tcpFirst == push)
            #expect(tcpSecond?.serial == 4)
            #expect(tcpSecond.flatMap { try? JSONValue(parsing: $0.payload) } == ["echo": ["a": 1]])

            let ws = try RawSocket.connect(to: endpoint)
            let wsPeer = try #require(try await firstEvent(events, "the WebSocket peer") { $0.kind == .peerConnected }.peer)
            try await server.push(push, to: wsPeer)
            try await offThread { try ws.upgrade() }
            let first = try await offThread { try ws.readWebSocketFrame() }
            #expect(first?.opcode == 0x2)
            #expect(first?.payload == seedBytes(type: 0x2, serial: 3, payload: Array("first".utf8)))
            try ws.write(clientFrame(opcode: 2, payload: request))
            let second = try await offThread { try ws.readWebSocketFrame() }
            var buffer = FrameBuffer(bytes: second?.payload ?? [])
            var codec = SeedCodec()
            let answer = try codec.decode(&buffer)
            #expect(answer?.serial == 4)
            #expect(answer.flatMap { try? JSONValue(parsing: $0.payload) } == ["echo": ["a": 1]])
        }
    }

    @Test("a peer that sends GE and stops is ended by the handshake timeout, which says it was 2 of the 4 deciding bytes")
    func stalledBeforeDecision() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        try await withSharedPortServer(configure: {
            $0.eventLoopGroup = group
            $0.handshakeTimeout = .milliseconds(300)
            $0.idleTimeout = nil
        }) { server, endpoint, _ in
            let events = server.events
            let socket = try RawSocket.connect(to: endpoint)
            try socket.write(Array("GE".utf8))
            _ = try await firstEvent(events, "the peer") { $0.kind == .peerConnected }
            await clock.advance(by: .milliseconds(300) - .nanoseconds(1))
            #expect(server.peerCount == 1)
            await clock.advance(by: .nanoseconds(1))
            let gone = try await firstEvent(events, "the peer's end") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .handshakeTimeout)
            #expect(gone.reason?.message.hasSuffix("sent 2 of the 4 bytes that tell Tether frames from a WebSocket upgrade within 300 ms of connecting") == true, "\(String(describing: gone.reason))")
            #expect(try await socket.waitForClose())
        }
    }

    @Test("a GET that is not an upgrade gets 400 Bad Request on the main port and is closed; frames are still served")
    func notAnUpgrade() async throws {
        try await withSharedPortServer { server, endpoint, _ in
            for request in ["GET / HTTP/1.1 garbage\r\n\r\n", "GET /tether HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"] {
                let socket = try RawSocket.connect(to: endpoint)
                try socket.write(Array(request.utf8))
                let head = try await offThread { try socket.readHead() }
                #expect(head.hasPrefix("HTTP/1.1 400 Bad Request\r\n"), "\(head)")
                #expect(try await socket.waitForClose())
            }
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let reply = try await connection.request(Request(type: 0x402, json: ["still": true]))
            #expect(reply.json == ["echo": ["still": true]])
            await connection.close()
        }
    }

    @Test("sharing the main port on the in-memory network: a Tether client and a WebSocket client on the same port are both served, each over its own kind of stream")
    func memoryNetworkShared() async throws {
        try await withTestNetwork { network in
            var configuration = ServerConfiguration.testing(on: network)
            var webSocket = WebSocketServerConfiguration()
            webSocket.path = "/tether"
            webSocket.sharesMainPort = true
            configuration.webSocket = webSocket
            configuration.handshakeTimeout = nil
            let server = Server(configuration: configuration)
            echoHandlers(server)
            let running = Task { try await server.run() }
            defer { running.cancel() }
            let address = try await bounded("the server to listen") { try await server.listeningAddress() }
            #expect(try await server.webSocketAddress() == address)
            let frames = Connection(to: Endpoint(host: "server", port: 9000), configuration: .testing(on: network))
            let upgraded = Connection(to: Endpoint(host: "server", port: 9000, webSocketPath: "/tether"), configuration: .testing(on: network))
            for (connection, name) in [(frames, "frames"), (upgraded, "websocket")] {
                try await bounded("\(name) to connect") { try await connection.connect() }
                let reply = try await bounded("\(name)'s answer") { try await connection.request(Request(type: 0x402, json: ["over": .string(name)])) }
                #expect(reply.json == ["echo": ["over": .string(name)]])
            }
            #expect(server.peerCount == 2)
            await frames.close()
            await upgraded.close()
            running.cancel()
            try await bounded("the server to stop") { try await running.value }
        }
    }
}
