import Testing
import TetherTesting
@testable import Tether

/// Connections on a test network whose path the test changes: a live connection verifies
/// itself at once, a reconnect starts at once with a fresh budget, and no attempt is spent
/// while no path exists. Everything runs on the network's clock, which moves only when told.
@Suite("Network path changes", .timeLimit(.guarded))
struct PathChangeTests {
    static let cellular = NetworkPath.testing(interface: "rmnet0", index: 9, gateway: "198.51.100.1")

    /// A server that echoes 0x402 and closes the connection of whoever sends it 0x407.
    static func closingHandlers(_ server: Server) {
        server.handle(type: 0x402) { request, _ in
            Response(json: ["echo": request.json ?? nil])
        }
        server.handle(type: 0x407) { _, peer in
            await peer.close()
            return Response()
        }
    }

    @Test("a change of path while connected sends a heartbeat at once: the server sees serial 2 at the instant of the change, and the schedule goes on from it")
    func changeVerifiesAtOnce() async throws {
        try await withTestNetwork { network in
            let clock = network.clock
            let (reached, arrival) = AsyncStream<(serial: UInt32, at: Duration)>.makeStream()
            try await withNetworkServer(on: network, configure: { $0.profile = heartbeatsAsRequests }, handlers: { server in
                server.handle(type: 0x1) { request, _ in
                    arrival.yield((request.serial, clock.elapsed))
                    return Response()
                }
            }) { _, endpoint in
                // The library's heartbeat defaults: every 10 s, 5 s to answer, 3 misses.
                let connection = Connection(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.heartbeat = HeartbeatConfiguration()
                })
                let log = HeartbeatLog(connection)
                try await connection.connect()
                #expect(try await log.take(2) == [Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero)])

                await network.advance(by: .seconds(3))
                network.pathMonitor.update(Self.cellular)
                #expect(try await log.take(2) == [Heartbeat(serial: 2, outcome: .sent), Heartbeat(serial: 2, outcome: .acked, roundTripTime: .zero)])
                #expect(await connection.networkPath == Self.cellular)
                // The same path again is no change: nothing is sent for it.
                network.pathMonitor.update(Self.cellular)
                await network.runUntilIdle()
                // The next heartbeat is due a full interval after the verification, at 13 s.
                await network.advance(by: .seconds(10))
                #expect(try await log.take(2) == [Heartbeat(serial: 3, outcome: .sent), Heartbeat(serial: 3, outcome: .acked, roundTripTime: .zero)])
                let seen = try await collect(3, from: reached, within: eventBound)
                #expect(seen.map(\.serial) == [1, 2, 3])
                #expect(seen.map(\.at) == [.zero, .seconds(3), .seconds(13)])
                #expect(await connection.currentState.phase == .connected)
                await connection.close()
            }
        }
    }

    @Test("a new address on the same interface and gateway is a change: the connection verifies itself at once")
    func newAddressVerifiesAtOnce() async throws {
        func wifi(_ address: String) -> NetworkPath {
            NetworkPath(isUsable: true, routes: [.init(family: .ipv4, interfaceName: "wlan0", interfaceIndex: 3, gateway: "192.168.1.1", localAddresses: [address])])
        }
        try await withTestNetwork { network in
            network.pathMonitor.update(wifi("192.168.1.20/24"))
            try await withNetworkServer(on: network, configure: { $0.profile = heartbeatsAsRequests }, handlers: { server in
                server.handle(type: 0x1) { _, _ in Response() }
            }) { _, endpoint in
                let connection = Connection(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.heartbeat = HeartbeatConfiguration()
                })
                let log = HeartbeatLog(connection)
                try await connection.connect()
                #expect(try await log.take(2) == [Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero)])

                await network.advance(by: .seconds(3))
                network.pathMonitor.update(wifi("192.168.1.57/24"))
                #expect(try await log.take(2) == [Heartbeat(serial: 2, outcome: .sent), Heartbeat(serial: 2, outcome: .acked, roundTripTime: .zero)])
                #expect(await connection.networkPath == wifi("192.168.1.57/24"))
                await connection.close()
            }
        }
    }

    @Test("a dead connection is found within the heartbeat timeout of a change of path: 5 s, where the heartbeat schedule alone takes 35 s")
    func deadConnectionFoundWithinTimeout() async throws {
        for pathChanges in [true, false] {
            try await withTestNetwork { network in
                let gate = HandlerGate()
                try await withNetworkServer(on: network, configure: { $0.profile = heartbeatsAsRequests }, handlers: { server in
                    server.handle(type: 0x1) { _, _ in
                        await gate.pass()
                        return Response()
                    }
                }) { _, endpoint in
                    // The library's heartbeat defaults: every 10 s, 5 s to answer, 3 misses.
                    let connection = Connection(to: endpoint, configuration: testConfiguration {
                        $0.use(network)
                        $0.heartbeat = HeartbeatConfiguration()
                    })
                    let log = HeartbeatLog(connection)
                    let watcher = StateWatcher(connection)
                    try await connection.connect()
                    _ = try await log.take(2)
                    // The old path is dead from now on: nothing answers any more.
                    gate.close()
                    if pathChanges { network.pathMonitor.update(Self.cellular) }
                    let found: Duration = pathChanges ? .seconds(5) : .seconds(35)
                    await network.advance(by: found - .nanoseconds(1))
                    #expect(await connection.currentState.phase == .connected, "found before \(found)")
                    await network.advance(by: .nanoseconds(1))
                    let closed = try await watcher.next(.closed)
                    #expect(closed.reason?.code == .heartbeatTimeout)
                    if pathChanges {
                        let peer = try #require(await connection.remoteAddress)
                        #expect(closed.reason?.message == "no heartbeat ack from \(peer) within 5 s after the network path changed")
                        #expect(try await log.take(2) == [Heartbeat(serial: 2, outcome: .sent), Heartbeat(serial: 2, outcome: .missed)])
                        #expect(await connection.metrics.heartbeatsMissed == 1)
                    } else {
                        #expect(await connection.metrics.heartbeatsMissed == 3)
                    }
                    gate.open()
                }
            }
        }
    }

    @Test("a change of path while backing off dials at once with a fresh attempt budget")
    func changeWhileBackingOff() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: Self.closingHandlers) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.reconnect = .backoff(initialDelay: .seconds(2), multiplier: 2, jitter: 0)
                })
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                network.refuseConnections(to: endpoint)
                _ = try? await connection.request(Request(type: 0x407), timeout: .seconds(5))
                let first = try await watcher.next(.reconnecting)
                #expect(first.attempt == 1 && first.delay == .seconds(2))
                await network.advance(by: .seconds(2))
                let second = try await watcher.next(.reconnecting)
                #expect(second.attempt == 2 && second.delay == .seconds(4))
                #expect(second.reason?.code == .connectionRefused)

                // Another network: the attempt starts now, not in 4 s, and counts from 1 again.
                network.pathMonitor.update(Self.cellular)
                let again = try await watcher.next(.reconnecting)
                #expect(again.attempt == 1 && again.delay == .seconds(2))
                #expect(network.clock.elapsed == .seconds(2))

                network.restoreConnections(to: endpoint)
                network.pathMonitor.update(.testing())
                try await watcher.next(.connected)
                #expect(network.clock.elapsed == .seconds(2))
                #expect(await watcher.phases == [
                    .connected, .reconnecting, .connecting, .reconnecting, .connecting, .reconnecting, .connecting, .connected,
                ])
                // Only the attempt the backoff started counts as a reconnect attempt; the two
                // the path started are fresh ones.
                #expect(await connection.metrics.reconnectAttempts == 1)
                #expect(await connection.metrics.connects == 2)
                await connection.close()
            }
        }
    }

    @Test("no path: a backoff that ends waits for the network, and no attempt of a budget of 2 is spent in 10 minutes; a path back connects at once, with the budget whole")
    func noPathSpendsNothing() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: Self.closingHandlers) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.reconnect = .backoff(initialDelay: .seconds(1), multiplier: 2, jitter: 0, maximumAttempts: 2)
                })
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                network.refuseConnections(to: endpoint)
                _ = try? await connection.request(Request(type: 0x407), timeout: .seconds(5))
                let backoff = try await watcher.next(.reconnecting)
                #expect(backoff.attempt == 1 && backoff.delay == .seconds(1))

                network.pathMonitor.update(.unusable)
                await network.advance(by: .seconds(1))
                let waiting = try await watcher.next(.waitingForNetwork)
                #expect(waiting.reason?.code == .peerClosed)
                #expect(waiting.attempt == nil && waiting.delay == nil)
                // Ten minutes, hundreds of backoffs' worth: nothing is dialled, nothing spent.
                await network.advance(by: .seconds(600))
                #expect(await connection.currentState == waiting)
                #expect(await connection.metrics.reconnectAttempts == 0)

                network.restoreConnections(to: endpoint)
                network.pathMonitor.update(.testing())
                try await watcher.next(.connected)
                #expect(network.clock.elapsed == .seconds(601))
                #expect(await watcher.phases == [.connected, .reconnecting, .waitingForNetwork, .connecting, .connected])

                // The budget is whole: two attempts, then failed.
                network.refuseConnections(to: endpoint)
                _ = try? await connection.request(Request(type: 0x407), timeout: .seconds(5))
                for delay in [Duration.seconds(1), .seconds(2)] {
                    let next = try await watcher.next(.reconnecting)
                    #expect(next.delay == delay)
                    await network.advance(by: delay)
                }
                let failed = try await watcher.next(.failed)
                #expect(failed.reason?.message.hasPrefix("gave up on \(endpoint) after 2 reconnect attempts: ") == true, "\(String(describing: failed.reason))")
            }
        }
    }

    @Test("a connection stays connected when the path goes away; one lost meanwhile waits, and reconnectNow() still dials")
    func connectedWithoutPath() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: Self.closingHandlers) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.use(network)
                    $0.reconnect = .backoff(initialDelay: .seconds(1), jitter: 0, maximumAttempts: 2)
                })
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                network.pathMonitor.update(.unusable)
                await network.runUntilIdle()
                #expect(try await connection.request(Request(type: 0x402, json: ["n": 1])).json == ["echo": ["n": 1]])
                #expect(await connection.currentState.phase == .connected)

                _ = try? await connection.request(Request(type: 0x407), timeout: .seconds(5))
                let waiting = try await watcher.next(.waitingForNetwork)
                #expect(waiting.reason?.code == .peerClosed)
                await connection.reconnectNow()
                try await watcher.next(.connected)
                #expect(network.clock.elapsed == .zero)
                #expect(await watcher.phases == [.connected, .waitingForNetwork, .connecting, .connected])
                await connection.close()
            }
        }
    }

    @Test("one monitor serves every connection: each is one observer while it lives; a loopback connection follows none")
    func monitorsAreShared() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: { _ in }) { _, endpoint in
                var connections: [Connection] = []
                for _ in 0..<3 {
                    connections.append(try await Connection.connect(to: endpoint, configuration: .testing(on: network)))
                }
                #expect(network.pathMonitor.observerCount == 3)
                for connection in connections { await connection.close() }
                #expect(network.pathMonitor.observerCount == 0)
            }
        }
        let monitor = TestPathMonitor()
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.pathMonitor = monitor })
            #expect(monitor.observerCount == 0)
            monitor.update(.unusable)
            #expect(await connection.networkPath == .assumedUsable)
            await connection.close()
        }
    }
}
