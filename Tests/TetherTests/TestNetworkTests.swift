import Testing
import TetherTesting
@testable import Tether

@Suite("The in-memory network and the test clock", .timeLimit(.minutes(1)))
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
                try await Task.sleep(for: .seconds(3600))   // cancelled when the server stops
                return Response()
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
}
