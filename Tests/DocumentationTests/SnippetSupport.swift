// Support for the documentation's code: each *Snippets.swift file holds the Swift blocks of
// one article (or of the README) verbatim, wrapped in functions where they are statements,
// and `scripts/docs.sh` checks that every block still appears in one of these files. Where
// an example can run on its own (a server on 127.0.0.1, port 0, and a client), a test runs
// it and checks what the example's comments say it prints.
import Synchronization
import Testing
import Tether
import TetherTesting

/// What the examples print while a test records them. Each snippet file that prints has a
/// file-private `print` that calls ``Transcript/print(_:separator:terminator:)``, so its
/// examples read as their article shows them and their lines go to the current task's
/// transcript, if it has one, instead of standard output.
final class Transcript: Sendable {
    @TaskLocal static var current: Transcript?

    /// Records a line in the current transcript, or prints it without one.
    static func print(_ items: [Any], separator: String, terminator: String) {
        let line = items.map { String(describing: $0) }.joined(separator: separator)
        if let transcript = current {
            transcript.append(line)
        } else {
            Swift.print(line, terminator: terminator)
        }
    }

    private let recorded = Mutex<[String]>([])
    private let stream: AsyncStream<String>
    private let continuation: AsyncStream<String>.Continuation

    init() {
        (stream, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    /// Every line printed so far.
    var lines: [String] { recorded.withLock { $0 } }

    func append(_ line: String) {
        recorded.withLock { $0.append(line) }
        continuation.yield(line)
    }

    /// Waits, within `limit`, until `count` lines have been printed, and returns them.
    func waitForLines(_ count: Int, within limit: Duration = testBound) async throws -> [String] {
        let stream = stream
        let recorded = self
        return try await bounded("\(count) printed lines", limit) {
            if recorded.lines.count < count {
                for await _ in stream where recorded.lines.count >= count { break }
            }
            return recorded.lines
        }
    }
}


/// Runs `body` with a fresh transcript, within `limit`, and returns what it printed.
func printedLines(
    within limit: Duration = testBound,
    _ body: @escaping @Sendable () async throws -> Void
) async throws -> [String] {
    let transcript = Transcript()
    try await bounded("the example", limit) {
        try await Transcript.$current.withValue(transcript) { try await body() }
    }
    return transcript.lines
}

/// How long anything a test awaits may take before the test fails: a guard against a
/// hang, never a measurement. The suites run all at once, so on a busy machine one wait can
/// last nearly as long as the whole suite (about 90 s with three CPU-bound processes beside
/// it); the guard is twice that, below the suites' time limit.
let testBound: Duration = .seconds(180)

extension TimeLimitTrait.Duration {
    /// The time limit of the suites: a guard against a hang too, above ``testBound``.
    static let guarded: Self = .minutes(5)
}

/// Runs `operation`, failing with ``TetherTesting/TimeLimitExceeded`` (naming `what`) if it
/// takes longer than `limit`; the operation is then cancelled and left behind, so one that
/// ignores cancellation cannot hang the test.
func bounded<T: Sendable>(
    _ what: String,
    _ limit: Duration = testBound,
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withTimeLimit(limit, what, operation)
}

/// Runs `server` on its port-0 address for the duration of `body`, then cancels it and
/// waits, within the bound, for it to stop.
func whileServing<T: Sendable>(
    _ server: Server,
    _ body: @escaping @Sendable (TetherSocketAddress) async throws -> T
) async throws -> T {
    let running = Task { try await server.run() }
    let result: Result<T, any Error>
    do {
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        result = .success(try await body(address))
    } catch {
        result = .failure(error)
    }
    running.cancel()
    _ = try? await bounded("the server to stop") { try await running.value }
    return try result.get()
}

/// A client configuration for tests: no reconnecting, so a stopped server ends it.
func quietConfiguration() -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration()
    configuration.reconnect = .disabled
    configuration.heartbeat = .disabled
    return configuration
}

/// Runs a server on 127.0.0.1, on a port the system picks, while `body` runs; then stops it
/// and waits until it has.
func withLocalServer<T: Sendable>(
    configure: (inout ServerConfiguration) -> Void = { _ in },
    handlers: @escaping @Sendable (Server) -> Void,
    _ body: (Server, Endpoint) async throws -> T
) async throws -> T {
    var configuration = TestServer.defaultConfiguration
    // No real-time handshake timeout unless a test sets one: on a busy machine a connection
    // may send its first frame later than the default 10 s, and these tests do not time it.
    configuration.handshakeTimeout = nil
    configure(&configuration)
    return try await withTestServer(configuration: configuration, handlers: handlers) { server in
        try await body(server.server, server.endpoint)
    }
}

/// Runs a server on `network`, at `server:9000`, while `body` runs; then stops it and waits
/// until it has. Its time is the network's clock: nothing in it waits in real time.
func withNetworkServer<T: Sendable>(
    on network: TestNetwork,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    handlers: @escaping @Sendable (Server) -> Void,
    _ body: (Server, Endpoint) async throws -> T
) async throws -> T {
    var configuration = ServerConfiguration.testing(on: network)
    configure(&configuration)
    return try await withTestServer(configuration: configuration, handlers: handlers) { server in
        try await body(server.server, server.endpoint)
    }
}

/// Runs `body` with a network, a server on it (with `handlers`), and a connection to it
/// (``TetherTesting/ConnectionConfiguration/testing(on:)``, changed by `configure`) that the
/// server has counted as connected; then closes the connection and stops the server.
func withNetworkConnection(
    handlers: @escaping @Sendable (Server) -> Void,
    configure: (inout ConnectionConfiguration) -> Void = { _ in },
    _ body: (TestNetwork, Server, Connection) async throws -> Void
) async throws {
    try await withTestNetwork { network in
        try await withNetworkServer(on: network, handlers: handlers) { server, endpoint in
            let events = server.events
            var configuration = ConnectionConfiguration.testing(on: network)
            configure(&configuration)
            try await Connection.withConnection(to: endpoint, configuration: configuration) { connection in
                _ = try await firstElement(of: events.filter { $0.kind == .peerConnected })
                try await body(network, server, connection)
            }
        }
    }
}

extension ConnectionConfiguration {
    /// For tests against a local server: ``testing`` over real sockets, its timeouts guards
    /// against a hang as long as ``testBound``. The 2 s of ``testing`` are exact on the
    /// manual clock of an in-memory network; here they are real time, which a busy machine
    /// stretches, and not what these tests time.
    static var localTesting: ConnectionConfiguration {
        var configuration = ConnectionConfiguration.testing
        configuration.connectTimeout = testBound
        configuration.requestTimeout = testBound
        configuration.prepareTimeout = testBound
        configuration.webSocket.handshakeTimeout = testBound
        return configuration
    }
}

/// A gate that handlers wait at until the test opens it, with a signal for each request
/// that reached it.
final class RequestGate: Sendable {
    private let state = Mutex<(isOpen: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))
    let (arrivals, arrival) = AsyncStream<Void>.makeStream()

    func wait() async {
        arrival.yield()
        await withCheckedContinuation { continuation in
            let isOpen = state.withLock { state in
                if !state.isOpen { state.waiters.append(continuation) }
                return state.isOpen
            }
            if isOpen { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { state in
            state.isOpen = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

extension ServerConfiguration {
    /// A server on 127.0.0.1, on a free port, with no handshake timeout: for the tests that
    /// make a server themselves and do not time the first frame, which a busy machine may
    /// send later than the default 10 s.
    static var localTest: ServerConfiguration {
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.handshakeTimeout = nil
        return configuration
    }
}
