#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import Tether

/// `tether serve` drains on SIGTERM: run as a child process.
@Suite("tether serve drain", .serialized, .timeLimit(.guarded))
struct CLIServeDrainTests {
    @Test("SIGTERM drains: a request in flight is answered, the client is told to leave, and the server exits 0")
    func sigtermDrains() async throws {
        let (server, endpoint) = try await tetherServe(["--drain-timeout", "20"])
        defer { server.kill() }
        let writes = RequestWrites()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.observer = writes })
        let frames = connection.frames
        let reply = Task { try await connection.request(Request(type: 0x404, json: ["delay_ms": 1_000])) }
        // Written before the signal, to a server that still reads.
        _ = try await collect(1, from: writes.serials, "the request to be written")
        #expect(kill(server.pid, SIGTERM) == 0)
        _ = try await collect(1, from: frames.filter { $0.type == 0x1 && !$0.payload.isEmpty }, "the drain notice")
        let response = try await bounded("the response") { try await reply.value }
        #expect(response.json?["echo"] == ["delay_ms": 1_000])
        #expect(try await server.waitForExit(within: eventBound) == 0)
        #expect(server.outputText.contains("SIGTERM: draining for up to 20 s\n"), "\(server.outputText)")
        #expect(server.outputText.contains("drained: shutting down\n"), "\(server.outputText)")
        #expect(try await finalState(of: connection).phase == .closed)
    }

    @Test("--drain-timeout is listed with its default, and must be a positive number")
    func option() async throws {
        let help = try tether(["serve", "--help-all"])
        defer { help.kill() }
        #expect(try await help.waitForExit(within: eventBound) == 0)
        #expect(help.outputText.contains("--drain-timeout SECONDS"))
        let bad = try tether(["serve", "--port", "0", "--drain-timeout", "0"])
        defer { bad.kill() }
        #expect(try await bad.waitForExit(within: eventBound) == 2)
        #expect(bad.outputText.contains("tether: --drain-timeout '0' is not a positive number of seconds (at most 86400)"), "\(bad.outputText)")
    }
}
