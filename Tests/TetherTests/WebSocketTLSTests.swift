import Testing
import TetherTLS
import TetherTesting
@testable import Tether

/// The server TLS of the test certificate, for a WebSocket port or a main port.
func webSocketServerTLS(_ certificates: TestCertificates) -> TLSConfiguration {
    .server(options: TLSServerOptions.guarded(certificates.server))
}

/// A test connection configuration with TLS trusting the test CA.
func webSocketClientTLS(
    _ certificates: TestCertificates,
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) -> ConnectionConfiguration {
    var options = TLSClientOptions()
    options.handshakeTimeout = eventBound
    options.trustRoots = .file(certificates.caCertificate)
    return testConfiguration {
        $0.tls = .client(options: options)
        change(&$0)
    }
}

/// Runs a server whose WebSocket port (path `/tether`) uses TLS, for the duration of
/// `body`, which gets the server and the `wss://` endpoint.
func withSecureWebSocketServer<T: Sendable>(
    _ certificates: TestCertificates,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    handlers: (Server) -> Void = echoHandlers,
    _ body: @escaping @Sendable (Server, Endpoint) async throws -> T
) async throws -> T {
    try await withWebSocketServer(configure: { configuration in
        configuration.webSocket?.tls = webSocketServerTLS(certificates)
        configure(&configuration)
    }, handlers: handlers) { server, endpoint in
        var secure = endpoint
        secure.webSocketSecure = true
        return try await body(server, secure)
    }
}

/// The SHA-256 of `bytes`, in hex.
func sha256Hex(_ bytes: [UInt8]) -> String {
    var checksummer = Checksummer(.sha256)
    bytes.withUnsafeBytes { checksummer.update($0) }
    return checksummer.finalize().map { String(format: "%02x", $0) }.joined()
}

@Suite("Tether over WebSocket over TLS (wss://)", .timeLimit(.guarded))
struct WebSocketTLSTests {
    @Test("wss:// URLs parse with port 443 by default and print as wss://; the Host header leaves out the default port")
    func parsing() throws {
        let plain = try #require(Endpoint(webSocket: "ws://example.com/tether"))
        #expect(plain.port == 80)
        #expect(!plain.webSocketSecure)
        let secure = try #require(Endpoint(webSocket: "WSS://example.com/tether?x=1"))
        #expect(secure.port == 443)
        #expect(secure.webSocketSecure)
        #expect(secure.webSocketPath == "/tether?x=1")
        #expect(secure.description == "wss://example.com:443/tether?x=1")
        #expect(secure.hostHeader == "example.com")
        let explicit = try #require(Endpoint(webSocket: "wss://[::1]:8443"))
        #expect(explicit.host == "::1")
        #expect(explicit.port == 8443)
        #expect(explicit.hostHeader == "[::1]:8443")
        #expect(explicit.description == "wss://[::1]:8443/")
        #expect(Endpoint(webSocket: "wss://") == nil)
        #expect(Endpoint(webSocket: "https://example.com/") == nil)
    }

