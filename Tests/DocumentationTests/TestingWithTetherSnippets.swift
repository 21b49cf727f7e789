// The code of Documentation.docc/TestingWithTether.md: the code under test and the tests
// the article shows, which run here as they are.

import Synchronization
import Testing
import Tether
import TetherTesting

// MARK: The code under test

/// A price, as the price service sends it.
struct Quote: Codable, Equatable, Sendable {
    var symbol: String
    var price: Double
}
/// What a ``PriceClient`` throws besides Tether's errors.
enum PriceError: Error, Equatable {
    case server(String)
}
/// The app's client for a price service: asks for quotes (type 0x410), and hears of new
/// prices in pushes (type 0x20).
struct PriceClient: Sendable {
    let connection: Connection
    var timeout: RequestTimeout = .seconds(2)
    func quote(for symbol: String) async throws -> Quote {
        let reply = try await connection.request(Request(type: 0x410, json: ["symbol": .string(symbol)]),
                                                 timeout: timeout)
        if let message = reply.errorMessage { throw PriceError.server(message) }
        return try reply.decode(Quote.self)
    }
    var updates: some AsyncSequence<Quote, Never> & Sendable {
        connection.notifications(ofType: 0x20).compactMap { try? $0.decode(Quote.self) }
    }
}

// MARK: The tests

@Suite("PriceClient on an in-memory network", .timeLimit(.guarded))
struct PriceClientTests {
    @Test("a quote is asked for by symbol and decoded from the answer")
    func quote() async throws {
        let asked = Mutex<[String]>([])
        try await withTestNetwork { network in
            try await withTestServer(configuration: .testing(on: network), handlers: { server in
                server.handle(type: 0x410) { request, _ in
                    let symbol = request.json?["symbol"]?.stringValue ?? ""
                    asked.withLock { $0.append(symbol) }
                    return try Response(encoding: Quote(symbol: symbol, price: 101.5))
                }
            }) { server in
                try await Connection.withConnection(to: server.endpoint, configuration: .testing(on: network)) { connection in
                    let client = PriceClient(connection: connection)
                    let quote = try await client.quote(for: "ACME")
                    #expect(quote == Quote(symbol: "ACME", price: 101.5))
                }
            }
        }
        #expect(asked.withLock { $0 } == ["ACME"])
    }

