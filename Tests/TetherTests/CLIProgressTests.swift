import Foundation
import Testing
@testable import Tether

/// `tether request` drawing the progress of large payloads on a terminal.
@Suite("tether request progress", .serialized, .timeLimit(.guarded))
struct CLIProgressTests {
    /// A JSON string of about 3 MiB in a file of its own.
    private static func largeContent() throws -> (TemporaryDirectory, String, Int) {
        let directory = try TemporaryDirectory()
        let path = directory.file("large.json")
        let content = "\"" + String(repeating: "x", count: 3 << 20) + "\""
        try content.write(toFile: path, atomically: true, encoding: .utf8)
        return (directory, path, content.utf8.count)
    }

    @Test("on a terminal (a pseudo-terminal from script(1)), a large request and its response draw their progress on one line each, ending at 100 %")
    func onATerminal() async throws {
        let (directory, path, size) = try Self.largeContent()
        defer { directory.remove() }
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let executable = try #require(CLIProfileTests.executable)
        let command = "\(executable) request 127.0.0.1:\(endpoint.port) --type 0x402 --file \(path) > /dev/null"
        let run = try ChildProcess("/usr/bin/script", ["-qefc", command, "/dev/null"])
        defer { run.kill() }
        #expect(try await run.waitForExit(within: eventBound) == 0, "\(run.outputText)")
        let output = run.outputText
        // Each report redraws the line: carriage return, clear to its end, the report.
        let lines = output.components(separatedBy: "\r\u{1B}[Ktether: ").dropFirst().map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        let sending = lines.filter { $0.hasPrefix("sending 0x402 serial 1: ") }
        let receiving = lines.filter { $0.hasPrefix("receiving 0x402 serial 1: ") }
        // The kernel may take the whole request in one write: then only the last line.
        #expect(!sending.isEmpty, "\(output)")
        #expect(sending.last == "sending 0x402 serial 1: \(12 + size) of \(12 + size) bytes (100 %)", "\(output)")
        #expect(receiving.count >= 2, "\(output)")
        #expect(receiving.last?.hasSuffix("bytes (100 %)") == true, "\(output)")
    }

    @Test("when stderr is not a terminal, nothing but the response is printed")
    func notOnATerminal() async throws {
        let (directory, path, size) = try Self.largeContent()
        defer { directory.remove() }
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let request = try tether(["request", "127.0.0.1:\(endpoint.port)", "--type", "0x402", "--file", path])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 0)
        let output = request.outputText
        #expect(!output.contains("tether: "))
        #expect(output.hasPrefix("{\"echo\":\"xxx"))
        #expect(output.utf8.count == size + 10)
    }

    @Test("--file that cannot be read, or given with --json, is a usage error")
    func fileUsage() async throws {
        let missing = try tether(["request", "127.0.0.1:1", "--type", "0x402", "--file", "/nonexistent/large.json"])
        defer { missing.kill() }
        #expect(try await missing.waitForExit(within: eventBound) == 2)
        #expect(missing.outputText.contains("tether: --file /nonexistent/large.json: cannot read it"), "\(missing.outputText)")
        let both = try tether(["request", "127.0.0.1:1", "--type", "0x402", "--file", "/dev/null", "--json", "1"])
        defer { both.kill() }
        #expect(try await both.waitForExit(within: eventBound) == 2)
        #expect(both.outputText.contains("tether: --file: give the content once, with --json, --text or --file"), "\(both.outputText)")
    }
}
