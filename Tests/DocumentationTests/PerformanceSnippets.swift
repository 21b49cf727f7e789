// The code of Documentation.docc/Performance.md, and a test that runs it against a server.
import Testing
import Tether

// MARK: - Getting the most from a connection

func performanceOnTheLoop(_ connection: Connection) async {
    await withTaskExecutorPreference(connection.taskExecutor) {
        let reply = try? await connection.request(Request(type: 0x402, json: ["n": 1]))
        _ = reply
    }
}

func performanceImmediateHandler(_ server: Server) {
    server.handle(type: 0x402) { request, peer in
        Response(payload: request.payload)
    }
}

// MARK: - Tests

@Suite struct PerformanceTests {
    @Test func theEchoHandlerAnswersWithThePayload() async throws {
        let server = Server(configuration: .localTest)
        performanceImmediateHandler(server)
        try await whileServing(server) { address in
            try await Connection.withConnection(
                to: Endpoint(host: "127.0.0.1", port: address.port), configuration: quietConfiguration()
            ) { connection in
                let reply = try await bounded("the echo") { try await connection.request(Request(type: 0x402, payload: [7, 8, 9])) }
                #expect(reply.payload == [7, 8, 9])
                #expect(reply.serial == 1)
            }
        }
    }

    @Test func aRequestFromATaskOnTheConnectionsLoopIsAnswered() async throws {
        let server = Server(configuration: .localTest)
        server.handle(type: 0x402) { request, _ in Response(json: ["echo": request.json ?? .null]) }
        try await whileServing(server) { address in
            try await Connection.withConnection(
                to: Endpoint(host: "127.0.0.1", port: address.port), configuration: quietConfiguration()
            ) { connection in
                try await bounded("the request") { await performanceOnTheLoop(connection) }
                let metrics = await connection.metrics
                #expect(metrics.requestsSent == 1)
                #expect(metrics.requestsCompleted == 1)
            }
        }
    }
}
