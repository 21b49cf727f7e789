import Foundation
import Testing
@testable import Tether

/// `tether serve --websocket-port` and the clients over `ws://`, directly or as the
/// `--fallback` of a TCP endpoint that refuses.
@Suite("tether over WebSocket", .serialized, .timeLimit(.guarded))
struct CLIWebSocketTests {
    /// Starts `tether serve` with a WebSocket port at `/tether`: the process and the URL of
    /// its second listening line.
    func serveWebSocket(_ options: [String] = ["--websocket-port", "0"], scheme: String = "ws") async throws -> (ChildProcess, String) {
        let server = try tether(["serve", "--port", "0", "--websocket-path", "/tether"] + options)
        do {
            let url = try await server.waitForOutput("the WebSocket listening line", within: eventBound) { (output: [UInt8]) -> String? in
                let text = String(decoding: output, as: UTF8.self)
                guard let start = text.range(of: "listening on \(scheme)://"),
                      let end = text.range(of: "\n", range: start.upperBound..<text.endIndex) else { return nil }
                return "\(scheme)://" + text[start.upperBound..<end.lowerBound]
            }
            return (server, url)
        } catch {
            server.kill()
            throw error
        }
    }

    @Test("tether serve --websocket-port prints the ws:// URL, and tether request ws://… gets the echo over it")
    func requestOverWebSocket() async throws {
        let (server, url) = try await serveWebSocket()
        defer { server.kill() }
        #expect(url.hasPrefix("ws://127.0.0.1:") && url.hasSuffix("/tether"), "\(url)")
        let request = try tether(["request", url, "--type", "0x402", "--json", #"{"over":"ws"}"#, "--verbose"])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 0, "\(request.outputText)")
        #expect(request.outputText.contains(#"{"echo":{"over":"ws"}}"#), "\(request.outputText)")
        #expect(request.outputText.contains("(IPv4) over \(url) in "), "\(request.outputText)")
    }

    @Test("tether serve with TLS serves wss:// on its WebSocket port, and tether request wss://… --ca gets the echo over it")
    func requestOverSecureWebSocket() async throws {
        let certificates = try await TestCertificates.shared()
        let (server, url) = try await serveWebSocket(
            ["--websocket-port", "0", "--tls-cert", certificates.server.certificateChain, "--tls-key", certificates.server.privateKey],
            scheme: "wss"
        )
        defer { server.kill() }
        #expect(url.hasPrefix("wss://127.0.0.1:") && url.hasSuffix("/tether"), "\(url)")
        let request = try tether(["request", url, "--ca", certificates.caCertificate, "--type", "0x402", "--json", #"{"over":"wss"}"#])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 0, "\(request.outputText)")
        #expect(request.outputText.contains(#"{"echo":{"over":"wss"}}"#), "\(request.outputText)")
        #expect(request.outputText.contains("tether: TLSv1."), "\(request.outputText)")
    }

    @Test("tether serve --websocket-main-port answers tether request over ws:// and over TCP on the one port")
    func mainPort() async throws {
        let (server, url) = try await serveWebSocket(["--websocket-main-port"])
        defer { server.kill() }
        let main = try #require(server.outputText.split(separator: "\n").first { $0.hasPrefix("listening on 127.0.0.1:") })
        #expect(url == "ws://\(main.dropFirst("listening on ".count))/tether", "\(server.outputText)")
        for target in [url, String(main.dropFirst("listening on ".count))] {
            let request = try tether(["request", target, "--type", "0x402", "--json", #"{"to":"main"}"#])
            defer { request.kill() }
            #expect(try await request.waitForExit(within: eventBound) == 0, "\(target): \(request.outputText)")
            #expect(request.outputText.contains(#"{"echo":{"to":"main"}}"#), "\(target): \(request.outputText)")
        }
    }

    @Test("tether request to a refused TCP port with --fallback ws://… connects over the fallback in its one attempt")
    func requestFallsBack() async throws {
        let (refusing, refused) = try RawSocket.bindOnly()
        defer { refusing.close() }
        let (server, url) = try await serveWebSocket()
        defer { server.kill() }
        let request = try tether(["request", "127.0.0.1:\(refused.port)", "--fallback", url, "--type", "0x402", "--json", #"{"via":"fallback"}"#, "--verbose"])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 0, "\(request.outputText)")
        #expect(request.outputText.contains(#"{"echo":{"via":"fallback"}}"#), "\(request.outputText)")
        #expect(request.outputText.contains("over \(url) in "), "\(request.outputText)")
    }

    @Test("tether bench measures over a ws:// URL, and over the --fallback of a refused TCP port, naming the endpoint in use")
    func bench() async throws {
        let (refusing, refused) = try RawSocket.bindOnly()
        defer { refusing.close() }
        let (server, url) = try await serveWebSocket()
        defer { server.kill() }
        for arguments in [[url], ["127.0.0.1:\(refused.port)", "--fallback", url]] {
            let bench = try tether(["bench"] + arguments + ["--duration", "0.3", "--in-flight", "4"])
            defer { bench.kill() }
            #expect(try await bench.waitForExit(within: eventBound) == 0, "\(arguments): \(bench.outputText)")
            #expect(bench.outputText.contains("\(url): 1 connection(s) × 4 in flight, 64-byte payloads"), "\(arguments): \(bench.outputText)")
            #expect(bench.outputText.contains(" req/s, "), "\(arguments): \(bench.outputText)")
            // The tests run a debug build, which says what it measures.
            #expect(bench.outputText.contains("tether: warning: this tether is a debug build, which measures several times less than a release build"), "\(bench.outputText)")
        }
    }

    @Test("tether request --proxy reaches a ws:// URL through tinyproxy", .enabled(if: TinyProxy.available, "tinyproxy is not installed"))
    func requestThroughProxy() async throws {
        let proxy = try await TinyProxy.start()
        let (server, url) = try await serveWebSocket()
        defer { server.kill() }
        let request = try tether(["request", url, "--proxy", "http://127.0.0.1:\(proxy.port)", "--type", "0x402", "--json", #"{"via":"proxy"}"#])
        defer { request.kill() }
        #expect(try await request.waitForExit(within: eventBound) == 0, "\(request.outputText)")
        #expect(request.outputText.contains(#"{"echo":{"via":"proxy"}}"#), "\(request.outputText)")
        let endpoint = try #require(Endpoint(webSocket: url))
        try await proxy.waitForConnect(to: endpoint)
    }

    @Test("tether ping and tether listen take a ws:// endpoint")
    func pingAndListen() async throws {
        let (server, url) = try await serveWebSocket()
        defer { server.kill() }
        let ping = try tether(["ping", url, "--count", "1"])
        defer { ping.kill() }
        #expect(try await ping.waitForExit(within: eventBound) == 0, "\(ping.outputText)")
        #expect(ping.outputText.contains("--- 127.0.0.1:"), "\(ping.outputText)")
        let listen = try tether(["listen", "127.0.0.1:1", "--fallback", url, "--verbose"])
        defer { listen.kill() }
        _ = try await listen.waitForOutput(containing: "over \(url) in ", within: eventBound)
    }

    @Test("bad endpoints and options are refused with exit 2 and what is wrong")
    func refusals() async throws {
        let cases: [([String], String)] = [
            (["request", "ws://127.0.0.1:1/x", "--tls", "--type", "0x402"], "'ws://127.0.0.1:1/x' is WebSocket without TLS, but TLS is on (--tls, --ca, --server-name, --cert, --pin, or a wss:// endpoint): use wss://"),
            (["request", "127.0.0.1:1", "--fallback", "127.0.0.1:2", "--type", "0x402"], "--fallback '127.0.0.1:2' is not a ws:// or wss:// URL (for example ws://127.0.0.1:8080/tether)"),
            (["ping", "ws://127.0.0.1:x/"], "'ws://127.0.0.1:x/' is not a ws:// URL"),
            (["ping", "wss://127.0.0.1:x/"], "'wss://127.0.0.1:x/' is not a wss:// URL"),
            (["request", "ws://127.0.0.1:1/x", "--proxy", "https://proxy:3128", "--type", "0x402"], "--proxy 'https://proxy:3128' is not an http://[USER:PASSWORD@]HOST[:PORT] URL (for example http://127.0.0.1:3128)"),
            (["bench", "ws://127.0.0.1:1/x", "--tls"], "'ws://127.0.0.1:1/x' is WebSocket without TLS, but TLS is on"),
            (["serve", "--websocket-path", "/x"], "--websocket-path needs --websocket-port or --websocket-main-port"),
            (["serve", "--websocket-port", "0", "--websocket-main-port"], "--websocket-port and --websocket-main-port exclude each other"),
            (["serve", "--websocket-port", "0", "--websocket-path", "x"], "--websocket-path 'x' is not a request path"),
        ]
        for (arguments, message) in cases {
            let command = try tether(arguments)
            defer { command.kill() }
            #expect(try await command.waitForExit(within: eventBound) == 2, "\(arguments)")
            #expect(command.outputText.contains(message), "\(arguments): \(command.outputText)")
        }
    }

    @Test("--help-all of serve, request, listen, ping and bench names the WebSocket options")
    func help() async throws {
        for (command, option) in [("serve", "--websocket-port PORT"), ("serve", "--websocket-main-port"), ("serve", "--websocket-path PATH"), ("request", "wss://HOST:PORT/PATH"), ("request", "--fallback URL"), ("listen", "--fallback URL"), ("ping", "--fallback URL"), ("request", "--proxy URL"), ("listen", "--proxy URL"), ("ping", "--proxy URL"), ("bench", "--fallback URL"), ("bench", "--proxy URL")] {
            let help = try tether([command, "--help-all"])
            defer { help.kill() }
            #expect(try await help.waitForExit(within: eventBound) == 0)
            #expect(help.outputText.contains(option), "\(command): \(option)")
            if command != "serve" { #expect(help.outputText.contains("ws://HOST:PORT/PATH"), "\(command)") }
        }
    }
}
