import Foundation
import Testing
@testable import Tether

/// `tether NAME --help` fits a screen, and `--help-all` still has everything.
@Suite("tether help", .serialized, .timeLimit(.guarded))
struct CLIHelpTests {
    /// Every command, as `tether --help` lists them.
    static let commands = ["demo", "serve", "request", "listen", "push", "ping", "bench", "pin", "profiles", "path", "udp"]
    /// The most lines `--help` may print.
    static let screenLines = 40
    /// The widest line `--help` may print.
    static let screenWidth = 100

    @Test("every command's --help is at most 40 lines of at most 100 characters, ending with where the rest is when there is more", arguments: commands)
    func fitsAScreen(_ command: String) async throws {
        let brief = try await run([command, "--help"])
        let all = try await run([command, "--help-all"])
        #expect(brief.status == 0 && all.status == 0, "\(brief.output)\(all.output)")
        let lines = brief.output.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count <= Self.screenLines, "\(command) --help is \(lines.count) lines")
        for line in lines {
            #expect(line.count <= Self.screenWidth, "\(command) --help: a line of \(line.count): \(line)")
        }
        #expect(brief.output.hasPrefix("usage: tether \(command)"), "\(brief.output)")
        if brief.output != all.output {
            #expect(lines.last == "Run `tether \(command) --help-all` for every option, with the details.", "\(brief.output)")
            #expect(!all.output.contains("--help-all` for every option"), "\(all.output)")
        }
    }

    @Test("--help-all shows the same wrapped synopsis, and lists every option of the synopsis and of --help", arguments: commands)
    func longFormHasEveryOption(_ command: String) async throws {
        let brief = try await run([command, "--help"])
        let all = try await run([command, "--help-all"])
        let usage = Self.usage(of: all.output)
        #expect(usage == Self.usage(of: brief.output))
        for line in usage {
            #expect(line.count <= Self.screenWidth, "\(command) --help-all: a usage line of \(line.count): \(line)")
        }
        let listed = Set(all.output.split(separator: "\n").compactMap(Self.listedOption))
        let inSynopsis = Self.options(in: usage.joined(separator: " "))
        let inBrief = brief.output.split(separator: "\n").compactMap(Self.listedOption)
        for option in inSynopsis + inBrief {
            #expect(listed.contains(option), "\(command) --help-all does not list \(option)")
        }
    }

    @Test("tether help NAME is NAME --help, and tether help NAME --all is NAME --help-all")
    func helpCommand() async throws {
        for command in ["serve", "udp"] {
            #expect(try await run(["help", command]).output == (try await run([command, "--help"])).output)
            #expect(try await run(["help", command, "--all"]).output == (try await run([command, "--help-all"])).output)
        }
        let wrong = try await run(["help", "serve", "--everything"])
        #expect(wrong.status == 2)
    }

    @Test("a usage error prints the synopsis wrapped to at most 100 characters a line")
    func usageErrorIsWrapped() async throws {
        let wrong = try await run(["serve", "--no-such-option"])
        #expect(wrong.status == 2)
        #expect(wrong.output.hasPrefix("tether: unknown option '--no-such-option'\nusage: tether serve [--host HOST]"), "\(wrong.output)")
        for line in wrong.output.split(separator: "\n") {
            #expect(line.count <= Self.screenWidth, "a line of \(line.count): \(line)")
        }
        #expect(wrong.output.hasSuffix("\nRun `tether serve --help` for more.\n"), "\(wrong.output)")
    }

    private func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let process = try tether(arguments)
        defer { process.kill() }
        let status = try await process.waitForExit(within: eventBound)
        return (status, process.outputText)
    }

    /// The lines of `usage: …` up to the blank line after it.
    private static func usage(of output: String) -> [Substring] {
        Array(output.split(separator: "\n", omittingEmptySubsequences: false).prefix { !$0.isEmpty })
    }

    /// `--name` for a line that lists an option: `  --name …` or `  -h, --help …`.
    private static func listedOption(_ line: Substring) -> String? {
        var rest = line
        guard rest.hasPrefix("  ") else { return nil }
        rest = rest.drop { $0 == " " }
        if rest.hasPrefix("-h, ") { rest = rest.dropFirst(4) }
        guard rest.hasPrefix("--") else { return nil }
        return String(rest.prefix { $0 != " " && $0 != "=" })
    }

    /// Every `--name` in a synopsis.
    private static func options(in synopsis: String) -> [String] {
        var found: [String] = []
        var rest = synopsis[...]
        while let start = rest.range(of: "--") {
            let name = rest[start.lowerBound...].prefix { $0 == "-" || $0.isLetter || $0.isNumber }
            found.append(String(name))
            rest = rest[name.endIndex...]
        }
        return found
    }
}
