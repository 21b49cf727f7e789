import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import Tether
import TetherTesting

@Suite("Test server and fault proxy of TetherTesting", .timeLimit(.guarded))
struct TestServerTests {
    /// Restarts `host` under a connected client and checks that the new server has the same
    /// port and takes the client back, connecting exactly twice.
    ///
    /// Over sockets a child process that another test is starting holds a copy of every
    /// descriptor between its fork and its exec; a listener that were only closed would
    /// still queue the reconnect then, and reset it once the copy went, so the client would
    /// connect three times. The server shuts its listeners down before closing them, so the
    /// reconnect is refused and retried instead.
    private func restartAndReconnect(_ host: TestServer, client configuration: ConnectionConfiguration) async throws {
        let port = host.port
        #expect(port != 0)
        let connection = try await Connection.connect(to: host.endpoint, configuration: configuration)
        let watcher = StateWatcher(connection)
        try await watcher.next(.connected)
        #expect(try await connection.request(Request(type: 0x402, json: ["n": 1])).json == ["echo": ["n": 1]])
        let first = host.server

        try await host.restart()
        #expect(host.isRunning)
        #expect(host.port == port)
        #expect(host.server !== first)
        #expect(try await host.server.listeningAddress().port == port)
        let lost = try await watcher.next(.reconnecting)
        #expect(lost.reason?.code == .peerClosed)
        try await watcher.next(.connected)
        #expect(try await connection.request(Request(type: 0x402, json: ["n": 2])).json == ["echo": ["n": 2]])
        #expect(await host.server.metrics().acceptedConnections == 1)
        await connection.close()
        try await watcher.next(.closed)
        let phases = await watcher.phases
        #expect(phases.first == .connected)
        let connects = phases.filter { $0 == .connected }.count
        #expect(connects == 2, "\(phases)")
        #expect(phases.last == .closed)
    }

    @Test("restart() on sockets keeps the port, and a connected client reconnects to the new server")
    func restartOnSockets() async throws {
        try await withTestServer(handlers: echoHandlers) { host in
            #expect(host.endpoint.host == "127.0.0.1")
            try await restartAndReconnect(host, client: reconnecting())
        }
    }

    @Test("restart() on an in-memory network listens on the same host and port, and the client reconnects")
    func restartInMemory() async throws {
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let network = MemoryNetwork(loop: group.loops[0])
        var configuration = TestServer.defaultConfiguration
        // This network's loop keeps real time: no handshake timeout, which a busy machine
        // could make close the reconnected client before its first request.
        configuration.eventLoopGroup = group
        configuration.network = network
        let host = try TestServer(configuration: configuration, handlers: echoHandlers)
        #expect(host.port == 0)
        try await host.start()
        #expect(host.endpoint == Endpoint(host: "127.0.0.1", port: try await host.server.listeningAddress().port))
        #expect(network.isListening(host.endpoint))
        try await restartAndReconnect(host, client: reconnecting {
            $0.eventLoopGroup = group
            $0.network = network
        })
        await host.stop()
        #expect(!network.isListening(host.endpoint))
    }

