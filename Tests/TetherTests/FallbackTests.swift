import Synchronization
import Testing
import TetherTesting
@testable import Tether

/// Falling back to a WebSocket endpoint over real loopback sockets: a refused TCP endpoint
/// leads to the server's WebSocket port in the same attempt, and the TCP endpoint is used
/// again once the primary retry interval has passed.
@Suite("Fallback to WebSocket", .timeLimit(.guarded))
struct FallbackTests {
    /// Runs `body` with a server listening for TCP and WebSocket: its TCP endpoint and its
    /// WebSocket endpoint. Besides the echo handlers, type `0x405` echoes once `gate` lets it.
    func withBothPorts<T: Sendable>(gate: HandlerGate = HandlerGate(), _ body: @escaping @Sendable (Endpoint, Endpoint) async throws -> T) async throws -> T {
        try await withServer(configure: {
            $0.webSocket = WebSocketServerConfiguration(port: 0, path: "/tether")
            $0.mailboxes = .inMemory
        }, handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x405) { request, _ in
                await gate.pass()
                return Response(json: ["echo": request.json ?? nil])
            }
        }) { server, tcp in
            let address = try await bounded("the WebSocket port") { try await server.webSocketAddress() }
            return try await body(tcp, Endpoint(host: address.ipAddress, port: address.port, webSocketPath: "/tether"))
        }
    }

    /// The same on `network`: the server's TCP endpoint is `server:9000`, its WebSocket
    /// endpoint `ws://server:8080/tether`.
    func withBothPorts<T: Sendable>(
        on network: TestNetwork,
        gate: HandlerGate = HandlerGate(),
        _ body: (Endpoint, Endpoint) async throws -> T
    ) async throws -> T {
        try await withNetworkServer(on: network, configure: {
            $0.mailboxes = .inMemory
            $0.handshakeTimeout = nil
            $0.idleTimeout = nil
            $0.webSocket = WebSocketServerConfiguration(port: 8080, path: "/tether")
        }, handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x405) { request, _ in
                await gate.pass()
                return Response(json: ["echo": request.json ?? nil])
            }
        }) { server, tcp in
            _ = try await bounded("the WebSocket port") { try await server.webSocketAddress() }
            return try await body(tcp, Endpoint(host: "server", port: 8080, webSocketPath: "/tether"))
        }
    }

    @Test("a refused TCP endpoint on the in-memory network connects over the WebSocket fallback at once: one attempt, no reconnect, the state names the fallback")
    func fallsBack() async throws {
        try await withTestNetwork { network in
            try await withBothPorts(on: network) { tcp, webSocket in
                network.refuseConnections(to: tcp)
                let connection = try await Connection.connect(to: tcp, configuration: testConfiguration {
                    $0.use(network)
                    // Without the fallback a refused first connect would end the connection.
                    $0.fallback = FallbackPolicy(endpoint: webSocket)
                })
                let reply = try await connection.request(Request(type: 0x402, json: ["via": "fallback"]))
                #expect(reply.json == ["echo": ["via": "fallback"]])
                let report = try #require(await connection.connectReport)
                #expect(report.endpoint == webSocket)
                #expect(report.attempts.count == 1)
                #expect(await connection.currentEndpoint == webSocket)
                #expect(await connection.currentState == ConnectionState(phase: .connected, endpoint: webSocket))
                let metrics = await connection.metrics
                #expect(metrics.connects == 1)
                #expect(metrics.reconnectAttempts == 0)
                await connection.close()
            }
        }
    }

    @Test("a TCP endpoint that accepts and then resets before anything arrived falls back at once: connecting, then connected over the fallback")
    func resetAfterAcceptFallsBack() async throws {
        let (listener, middlebox) = try RawSocket.listen()
        defer { listener.close() }
        try await withBothPorts { _, webSocket in
            let connection = try await Connection.connect(to: middlebox, configuration: testConfiguration {
                $0.fallback = FallbackPolicy(endpoint: webSocket)
            })
            let accepted = try await listener.accept()
            let states = connection.states
            accepted.reset()
            let seen = try await collect(3, from: states, "the fallback after the reset")
            #expect(seen == [.connected(to: middlebox), .connecting, .connected(to: webSocket)])
            let reply = try await connection.request(Request(type: 0x402, json: ["via": "fallback"]))
            #expect(reply.json == ["echo": ["via": "fallback"]])
            #expect(await connection.currentEndpoint == webSocket)
            let metrics = await connection.metrics
            #expect(metrics.connects == 2)
            #expect(metrics.reconnectAttempts == 0)
            await connection.close()
        }
    }

    @Test("a TCP endpoint that resets on the session hello falls back within the same attempt: connect() returns over the fallback")
    func resetOnHelloFallsBack() async throws {
        let (listener, middlebox) = try RawSocket.listen()
        defer { listener.close() }
        try await withBothPorts { _, webSocket in
            let middleman = Task {
                let accepted = try await listener.accept()
                // The hello's header, then the reset.
                _ = try await offThread { try accepted.read(12) }
                accepted.reset()
            }
            let connection = try await Connection.connect(to: middlebox, configuration: testConfiguration {
                $0.fallback = FallbackPolicy(endpoint: webSocket)
                $0.session = SessionConfiguration(clientID: "middlebox-\(UInt32.random(in: 0 ... .max))")
            })
            try await middleman.value
            #expect(await connection.currentState == ConnectionState(phase: .connected, endpoint: webSocket))
            let reply = try await connection.request(Request(type: 0x402, json: ["via": "fallback"]))
            #expect(reply.json == ["echo": ["via": "fallback"]])
            let metrics = await connection.metrics
            #expect(metrics.connects == 1)
            #expect(metrics.reconnectAttempts == 0)
            await connection.close()
        }
    }

    @Test("after the primary retry interval, and not before, a connection on the in-memory network leaves the fallback for the TCP endpoint, with no reconnect counted")
    func primaryComesBack() async throws {
        try await withTestNetwork { network in
            try await withBothPorts(on: network) { tcp, webSocket in
                // The main endpoint refuses until the test lets it through.
                network.refuseConnections(to: tcp)
                let connection = try await Connection.connect(to: tcp, configuration: testConfiguration {
                    $0.use(network)
                    $0.fallback = FallbackPolicy(endpoint: webSocket, primaryRetryInterval: .seconds(60))
                })
                #expect(await connection.currentEndpoint == webSocket)
                let states = connection.states
                network.restoreConnections(to: tcp)

                await network.advance(by: .seconds(60) - .nanoseconds(1))
                #expect(await connection.currentState == ConnectionState(phase: .connected, endpoint: webSocket))
                await network.advance(by: .nanoseconds(1))
                let seen = try await collect(3, from: states, "the reconnect to the main endpoint")
                #expect(seen == [.connected(to: webSocket), .connecting, .connected(to: tcp)])
                #expect(await connection.currentEndpoint == tcp)
                let reply = try await connection.request(Request(type: 0x402, json: ["via": "tcp"]))
                #expect(reply.json == ["echo": ["via": "tcp"]])
                let metrics = await connection.metrics
                #expect(metrics.connects == 2)
                #expect(metrics.reconnectAttempts == 0)
                await connection.close()
            }
        }
    }

    @Test("a primary retry that falls due with a request in flight waits for its response, then reconnects to the TCP endpoint")
    func primaryRetryWaitsForRequests() async throws {
        let (refusing, refused) = try RawSocket.bindOnly()
        defer { refusing.close() }
        let gate = HandlerGate(open: false)
        try await withBothPorts(gate: gate) { tcp, webSocket in
            try await withManualLoop { clock, group in
                let primary = Endpoint(host: "primary.test", port: 1)
                let target = Mutex(TetherSocketAddress(ipAddress: refused.host, port: refused.port)!)
                let connection = try await Connection.connect(to: primary, configuration: testConfiguration {
                    $0.eventLoopGroup = group
                    $0.requestTimeout = nil
                    $0.fallback = FallbackPolicy(endpoint: webSocket, primaryRetryInterval: .seconds(60))
                    $0.resolver = .list { endpoint throws(TetherError) in
                        if endpoint == primary { return [target.withLock { $0 }] }
                        return [TetherSocketAddress(ipAddress: endpoint.host, port: endpoint.port)!]
                    }
                })
                let states = connection.states
                target.withLock { $0 = TetherSocketAddress(ipAddress: tcp.host, port: tcp.port)! }
                let pending = await connection.startRequest(Request(type: 0x405, json: ["held": true]), settlingOn: clock)
                #expect(await connection.pendingRequestCount == 1)

                await clock.advance(by: .seconds(60))
                #expect(await connection.currentState == ConnectionState(phase: .connected, endpoint: webSocket))
                #expect(await connection.metrics.connects == 1)

                gate.open()
                let reply = try await bounded("the held response") { try await pending.value }
                #expect(reply.json == ["echo": ["held": true]])
                let seen = try await collect(3, from: states, "the reconnect to the main endpoint")
                #expect(seen == [.connected(to: webSocket), .connecting, .connected(to: primary)])
                #expect(await connection.currentEndpoint == primary)
                #expect(await connection.metrics.reconnectAttempts == 0)
                await connection.close()
            }
        }
    }

    @Test("a primary retry interval of zero is refused by connect() with invalidArgument, before any socket")
    func zeroInterval() async throws {
        let fallback = Endpoint(host: "127.0.0.1", port: 1, webSocketPath: "/tether")
        let error = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: 1), configuration: testConfiguration {
                $0.fallback = FallbackPolicy(endpoint: fallback, primaryRetryInterval: .zero)
            })
        }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message == "fallback.primaryRetryInterval must be above zero, not 0 s")
    }
}
