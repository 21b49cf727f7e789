import Testing
@testable import Tether

@Suite("Every request ends exactly once", .timeLimit(.minutes(1)))
struct ExactlyOnceTests {
    enum Outcome: Hashable { case response, timedOut, cancelled, connectionLost }

    @Test("responses, timeouts, cancellations and a server close in one storm: one outcome each, table empty")
    func storm() async throws {
        try await withServer(handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x40A) { _, peer in
                await peer.close()
                return Response()
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            var callers: [(kind: Int, task: Task<Outcome, Never>)] = []
            for index in 0..<300 {
                let kind = index % 4
                let task = Task<Outcome, Never> {
                    do {
                        switch kind {
                        case 0: // answered quickly
                            _ = try await connection.request(Request(type: 0x402, json: ["i": .int(index)]))
                        case 1: // times out: the server waits longer than the caller
                            _ = try await connection.request(Request(type: 0x404, json: ["delay_ms": 30_000]), timeout: .milliseconds(20))
                        default: // slow; cancelled, or cut off by the close
                            // The server's 30 s outlast any stall of a loaded machine; its
                            // handlers are cancelled when it closes the peer, so nobody waits them out.
                            _ = try await connection.request(Request(type: 0x404, json: ["delay_ms": 30_000]), timeout: .seconds(60))
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
            // Wait until every quick request has its answer, then cancel half of the slow ones.
            for caller in callers where caller.kind == 0 {
                #expect(try await bounded("a quick response") { await caller.task.value } == .response)
            }
            for caller in callers where caller.kind == 2 { caller.task.cancel() }
            // Then the server closes the connection while the kind-3 requests are in flight.
            _ = try? await connection.request(Request(type: 0x40A), timeout: .seconds(5))
            var outcomes: [Int: [Outcome]] = [:]
            for caller in callers {
                let outcome = try await bounded("every caller to finish") { await caller.task.value }
                outcomes[caller.kind, default: []].append(outcome)
            }
            #expect(outcomes[0] == Array(repeating: .response, count: 75))
            #expect(outcomes[1] == Array(repeating: .timedOut, count: 75))
            #expect(outcomes[2] == Array(repeating: .cancelled, count: 75))
            #expect(outcomes[3] == Array(repeating: .connectionLost, count: 75))
            #expect(await connection.pendingRequestCount == 0)
            let state = try await finalState(of: connection)
            #expect(state.reason?.code == .peerClosed)
        }
    }
}
