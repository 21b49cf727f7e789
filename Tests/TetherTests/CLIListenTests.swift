import Foundation
import Testing
@testable import Tether
import TetherTesting

/// `tether listen`, end to end: against peers that are not Tether servers, and with
/// `tether serve --push-every` behind a proxy that resets every connection after a few
/// hundred bytes. Both run as child processes.
@Suite("tether listen", .serialized, .timeLimit(.guarded))
struct CLIListenTests {
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

    @Test("listen --client-id R --count 200 behind resets every 400 bytes prints serials 1…200, each once, in order, and nothing else")
    func sessionThroughResets() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (server, endpoint) = try await tetherServe(["--push-every", "0.005", "--store", directory.file("mailboxes.sqlite")])
        defer { server.kill() }
        let port = endpoint.port
        try await withFaultProxy(to: Endpoint(host: "127.0.0.1", port: port), mode: .cut(after: 400, reset: true)) { proxy in
            let listener = try tether([
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

    @Test("tether listen --heartbeat adaptive connects and prints the server's pushes")
    func adaptiveHeartbeat() async throws {
        let (server, endpoint) = try await tetherServe(["--push-every", "0.05"])
        defer { server.kill() }
        let listen = try tether(["listen", "127.0.0.1:\(endpoint.port)", "--count", "2", "--heartbeat", "adaptive", "--max-missed", "2"])
        defer { listen.kill() }
        #expect(try await listen.waitForExit(within: eventBound) == 0, "\(listen.outputText)")
        let pushes = listen.outputText.split(separator: "\n").filter { $0.hasPrefix("{\"type\":") }
        #expect(pushes.count == 2, "\(listen.outputText)")
    }
}
