import Foundation
import Testing
@testable import Tether

/// What `tether bench` and `tether serve` say about the builds a measurement depends on.
@Suite("tether bench builds", .serialized, .timeLimit(.guarded))
struct CLIBenchTests {
    /// Whether the tests, and the `tether` beside them, are a debug build.
    static let isDebugBuild: Bool = {
        #if DEBUG
        true
        #else
        false
        #endif
    }()

    @Test("tether bench ends, after its results, with one line on how to check the server's build")
    func serverBuildNote() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let bench = try tether(["bench", "\(endpoint)", "--duration", "0.2"])
        defer { bench.kill() }
        #expect(try await bench.waitForExit(within: eventBound) == 0, "\(bench.outputText)")
        let lines = bench.outputText.split(separator: "\n")
        let results = try #require(lines.firstIndex { $0.hasPrefix("max ") }, "\(bench.outputText)")
        #expect(lines.dropFirst(results + 1) == [
            "tether: check the server's build too: a debug build of `tether serve` says so when it starts; measure against `swift run -c release tether serve …`",
        ], "\(bench.outputText)")
    }

    @Test("a debug build of tether serve says so on stderr once it listens", .enabled(if: isDebugBuild, "the tests are a release build"))
    func serveSaysDebugBuild() async throws {
        let (server, _) = try await tetherServe([])
        defer { server.kill() }
        let warning = "tether: warning: this tether is a debug build, which serves several times fewer requests than a release build (`swift run -c release tether serve …`)\n"
        _ = try await server.waitForOutput(containing: warning, within: eventBound)
        #expect(server.outputText.components(separatedBy: warning).count == 2, "\(server.outputText)")
    }
}
