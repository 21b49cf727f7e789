import Foundation
import Testing
@testable import Tether

/// `tether ping`, end to end against `tether serve`.
@Suite("tether ping", .serialized, .timeLimit(.minutes(1)))
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
}
