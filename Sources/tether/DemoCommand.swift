#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import Tether

/// `tether demo`: a server and a client in one process, every feature once, in about a second.
struct DemoCommand: Command {
    static let name = "demo"
    static let summary = "run a server and a client in one process and show what Tether does"
    static let synopsis = "tether demo"
    static let help = """
        Starts the seed demo server on 127.0.0.1 (a free port) and connects a client to it
        in the same process, then shows:

          1. a request and its response, and an error response for an unknown type
          2. five concurrent requests that the server answers out of order, each matched
             to its request by serial
          3. a push received with `for await` on connection.notifications
          4. heartbeats every 200 ms with their round-trip times
          5. a clean close and the final state

        Ends by itself in about a second and exits 0; exits 1 if any step fails. Every
        wait is bounded, and the whole demo gives up after 10 s.

        options:
          -h, --help   show this help
        """

    /// Bound on each single wait of the demo.
    static let stepLimit: Duration = .seconds(3)
    /// Bound on the whole demo.
    static let overallLimit = 10

    init(parsing arguments: inout Arguments) throws(ArgumentError) {}

    func run() async throws -> ExitStatus {
        let clock = ContinuousClock()
        let start = clock.now
        DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(Self.overallLimit)) {
            Console.fail("demo did not finish within \(Self.overallLimit) s")
            exit(ExitStatus.failure.code)
        }

        let server = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: 0))
        SeedService.install(on: server)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            do {
                try await Self.tour(server)
            } catch {
                group.cancelAll()
                throw error
            }
            group.cancelAll()
            try await group.waitForAll()
        }
        let elapsed = milliseconds(clock.now - start) / 1000
        Console.out("server stopped; demo finished in \(String(format: "%.2f", elapsed)) s")
        return .success
    }

    private static func tour(_ server: Server) async throws {
        let address = try await withTimeout(stepLimit, waitingFor: "the server to listen") {
            try await server.listeningAddress()
        }
        Console.out("server listening on \(address)")

        var configuration = ConnectionConfiguration()
        configuration.connectTimeout = stepLimit
        configuration.requestTimeout = stepLimit
        configuration.heartbeat = .every(.milliseconds(200))
        let connection = try await Connection.connect(
            to: Endpoint(host: address.ipAddress, port: address.port),
            configuration: configuration
        )
        let local = await connection.localAddress?.description ?? "?"
        Console.out("client connected from \(local)")

        try await requestAndResponse(connection)
        try await outOfOrder(connection)
        try await push(server, connection)
        try await heartbeats(connection)
        try await close(connection)
    }

    // MARK: Steps

    private static func requestAndResponse(_ connection: Connection) async throws {
        Console.out("\n1. request and response")
        let request = Request(type: SeedService.echoType, json: ["hello": "world"])
        Console.out("   -> \(hex(request.type)) \(embeddedJSON(request.payload))")
        let response = try await connection.request(request)
        Console.out("   <- \(hex(response.type)) serial \(response.serial): \(response.text)")

        let unknown = try await connection.request(Request(type: 0x999))
        Console.out("   -> 0x999 (no handler on the server)")
        Console.out("   <- \(hex(unknown.type)) serial \(unknown.serial): error response \"\(unknown.errorMessage ?? "?")\"")
    }

    private static func outOfOrder(_ connection: Connection) async throws {
        let delays = [250, 50, 200, 10, 120]
        Console.out("\n2. \(delays.count) concurrent requests; the server sleeps delay_ms before answering each")
        Console.out("   -> #0…#\(delays.count - 1) sent at once as 0x404 with delay_ms \(delays.map(String.init).joined(separator: ", "))")
        let clock = ContinuousClock()
        let start = clock.now
        var arrival: [Int] = []
        try await withThrowingTaskGroup(of: (index: Int, response: Response, elapsed: Duration).self) { group in
            for (index, delay) in delays.enumerated() {
                group.addTask {
                    let request = Request(type: SeedService.delayedEchoType, json: ["index": .int(index), "delay_ms": .int(delay)])
                    let response = try await connection.request(request)
                    return (index, response, clock.now - start)
                }
            }
            for try await (index, response, elapsed) in group {
                guard response.json?["echo"]?["index"]?.intValue == index else {
                    throw TetherError(code: .protocolError, message: "request #\(index) got the response \(response.text)")
                }
                arrival.append(index)
                let millis = String(Int(milliseconds(elapsed).rounded()))
                let time = String(repeating: " ", count: max(0, 3 - millis.count)) + millis
                Console.out("   <- serial \(response.serial) after \(time) ms: \(response.text)  matches request #\(index)")
            }
        }
        Console.out("   answered in the order #\(arrival.map(String.init).joined(separator: ", #")); every response matched its request by serial")
    }

    private static func push(_ server: Server, _ connection: Connection) async throws {
        Console.out("\n3. push")
        let pushes = connection.notifications(ofType: SeedService.pushType)
        let frame = SeedService.push(type: SeedService.pushType, sequence: 1, time: Date().ISO8601Format())
        let peers = await server.broadcast(frame)
        Console.out("   server broadcast \(hex(frame.type)) serial \(frame.serial) to \(peers) peer\(peers == 1 ? "" : "s")")
        let received = try await withTimeout(stepLimit, waitingFor: "the push") {
            for await push in pushes { return push }
            throw TetherError(code: .connectionClosed, message: "the connection closed before the push arrived")
        }
        Console.out("   for await push in connection.notifications -> \(hex(received.type)) serial \(received.serial): \(received.payloadText)")
    }

    private static func heartbeats(_ connection: Connection) async throws {
        let wanted = 3
        Console.out("\n4. heartbeats every 200 ms")
        let beats = connection.heartbeats
        try await withTimeout(stepLimit, waitingFor: "\(wanted) heartbeat acks") {
            var acked = 0
            for await beat in beats {
                switch beat.outcome {
                case .acked:
                    acked += 1
                    let rtt = beat.roundTripTime.map(milliseconds) ?? 0
                    Console.out("   heartbeat \(beat.serial) acked: rtt \(formatMilliseconds(rtt)) ms")
                    if acked == wanted { return }
                case .missed:
                    Console.out("   heartbeat \(beat.serial) missed")
                default:
                    continue
                }
            }
            throw TetherError(code: .connectionClosed, message: "the connection closed after \(acked) heartbeat acks")
        }
    }

    private static func close(_ connection: Connection) async throws {
        Console.out("\n5. close")
        let states = connection.states
        await connection.close()
        let seen = try await withTimeout(stepLimit, waitingFor: "the closed state") {
            var seen: [ConnectionState] = []
            for await state in states { seen.append(state) }
            return seen
        }
        for state in seen { Console.out("   state: \(state)") }
        let statistics = await connection.metrics
        Console.out("   \(statistics.requestsSent) requests, \(statistics.requestsCompleted) responses, \(statistics.notificationsReceived) push\(statistics.notificationsReceived == 1 ? "" : "es"), \(statistics.inFlightRequests) pending")
        guard seen.last?.phase == .closed else {
            throw TetherError(code: .protocolError, message: "the connection did not report its closed state")
        }
    }
}

extension Frame {
    /// The payload as UTF-8 text.
    fileprivate var payloadText: String { String(decoding: payload, as: UTF8.self) }
}
