import Testing
@testable import Tether

/// `tether demo`, the README's first command, run as a user runs it.
@Suite("tether demo", .timeLimit(.guarded))
struct CLIDemoTests {
    @Test("tether demo runs every step and exits 0")
    func demo() async throws {
        let demo = try tether(["demo"])
        defer { demo.kill() }
        // The demo bounds each of its steps itself (10 s); this only stops a hung process.
        let status = try await demo.waitForExit(within: .seconds(50))
        let output = demo.outputText
        #expect(status == 0, "\(output)")
        for step in 1...11 {
            #expect(output.contains("\n\(step). "), "step \(step) missing: \(output)")
        }
        #expect(output.contains("a client expecting chat.example.com refuses it: "), "\(output)")
        #expect(output.contains("   state: connected to ws://127.0.0.1:"), "\(output)")
        #expect(output.contains("the firewall reset 1 connection; 1 connect, 0 reconnect attempts"), "\(output)")
        #expect(output.contains("server stopped; demo finished in "), "\(output)")
    }
}
