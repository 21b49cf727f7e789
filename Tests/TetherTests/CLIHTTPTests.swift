import Foundation
import Testing
@testable import Tether

/// `tether serve --http-allow` and `tether request --http-get`, run as a user runs them,
/// against a real HTTP server on 127.0.0.1.
@Suite("tether --http-get", .serialized, .timeLimit(.guarded))
struct CLIHTTPTests {
    @Test("a GET through `tether serve`: body on stdout, status on stderr, each exchange logged; other hosts refused")
    func getThroughServe() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let (server, endpoint) = try await tetherServe(["--http-allow", upstream.hostAndPort])
        defer { server.kill() }
        let port = endpoint.port

        let ok = try tether(["request", "127.0.0.1:\(port)", "--http-get", upstream.url("/status/200"), "--header", "X-Trace: 42"])
        defer { ok.kill() }
        #expect(try await ok.waitForExit(within: eventBound) == 0, "\(ok.outputText)")
        #expect(ok.outputText.hasPrefix("tether: HTTP 200 from \(upstream.url("/status/200"))\n"), "\(ok.outputText)")
        #expect(ok.outputText.contains("tether: Content-Type: text/plain\n"))
        #expect(ok.outputText.hasSuffix("status 200"))
        #expect(upstream.requests.first?.header("X-Trace") == "42")

        let missing = try tether(["request", "127.0.0.1:\(port)", "--http-get", upstream.url("/status/404")])
        defer { missing.kill() }
        #expect(try await missing.waitForExit(within: eventBound) == 1)

        let refused = try tether(["request", "127.0.0.1:\(port)", "--http-get", "http://127.0.0.1:1/"])
        defer { refused.kill() }
        #expect(try await refused.waitForExit(within: eventBound) == 1)
        #expect(refused.outputText == "tether: HTTP GET http://127.0.0.1:1/ refused: 127.0.0.1:1 is not on this server's allow-list\n")

        _ = try await server.waitForOutput(containing: "refused: 127.0.0.1:1 is not", within: eventBound)
        let log = server.outputText
        #expect(log.contains("HTTP GET \(upstream.url("/status/200")) → 200 (10 bytes, "), "\(log)")
        #expect(log.contains("HTTP GET \(upstream.url("/status/404")) → 404 (10 bytes, "), "\(log)")
        #expect(upstream.requests.count == 2)
    }

    @Test("bad HTTP options are usage errors with the reason")
    func usage() async throws {
        let cases: [([String], String)] = [
            (["serve", "--http-allow", "::1"], "tether: --http-allow: cannot read the allowed host \"::1\": write an IPv6 address in brackets: [::1]:8080\n"),
            (["serve", "--http-timeout", "5"], "tether: --http-timeout needs --http-allow\n"),
            (["request", "127.0.0.1:9", "--http-get", "http://a/", "--json", "{}"], "tether: --http-get sends an HTTP request; it takes no --json, --text or --file\n"),
            (["request", "127.0.0.1:9", "--type", "0x402", "--header", "A: b"], "tether: --header needs --http-get\n"),
            (["request", "127.0.0.1:9", "--http-get", "http://a/", "--header", "nocolon"], "tether: --header nocolon: write it as NAME:VALUE\n"),
        ]
        for (arguments, message) in cases {
            let process = try tether(arguments)
            defer { process.kill() }
            #expect(try await process.waitForExit(within: eventBound) == 2, "\(arguments)")
            #expect(process.outputText.hasPrefix(message), "\(arguments): \(process.outputText)")
        }
    }
}
