// The code of Documentation.docc/WhenTCPIsBlocked.md ("When TCP Is Blocked"). The overview
// is run by its test with the ports moved to 0 and the host to 127.0.0.1; the WebSocket
// tests (Tests/TetherTests/WebSocket*.swift) cover the rest with real sockets.
import Tether
import TetherTLS
import Testing

func whenTCPIsBlockedOverview() async throws -> (Server, Connection) {
    // Server: TCP on 9000, WebSocket on 8080 at /tether.
    var serverConfiguration = ServerConfiguration(host: "0.0.0.0", port: 9000)
    serverConfiguration.webSocket = WebSocketServerConfiguration(port: 8080, path: "/tether")
    let server = Server(configuration: serverConfiguration)

    // Client: the same API, a ws:// endpoint.
    let endpoint = Endpoint(webSocket: "ws://chat.example.com:8080/tether")!
    let connection = try await Connection.connect(to: endpoint)
    return (server, connection)
}

func whenTCPIsBlockedHeaders(token: String) -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration.defaults
    configuration.webSocket.headers = ["Authorization": "Bearer \(token)"]
    configuration.webSocket.handshakeTimeout = .seconds(5)      // default 10 s
    return configuration
}

func whenTCPIsBlockedSecure() -> (ServerConfiguration, ConnectionConfiguration, Endpoint) {
    // Server: WebSocket over TLS on 8443 at /tether, next to plain TCP on 9000.
    var secureServer = ServerConfiguration(host: "0.0.0.0", port: 9000)
    var webSocket = WebSocketServerConfiguration(port: 8443, path: "/tether")
    webSocket.tls = .server(certificateChain: "/etc/tether/server.pem", privateKey: "/etc/tether/server.key")
    secureServer.webSocket = webSocket

    // Client: a wss:// URL and TLS settings; Endpoint.webSocketSecure is true.
    var secureClient = ConnectionConfiguration.defaults
    secureClient.tls = .client()
    let secureEndpoint = Endpoint(webSocket: "wss://chat.example.com/tether")!   // port 443
    return (secureServer, secureClient, secureEndpoint)
}

func whenTCPIsBlockedSharedPort() -> ServerConfiguration {
    // One port, 443: Tether clients and wss:// clients alike.
    var sharedServer = ServerConfiguration(host: "0.0.0.0", port: 443)
    sharedServer.tls = .server(certificateChain: "/etc/tether/server.pem", privateKey: "/etc/tether/server.key")
    var sharedWebSocket = WebSocketServerConfiguration()
    sharedWebSocket.path = "/tether"
    sharedWebSocket.sharesMainPort = true
    sharedServer.webSocket = sharedWebSocket
    return sharedServer
}

func whenTCPIsBlockedProxy() -> ConnectionConfiguration {
    // WebSocket endpoints through the office proxy; TCP endpoints stay direct.
    var proxied = ConnectionConfiguration.defaults
    proxied.webSocket.proxy = HTTPProxy(url: "http://alice:secret@proxy.example.com:3128")
    return proxied
}

func whenTCPIsBlockedFallback() -> (ConnectionConfiguration, Endpoint) {
    // TCP first; when it cannot connect, WebSocket at once, in the same attempt.
    var configuration = ConnectionConfiguration.defaults
    configuration.fallback = FallbackPolicy(
        endpoint: Endpoint(webSocket: "ws://chat.example.com:8080/tether")!,
        primaryRetryInterval: .seconds(300)     // default 5 minutes
    )
    let primary = Endpoint(host: "chat.example.com", port: 9000)
    return (configuration, primary)
}

@Suite("When TCP Is Blocked article", .timeLimit(.guarded))
struct WhenTCPIsBlockedSnippetTests {
    @Test("the overview's server and client, on free ports of 127.0.0.1, with the article's headers: a request answered over WebSocket")
    func overview() async throws {
        var serverConfiguration = ServerConfiguration.localTest
        serverConfiguration.webSocket = WebSocketServerConfiguration(port: 0, path: "/tether")
        let server = Server(configuration: serverConfiguration)
        server.handle(type: 0x402) { request, _ in Response(payload: request.payload) }
        let running = Task { try await server.run() }
        defer { running.cancel() }
        let address = try await server.webSocketAddress()
        let endpoint = try #require(Endpoint(webSocket: "ws://127.0.0.1:\(address.port)/tether"))
        var configuration = whenTCPIsBlockedHeaders(token: "t0ken")
        #expect(configuration.webSocket.handshakeTimeout == .seconds(5))
        // The article's 5 s is real time here, which a busy machine stretches; this test is
        // about the headers and the request, not the timeout.
        configuration.webSocket.handshakeTimeout = testBound
        configuration.connectTimeout = testBound
        configuration.requestTimeout = testBound
        configuration.reconnect = .disabled
        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        let reply = try await connection.request(Request(type: 0x402, payload: [1, 2, 3]))
        #expect(reply.payload == [1, 2, 3])
        await connection.close()
    }

    @Test("the wss:// section's configurations: TLS on the WebSocket port only, a wss:// endpoint on port 443 with client TLS")
    func secure() {
        let (server, client, endpoint) = whenTCPIsBlockedSecure()
        #expect(server.tls == nil)
        #expect(server.webSocket?.tls != nil)
        #expect(server.webSocket?.port == 8443)
        #expect(client.tls != nil)
        #expect(endpoint.webSocketSecure)
        #expect(endpoint.port == 443)
        #expect(endpoint.description == "wss://chat.example.com:443/tether")
    }

    @Test("the shared port section's configuration: WebSocket at /tether on the TLS main port, no port of its own")
    func sharedPort() {
        let server = whenTCPIsBlockedSharedPort()
        #expect(server.tls != nil)
        #expect(server.webSocket?.sharesMainPort == true)
        #expect(server.webSocket?.path == "/tether")
        #expect(server.webSocket?.tls == nil)
    }

    @Test("the fallback section's configuration: the ws:// endpoint at /tether, 5 minutes, which is the default")
    func fallback() {
        let (configuration, primary) = whenTCPIsBlockedFallback()
        #expect(configuration.fallback?.endpoint == Endpoint(host: "chat.example.com", port: 8080, webSocketPath: "/tether"))
        #expect(configuration.fallback?.primaryRetryInterval == FallbackPolicy(endpoint: primary).primaryRetryInterval)
        #expect(primary.webSocketPath == nil)
    }
}