    @Test("stop() returns with the port free: connections are refused, and another listener can take the port")
    func stopFreesThePort() async throws {
        let host = try TestServer(handlers: echoHandlers)
        try await host.start()
        let connection = try await Connection.connect(to: host.endpoint, configuration: testConfiguration())
        await host.stop()
        #expect(!host.isRunning)
        #expect(try await finalState(of: connection).reason?.code == .peerClosed)
        let refused = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: host.endpoint, configuration: testConfiguration())
        }
        #expect(refused?.code == .connectionRefused)

        // A server that is not a TestServer can listen on the port now.
        try await withServer(configure: { $0.port = host.port }, handlers: echoHandlers) { server, endpoint in
            #expect(endpoint.port == host.port)
            let other = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            #expect(try await other.request(Request(type: 0x402, json: ["n": 3])).json == ["echo": ["n": 3]])
            await other.close()
        }
        // stop() when stopped does nothing.
        await host.stop()
    }

    @Test("a test server on a port another server listens on fails at once with bindFailed")
    func takenPort() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let error = #expect(throws: TetherError.self) {
                _ = try TestServer(configuration: ServerConfiguration(host: "127.0.0.1", port: endpoint.port))
            }
            #expect(error?.code == .bindFailed)
            #expect(error?.message == "cannot reserve port \(endpoint.port) of 127.0.0.1 for a test server: address already in use")
        }
    }

    @Test("the fault proxy forwards only to 127.0.0.1: any other upstream is refused with invalidArgument", arguments: [
        Endpoint(host: "10.0.0.1", port: 9000),
        Endpoint(host: "example.com", port: 443),
        Endpoint(host: "localhost", port: 9000),
        Endpoint(host: "::1", port: 9000),
        Endpoint(host: "127.0.0.1", port: 0),
        Endpoint(host: "127.0.0.1", port: 70000),
    ])
    func proxyRefusesOtherUpstreams(upstream: Endpoint) throws {
        let error = #expect(throws: TetherError.self) { _ = try FaultProxy(upstream: upstream) }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.contains(upstream.port == 9000 || upstream.port == 443 ? "\(upstream)" : "port \(upstream.port)") == true)
    }

    @Test("a fault proxy that refuses connections resets new ones without connecting upstream, and takes them again after")
    func proxyRefusesConnections() async throws {
        try await withTestServer(handlers: echoHandlers) { host in
            try await withFaultProxy(to: host.endpoint) { proxy in
                proxy.refusesConnections = true
                // A nonblocking connect that reads the socket's pending error once the
                // handshake is done: the reset may come before or after that.
                let address = TetherSocketAddress(ipAddress: "127.0.0.1", port: proxy.port)!
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
                #expect(fd >= 0)
                defer { Glibc.close(fd) }
                _ = address.withSockAddr { Glibc.connect(fd, $0, $1) }
                // Reset, not closed: the socket's pending error is ECONNRESET.
                let pending = try await offThread { () -> Int32 in
                    var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    guard poll(&descriptor, 1, 10_000) == 1 else { return -1 }
                    let error = (try? Syscall.getOption(fd, level: SOL_SOCKET, name: SO_ERROR)) ?? -2
                    guard error == 0 else { return error }
                    descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    guard poll(&descriptor, 1, 10_000) == 1 else { return -1 }
                    return (try? Syscall.getOption(fd, level: SOL_SOCKET, name: SO_ERROR)) ?? -2
                }
                #expect(pending == ECONNRESET)
                try await proxy.waitUntil("a refused connection") { $0.refused == 1 }
                #expect(proxy.counters.accepted == 0)
                #expect(proxy.counters.upstreamConnected == 0)

                proxy.refusesConnections = false
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                #expect(try await connection.request(Request(type: 0x402, json: ["n": 1])).json == ["echo": ["n": 1]])
                #expect(proxy.counters.accepted == 1)
                #expect(proxy.counters.refused == 1)
                await connection.close()
            }
        }
    }

    @Test("a fault proxy with a delay holds every byte for it: a request's round trip takes two delays")
    func proxyDelay() async throws {
        try await withTestServer(handlers: echoHandlers) { host in
            try await withFaultProxy(to: host.endpoint, mode: .delayed(.milliseconds(150))) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                let clock = ContinuousClock()
                let started = clock.now
                let reply = try await connection.request(Request(type: 0x402, json: ["n": 1]))
                let elapsed = clock.now - started
                #expect(reply.json == ["echo": ["n": 1]])
                #expect(elapsed >= .milliseconds(300), "took \(elapsed)")
                #expect(proxy.counters.bytesUpstream == SeedCodec.headerLength + Request(type: 0x402, json: ["n": 1]).payload.count)
                await connection.close()
            }
        }
    }

    @Test("waits of the fault proxy fail with timedOut, naming what they waited for and the counters")
    func proxyWaitTimesOut() async throws {
        try await withTestServer(handlers: echoHandlers) { host in
            try await withFaultProxy(to: host.endpoint) { proxy in
                let error = await #expect(throws: TetherError.self) {
                    try await proxy.waitForAccepted(1, within: .milliseconds(50))
                }
                #expect(error?.code == .timedOut)
                #expect(error?.message.contains("1 accepted connections") == true)
                #expect(error?.message.contains("accepted 0, refused 0") == true)
            }
        }
    }
}
