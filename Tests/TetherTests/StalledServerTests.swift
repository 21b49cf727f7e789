import Testing
import TetherTesting
@testable import Tether

/// A server that stops answering heartbeats for a while, on the in-memory network and the
/// test clock: every step at its exact instant.
@Suite("A client against a server that stalls", .timeLimit(.guarded))
struct StalledServerTests {
    @Test("the server stalls for 30 s: the client notices within interval × (misses + 1), reconnects after its backoff, and the request made meanwhile goes out")
    func stallThenRecover() async throws {
        try await withTestNetwork { network in
            // Heartbeats reach a handler, which answers them while the gate is open.
            let gate = HandlerGate()
            try await withNetworkServer(on: network, configure: { $0.profile = heartbeatsAsRequests }, handlers: { server in
                server.handle(type: 0x1) { _, _ in
                    await gate.pass()
                    return Response()
                }
                server.handle(type: 0x402) { request, _ in Response(json: ["echo": request.json ?? nil]) }
            }) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.heartbeat = .every(.seconds(10), timeout: .seconds(5), maximumMissed: 2)
                configuration.reconnect = .backoff(initialDelay: .seconds(1), multiplier: 2, jitter: 0)
                let connection = Connection(to: endpoint, configuration: configuration)
                let watcher = StateWatcher(connection)
                let beats = connection.heartbeats
                let firstAck = connection.heartbeats.filter { $0.outcome == .acked }
                try await connection.connect()
                // The first heartbeat goes out at 0 s; its ack comes from a handler, off the loop.
                #expect(try await firstElement(of: firstAck) == Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero))
                #expect(network.clock.elapsed == .zero)

                // The server stalls from 0 s to 30 s.
                gate.close()
                await network.advance(by: .seconds(15) - .nanoseconds(1))
                #expect(await connection.metrics.heartbeatsMissed == 0)
                await network.advance(by: .nanoseconds(1))
                #expect(await connection.metrics.heartbeatsMissed == 1)
                // The second miss in a row, at interval × misses + timeout: 25 s.
                await network.advance(by: .seconds(10) - .nanoseconds(1))
                #expect(await connection.currentState.phase == .connected)
                await network.advance(by: .nanoseconds(1))
                let lost = try await watcher.next(.reconnecting)
                #expect(network.clock.elapsed == .seconds(25))
                #expect(network.clock.elapsed <= .seconds(10) * (2 + 1))
                #expect(lost.reason?.code == .heartbeatTimeout)
                #expect(lost.reason?.message == "no heartbeat ack from 127.0.10.1:9000 for 2 heartbeats in a row (5 s each)")
                #expect(lost.attempt == 1)
                #expect(lost.delay == .seconds(1))

                // A request made while reconnecting waits for the connection.
                let queued = await connection.startRequest(Request(type: 0x402, json: ["n": 1]), timeout: .seconds(10), settlingOn: network.clock)
                #expect(await connection.metrics.queuedRequests == 1)
                await network.advance(by: .seconds(1) - .nanoseconds(1))
                #expect(await connection.currentState.phase == .reconnecting)
                #expect(await connection.metrics.connects == 1)
                await network.advance(by: .nanoseconds(1))
                try await watcher.next(.connected)
                let reply = try await withTimeLimit { try await queued.value }
                #expect(reply.json == ["echo": ["n": 1]])
                #expect(network.clock.elapsed == .seconds(26))
                #expect(await connection.metrics.connects == 2)
                #expect(await connection.metrics.requestsCompleted == 1)

                // The stall ends at 30 s: the new connection's first heartbeat, sent at 26 s and
                // waiting at the gate, is answered before its miss at 31 s.
                let acked = connection.heartbeats.filter { $0.outcome == .acked }
                await network.advance(by: .seconds(4))
                gate.open()
                #expect(try await firstElement(of: acked) == Heartbeat(serial: 1, outcome: .acked, roundTripTime: .seconds(4)))
                await network.advance(by: .seconds(1))
                #expect(await connection.currentState.phase == .connected)
                #expect(await connection.metrics.heartbeatsMissed == 2)
                #expect(try await collect(8, from: beats, "eight heartbeat events") == [
                    Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero),
                    Heartbeat(serial: 2, outcome: .sent), Heartbeat(serial: 2, outcome: .missed),
                    Heartbeat(serial: 3, outcome: .sent), Heartbeat(serial: 3, outcome: .missed),
                    Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .acked, roundTripTime: .seconds(4)),
                ])
                #expect(await watcher.phases == [.idle, .connecting, .connected, .reconnecting, .connecting, .connected])
                await connection.close()
            }
        }
    }
}
