import Testing
import TetherTLS
import TetherTesting
@testable import Tether

/// WebSocket endpoints reached through an HTTP `CONNECT` proxy: a real proxy (tinyproxy)
/// between a Tether client and server on loopback, and raw sockets playing proxies that
/// misbehave.
@Suite(
    "HTTP CONNECT proxy",
    .timeLimit(.guarded),
    .enabled(if: TinyProxy.available, "tinyproxy is not installed (.ci/run installs it: apt-get install tinyproxy)")
)
struct ProxyTests {
    /// Runs `body` with a server whose WebSocket port serves `/tether`, and its endpoint.
    func withWebSocketServer<T: Sendable>(_ body: @escaping @Sendable (Endpoint, Endpoint) async throws -> T) async throws -> T {
        try await withServer(configure: {
            $0.webSocket = WebSocketServerConfiguration(port: 0, path: "/tether")
        }, handlers: echoHandlers) { server, tcp in
            let address = try await bounded("the WebSocket port") { try await server.webSocketAddress() }
            return try await body(tcp, Endpoint(host: address.ipAddress, port: address.port, webSocketPath: "/tether"))
        }
    }

    @Test("a ws:// endpoint through tinyproxy: requests are answered, the proxy saw CONNECT to the WebSocket port, the report names the endpoint and the proxy's address")
    func throughTinyproxy() async throws {
        let proxy = try await TinyProxy.start()
        try await withWebSocketServer { _, webSocket in
            let connection = try await Connection.connect(to: webSocket, configuration: testConfiguration {
                $0.webSocket.proxy = proxy.httpProxy
            })
            try await proxy.waitForConnect(to: webSocket)
            for index in 0..<3 {
                let reply = try await connection.request(Request(type: 0x402, json: ["through": "proxy", "n": .int(index)]))
                #expect(reply.json == ["echo": ["through": "proxy", "n": .int(index)]])
            }
            let report = try #require(await connection.connectReport)
            #expect(report.endpoint == webSocket)
            #expect(report.address == TetherSocketAddress(ipAddress: "127.0.0.1", port: proxy.port))
            #expect(await connection.currentEndpoint == webSocket)
            await connection.close()
        }
    }

    @Test("a wss:// endpoint through tinyproxy: TLS and the upgrade go through the tunnel, a 1 MiB request comes back whole")
    func secureThroughTinyproxy() async throws {
        let proxy = try await TinyProxy.start()
        let certificates = try await TestCertificates.shared()
        try await withSecureWebSocketServer(certificates) { server, endpoint in
            server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
            let connection = try await Connection.connect(to: endpoint, configuration: webSocketClientTLS(certificates) {
                $0.webSocket.proxy = proxy.httpProxy
            })
            try await proxy.waitForConnect(to: endpoint)
            #expect(await connection.tlsDetails?.peerSubject == "/CN=localhost")
            let large = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let echoed = try await connection.request(Request(type: 0x405, payload: large))
            #expect(echoed.payload == large)
            await connection.close()
        }
    }

    @Test("a proxy that wants credentials: without them connect fails with connectFailed quoting 407; with an http://user:password@ URL it connects")
    func credentials() async throws {
        let proxy = try await TinyProxy.start(credentials: ("alice", "s3cret"))
        try await withWebSocketServer { _, webSocket in
            let error = await #expect(throws: TetherError.self) {
                _ = try await Connection.connect(to: webSocket, configuration: testConfiguration {
                    $0.webSocket.proxy = proxy.httpProxy
                })
            }
            #expect(error?.code == .connectFailed)
            #expect(error?.message.contains("the proxy http://127.0.0.1:\(proxy.port) refused CONNECT \(webSocket.host):\(webSocket.port) with \"HTTP/1.0 407 Proxy Authentication Required\": it wants credentials") == true)

            let connection = try await Connection.connect(to: webSocket, configuration: testConfiguration {
                $0.webSocket.proxy = HTTPProxy(url: "http://alice:s3cret@127.0.0.1:\(proxy.port)")
            })
            let reply = try await connection.request(Request(type: 0x402, json: ["with": "credentials"]))
            #expect(reply.json == ["echo": ["with": "credentials"]])
            await connection.close()
        }
    }

    @Test("a TCP endpoint that is refused falls back to a ws:// endpoint through the proxy; the TCP endpoint is dialed directly")
    func fallbackThroughProxy() async throws {
        let proxy = try await TinyProxy.start()
        let (refusing, tcp) = try RawSocket.bindOnly()
        defer { refusing.close() }
        try await withWebSocketServer { _, webSocket in
            let connection = try await Connection.connect(to: tcp, configuration: testConfiguration {
                $0.fallback = FallbackPolicy(endpoint: webSocket)
                $0.webSocket.proxy = proxy.httpProxy
            })
            let reply = try await connection.request(Request(type: 0x402, json: ["via": "proxy"]))
            #expect(reply.json == ["echo": ["via": "proxy"]])
            #expect(await connection.currentState == ConnectionState(phase: .connected, endpoint: webSocket))
            #expect(!proxy.process.outputText.contains("CONNECT \(tcp.host):\(tcp.port) "))
            await connection.close()
        }
    }

    @Test("a proxy that cannot reach the endpoint: connectFailed quoting the proxy's status line")
    func unreachableTarget() async throws {
        let proxy = try await TinyProxy.start()
        let (refusing, closed) = try RawSocket.bindOnly()
        defer { refusing.close() }
        let target = Endpoint(host: closed.host, port: closed.port, webSocketPath: "/tether")
        let error = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: target, configuration: testConfiguration {
                $0.webSocket.proxy = proxy.httpProxy
            })
        }
        #expect(error?.code == .connectFailed)
        #expect(error?.message == "the proxy http://127.0.0.1:\(proxy.port) refused CONNECT \(closed.host):\(closed.port) with \"HTTP/1.1 500 Unable to connect\"")
    }
}

