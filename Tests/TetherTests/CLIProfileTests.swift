import Foundation
import Testing
@testable import Tether

/// `tether --profile`, end to end: the `tether` executable that the build puts beside this
/// test bundle, run as a child process the way a user runs it. (The test target cannot
/// import an executable target, so the command line is tested from outside.)
@Suite("tether --profile", .serialized, .timeLimit(.guarded))
struct CLIProfileTests {
    /// The `tether` executable beside the running test bundle, if the build made one.
    static let executable: String? = {
        let running = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let path = URL(fileURLWithPath: running).deletingLastPathComponent().appendingPathComponent("tether").path
        let type = try? FileManager.default.attributesOfItem(atPath: path)[.type] as? FileAttributeType
        return type == .typeRegular && FileManager.default.isExecutableFile(atPath: path) ? path : nil
    }()

    @Test("tether profiles describes every built-in profile")
    func listsProfiles() async throws {
        let profiles = try tether(["profiles"])
        defer { profiles.kill() }
        #expect(try await profiles.waitForExit(within: eventBound) == 0)
        // Each profile's block starts with its name alone on a line (the default says so).
        let titles = profiles.outputText.split(separator: "\n").filter { !$0.hasPrefix(" ") }
        #expect(titles == ["seed (default)", "seed-extended", "marker", "compact", "lines"], "\(profiles.outputText)")
        #expect(Profile.builtIn.map(\.name) == ["seed", "seed-extended", "marker", "compact", "lines"])
    }

    @Test("tether profiles names the types a session takes from the request range, in the profiles that have sessions")
    func listsSessionTypes() async throws {
        let profiles = try tether(["profiles"])
        defer { profiles.kill() }
        #expect(try await profiles.waitForExit(within: eventBound) == 0)
        let blocks = profiles.outputText.components(separatedBy: "\n\n")
        let seed = try #require(blocks.first { $0.hasPrefix("seed (default)") })
        #expect(seed.contains("sessions     0x401 hello, 0x400 acknowledgement, with --mailboxes"), "\(seed)")
        let lines = try #require(blocks.first { $0.hasPrefix("lines") })
        #expect(!lines.contains("sessions "), "\(lines)")
    }

    @Test("an unknown profile is a usage error, exit 2, that lists the names")
    func unknownProfile() async throws {
        let request = try tether(["request", "127.0.0.1:9", "--profile", "x", "--text", "hi"])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 2)
        #expect(request.outputText.contains("tether: unknown profile x: choose seed, seed-extended, marker, compact, lines"), "\(request.outputText)")
    }

    @Test("serve and request speak the lines profile: a line comes back after `echo: `")
    func linesEcho() async throws {
        let server = try tether(["serve", "--profile", "lines", "--port", "0"])
        defer { server.kill() }
        let port = try await server.waitForOutput("the listening line", within: eventBound) { output in
            listeningPort(in: String(decoding: output, as: UTF8.self), suffix: " (profile lines)\n")
        }
        let request = try tether(["request", "127.0.0.1:\(port)", "--profile", "lines", "--text", "hi"])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 0, "\(request.outputText)")
        #expect(request.outputText == "echo: hi\n")
    }
}
