import Testing
@testable import Tether

@Suite struct Smoke {
    @Test(.timeLimit(.minutes(1))) func roundTrip() async throws {
        let server = Server(configuration: .init(port: 0))
        server.handle(type: 0x402) { request, _ in Response(json: ["echo": request.json ?? nil]) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            let address = try await server.listeningAddress()
            let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: address.port))
            let reply = try await connection.request(Request(type: 0x402, json: ["hello": "world"]))
            #expect(reply.json == ["echo": ["hello": "world"]])
            await connection.close()
            group.cancelAll()
        }
    }
}