    @Test("an error answer becomes PriceError.server with the server's message")
    func serverError() async throws {
        try await withTestNetwork { network in
            try await withTestServer(configuration: .testing(on: network), handlers: { server in
                server.handle(type: 0x410) { _, _ in
                    throw TetherError(code: .invalidArgument, message: "unknown symbol")
                }
            }) { server in
                try await Connection.withConnection(to: server.endpoint, configuration: .testing(on: network)) { connection in
                    let client = PriceClient(connection: connection)
                    await #expect(throws: PriceError.server("unknown symbol")) {
                        try await client.quote(for: "NOPE")
                    }
                }
            }
        }
    }

    @Test("a server that does not answer makes the quote fail with timedOut, exactly at its timeout")
    func slowServer() async throws {
        let (arrivals, arrived) = AsyncStream<Void>.makeStream()
        try await withTestNetwork { network in
            try await withTestServer(configuration: .testing(on: network), handlers: { server in
                server.handle(type: 0x410) { _, _ in
                    arrived.yield()
                    try await suspendUntilCancelled()              // never answers
                }
            }) { server in
                try await Connection.withConnection(to: server.endpoint, configuration: .testing(on: network)) { connection in
                    let client = PriceClient(connection: connection, timeout: .seconds(2))
                    let quote = Task { try await client.quote(for: "ACME") }
                    _ = try await firstElement(of: arrivals)         // the request reached the server
                    await network.advance(by: .seconds(2) - .milliseconds(1))
                    #expect(await connection.metrics.requestsTimedOut == 0)
                    await network.advance(by: .milliseconds(1))
                    let error = await #expect(throws: TetherError.self) { try await quote.value }
                    #expect(error?.code == .timedOut)
                }
            }
        }
    }

    @Test("a server that closes the connection mid-request fails the quote with connectionLost")
    func serverClosesConnection() async throws {
        try await withTestNetwork { network in
            try await withTestServer(configuration: .testing(on: network), handlers: { server in
                server.handle(type: 0x410) { _, peer in
                    await peer.close()                           // no answer: the peer is gone
                    return Response()
                }
            }) { server in
                try await Connection.withConnection(to: server.endpoint, configuration: .testing(on: network)) { connection in
                    let client = PriceClient(connection: connection)
                    let error = await #expect(throws: TetherError.self) {
                        try await client.quote(for: "ACME")
                    }
                    #expect(error?.code == .connectionLost)
                    #expect((error?.underlying as? TetherError)?.code == .peerClosed)
                }
            }
        }
    }

    @Test("the connection comes back after its backoff when the server restarts")
    func reconnects() async throws {
        try await withTestNetwork { network in
            try await withTestServer(configuration: .testing(on: network)) { server in
                try await Connection.withConnection(to: server.endpoint, configuration: .testing(on: network)) { connection in
                    let states = connection.states
                    try await server.restart()                   // drops every connection
                    let phases = try await collect(2, from: states.map(\.phase))
                    #expect(phases == [.connected, .reconnecting])
                    await network.advance(by: .milliseconds(20))  // the first backoff, exactly
                    #expect(await connection.currentState.phase == .connected)
                    #expect(await connection.metrics.connects == 2)
                }
            }
        }
    }

    @Test("a session client comes back after its backoff, once its hello is answered")
    func sessionReconnects() async throws {
        try await withTestNetwork { network in
            var configuration = ServerConfiguration.testing(on: network)
            configuration.mailboxes = .inMemory              // before or after testing(on:)
            try await withTestServer(configuration: configuration) { server in
                var client = ConnectionConfiguration.testing(on: network)
                client.session = SessionConfiguration(clientID: "alice")
                try await Connection.withConnection(to: server.endpoint, configuration: client) { connection in
                    let states = connection.states
                    try await server.restart()
                    let phases = try await collect(2, from: states.map(\.phase))
                    #expect(phases == [.connected, .reconnecting])
                    await network.advance(by: .milliseconds(20))  // the first backoff, exactly
                    let back = try await collect(2, from: states.map(\.phase))   // the hello's answer
                    #expect(back == [.connecting, .connected])
                }
            }
        }
    }

    @Test("a pushed price reaches the updates")
    func pushedPrice() async throws {
        try await withTestNetwork { network in
            try await withTestServer(configuration: .testing(on: network)) { server in
                let events = server.server.events
                try await Connection.withConnection(to: server.endpoint, configuration: .testing(on: network)) { connection in
                    let client = PriceClient(connection: connection)
                    let updates = client.updates
                    // Wait until the server counts the peer as connected, so the push reaches it.
                    _ = try await firstElement(of: events.filter { $0.kind == .peerConnected })
                    let update: JSONValue = ["symbol": "ACME", "price": 99.0]
                    let delivered = await server.server.broadcast(Frame(type: 0x20, payload: update.encoded))
                    #expect(delivered == 1)
                    let first = try await firstElement(of: updates)
                    #expect(first == Quote(symbol: "ACME", price: 99.0))
                }
            }
        }
    }

    @Test("with the server gone, the connection gives up after its last attempt")
    func serverGone() async throws {
        try await withTestNetwork { network in
            let endpoint = Endpoint(host: "server", port: 9000)
            network.refuseConnections(to: endpoint)
            let connection = Connection(to: endpoint, configuration: .testing(on: network))
            let states = connection.states
            let opening = Task { try await connection.connect() }
            _ = try await firstElement(of: states.filter { $0.phase == .reconnecting })
            await network.advance(by: .seconds(1))           // every backoff, 20 ms to 131 ms
            let error = await #expect(throws: TetherError.self) { try await opening.value }
            #expect(error?.code == .connectionRefused)
            #expect(await connection.currentState.phase == .failed)
        }
    }
    @Test("a server that goes silent is noticed after 40 s of heartbeats, and a quote asked then goes out on the next connection")
    func silentServer() async throws {
        try await withTestNetwork { network in
            try await withTestServer(configuration: .testing(on: network), handlers: { server in
                server.handle(type: 0x410) { _, _ in try Response(encoding: Quote(symbol: "ACME", price: 101.5)) }
            }) { server in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.heartbeat = .every(.seconds(10), timeout: .seconds(10), maximumMissed: 3)
                let connection = Connection(to: server.endpoint, configuration: configuration)
                let heartbeats = connection.heartbeats
                try await connection.connect()
                // The first heartbeat goes out at once: let it be answered before the silence.
                #expect(try await collect(2, from: heartbeats).map(\.outcome) == [.sent, .acked])
                let link = await network.link(1)
                link.faults.toClient = .stalled                  // nothing from the server arrives
                await network.advance(by: .seconds(40) - .nanoseconds(1))
                #expect(await connection.currentState.phase == .connected)
                await network.advance(by: .nanoseconds(1))       // interval × (misses + 1)
                #expect(await connection.currentState.phase == .reconnecting)
                let quote = Task { try await PriceClient(connection: connection).quote(for: "ACME") }
                await network.advance(by: .milliseconds(20))     // the backoff
                #expect(try await quote.value == Quote(symbol: "ACME", price: 101.5))
                #expect(network.links.count == 2)
                await connection.close()
            }
        }
    }
}

@Suite("PriceClient over real sockets", .timeLimit(.guarded))
struct PriceClientSocketTests {
    @Test("a quote still arrives when every byte crosses the network on its own")
    func onePieceAtATime() async throws {
        try await withTestServer(handlers: { server in
            server.handle(type: 0x410) { _, _ in try Response(encoding: Quote(symbol: "ACME", price: 101.5)) }
        }) { server in
            try await withFaultProxy(to: server.endpoint, mode: .pieces(1)) { proxy in
                try await Connection.withConnection(to: proxy.endpoint, configuration: .testing) { connection in
                    let quote = try await PriceClient(connection: connection).quote(for: "ACME")
                    #expect(quote == Quote(symbol: "ACME", price: 101.5))
                }
            }
        }
    }
}
