import Testing
import TetherTesting
@testable import Tether

/// The rate of these tests' link: a phone's slow uplink.
private let linkRate = 250_000

/// A server whose frame-completion timeout, and a client whose heartbeat bound, are each
/// well below the time a large frame takes on the link: the rules must follow the bytes,
/// not the clock alone.
private func slowLinkServer(_ configuration: inout ServerConfiguration) {
    configuration.frameCompletionTimeout = .seconds(1)
    // No handshake or idle timeout: the first frame and the idle peer's silence are
    // heartbeats' matter, which prove nothing about a large frame, and a busy machine could
    // hold a heartbeat past a real-time second or two. The frame rule is what is tested.
    configuration.handshakeTimeout = nil
    configuration.idleTimeout = nil
}

private func slowLinkClient() -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration()
    // Found dead within 3 s (interval × (misses + 1)) when nothing moves; the timeout is
    // above what the proxy and its kernel hold in flight at the link's rate (about 0.8 s).
    configuration.heartbeat = .every(.seconds(1), timeout: .seconds(1), maximumMissed: 2)
    configuration.reconnect.isEnabled = false
    configuration.requestTimeout = .seconds(60)
    return configuration
}

/// Echoes the payload as it came.
private func rawEcho(_ server: Server) {
    server.handle(type: 0x402) { request, _ in Response(payload: request.payload) }
}

@Suite("Large frames on a slow link", .timeLimit(.minutes(2)))
struct SlowLinkTests {
    @Test("a 1.5 MB request and its 1.5 MB answer at 250 KB/s each way complete, though each takes six times the frame-completion timeout and twice the time in which heartbeats find a dead peer")
    func largeFrameOnASlowLink() async throws {
        try await withServer(configure: slowLinkServer, handlers: rawEcho) { server, endpoint in
            try await withFaultProxy(to: endpoint, mode: .limited(bytesPerSecond: linkRate)) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: slowLinkClient())
                let heartbeats = connection.heartbeats
                let payload = (0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
                let response = try await connection.request(Request(type: 0x402, payload: payload))
                #expect(response.payload == payload)
                #expect(await connection.state == .connected)
                // The one connection carried it all: no heartbeat loss, no reconnect. (A
                // heartbeat sent while the request's last bytes are still in the relay and
                // the answer has not begun sees nothing move, and may count one miss of the
                // two allowed: that silence is real.)
                let metrics = await connection.metrics
                #expect(metrics.connects == 1)
                #expect(metrics.heartbeatsMissed < 2, "\(metrics)")
                #expect(server.peerCount == 1)
                // Heartbeats went on being acked once the link was free.
                let acked = try await bounded("a heartbeat acked after the transfer") {
                    for await beat in heartbeats where beat.outcome == .acked { return true }
                    return false
                }
                #expect(acked)
                await connection.close()
                _ = proxy
            }
        }
    }

    @Test("a link that stops in the middle of a large frame is still found: the client by its heartbeats, the server by the frame rule")
    func stallInTheMiddle() async throws {
        try await withServer(configure: slowLinkServer, handlers: rawEcho) { server, endpoint in
            try await withFaultProxy(to: endpoint, mode: .limited(bytesPerSecond: linkRate)) { proxy in
                let events = server.events
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: slowLinkClient())
                let states = connection.states
                let payload = [UInt8](repeating: 7, count: 3_000_000)
                let request = Task { try await connection.request(Request(type: 0x402, payload: payload)) }
                try await proxy.waitUntil("part of the frame upstream", within: .seconds(30)) { $0.bytesUpstream > 400_000 }
                proxy.setMode(.stalled, for: .currentConnections)
                let lost = try await bounded("the client to find the stalled link", .seconds(30)) { () -> ConnectionState? in
                    for await state in states where state.phase != .connected { return state }
                    return nil
                }
                #expect(lost?.reason?.code == .heartbeatTimeout, "\(String(describing: lost))")
                let failed = await request.result
                #expect(throws: TetherError.self) { try failed.get() }
                let gone = try await firstEvent(events, "the server to end the stalled peer") { $0.kind == .peerDisconnected }
                #expect([.frameTimeout, .idleTimeout, .peerClosed, .connectionReset].contains(gone.reason?.code), "\(String(describing: gone.reason))")
                await connection.close()
            }
        }
    }
}