    @Test("a Tether client and server over wss://: small and 3 MiB requests, 200 at once, a push, heartbeats, TLS details on both ends")
    func endToEnd() async throws {
        let certificates = try await TestCertificates.shared()
        try await withSecureWebSocketServer(certificates) { server, endpoint in
            server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: webSocketClientTLS(certificates) {
                $0.heartbeat = .every(.milliseconds(50), timeout: .seconds(5))
            })
            let pushes = connection.notifications
            let acked = connection.heartbeats.filter { $0.outcome == .acked }
            let details = try #require(await connection.tlsDetails)
            #expect(details.peerSubject == "/CN=localhost")
            #expect(await connection.connectReport?.endpoint == endpoint)
            let secured = try await firstEvent(events, "the peer's TLS handshake") { $0.kind == .peerSecured }
            #expect(secured.tls?.version == details.version)

            let reply = try await connection.request(Request(type: 0x402, json: ["over": "wss"]))
            #expect(reply.json == ["echo": ["over": "wss"]])
            // Larger than one outgoing message (1 MiB) and than a TLS record: several of each.
            let large = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let echoed = try await connection.request(Request(type: 0x405, payload: large))
            #expect(echoed.payload == large)
            // Many small messages, several per TLS record.
            let answers = try await withThrowingTaskGroup(of: (Int, JSONValue?).self) { group in
                for index in 0..<200 {
                    group.addTask { (index, try await connection.request(Request(type: 0x402, json: ["n": .int(index)])).json) }
                }
                return try await group.reduce(into: [Int: JSONValue?]()) { $0[$1.0] = $1.1 }
            }
            #expect(answers.count == 200)
            #expect((0..<200).allSatisfy { answers[$0] == ["echo": ["n": .int($0)]] })

            let peer = try #require(secured.peer)
            try await server.push(Frame(type: 0x2, serial: 7, payload: Array("secure".utf8)), to: peer)
            let pushed = try await collect(1, from: pushes, "the push")
            #expect(pushed == [Frame(type: 0x2, serial: 7, payload: Array("secure".utf8))])
            let beats = try await collect(2, from: acked, "two acked heartbeats")
            #expect(beats.count == 2)
            let serving = try #require(server.peers.first)
            #expect(await serving.tlsDetails?.version == details.version)
            await connection.close()
            let gone = try await firstEvent(events, "the peer to leave") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.message.hasSuffix("closed the WebSocket with 1000 (normal closure)") == true, "\(String(describing: gone.reason))")
        }
    }

    @Test("between reads, a wss:// peer keeps no inbound storage in its TLS or WebSocket layer: each lends a different loop buffer during a read and gives it back")
    func idleBuffers() async throws {
        let certificates = try await TestCertificates.shared()
        try await withSecureWebSocketServer(certificates) { server, endpoint in
            server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: webSocketClientTLS(certificates))
            _ = try await firstEvent(events, "the peer") { $0.kind == .peerConnected }
            for index in 0..<5 {
                _ = try await connection.request(Request(type: 0x402, json: ["n": .int(index)]))
            }
            let peer = try #require(server.peers.first)
            let channel = try #require(await peer.channel)
            let capacities = { @Sendable () async throws -> [Int] in
                try await peer.loop.submit { () -> [Int] in
                    let webSocket = channel.transport as? WebSocketTransport
                    let tls = webSocket?.base as? TLSTransport
                    return [webSocket?.buffers.inbound.capacity ?? -1, tls?.buffers.inbound.capacity ?? -1, tls?.base.buffers.inbound.capacity ?? -1]
                }
            }
            #expect(try await capacities() == [0, 0, 0])
            // A frame of several messages and records leaves storage kept for the next
            // one, within the idle limit of every buffer (16 MiB), as over TLS alone.
            let large = (0..<((2 << 20) + 3)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            #expect(try await connection.request(Request(type: 0x405, payload: large)).payload == large)
            #expect(try await capacities().allSatisfy { (0...TransportBuffers.idleBufferLimit).contains($0) })
            await connection.close()
        }
    }

    @Test("a wss:// endpoint without tls, and a ws:// endpoint (or fallback) with tls, fail at connect with invalidArgument before any socket")
    func mismatches() async throws {
        let certificates = try await TestCertificates.shared()
        let secure = try #require(Endpoint(webSocket: "wss://127.0.0.1:1/tether"))
        let plain = try #require(Endpoint(webSocket: "ws://127.0.0.1:1/tether"))
        let cases: [(Endpoint, ConnectionConfiguration, String)] = [
            (secure, testConfiguration(), "wss://127.0.0.1:1/tether is WebSocket over TLS but ConnectionConfiguration.tls is not set"),
            (plain, webSocketClientTLS(certificates), "ws://127.0.0.1:1/tether is WebSocket without TLS but ConnectionConfiguration.tls is set: use wss://127.0.0.1:1/tether"),
            (Endpoint(host: "127.0.0.1", port: 1), webSocketClientTLS(certificates) { $0.fallback = FallbackPolicy(endpoint: plain) }, "use wss://127.0.0.1:1/tether"),
        ]
        for (endpoint, configuration, message) in cases {
            do {
                let connection = try await bounded("the connect to fail") { try await Connection.connect(to: endpoint, configuration: configuration) }
                await connection.close()
                Issue.record("connected to \(endpoint)")
            } catch let error as TetherError {
                #expect(error.code == .invalidArgument, "\(error)")
                #expect(error.message.contains(message), "\(error.message)")
            }
        }
    }

    @Test("a wss:// client whose server never finishes TLS fails with handshakeTimeout naming the TLS handshake, within the WebSocket handshake timeout")
    func tlsStalls() async throws {
        let certificates = try await TestCertificates.shared()
        let (listener, endpoint) = try RawSocket.listen()
        let holding = Task {
            let peer = try await listener.accept()
            return try await peer.waitForClose()
        }
        var secure = Endpoint(host: endpoint.host, port: endpoint.port, webSocketPath: "/x")
        secure.webSocketSecure = true
        do {
            let connection = try await Connection.connect(to: secure, configuration: webSocketClientTLS(certificates) {
                $0.webSocket.handshakeTimeout = .milliseconds(200)
            })
            await connection.close()
            Issue.record("connected without a TLS handshake")
        } catch let error as TetherError {
            #expect(error.code == .handshakeTimeout)
            #expect(error.message.contains("the TLS handshake (before the WebSocket upgrade) with 127.0.0.1:\(endpoint.port) did not finish within 200 ms"), "\(error.message)")
        }
        #expect(try await bounded("the client to close") { try await holding.value })
    }
}