/// Proxies played by raw sockets: the exact request, and every way an answer can go wrong.
@Suite("HTTP CONNECT proxy: misbehaving proxies", .timeLimit(.guarded))
struct MisbehavingProxyTests {
    /// Connects to a WebSocket endpoint through the raw proxy `listener`, which `act`
    /// plays once it has read the request; returns the error and the request it read.
    func attempt(
        connectTimeout: Duration = eventBound,
        headers: TetherHTTPHeaders = [:],
        _ act: @escaping @Sendable (RawSocket) throws -> Void
    ) async throws -> (TetherError?, String) {
        let (listener, proxyEndpoint) = try RawSocket.listen()
        defer { listener.close() }
        let target = Endpoint(host: "backend.test", port: 8443, webSocketPath: "/tether")
        let played = Task {
            let socket = try await listener.accept()
            let request = try await offThread { () throws -> [UInt8] in
                var request: [UInt8] = []
                while !request.suffix(4).elementsEqual([13, 10, 13, 10]) {
                    request += try socket.read(1)
                }
                return request
            }
            try act(socket)
            return (socket, String(decoding: request, as: UTF8.self))
        }
        let error = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: target, configuration: testConfiguration {
                $0.connectTimeout = connectTimeout
                $0.webSocket.proxy = HTTPProxy(host: proxyEndpoint.host, port: proxyEndpoint.port, headers: headers)
            })
        }
        let (socket, request) = try await played.value
        socket.close()
        return (error, request)
    }

    @Test("the CONNECT request is exact: authority, Host and the extra headers; a silent proxy times out within the connect timeout")
    func silentProxy() async throws {
        let (error, request) = try await attempt(connectTimeout: .milliseconds(300), headers: ["Proxy-Authorization": "Bearer t0ken"]) { _ in }
        #expect(request == "CONNECT backend.test:8443 HTTP/1.1\r\nHost: backend.test:8443\r\nProxy-Authorization: Bearer t0ken\r\n\r\n")
        #expect(error?.code == .connectTimedOut)
        #expect(error?.message.hasPrefix("the proxy http://127.0.0.1:") == true)
        #expect(error?.message.hasSuffix(" did not answer CONNECT backend.test:8443 within") == false)
        #expect(error?.message.contains(" did not answer CONNECT backend.test:8443 within ") == true)
    }

    @Test("a proxy that closes without answering, answers with a head over 8 KiB, sends bytes after its 200, or does not speak HTTP")
    func brokenAnswers() async throws {
        let (closed, _) = try await attempt { $0.close() }
        #expect(closed?.code == .connectFailed)
        #expect(closed?.message.hasSuffix("closed the connection without answering CONNECT backend.test:8443") == true)

        let (oversized, _) = try await attempt { socket in
            try socket.write(Array("HTTP/1.1 200 OK\r\nX-Padding: \(String(repeating: "p", count: 9000))\r\n\r\n".utf8))
        }
        #expect(oversized?.code == .connectFailed)
        #expect(oversized?.message.hasSuffix("answered CONNECT backend.test:8443 with a head over 8192 bytes") == true)

        let (extra, _) = try await attempt { socket in
            try socket.write(Array("HTTP/1.1 200 Connection established\r\n\r\nSURPRISE".utf8))
        }
        #expect(extra?.code == .protocolError)
        #expect(extra?.message.hasSuffix("sent 8 bytes after its answer to CONNECT backend.test:8443, before the tunnel carried anything") == true)

        let (notHTTP, _) = try await attempt { socket in
            try socket.write(Array("SSH-2.0-OpenSSH_9.2\r\n\r\n".utf8))
        }
        #expect(notHTTP?.code == .connectFailed)
        #expect(notHTTP?.message.hasSuffix("did not answer CONNECT backend.test:8443 with HTTP (first line \"SSH-2.0-OpenSSH_9.2\")") == true)
    }

    @Test("proxy URLs: credentials become Basic authorization, the port defaults to 8080, anything but http:// is refused")
    func urls() {
        let proxy = HTTPProxy(url: "http://alice:s3cret@proxy.example.com:3128")
        #expect(proxy?.host == "proxy.example.com")
        #expect(proxy?.port == 3128)
        #expect(proxy?.headers == ["Proxy-Authorization": "Basic YWxpY2U6czNjcmV0"])
        #expect(proxy?.description == "http://proxy.example.com:3128")
        #expect(HTTPProxy(url: "http://[::1]")?.port == 8080)
        #expect(HTTPProxy(url: "http://[::1]")?.host == "::1")
        #expect(HTTPProxy(url: "http://proxy:3128/")?.port == 3128)
        #expect(HTTPProxy(url: "https://proxy:3128") == nil)
        #expect(HTTPProxy(url: "http://alice@proxy:3128") == nil)
        #expect(HTTPProxy(url: "http://proxy:3128/path") == nil)
        #expect(HTTPProxy(url: "http://") == nil)
    }
}
