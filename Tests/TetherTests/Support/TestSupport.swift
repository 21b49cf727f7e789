import Testing
import TetherTesting
@testable import Tether

/// A bound on how long any awaited event may take in a test: a guard against a test that
/// hangs, never a measurement. No assertion depends on it (a test that times something
/// uses the manual clock, or a bound of its own). The suites run all at once, so on a busy
/// machine one wait can last nearly as long as the whole suite: about 90 s with three
/// CPU-bound processes beside it. The guard is twice that, and shorter than the suites' time
/// limit (``Testing/TimeLimitTrait/Duration/guarded``), so a hang fails with the name of
/// what it waited for.
let eventBound: Duration = .seconds(180)

extension TimeLimitTrait.Duration {
    /// The time limit of the suites: a guard against a hang too, above ``eventBound``.
    static let guarded: Self = .minutes(5)
}

struct TimedOut: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Runs `operation`, failing with ``TimedOut`` if it takes longer than `limit` of real time.
///
/// TetherTesting's `withTimeLimit`, a race rather than a task group: a group would wait for
/// an operation that ignores cancellation (awaiting a stuck task's value, say), and the test
/// would hang instead of failing. On timeout the operation is cancelled and left behind, and
/// the error names `what`.
func bounded<T: Sendable>(
    _ what: String,
    _ limit: Duration = eventBound,
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    do {
        return try await withTimeLimit(limit, what, operation)
    } catch let exceeded as TimeLimitExceeded {
        throw TimedOut(what: exceeded.what)
    }
}

/// Waits until the calling task is cancelled, and returns then; nothing else ends it.
///
/// For a handler that must never answer: the server cancels it when the peer or the server
/// goes away. No time passes in it, on any clock.
func untilCancelled() async {
    let (never, keeper) = AsyncStream<Void>.makeStream()
    await withTaskCancellationHandler {
        // An AsyncStream ends its iteration when the iterating task is cancelled.
        for await _ in never {}
    } onCancel: {
        keeper.finish()
    }
}

/// Runs blocking work (a `poll`, a child process to wait for) on a thread of its own, so it
/// never holds one of the few cooperative threads the code under test needs.
func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        BlockingThread.run { continuation.resume(with: Result { try body() }) }
    }
}

/// Collects the first `count` elements of a sequence, within the bound: TetherTesting's
/// `collect`, with the timeout named by `what`.
func collect<S: AsyncSequence & Sendable>(
    _ count: Int,
    from sequence: S,
    _ what: String = "elements"
) async throws -> [S.Element] where S.Element: Sendable {
    do {
        return try await TetherTesting.collect(count, from: sequence, within: eventBound)
    } catch is TimeLimitExceeded {
        throw TimedOut(what: what)
    }
}

/// The first server event that matches, within the bound.
func firstEvent(
    _ events: Subscription<ServerEvent>,
    _ what: String,
    where matches: @escaping @Sendable (ServerEvent) -> Bool
) async throws -> ServerEvent {
    try await collect(1, from: events.filter(matches), what)[0]
}

/// Runs a server on 127.0.0.1 (or `host`) on a free port for the duration of `body`, then
/// cancels it and requires `run()` to return within the bound: a server that does not stop
/// fails the test instead of hanging it.
func withServer<T: Sendable>(
    host: String = "127.0.0.1",
    configure: (inout ServerConfiguration) -> Void = { _ in },
    handlers: (Server) -> Void = { _ in },
    _ body: @escaping @Sendable (Server, Endpoint) async throws -> T
) async throws -> T {
    var configuration = ServerConfiguration(host: host, port: 0)
    // No handshake timeout unless a test sets one: with the whole suite running on two busy
    // cores, a test may not get to send its connection's first frame within the default 10 s
    // of real time, and the server would close the connection under it.
    configuration.handshakeTimeout = nil
    // Nor an idle timeout: the tests' clients send no heartbeats, and one that waits with
    // its reading paused (a slow subscriber) for a minute of a busy machine is not idle in
    // any sense a test means.
    configuration.idleTimeout = nil
    configure(&configuration)
    let server = Server(configuration: configuration)
    handlers(server)
    let running = Task { try await server.run() }
    let result: Result<T, any Error>
    do {
        let address = try await bounded("server to listen") { try await server.listeningAddress() }
        result = .success(try await body(server, Endpoint(host: address.ipAddress, port: address.port)))
    } catch {
        result = .failure(error)
    }
    running.cancel()
    try await bounded("the server to stop after cancellation") { try await running.value }
    return try result.get()
}

/// The standard test server handlers: 0x402 echo; 0x404 never answers, and ends when the
/// server cancels it.
func echoHandlers(_ server: Server) {
    server.handle(type: 0x402) { request, _ in
        Response(json: ["echo": request.json ?? nil])
    }
    server.handle(type: 0x404) { _, _ in
        try await suspendUntilCancelled()
    }
}

/// A configuration for tests: heartbeats and reconnecting off unless a test turns them on.
func testConfiguration(_ change: (inout ConnectionConfiguration) -> Void = { _ in }) -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration()
    configuration.heartbeat = .disabled
    configuration.reconnect = .disabled
    // The bound every wait of the tests has: a machine with one core busy can take seconds
    // to answer a hello among hundreds of tests at once.
    configuration.connectTimeout = eventBound
    // The same for the app's preparation of each connection, which a test that does not
    // time it must not see cut short by the machine's load.
    configuration.prepareTimeout = eventBound
    configuration.webSocket.handshakeTimeout = eventBound
    change(&configuration)
    return configuration
}

/// Awaits the final state of a connection.
func finalState(of connection: Connection) async throws -> ConnectionState {
    try await bounded("the connection to close") {
        var last: ConnectionState?
        for await state in connection.states { last = state }
        return last!
    }
}

/// Bytes of one seed frame.
func seedBytes(type: UInt32, serial: UInt32, payload: [UInt8] = []) -> [UInt8] {
    var buffer = FrameBuffer()
    try! SeedCodec().encode(Frame(type: type, serial: serial, payload: payload), into: &buffer)
    return Array(buffer.readableBytesView)
}

/// An observer that yields the serial of each request as it is written: for a test that
/// acts once a request is on the wire, without asking again and again.
final class RequestWrites: ConnectionObserver {
    typealias RequestSpan = Void
    /// The serials, in the order the requests were written.
    let serials: AsyncStream<UInt32>
    private let continuation: AsyncStream<UInt32>.Continuation

    init() {
        (serials, continuation) = AsyncStream.makeStream()
    }

    func requestWritten(_ request: ObservedRequest, span: Void) {
        continuation.yield(request.serial)
    }
}
