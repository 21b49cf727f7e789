import Testing
import TetherTesting
@testable import Tether

/// Adaptive heartbeats on connections over a test network, on its manual clock.
@Suite("Adaptive heartbeats on a manual clock", .timeLimit(.guarded))
struct AdaptiveHeartbeatTests {
    /// Adaptive heartbeats from 30 s by 60 s steps up to `maximum`, in `memory`, 10 s for
    /// each ack and two misses in a row; a reconnect 1 s after a loss.
    static func configuration(on network: TestNetwork, memory: HeartbeatMemory, maximum: Duration = .seconds(300)) -> ConnectionConfiguration {
        testConfiguration {
            $0.use(network)
            $0.heartbeat = .adaptive(
                AdaptiveHeartbeat(minimum: .seconds(30), maximum: maximum, step: .seconds(60), memory: memory),
                timeout: .seconds(10),
                maximumMissed: 2
            )
            $0.reconnect = .backoff(initialDelay: .seconds(1), jitter: 0)
        }
    }

    /// Advances to 1 ns before the next heartbeat, checks that none went out, then to it,
    /// and returns its events (sent, acked) and the interval after its ack.
    static func nextHeartbeat(after gap: Duration, _ connection: Connection, _ network: TestNetwork, _ log: HeartbeatLog) async throws -> (events: [Heartbeat], interval: Duration?) {
        let written = await connection.metrics.framesOut
        await network.advance(by: gap - .nanoseconds(1))
        #expect(await connection.metrics.framesOut == written, "a heartbeat went out before its interval of \(gap)")
        await network.advance(by: .nanoseconds(1))
        let events = try await log.take(2)
        return (events, await connection.heartbeatInterval)
    }

