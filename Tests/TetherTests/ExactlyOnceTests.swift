import Testing
import TetherTesting
@testable import Tether

@Suite("Every request ends exactly once", .timeLimit(.guarded))
struct ExactlyOnceTests {
    enum Outcome: Hashable { case response, timedOut, cancelled, connectionLost }

    @Test("responses, timeouts, cancellations and a server close in one storm: one outcome each, table empty")
    func storm() async throws {
        try await withTestNetwork { network in
            // 0x404 never answers: its handler waits until the server cancels it.
            let (reached, arrival) = AsyncStream<Void>.makeStream()
            try await withNetworkServer(on: network, handlers: { server in
                server.handle(type: 0x402) { request, _ in Response(json: ["echo": request.json ?? nil]) }
                server.handle(type: 0x404) { _, _ in
                    arrival.yield()
                    try await untilCancelledByServer()
                    return Response()
                }
                server.handle(type: 0x40A) { _, peer in
                    await peer.close()
                    return Response()
                }
            }) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.reconnect = .disabled
                let connection = try await Connection.connect(to: endpoint, configuration: configuration)
                var callers: [(kind: Int, task: Task<Outcome, Never>)] = []
                for index in 0..<300 {
                    let kind = index % 4
                    let task = Task<Outcome, Never> {
                        do {
                            switch kind {
                            case 0: // answered
                                _ = try await connection.request(Request(type: 0x402, json: ["i": .int(index)]))
                            case 1: // times out after 20 ms on the network's clock
                                _ = try await connection.request(Request(type: 0x404), timeout: .milliseconds(20))
                            default: // never answered; cancelled, or cut off by the close
                                _ = try await connection.request(Request(type: 0x404), timeout: .seconds(60))
                            }
                            return .response
                        } catch let error as TetherError where error.code == .timedOut {
                            return .timedOut
                        } catch is CancellationError {
                            return .cancelled
                        } catch {
                            return .connectionLost
                        }
                    }
                    callers.append((kind, task))
                }
                // Every answered request has its answer, and every other one is at its handler.
                for caller in callers where caller.kind == 0 {
                    #expect(try await withTimeLimit { await caller.task.value } == .response)
                }
                #expect(try await collect(225, from: reached, "the unanswered requests at their handler").count == 225)
                #expect(await connection.metrics.inFlightRequests == 225)

                // The 20 ms timeouts fire together at 20 ms, not 1 ns before.
                await network.advance(by: .milliseconds(20) - .nanoseconds(1))
                #expect(await connection.metrics.requestsTimedOut == 0)
                await network.advance(by: .nanoseconds(1))
                #expect(await connection.metrics.requestsTimedOut == 75)
                #expect(await connection.metrics.inFlightRequests == 150)

                for caller in callers where caller.kind == 2 { caller.task.cancel() }
                for caller in callers where caller.kind == 2 {
                    #expect(try await withTimeLimit { await caller.task.value } == .cancelled)
                }
                // Then the server closes the connection while the kind-3 requests are in flight.
                _ = try? await connection.request(Request(type: 0x40A), timeout: .seconds(5))
                var outcomes: [Int: [Outcome]] = [:]
                for caller in callers {
                    let outcome = try await withTimeLimit(eventBound, "every caller to finish") { await caller.task.value }
                    outcomes[caller.kind, default: []].append(outcome)
                }
                #expect(outcomes[0] == Array(repeating: .response, count: 75))
                #expect(outcomes[1] == Array(repeating: .timedOut, count: 75))
                #expect(outcomes[2] == Array(repeating: .cancelled, count: 75))
                #expect(outcomes[3] == Array(repeating: .connectionLost, count: 75))
                #expect(await connection.pendingRequestCount == 0)
                let state = try await finalState(of: connection)
                #expect(state.reason?.code == .peerClosed)
                #expect(network.clock.elapsed == .milliseconds(20))
            }
        }
    }
}
