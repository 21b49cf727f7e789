import Testing
import TetherTLS
import TetherTesting
@testable import Tether

@Suite("The in-memory network and the test clock", .timeLimit(.guarded))
struct TestNetworkTests {
    let endpoint = Endpoint(host: "server", port: 9000)

    @Test("a request and its answer cross the in-memory network, with the server's in-memory addresses")
    func requestAndAnswer() async throws {
        try await withTestNetwork { network in
            let server = Server(configuration: .testing(on: network))
            server.handle(type: 0x410) { request, _ in Response(json: ["echo": request.json?["n"] ?? .null]) }
            try await whileRunning(server) {
                #expect(network.isListening(on: endpoint))
                try await Connection.withConnection(to: endpoint, configuration: .testing(on: network)) { connection in
                    let reply = try await connection.request(Request(type: 0x410, json: ["n": 7]))
                    #expect(reply.json?["echo"]?.intValue == 7)
                    #expect(await connection.remoteAddress?.description == "127.0.10.1:9000")
                }
            }
            #expect(!network.isListening(on: endpoint))
        }
    }

    @Test("a dial where nothing listens is refused at once; a refused or black-holed endpoint fails as configured")
    func refusedAndBlackHoled() async throws {
        try await withTestNetwork { network in
            var configuration = ConnectionConfiguration.testing(on: network)
            configuration.reconnect = .disabled
            let refused = await #expect(throws: TetherError.self) {
                try await Connection.connect(to: endpoint, configuration: configuration)
            }
            #expect(refused?.code == .connectionRefused)

            let server = Server(configuration: .testing(on: network))
            try await whileRunning(server) {
                network.refuseConnections(to: endpoint)
                let error = await #expect(throws: TetherError.self) {
                    try await Connection.connect(to: endpoint, configuration: configuration)
                }
                #expect(error?.code == .connectionRefused)

                network.blackHole(endpoint)
                let start = network.clock.elapsed
                let connection = Connection(to: endpoint, configuration: configuration)
                let connecting = connection.states.filter { $0.phase == .connecting }
                let pending = Task { try await connection.connect() }
                // The dial is on the loop once the connection says it is connecting; only
                // then is there a timer for the clock to move to.
                _ = try await firstElement(of: connecting)
                await network.advance(by: .seconds(2) - .nanoseconds(1))
                await network.advance(by: .nanoseconds(1))
                let outcome = try await withTimeLimit { await pending.result }
                #expect(throws: TetherError.self) { try outcome.get() }
                if case .failure(let error as TetherError) = outcome { #expect(error.code == .connectTimedOut) }
                #expect(network.clock.elapsed - start == .seconds(2))

                network.restoreConnections(to: endpoint)
                let again = try await Connection.connect(to: endpoint, configuration: configuration)
                await again.close()
            }
        }
    }

    @Test("a request times out at its deadline on the network's clock, not before")
    func requestTimeout() async throws {
        try await withTestNetwork { network in
            let (reached, arrival) = AsyncStream<Void>.makeStream()
            let server = Server(configuration: .testing(on: network))
            server.handle(type: 0x410) { _, _ in
                arrival.yield()
                try await suspendUntilCancelled()              // ends when the server stops
            }
            try await whileRunning(server) {
                try await Connection.withConnection(to: endpoint, configuration: .testing(on: network)) { connection in
                    let pending = Task { try await connection.request(Request(type: 0x410), timeout: .seconds(5)) }
                    _ = try await firstElement(of: reached)
                    await network.advance(by: .seconds(5) - .nanoseconds(1))
                    #expect(await connection.metrics.requestsTimedOut == 0)
                    await network.advance(by: .nanoseconds(1))
                    let outcome = try await withTimeLimit { await pending.result }
                    if case .failure(let error as TetherError) = outcome {
                        #expect(error.code == .timedOut)
                    } else {
                        Issue.record("expected a timeout, got \(outcome)")
                    }
                }
            }
        }
    }

    @Test("mailboxes set after testing(on:) stamp and age their pushes on the test clock")
    func mailboxClockFollowsTestClock() async throws {
        try await withTestNetwork { network in
            var configuration = ServerConfiguration.testing(on: network)
            configuration.mailboxes = .inMemory
            let server = Server(configuration: configuration)
            let hub = try #require(server.hub)
            let before = hub.configuration.clock()
            await network.advance(by: .seconds(3600))
            let after = hub.configuration.clock()
            #expect(after.millisecondsSince1970 - before.millisecondsSince1970 == 3_600_000)
        }
    }

    @Test("TLS 1.3 runs over an in-memory link with real OpenSSL on both ends, and the certificate is verified")
    func tlsInMemory() async throws {
        let certificates = try await TestCertificates.shared()
        try await withTestNetwork { network in
            var serverConfiguration = ServerConfiguration.testing(on: network)
            serverConfiguration.tls = .server(options: TLSServerOptions(certificate: certificates.server))
            try await withTestServer(configuration: serverConfiguration, handlers: { server in
                server.handle(type: 0x401) { request, _ in Response(payload: request.payload) }
            }) { server in
                var options = TLSClientOptions()
                options.trustRoots = .file(certificates.caCertificate)
                options.serverName = "localhost"
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.tls = .client(options: options)
                try await Connection.withConnection(to: server.endpoint, configuration: configuration) { connection in
                    let reply = try await connection.request(Request(type: 0x401, payload: [1, 2, 3]))
                    #expect(reply.payload == [1, 2, 3])
                    #expect(await connection.tlsDetails?.version == "TLSv1.3")
                }
                // A client that trusts nothing else fails the handshake with a verification error.
                var untrusting = ConnectionConfiguration.testing(on: network)
                untrusting.reconnect = .disabled
                untrusting.tls = .client(options: TLSClientOptions())
                let error = await #expect(throws: TetherError.self) {
                    try await Connection.connect(to: server.endpoint, configuration: untrusting)
                }
                #expect(error?.code == .certificateRejected)
            }
        }
    }

    @Test("a session's pushes stored while its link is down arrive once, in order, after the client reconnects")
    func sessionAcrossACut() async throws {
        try await withTestNetwork { network in
            var serverConfiguration = ServerConfiguration(host: "server", port: 9000)
            serverConfiguration.mailboxes = .inMemory
            serverConfiguration.use(network)
            try await withTestServer(configuration: serverConfiguration) { server in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.session = SessionConfiguration(clientID: "alice")
                let connection = Connection(to: server.endpoint, configuration: configuration)
                let pushes = connection.notifications
                let states = connection.states
                try await connection.connect()
                #expect(try await server.server.push(Frame(type: 0x20, payload: [1]), toClient: "alice") == 1)
                await network.link(1).cut()
                _ = try await firstElement(of: states.filter { $0.phase == .reconnecting })
                #expect(try await server.server.push(Frame(type: 0x20, payload: [2]), toClient: "alice") == 2)
                #expect(try await server.server.push(Frame(type: 0x20, payload: [3]), toClient: "alice") == 3)
                await network.advance(by: .milliseconds(20))        // the backoff
                let received = try await TetherTesting.collect(3, from: pushes)
                #expect(received.map(\.payload) == [[1], [2], [3]])
                #expect(network.links.count == 2)
                await connection.close()
            }
        }
    }
}
