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

/// Moves `clock` with the bytes the proxy carries, a tenth of a second for each tenth of
/// the link's rate, until ``stop()``: the link's time, not the machine's. A busy machine
/// moves fewer bytes in a real second, and its timers see the same fewer seconds; a
/// stalled link stops the time, and the test then moves it on its own.
///
/// The time jumps, on the proxy's thread as it counts the bytes: while bytes flow the
/// loops are never idle, so an advance (which waits for that) would wait for the end of
/// the transfer, and a task could wait for a cooperative thread the suite keeps busy.
private final class LinkTime: Sendable {
    private let clock: TestClock
    private let proxy: FaultProxy
    /// The tenths of a second moved so far; `nil` once stopped.
    private let steps = Lock<Int?>(0)

    init(_ clock: TestClock, following proxy: FaultProxy) {
        self.clock = clock
        self.proxy = proxy
        let step = linkRate / 10
        proxy.observeCounters { [steps, clock] counters in
            let carried = (counters.bytesUpstream + counters.bytesDownstream) / step
            let due = steps.withLock { taken -> Int in
                guard let moved = taken, carried > moved else { return 0 }
                taken = carried
                return carried - moved
            }
            if due > 0 { clock.manual.jump(by: .milliseconds(100) * due) }
        }
    }

    /// Stops following the proxy: the time moves only when the test advances it.
    func stop() {
        proxy.observeCounters(nil)
        steps.withLock { $0 = nil }
    }
}

/// Runs `body` with a server and a client configuration whose timers (the server's frame
/// rule, the client's heartbeats and request timeout) follow the link's time, behind a
/// proxy limited to the link's rate.
private func onSlowLink(
    _ body: @escaping @Sendable (_ server: Server, _ proxy: FaultProxy, _ clock: TestClock, _ client: ConnectionConfiguration) async throws -> Void
) async throws {
    let clock = TestClock()
    let group = clock.makeEventLoopGroup()
    defer { clock.shutdown() }
    try await withServer(configure: {
        slowLinkServer(&$0)
        $0.eventLoopGroup = group
    }, handlers: rawEcho) { server, endpoint in
        try await withFaultProxy(to: endpoint, mode: .limited(bytesPerSecond: linkRate)) { proxy in
            var client = slowLinkClient()
            client.eventLoopGroup = group
            try await body(server, proxy, clock, client)
        }
    }
}

@Suite("Large frames on a slow link", .timeLimit(.guarded))
struct SlowLinkTests {
    @Test("a 1.5 MB request and its 1.5 MB answer at 250 KB/s each way complete, though each takes six times the frame-completion timeout and twice the time in which heartbeats find a dead peer")
    func largeFrameOnASlowLink() async throws {
        try await onSlowLink { server, proxy, clock, configuration in
            let connection = try await Connection.connect(to: proxy.endpoint, configuration: configuration)
            let payload = (0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let time = LinkTime(clock, following: proxy)
            let response = try await connection.request(Request(type: 0x402, payload: payload))
            time.stop()
            #expect(response.payload == payload)
            // 3 MB took 12 s of the link's time: the client's heartbeats and the server's
            // frame rule ran through all of it.
            #expect(clock.elapsed >= .seconds(11), "\(clock.elapsed)")
            #expect(await connection.state.phase == .connected)
            // The one connection carried it all: no heartbeat loss, no reconnect. (A
            // heartbeat sent while the request's last bytes are still in the relay and
            // the answer has not begun sees nothing move, and may count one miss of the
            // two allowed: that silence is real.)
            let metrics = await connection.metrics
            #expect(metrics.connects == 1)
            #expect(metrics.heartbeatsMissed < 2, "\(metrics)")
            #expect(server.peerCount == 1)
            // Heartbeats go on being acked once the link is free. The last one sent may
            // still wait for its ack, which the link carries without the link's time moving.
            let settling = connection.heartbeats
            if await connection.heartbeatOutstandingForTesting {
                _ = try await bounded("the last heartbeat's ack") { () -> Heartbeat? in
                    for await beat in settling where beat.outcome != .sent { return beat }
                    return nil
                }
            }
            // The next one is due within the interval, and acked.
            let next = connection.heartbeats
            await clock.advance(by: .seconds(1))
            let acked = try await bounded("a heartbeat acked after the transfer") { () -> Heartbeat? in
                for await beat in next where beat.outcome != .sent { return beat }
                return nil
            }
            #expect(acked?.outcome == .acked, "\(String(describing: acked))")
            #expect(await connection.state.phase == .connected)
            await connection.close()
        }
    }

    @Test("a link that stops in the middle of a large frame is still found: the client by its heartbeats, the server by the frame rule")
    func stallInTheMiddle() async throws {
        try await onSlowLink { server, proxy, clock, configuration in
            let events = server.events
            let connection = try await Connection.connect(to: proxy.endpoint, configuration: configuration)
            let states = connection.states
            let payload = [UInt8](repeating: 7, count: 3_000_000)
            let time = LinkTime(clock, following: proxy)
            let request = Task { try await connection.request(Request(type: 0x402, payload: payload)) }
            try await proxy.waitUntil("part of the frame upstream", within: eventBound) { $0.bytesUpstream > 400_000 }
            proxy.setMode(.stalled, for: .currentConnections)
            time.stop()
            // Nothing moves now, nor does the link's time: the test moves it, a second at a
            // time. 3 s of silence is what the client's heartbeats allow (interval × (misses
            // + 1)), one more if the heartbeat out at the stall is excused for the bytes
            // that moved after it; 1 s is what the server's frame rule allows.
            var silence = Duration.zero
            while await connection.state.phase == .connected, silence < .seconds(10) {
                await clock.advance(by: .seconds(1))
                silence += .seconds(1)
            }
            #expect(silence <= .seconds(4), "found after \(silence) of silence")
            let lost = try await bounded("the client to find the stalled link") { () -> ConnectionState? in
                for await state in states where state.phase != .connected { return state }
                return nil
            }
            #expect(lost?.reason?.code == .heartbeatTimeout, "\(String(describing: lost))")
            let failed = await request.result
            #expect(throws: TetherError.self) { try failed.get() }
            // The server's frame rule counts from the last bytes it read. On a busy machine the
            // last bytes the proxy forwarded before the stall can reach the server's read after
            // the client has already been found, with the link's time stopped: the rule then
            // waits for time that no one moves. So wait, one turn of the peer's loop at a time,
            // until the server has read every byte the proxy forwarded, then move the time on.
            let forwarded = proxy.counters.bytesUpstream
            if let peer = server.peers.first {
                try await bounded("the server to read the \(forwarded) bytes forwarded before the stall") {
                    while await peer.metrics.bytesIn < forwarded {}
                }
            }
            await clock.advance(by: .seconds(2))
            let gone = try await firstEvent(events, "the server to end the stalled peer") { $0.kind == .peerDisconnected }
            #expect([.frameTimeout, .idleTimeout, .peerClosed, .connectionReset].contains(gone.reason?.code), "\(String(describing: gone.reason))")
            await connection.close()
        }
    }
}
