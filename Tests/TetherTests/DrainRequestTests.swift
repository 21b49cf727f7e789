import Synchronization
import Testing
@testable import Tether

/// Requests that meet a server's drain, over real loopback sockets: each one ends with its
/// response or with an error that says the server drains, never with a lost connection.
@Suite("Requests across a drain", .timeLimit(.guarded))
struct DrainRequestTests {
    /// What the requests of a loop ended with.
    struct Outcomes: Sendable, CustomStringConvertible {
        var answered = 0
        var draining = 0
        /// Of ``draining``: those the server answered, not run, rather than never sent.
        var notRun = 0
        var other: [String: Int] = [:]
        var total: Int { answered + draining + other.values.reduce(0, +) }
        var description: String { "\(answered) answered, \(draining) draining (\(notRun) not run by the server), other \(other.sorted { $0.key < $1.key })" }
    }

    /// The outcomes, shared by the loops.
    final class Tally: Sendable {
        let outcomes = Mutex(Outcomes())
    }

    @Test("requests sent in a loop across the drain notice each end with their response or the draining error, none with a lost connection or a timeout")
    func requestsAcrossTheNotice() async throws {
        var configuration = ServerConfiguration(port: 0)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        configuration.drain.deadline = .seconds(30)
        let server = Server(configuration: configuration)
        server.handle(type: 0x402) { request, _ in
            await Task.yield()
            return Response(payload: request.payload)
        }
        let running = Task { try await server.run() }
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        let connection = try await Connection.connect(to: Endpoint(host: address.ipAddress, port: address.port), configuration: testConfiguration())
        let tally = Tally()
        let (drainDue, dueSignal) = AsyncStream<Void>.makeStream()
        let workers = 32
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<workers {
                group.addTask {
                    // Until the first request that does not get its response: the one that
                    // meets the drain.
                    for n in 0..<10_000 {
                        do {
                            let response = try await connection.request(Request(type: 0x402, payload: Array("\(worker).\(n)".utf8)))
                            let answered = tally.outcomes.withLock { outcomes in
                                if let error = response.errorMessage {
                                    outcomes.other["error response: \(error)", default: 0] += 1
                                    return false
                                }
                                outcomes.answered += 1
                                // Exactly once, by the worker whose answer is the 64th: two
                                // a worker, so every loop is under way when the drain begins.
                                if outcomes.answered == 64 { dueSignal.yield() }
                                return true
                            }
                            guard answered else { return }
                        } catch let error as TetherError {
                            tally.outcomes.withLock { outcomes in
                                if error.code == .serverDraining {
                                    outcomes.draining += 1
                                    if error.message.contains("was not run") { outcomes.notRun += 1 }
                                } else { outcomes.other["\(error.code)", default: 0] += 1 }
                            }
                            return
                        }
                    }
                }
            }
            _ = try await collect(1, from: drainDue, "64 responses")
            try await bounded("drain() to return") { await server.drain() }
            try await group.waitForAll()
        }
        try await bounded("run() to return") { try await running.value }
        let counted = tally.outcomes.withLock { $0 }
        print("requests across the drain: \(counted)")
        // Every worker ends with the drain; none with a lost connection, a timeout or an
        // error made up on the way.
        #expect(counted.other.isEmpty, "\(counted)")
        #expect(counted.draining == workers, "\(counted)")
        #expect(counted.answered >= 64)
        let final = try await finalState(of: connection)
        #expect(final.reason?.code == .serverDraining)
    }
}
