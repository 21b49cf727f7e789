import Testing
@testable import Tether

/// `tether listen`, end to end, against peers that are not Tether servers.
@Suite("tether listen", .serialized, .timeLimit(.minutes(1)))
struct CLIListenTests {
    private func tether(_ arguments: [String]) throws -> ChildProcess {
        let path = try #require(CLIProfileTests.executable, "no tether executable beside the test bundle: `swift build` makes it")
        return try ChildProcess(path, arguments)
    }

    @Test("--max-attempts 2 against an HTTP server that answers 400: 3 connects, then exit 1 with the reason")
    func maxAttemptsEnds() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let listen = try tether(["listen", "\(endpoint)", "--max-attempts", "2", "--reconnect-delay", "0.05"])
        defer { listen.kill() }
        try await acceptAndFail(listener, count: 3)
        #expect(try await listen.waitForExit(within: eventBound) == 1, "\(listen.outputText)")
        let output = listen.outputText
        #expect(output.contains("tether: reconnecting (attempt 1 in "), "\(output)")
        #expect(output.contains("tether: reconnecting (attempt 2 in "), "\(output)")
        #expect(!output.contains("attempt 3"), "\(output)")
        #expect(output.contains("tether: failed: gave up on \(endpoint) after 2 reconnect attempts: "), "\(output)")
        await #expect(throws: TimedOut.self) { _ = try await listener.accept(timeout: .milliseconds(300)) }
    }
}
