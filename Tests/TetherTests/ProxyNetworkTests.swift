import Testing
import TetherTesting
@testable import Tether

/// The HTTP `CONNECT` proxy on the in-memory network: the same connector as over sockets,
/// with a proxy the test plays (``MemoryHTTPProxy``) and the connect timeout on the
/// network's manual clock.
@Suite("HTTP CONNECT proxy on the test network", .timeLimit(.guarded))
struct ProxyNetworkTests {
    static let target = Endpoint(host: "server", port: 8080, webSocketPath: "/tether")

    /// Connects to ``target`` through a proxy with `behavior` on `network`; returns the error
    /// and the `CONNECT` head the proxy read.
    func attempt(on network: TestNetwork, _ behavior: MemoryHTTPProxy.Behavior, headers: TetherHTTPHeaders = [:]) async throws -> (TetherError?, String?) {
        let proxy = try MemoryHTTPProxy(on: network, behavior: behavior)
        defer { proxy.stop() }
        let error = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: Self.target, configuration: testConfiguration {
                $0.use(network)
                $0.webSocket.proxy = HTTPProxy(host: MemoryHTTPProxy.endpoint.host, port: MemoryHTTPProxy.endpoint.port, headers: headers)
            })
        }
        proxy.stop()
        var heads = proxy.connects.makeAsyncIterator()
        return (error, await heads.next())
    }

    @Test("a ws:// endpoint through the proxy: the CONNECT is exact, requests are answered, the report names the endpoint and the proxy's address")
    func throughProxy() async throws {
        try await withTestNetwork { network in
            let proxy = try MemoryHTTPProxy(on: network)
            defer { proxy.stop() }
            try await withWebSocketServer(on: network, handlers: { server in
                echoHandlers(server)
                server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
            }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.webSocket.proxy = HTTPProxy(host: MemoryHTTPProxy.endpoint.host, port: MemoryHTTPProxy.endpoint.port, headers: ["Proxy-Authorization": "Bearer t0ken"])
                })
                var heads = proxy.connects.makeAsyncIterator()
                #expect(await heads.next() == "CONNECT server:8080 HTTP/1.1\r\nHost: server:8080\r\nProxy-Authorization: Bearer t0ken\r\n\r\n")
                for index in 0..<3 {
                    let reply = try await connection.request(Request(type: 0x402, json: ["through": "proxy", "n": .int(index)]))
                    #expect(reply.json == ["echo": ["through": "proxy", "n": .int(index)]])
                }
                let large = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
                let echoed = try await connection.request(Request(type: 0x405, payload: large))
                // Compared outside the expectation, which would diff a megabyte on a mismatch.
                let whole = echoed.payload == large
                #expect(whole)
                let report = try #require(await connection.connectReport)
                #expect(report.endpoint == endpoint)
                #expect(report.address.port == MemoryHTTPProxy.endpoint.port)
                #expect(await connection.currentEndpoint == endpoint)
                // Client to proxy, and proxy to server.
                #expect(network.links.count == 2)
                await connection.close()
            }
        }
    }

    @Test("a proxy that wants credentials, or cannot reach the endpoint: connectFailed quoting its status line")
    func refusals() async throws {
        try await withTestNetwork { network in
            let (credentials, head) = try await attempt(on: network, .answer("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n"))
            #expect(head?.hasPrefix("CONNECT server:8080 HTTP/1.1\r\n") == true)
            #expect(credentials?.code == .connectFailed)
            #expect(credentials?.message == "the proxy http://proxy:3128 refused CONNECT server:8080 with \"HTTP/1.1 407 Proxy Authentication Required\": it wants credentials (HTTPProxy.headers, Proxy-Authorization)")

            // Nothing listens on server:8080: the proxy's dial is refused.
            let (unreachable, _) = try await attempt(on: network, .tunnel)
            #expect(unreachable?.code == .connectFailed)
            #expect(unreachable?.message == "the proxy http://proxy:3128 refused CONNECT server:8080 with \"HTTP/1.1 502 Bad Gateway\"")
        }
    }

    @Test("a proxy that closes without answering, answers with a head over 8 KiB, sends bytes after its 200, or does not speak HTTP")
    func brokenAnswers() async throws {
        try await withTestNetwork { network in
            let (closed, _) = try await attempt(on: network, .answer(""))
            #expect(closed?.code == .connectFailed)
            #expect(closed?.message == "the proxy http://proxy:3128 closed the connection without answering CONNECT server:8080")

            let (oversized, _) = try await attempt(on: network, .answer("HTTP/1.1 200 OK\r\nX-Padding: \(String(repeating: "p", count: 9000))\r\n\r\n"))
            #expect(oversized?.code == .connectFailed)
            #expect(oversized?.message == "the proxy http://proxy:3128 answered CONNECT server:8080 with a head over 8192 bytes")

            let (extra, _) = try await attempt(on: network, .answer("HTTP/1.1 200 Connection established\r\n\r\nSURPRISE"))
            #expect(extra?.code == .protocolError)
            #expect(extra?.message == "the proxy http://proxy:3128 sent 8 bytes after its answer to CONNECT server:8080, before the tunnel carried anything")

            let (notHTTP, _) = try await attempt(on: network, .answer("SSH-2.0-OpenSSH_9.2\r\n\r\n"))
            #expect(notHTTP?.code == .connectFailed)
            #expect(notHTTP?.message == "the proxy http://proxy:3128 did not answer CONNECT server:8080 with HTTP (first line \"SSH-2.0-OpenSSH_9.2\")")
        }
    }

    @Test("a silent proxy: connect fails with connectTimedOut at the connect timeout on the manual clock, not a nanosecond before")
    func silentProxy() async throws {
        try await withTestNetwork { network in
            let proxy = try MemoryHTTPProxy(on: network, behavior: .silent)
            defer { proxy.stop() }
            let connection = Connection(to: Self.target, configuration: testConfiguration {
                $0.use(network)
                $0.connectTimeout = .seconds(3)
                $0.webSocket.proxy = proxy.httpProxy
            })
            let start = network.clock.elapsed
            let pending = Task { try await connection.connect() }
            var heads = proxy.connects.makeAsyncIterator()
            // The exchange's timer is set once the proxy has the request.
            _ = await heads.next()
            await network.advance(by: .seconds(3) - .nanoseconds(1) - (network.clock.elapsed - start))
            #expect(await connection.currentState.phase == .connecting)
            await network.advance(by: .nanoseconds(1))
            let outcome = try await withTimeLimit { await pending.result }
            guard case .failure(let error as TetherError) = outcome else {
                Issue.record("connect did not fail: \(outcome)")
                return
            }
            #expect(error.code == .connectTimedOut)
            #expect(error.message == "the proxy http://proxy:3128 did not answer CONNECT server:8080 within 3 s")
            #expect(network.clock.elapsed - start == .seconds(3))
        }
    }
}
