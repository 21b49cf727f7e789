import Foundation
import Testing
@testable import Tether

/// `tether listen --client-id` against `tether serve --push-every`, both run as child
/// processes, through a proxy that resets every connection after a few hundred bytes.
@Suite("tether listen through cuts", .serialized, .timeLimit(.minutes(1)))
struct CLIListenTests {
    @Test("listen --client-id R --count 200 behind resets every 400 bytes prints serials 1…200, each once, in order, and nothing else")
    func sessionThroughResets() async throws {
        let path = try #require(CLIProfileTests.executable, "no tether executable beside the test bundle: `swift build` makes it")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let server = try ChildProcess(path, ["serve", "--port", "0", "--push-every", "0.005", "--store", directory.file("mailboxes.sqlite")])
        defer { server.kill() }
        let port = try await server.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            let text = String(decoding: output, as: UTF8.self)
            guard let start = text.range(of: "listening on 127.0.0.1:"), let end = text[start.upperBound...].firstIndex(of: "\n") else { return nil }
            return Int(text[start.upperBound..<end])
        }
        try await withFaultProxy(to: Endpoint(host: "127.0.0.1", port: port), mode: .cut(after: 400, reset: true)) { proxy in
            let listener = try ChildProcess(path, [
                "listen", "127.0.0.1:\(proxy.endpoint.port)", "--client-id", "R", "--state", directory.file("R.state"),
                "--count", "200", "--reconnect-delay", "0.005",
            ])
            defer { listener.kill() }
            #expect(try await listener.waitForExit(within: .seconds(45)) == 0, "\(listener.outputText)")
            // stdout and stderr are merged: the pushes are the JSON lines.
            let lines = listener.outputText.split(separator: "\n").filter { $0.hasPrefix("{") }
            let serials = lines.compactMap { line -> Int? in
                guard let start = line.range(of: #""serial":"#), let end = line[start.upperBound...].firstIndex(of: ",") else { return nil }
                return Int(line[start.upperBound..<end])
            }
            #expect(serials.count == lines.count)
            #expect(serials == Array(1...200), "\(serials)")
            // Each printed push is the tick the server stored for R as that sequence.
            #expect(proxy.counters.accepted > 10, "\(proxy.counters)")
            let saved = try String(contentsOfFile: directory.file("R.state"), encoding: .utf8)
            #expect(saved == "200\n")
        }
    }
}