    @Test("on a quiet connection the interval grows by a step after two acked intervals, exactly on the clock, up to the maximum")
    func growsToMaximum() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.idleTimeout = nil }) { _, endpoint in
                let memory = HeartbeatMemory()
                let connection = Connection(to: endpoint, configuration: Self.configuration(on: network, memory: memory, maximum: .seconds(120)))
                let log = HeartbeatLog(connection)
                try await connection.connect()
                #expect(try await log.take(2).map(\.outcome) == [.sent, .acked])
                #expect(await connection.heartbeatInterval == .seconds(30))

                var intervals: [Duration?] = []
                for (serial, gap) in zip(2..., [30, 30, 90, 90, 120, 120]) {
                    let (events, interval) = try await Self.nextHeartbeat(after: .seconds(gap), connection, network, log)
                    #expect(events.map(\.serial) == [UInt32(serial), UInt32(serial)])
                    #expect(events.map(\.outcome) == [.sent, .acked])
                    intervals.append(interval)
                }
                #expect(intervals == [.seconds(30), .seconds(90), .seconds(90), .seconds(120), .seconds(120), .seconds(120)])
                #expect(await connection.metrics.heartbeatIntervalIncreases == 2)
                #expect(memory.lastGoodInterval(on: await connection.networkPath, to: endpoint) == .seconds(120))
                await connection.close()
            }
        }
    }

    @Test("an interval with a request in it proves nothing: the step comes one interval later")
    func trafficDoesNotCount() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.idleTimeout = nil }, handlers: echoHandlers) { _, endpoint in
                let connection = Connection(to: endpoint, configuration: Self.configuration(on: network, memory: HeartbeatMemory()))
                let log = HeartbeatLog(connection)
                try await connection.connect()
                _ = try await log.take(2)
                await network.advance(by: .seconds(15))
                _ = try await connection.request(Request(type: 0x402, json: ["n": 1]))
                // Heartbeat 2 is acked, but frames went both ways in its interval.
                #expect(try await Self.nextHeartbeat(after: .seconds(15), connection, network, log).interval == .seconds(30))
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(30))
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(90))
                await connection.close()
            }
        }
    }

    @Test("a silent death at a longer interval steps back: the next connection on the network starts from the last good interval and does not try the failed one")
    func backsOffAfterSilentDeath() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.idleTimeout = nil }) { _, endpoint in
                let memory = HeartbeatMemory()
                let connection = Connection(to: endpoint, configuration: Self.configuration(on: network, memory: memory))
                let log = HeartbeatLog(connection)
                let watcher = StateWatcher(connection)
                try await connection.connect()
                _ = try await log.take(2)
                _ = try await Self.nextHeartbeat(after: .seconds(30), connection, network, log)
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(90))

                // The NAT forgets the mapping: nothing gets through either way, and no error.
                await network.link(1).updateFaults {
                    $0.toServer.stalled = true
                    $0.toClient.stalled = true
                }
                await network.advance(by: .seconds(90))
                #expect(try await log.take(1) == [Heartbeat(serial: 4, outcome: .sent)])
                // After a miss the next goes out at once; the second miss ends the connection.
                await network.advance(by: .seconds(10))
                #expect(try await log.take(2) == [Heartbeat(serial: 4, outcome: .missed), Heartbeat(serial: 5, outcome: .sent)])
                await network.advance(by: .seconds(10))
                #expect(try await log.take(1) == [Heartbeat(serial: 5, outcome: .missed)])
                let lost = try await watcher.next(.reconnecting)
                #expect(lost.reason?.code == .heartbeatTimeout)
                #expect(await connection.metrics.heartbeatIntervalDecreases == 1)
                let path = await connection.networkPath
                #expect(memory.lastGoodInterval(on: path, to: endpoint) == .seconds(30))

                await network.advance(by: .seconds(1))
                try await watcher.next(.connected)
                #expect(try await log.take(2).map(\.outcome) == [.sent, .acked])
                #expect(await connection.heartbeatInterval == .seconds(30))
                // Two more proofs would step to 90 s, which failed here: the interval stays.
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(30))
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(30))
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(30))
                #expect(await connection.metrics.heartbeatIntervalIncreases == 1)
                await connection.close()
            }
        }
    }

    @Test("a server that closes idle peers after 60 s ends the 90 s interval: it is recorded as failed, and the next connection stays at 30 s")
    func learnsTheServersIdleTimeout() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.idleTimeout = .seconds(60) }) { _, endpoint in
                let memory = HeartbeatMemory()
                let connection = Connection(to: endpoint, configuration: Self.configuration(on: network, memory: memory))
                let log = HeartbeatLog(connection)
                let watcher = StateWatcher(connection)
                try await connection.connect()
                _ = try await log.take(2)
                _ = try await Self.nextHeartbeat(after: .seconds(30), connection, network, log)
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(90))
                // 60 s after heartbeat 3 the server closes the connection, 30 s before heartbeat 4.
                await network.advance(by: .seconds(60))
                let lost = try await watcher.next(.reconnecting)
                // The server says why it closes.
                #expect(lost.reason?.code == .idleTimeout, "\(lost)")
                #expect(await connection.metrics.heartbeatIntervalDecreases == 1)
                #expect(memory.lastGoodInterval(on: await connection.networkPath, to: endpoint) == .seconds(30))
                await network.advance(by: .seconds(1))
                try await watcher.next(.connected)
                _ = try await log.take(2)
                #expect(await connection.heartbeatInterval == .seconds(30))
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(30))
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(30))
                await connection.close()
            }
        }
    }

    @Test("a connection that dies after its network path changed records no failure: the change, not the interval, ended it")
    func pathChangeIsNoFailure() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.idleTimeout = nil }) { _, endpoint in
                let memory = HeartbeatMemory()
                let connection = Connection(to: endpoint, configuration: Self.configuration(on: network, memory: memory))
                let log = HeartbeatLog(connection)
                let watcher = StateWatcher(connection)
                try await connection.connect()
                _ = try await log.take(2)
                let key = HeartbeatMemory.key(path: await connection.networkPath, endpoint: endpoint)
                _ = try await Self.nextHeartbeat(after: .seconds(30), connection, network, log)
                #expect(try await Self.nextHeartbeat(after: .seconds(30), connection, network, log).interval == .seconds(90))

                await network.link(1).updateFaults {
                    $0.toServer.stalled = true
                    $0.toClient.stalled = true
                }
                await network.advance(by: .seconds(90))
                #expect(try await log.take(1) == [Heartbeat(serial: 4, outcome: .sent)])
                // The phone moves to another network while heartbeat 4 waits for its ack.
                network.pathMonitor.update(.testing(interface: "rmnet0", index: 9, gateway: "198.51.100.1"))
                await network.advance(by: .seconds(10))
                let lost = try await watcher.next(.reconnecting)
                #expect(lost.reason?.code == .heartbeatTimeout)
                #expect(await connection.metrics.heartbeatIntervalDecreases == 0)
                #expect(memory.record(for: key) == .init(lastGood: MonotonicTime.nanoseconds(of: .seconds(30))))
                await connection.close()
            }
        }
    }

    @Test("a connection on a remembered network starts from its interval; on another network, from the minimum")
    func keyedByNetwork() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.idleTimeout = nil }) { _, endpoint in
                let memory = HeartbeatMemory()
                memory.store(.init(lastGood: MonotonicTime.nanoseconds(of: .seconds(150))), for: HeartbeatMemory.key(path: network.pathMonitor.currentPath, endpoint: endpoint))

                let known = Connection(to: endpoint, configuration: Self.configuration(on: network, memory: memory))
                try await known.connect()
                #expect(await known.heartbeatInterval == .seconds(150))
                await known.close()

                var elsewhere = Self.configuration(on: network, memory: memory)
                elsewhere.pathMonitor = TestPathMonitor(.testing(interface: "rmnet0", index: 9, gateway: "198.51.100.1"))
                let other = Connection(to: endpoint, configuration: elsewhere)
                try await other.connect()
                #expect(await other.heartbeatInterval == .seconds(30))
                await other.close()
                #expect(memory.count == 1)
            }
        }
    }
}

