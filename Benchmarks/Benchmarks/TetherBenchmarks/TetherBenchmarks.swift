import Benchmark
import Tether

// Heap allocations per request round trip over loopback, one request in flight:
//
//   client round trip   Tether `Connection` ↔ a raw-socket echo thread: the client's allocations,
//                       with the calling task on the global executor (as an app's is) and,
//                       "on its loop", on the connection's event loop (`taskExecutor`)
//   server round trip   a raw blocking socket ↔ Tether `Server`: the server's allocations
//   client ↔ server     Tether on both sides, in one process: the two added up
//
// The raw sides allocate nothing per frame, so each count is Tether's alone. Counts are per
// request (scaling factor .kilo: 1,000 requests per measured iteration).
//
//   swift package --package-path Benchmarks benchmark --target TetherBenchmarks

let payloadLength = 64

/// A Tether server serving the echo handler until cancelled.
final class EchoServer: Sendable {
    let server = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: 0))
    let task: Task<Void, any Error>
    let port: Int

    init() async throws {
        let server = server
        server.handle(type: 0x402) { request, _ in Response(payload: request.payload) }
        task = Task { try await server.run() }
        port = try await server.listeningAddress().port
    }

    func stop() async {
        task.cancel()
        _ = await task.result
    }
}

func connect(port: Int) async throws -> Connection {
    var configuration = ConnectionConfiguration()
    configuration.heartbeat = .disabled
    return try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: port), configuration: configuration)
}

/// What a benchmark's setup opened and its teardown closes.
final class Fixture: @unchecked Sendable {
    // Set by setup and read by the closure and teardown, which package-benchmark runs one
    // after another, never at once.
    var connection: Connection?
    var server: EchoServer?
    var rawServer: RawEchoServer?
    var rawClient: RawEchoClient?

    func close() async {
        await connection?.close()
        await server?.stop()
        rawServer?.stop()
        rawClient = nil
        connection = nil
        server = nil
        rawServer = nil
    }
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.mallocCountTotal, .wallClock, .throughput],
        warmupIterations: 2,
        scalingFactor: .kilo,
        maxDuration: .seconds(3),
        maxIterations: 50
    )
    let request = Request(type: 0x402, payload: [UInt8](repeating: 0x61, count: payloadLength))

    let client = Fixture()
    Benchmark("client round trip (Connection ↔ raw echo)") { benchmark in
        guard let connection = client.connection else { return }
        for _ in benchmark.scaledIterations {
            blackHole(try await connection.request(request))
        }
    } setup: {
        let raw = try RawEchoServer()
        client.rawServer = raw
        client.connection = try await connect(port: raw.port)
    } teardown: {
        await client.close()
    }

    let onLoop = Fixture()
    Benchmark("client round trip on its loop (Connection ↔ raw echo, taskExecutor)") { benchmark in
        guard let connection = onLoop.connection else { return }
        try await withTaskExecutorPreference(connection.taskExecutor) {
            for _ in benchmark.scaledIterations {
                blackHole(try await connection.request(request))
            }
        }
    } setup: {
        let raw = try RawEchoServer()
        onLoop.rawServer = raw
        onLoop.connection = try await connect(port: raw.port)
    } teardown: {
        await onLoop.close()
    }

    let server = Fixture()
    Benchmark("server round trip (raw client ↔ Server)") { benchmark in
        guard let raw = server.rawClient else { return }
        for _ in benchmark.scaledIterations {
            precondition(raw.roundTrip(), "the echo server closed the connection")
        }
    } setup: {
        let echo = try await EchoServer()
        server.server = echo
        server.rawClient = try RawEchoClient(port: echo.port, payloadLength: payloadLength)
    } teardown: {
        await server.close()
    }

    let both = Fixture()
    Benchmark("client ↔ server round trip (Connection ↔ Server)") { benchmark in
        guard let connection = both.connection else { return }
        for _ in benchmark.scaledIterations {
            blackHole(try await connection.request(request))
        }
    } setup: {
        let echo = try await EchoServer()
        both.server = echo
        both.connection = try await connect(port: echo.port)
    } teardown: {
        await both.close()
    }
}
