import Foundation
import Testing
@testable import Tether

/// `tether ping`, end to end against `tether serve`.
@Suite("tether ping", .serialized, .timeLimit(.guarded))
struct CLIPingTests {
    @Test("tether ping reports every heartbeat from the first, which goes out as the connection opens: serials 1, 2")
    func reportsFromTheFirstHeartbeat() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let ping = try tether(["ping", "127.0.0.1:\(endpoint.port)", "--count", "2", "--heartbeat-interval", "1", "--heartbeat-timeout", "1"])
        defer { ping.kill() }
        #expect(try await ping.waitForExit(within: eventBound) == 0, "\(ping.outputText)")
        let beats = ping.outputText.split(separator: "\n").filter { $0.hasPrefix("heartbeat ") }
        #expect(beats.map { $0.split(separator: " ").prefix(4).joined(separator: " ") } == [
            "heartbeat 1 from 127.0.0.1:\(endpoint.port):",
            "heartbeat 2 from 127.0.0.1:\(endpoint.port):",
        ], "\(ping.outputText)")
        // Acked or missed (a busy machine may take longer than the timeout), each is reported.
        #expect(ping.outputText.contains("--- 127.0.0.1:\(endpoint.port): 2 heartbeats, "), "\(ping.outputText)")
    }

    @Test("tether ping --heartbeat adaptive starts at 30 s, says so in its header, and reports heartbeat 1")
    func adaptive() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let ping = try tether(["ping", "127.0.0.1:\(endpoint.port)", "--count", "1", "--heartbeat", "adaptive"])
        defer { ping.kill() }
        #expect(try await ping.waitForExit(within: eventBound) == 0, "\(ping.outputText)")
        #expect(ping.outputText.contains("PING 127.0.0.1:\(endpoint.port): heartbeat adaptive from 30 s up to 540 s, timeout 10 s\n"), "\(ping.outputText)")
        #expect(ping.outputText.contains("heartbeat 1 from 127.0.0.1:\(endpoint.port): rtt "), "\(ping.outputText)")
    }

    @Test("--heartbeat takes fixed or adaptive; adaptive with a fixed interval is a usage error, exit 2")
    func adaptiveUsageErrors() async throws {
        for (arguments, message) in [
            (["--heartbeat", "smart"], "tether: --heartbeat takes fixed or adaptive, not \"smart\""),
            (["--heartbeat", "adaptive", "--heartbeat-interval", "5"], "tether: --heartbeat adaptive finds its own interval, and --heartbeat-interval sets a fixed one: give one of them"),
            (["--heartbeat", "adaptive", "--interval", "5"], "tether: --heartbeat adaptive finds its own interval, and --heartbeat-interval sets a fixed one: give one of them"),
        ] {
            let ping = try tether(["ping", "127.0.0.1:9"] + arguments)
            defer { ping.kill() }
            #expect(try await ping.waitForExit(within: eventBound) == 2, "\(arguments)")
            #expect(ping.outputText.contains(message), "\(ping.outputText)")
        }
    }
}