extension AdaptiveHeartbeatTests {
    @Test("a connection that survives a change of network learns for the new one from then on: its interval starts over there, and what it proves is kept under the new network, not the old")
    func networkChangeWhileConnected() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.idleTimeout = nil }) { _, endpoint in
                let memory = HeartbeatMemory()
                let connection = Connection(to: endpoint, configuration: Self.configuration(on: network, memory: memory))
                let log = HeartbeatLog(connection)
                try await connection.connect()
                _ = try await log.take(2)
                let wifi = await connection.networkPath
                for gap in [30, 30, 90, 90] {
                    _ = try await Self.nextHeartbeat(after: .seconds(gap), connection, network, log)
                }
                #expect(await connection.heartbeatInterval == .seconds(150))
                #expect(memory.lastGoodInterval(on: wifi, to: endpoint) == .seconds(90))

                let cellular = NetworkPath.testing(interface: "rmnet0", index: 9, gateway: "198.51.100.1")
                network.pathMonitor.update(cellular)
                // The connection verifies itself on the new path at once, and survives.
                #expect(try await log.take(2).map(\.outcome) == [.sent, .acked])
                #expect(await connection.heartbeatInterval == .seconds(30))
                let (events, interval) = try await Self.nextHeartbeat(after: .seconds(30), connection, network, log)
                #expect(events.map(\.outcome) == [.sent, .acked])
                #expect(interval == .seconds(30))
                #expect(memory.lastGoodInterval(on: cellular, to: endpoint) == .seconds(30))
                #expect(memory.lastGoodInterval(on: wifi, to: endpoint) == .seconds(90))
                #expect(await connection.state.phase == .connected)
                await connection.close()
            }
        }
    }
}

@Suite("Adaptive heartbeats over real sockets", .timeLimit(.guarded))
struct AdaptiveHeartbeatSocketTests {
    @Test("through a fault proxy on 127.0.0.1: the interval grows while heartbeats are acked; a stall kills the connection silently at the longer interval, and the next connection starts from the last good one")
    func stallThroughFaultProxy() async throws {
        let memory = HeartbeatMemory()
        try await withServer(configure: { $0.idleTimeout = nil }, handlers: echoHandlers) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                // Short intervals up to 600 ms, where the interval then stays; a generous
                // timeout, so that only the stall makes a heartbeat miss on a busy machine.
                let policy = AdaptiveHeartbeat(minimum: .milliseconds(200), maximum: .milliseconds(600), step: .milliseconds(200), successesBeforeStep: 1, memory: memory)
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: reconnecting(after: .milliseconds(20)) {
                    $0.heartbeat = .adaptive(policy, timeout: .seconds(5), maximumMissed: 1)
                })
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                let heartbeats = connection.heartbeats
                try await bounded("the interval to grow to 600 ms") {
                    if await connection.heartbeatInterval == .milliseconds(600) { return }
                    for await event in heartbeats where event.outcome != .sent {
                        #expect(event.outcome != .missed)
                        if await connection.heartbeatInterval == .milliseconds(600) { return }
                    }
                }
                let grown = await connection.metrics
                #expect(grown.heartbeatIntervalIncreases == 2)
                #expect(grown.heartbeatIntervalDecreases == 0)
                // The path goes silent, as a NAT that dropped its mapping: nothing either way.
                proxy.updateMode(for: .currentConnections) { $0.stalled = true }
                try await watcher.next(.reconnecting)
                try await watcher.next(.connected)
                let after = await connection.metrics
                #expect(after.heartbeatIntervalDecreases == 1)
                #expect(after.heartbeatsMissed == grown.heartbeatsMissed + 1)
                // 600 ms died silently: the next connection starts from 400 ms, which worked.
                #expect(await connection.heartbeatInterval == .milliseconds(400))
                await connection.close()
            }
        }
    }
}
