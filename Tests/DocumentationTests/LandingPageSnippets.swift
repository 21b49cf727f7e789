// The code of Documentation.docc/Tether.md, compiled and run.

import Testing
import Tether
import TetherTesting

private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    recordAndPrint(items, separator: separator, terminator: terminator)
}

/// The example on the first screen of the landing page, line for line.
private func landingPageExample() async throws {
    let configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
    let server = Server(configuration: configuration)
    server.handle(type: 0x402) { request, peer in
        Response(json: ["echo": request.json ?? .null])
    }

    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await server.run() }   // serves until cancelled
        let address = try await server.listeningAddress()
        let endpoint = Endpoint(host: "127.0.0.1", port: address.port)

        try await Connection.withConnection(to: endpoint) { connection in
            let request = Request(type: 0x402, json: ["hello": "world"])
            let reply = try await connection.request(request, timeout: .seconds(5))
            print(reply.text)   // {"echo":{"hello":"world"}}
        }
        group.cancelAll()       // stops the server gracefully
    }
}

@Suite("The landing page's example", .timeLimit(.guarded))
struct LandingPageSnippets {
    @Test("the first-screen example prints the echo and returns once the server has stopped")
    func firstScreen() async throws {
        let printed = try await withTimeLimit(testBound) {
            try await withPrintedLines { try await landingPageExample() }
        }
        #expect(printed == [#"{"echo":{"hello":"world"}}"#])
    }
}
