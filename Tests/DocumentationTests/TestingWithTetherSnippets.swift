// The code of Documentation.docc/TestingWithTether.md: the helpers, the code under test and
// the tests the article shows, which run here as they are.

import Synchronization
import Testing
import Tether

// MARK: Helpers

/// Thrown by ``withTimeLimit(_:_:)`` when the operation takes longer than its limit.
struct TimeLimitExceeded: Error, CustomStringConvertible {
    var limit: Duration
    var description: String { "no result within \(limit)" }
}
/// Runs `operation`, and throws ``TimeLimitExceeded`` if it has not finished within `limit`.
///
/// The operation is cancelled when the limit passes, and the group waits for it to end:
/// requests, connects and `for await` loops over Tether's sequences all end when cancelled.
func withTimeLimit<T: Sendable>(
    _ limit: Duration,
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw TimeLimitExceeded(limit: limit)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}
/// Runs a server on 127.0.0.1, on a port the system picks, while `body` runs; then stops it
/// and waits until it has.
func withLocalServer<T: Sendable>(
    configure: (inout ServerConfiguration) -> Void = { _ in },
    handlers: (Server) -> Void,
    _ body: (Server, Endpoint) async throws -> T
) async throws -> T {
    var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
    configure(&configuration)
    let server = Server(configuration: configuration)
    handlers(server)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await server.run() }
        defer { group.cancelAll() }                      // stops the server, however body ends
        let address = try await server.listeningAddress()
        return try await body(server, Endpoint(host: "127.0.0.1", port: address.port))
    }
}
/// Gets the first element of `sequence` within `limit`.
func firstElement<S: AsyncSequence & Sendable>(
    of sequence: S,
    within limit: Duration = .seconds(5)
) async throws -> S.Element? where S.Element: Sendable {
    try await withTimeLimit(limit) {
        for try await element in sequence { return element }
        return nil
    }
}
extension ConnectionConfiguration {
    /// For tests against a local server: quick to fail, quick to come back, no heartbeats.
    static var localTesting: ConnectionConfiguration {
        var configuration = ConnectionConfiguration()
        configuration.connectTimeout = .seconds(2)
        configuration.requestTimeout = .seconds(2)
        configuration.heartbeat = .disabled
        configuration.reconnect = .backoff(initialDelay: .milliseconds(20), maximumAttempts: 5)
        return configuration
    }
}

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
    var timeout: Duration = .seconds(2)
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

@Suite("PriceClient against a local server", .timeLimit(.minutes(1)))
struct PriceClientTests {
    @Test("a quote is asked for by symbol and decoded from the answer")
    func quote() async throws {
        let asked = Mutex<[String]>([])
        try await withLocalServer(handlers: { server in
            server.handle(type: 0x410) { request, _ in
                let symbol = request.json?["symbol"]?.stringValue ?? ""
                asked.withLock { $0.append(symbol) }
                return try Response(encoding: Quote(symbol: symbol, price: 101.5))
            }
        }) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                let client = PriceClient(connection: connection)
                let quote = try await client.quote(for: "ACME")
                #expect(quote == Quote(symbol: "ACME", price: 101.5))
            }
        }
        #expect(asked.withLock { $0 } == ["ACME"])
    }

    @Test("an error answer becomes PriceError.server with the server's message")
    func serverError() async throws {
        try await withLocalServer(handlers: { server in
            server.handle(type: 0x410) { _, _ in
                throw TetherError(code: .invalidArgument, message: "unknown symbol")
            }
        }) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                let client = PriceClient(connection: connection)
                await #expect(throws: PriceError.server("unknown symbol")) {
                    try await client.quote(for: "NOPE")
                }
            }
        }
    }

    @Test("a server that does not answer in time makes the quote fail with timedOut")
    func slowServer() async throws {
        try await withLocalServer(handlers: { server in
            server.handle(type: 0x410) { _, _ in
                try await Task.sleep(for: .seconds(3600))   // cancelled when the server stops
                return Response()
            }
        }) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                let client = PriceClient(connection: connection, timeout: .milliseconds(100))
                let error = await #expect(throws: TetherError.self) {
                    try await client.quote(for: "ACME")
                }
                #expect(error?.code == .timedOut)
                #expect(await connection.metrics.requestsTimedOut == 1)
            }
        }
    }

    @Test("a server that closes the connection mid-request fails the quote with connectionLost")
    func serverClosesConnection() async throws {
        try await withLocalServer(handlers: { server in
            server.handle(type: 0x410) { _, peer in
                await peer.close()                           // no answer: the peer is gone
                return Response()
            }
        }) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                let client = PriceClient(connection: connection)
                let error = await #expect(throws: TetherError.self) {
                    try await client.quote(for: "ACME")
                }
                #expect(error?.code == .connectionLost)
                #expect((error?.underlying as? TetherError)?.code == .peerClosed)
            }
        }
    }

    @Test("the connection comes back by itself after the server drops it")
    func reconnects() async throws {
        try await withLocalServer(handlers: { _ in }) { server, endpoint in
            let events = server.events
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                _ = try await firstElement(of: events.filter { $0.kind == .peerConnected })
                let states = connection.states
                for peer in server.peers { await peer.close() }
                let phases = try await withTimeLimit(.seconds(5)) {
                    var phases: [ConnectionState.Phase] = []
                    for await state in states {
                        phases.append(state.phase)
                        if phases.count > 1, state.phase == .connected { break }
                    }
                    return phases
                }
                #expect(phases == [.connected, .reconnecting, .connecting, .connected])
                #expect(await connection.metrics.connects == 2)
            }
        }
    }

    @Test("a pushed price reaches the updates")
    func pushedPrice() async throws {
        try await withLocalServer(handlers: { _ in }) { server, endpoint in
            let events = server.events
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                let client = PriceClient(connection: connection)
                let updates = client.updates
                // Wait until the server counts the peer as connected, so the push reaches it.
                _ = try await firstElement(of: events.filter { $0.kind == .peerConnected })
                let update: JSONValue = ["symbol": "ACME", "price": 99.0]
                let delivered = await server.broadcast(Frame(type: 0x20, payload: update.encoded))
                #expect(delivered == 1)
                let first = try await firstElement(of: updates)
                #expect(first == Quote(symbol: "ACME", price: 99.0))
            }
        }
    }
}
