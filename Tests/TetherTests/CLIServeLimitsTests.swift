import Testing
@testable import Tether

/// `tether serve` and its limits on hostile peers, run as a child process.
@Suite("tether serve limits", .serialized, .timeLimit(.guarded))
struct CLIServeLimitsTests {
    @Test("--help-all lists the request, handler and frame limits with their defaults")
    func help() async throws {
        let help = try tether(["serve", "--help-all"])
        defer { help.kill() }
        #expect(try await help.waitForExit(within: eventBound) == 0)
        let text = help.outputText
        #expect(text.contains("--max-requests-per-peer N"))
        #expect(text.contains("(default 256)"))
        #expect(text.contains("--max-handlers N"))
        #expect(text.contains("(default 10000)"))
        #expect(text.contains("--frame-timeout SECONDS"))
        #expect(text.contains("0 or off waits forever (default 30)"))
    }

    @Test("a limit that is not a positive number is a usage error, exit 2")
    func badLimit() async throws {
        let serve = try tether(["serve", "--port", "0", "--max-requests-per-peer", "0"])
        defer { serve.kill() }
        #expect(try await serve.waitForExit(within: eventBound) == 2)
        #expect(serve.outputText.contains("tether: --max-requests-per-peer '0' is not a positive whole number"), "\(serve.outputText)")
    }

    @Test("--frame-timeout closes a peer that stalls inside a frame, and the log says why")
    func frameTimeoutIsLogged() async throws {
        let (server, endpoint) = try await tetherServe(["--frame-timeout", "0.2"])
        defer { server.kill() }
        let port = endpoint.port
        let loris = try RawSocket.connect(to: Endpoint(host: "127.0.0.1", port: port))
        let local = try Syscall.localAddress(loris.fd).port
        try loris.write(seedBytes(type: 0x1, serial: 1))
        #expect(try await loris.readFrame()?.serial == 1)
        try loris.write(Array(seedBytes(type: 0x402, serial: 2, payload: Array(repeating: 0x20, count: 100)).prefix(20)))
        #expect(try await loris.waitForClose())
        let line = "disconnected: peer 127.0.0.1:\(local) did not finish a frame within 200 ms of its first byte (20 bytes of it received)"
        _ = try await server.waitForOutput(containing: line, within: eventBound)
    }
}
