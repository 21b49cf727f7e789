import Foundation
import Testing
@testable import Tether

/// `--verbose` on `tether request`, `ping` and `listen`: how each connection was opened.
@Suite("tether --verbose", .serialized, .timeLimit(.guarded))
struct CLIVerboseTests {
    /// The verbose line of a connection to `address`, with the times left out.
    private static func connectedLine(in output: String, address: String, family: String) -> Substring? {
        output.split(separator: "\n").first { $0.hasPrefix("tether: connected to \(address) (\(family)) in ") && $0.contains(" ms, resolved in ") }
    }

    @Test("tether request --verbose names the address and family that won, the connect, resolution and ready times, and each address tried")
    func request() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let request = try tether(["request", "localhost:\(endpoint.port)", "--type", "0x402", "--text", "hi", "--verbose"])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 0, "\(request.outputText)")
        let output = request.outputText
        let line = try #require(Self.connectedLine(in: output, address: "127.0.0.1:\(endpoint.port)", family: "IPv4"), "\(output)")
        #expect(line.contains(" ms, ready in "), "\(line)")
        // A name rather than an address: every address tried is listed. `localhost` needs no
        // lookup: ::1 first (nothing listens there), then 127.0.0.1.
        let tried = output.split(separator: "\n").filter { $0.hasPrefix("tether:   tried ") }
        #expect(tried.count == 2, "\(output)")
        if tried.count == 2 {
            #expect(tried[0].hasPrefix("tether:   tried [::1]:\(endpoint.port) after ") && tried[0].contains(": failed in "), "\(output)")
            #expect(tried[1].hasPrefix("tether:   tried 127.0.0.1:\(endpoint.port) after ") && tried[1].contains(" ms: connected in "), "\(output)")
        }
        #expect(output.contains(#"{"echo":"hi"}"#), "\(output)")
    }

    @Test("without --verbose, tether request prints no connect line")
    func quietByDefault() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let request = try tether(["request", "127.0.0.1:\(endpoint.port)", "--type", "0x402", "--text", "hi"])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 0, "\(request.outputText)")
        #expect(!request.outputText.contains("tether: connected to"), "\(request.outputText)")
    }

    @Test("tether ping --verbose over IPv6 says IPv6")
    func pingOverIPv6() async throws {
        let server = try tether(["serve", "--port", "0", "--host", "::1"])
        defer { server.kill() }
        let port = try await server.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            let text = String(decoding: output, as: UTF8.self)
            guard let start = text.range(of: "listening on [::1]:") else { return nil }
            return Int(text[start.upperBound...].prefix { $0.isNumber })
        }
        let ping = try tether(["ping", "[::1]:\(port)", "--count", "1", "--heartbeat-timeout", "1", "--verbose"])
        defer { ping.kill() }
        #expect(try await ping.waitForExit(within: eventBound) == 0, "\(ping.outputText)")
        #expect(Self.connectedLine(in: ping.outputText, address: "[::1]:\(port)", family: "IPv6") != nil, "\(ping.outputText)")
        // An address rather than a name, one attempt: no list of attempts.
        #expect(!ping.outputText.contains("tried"), "\(ping.outputText)")
    }

    @Test("tether listen --verbose follows its connected line with how the connection was opened")
    func listen() async throws {
        let (server, endpoint) = try await tetherServe(["--push-every", "0.05"])
        defer { server.kill() }
        let listen = try tether(["listen", "127.0.0.1:\(endpoint.port)", "--count", "1", "--verbose"])
        defer { listen.kill() }
        #expect(try await listen.waitForExit(within: eventBound) == 0, "\(listen.outputText)")
        // Only the lines on stderr: the push printed on stdout may come between them.
        let lines = listen.outputText.split(separator: "\n").filter { $0.hasPrefix("tether:") }
        let connected = try #require(lines.firstIndex(of: "tether: connected to 127.0.0.1:\(endpoint.port)"), "\(listen.outputText)")
        #expect(lines.indices.contains(connected + 1) && lines[connected + 1].hasPrefix("tether: connected to 127.0.0.1:\(endpoint.port) (IPv4) in "), "\(listen.outputText)")
    }
}
