import Testing
import TetherTesting
@testable import Tether

/// The local port of a raw socket, as the server sees it in its messages.
private func port(of socket: RawSocket) throws -> Int {
    try Syscall.localAddress(socket.fd).port
}

/// A client on `network` with heartbeats and reconnecting off unless `change` turns them on.
private func networkConfiguration(
    _ network: TestNetwork,
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration.testing(on: network)
    configuration.reconnect = .disabled
    change(&configuration)
    return configuration
}

@Suite("Server resilience", .timeLimit(.guarded))
struct ServerResilienceTests {
    @Test("listeningAddress() of a server that never runs ends with CancellationError when its task is cancelled, before or while it waits")
    func listeningAddressHonoursCancellation() async throws {
        let server = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: 0))
        let waiting = Task { try await server.listeningAddress() }
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await server.listeningAddress()
        }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await bounded("the cancelled wait") { try await waiting.value } }
        await #expect(throws: CancellationError.self) { try await bounded("the wait cancelled first") { try await early.value } }
    }

    @Test("a peer that sends nothing is closed with idleTimeout at the timeout after connecting, not 1 ns before")
    func idle() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: {
                $0.idleTimeout = .milliseconds(300)
                $0.handshakeTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let quiet = try await Connection.connect(to: endpoint, configuration: networkConfiguration(network))
                // Admitted without the clock moving: its idle timer counts from zero.
                let connected = try await firstEvent(events, "the peer to connect") { $0.kind == .peerConnected }
                await network.advance(by: .milliseconds(300) - .nanoseconds(1))
                #expect(server.peerCount == 1, "closed before its idle timeout")
                #expect(await server.metrics().idleTimeouts == 0)
                await network.advance(by: .nanoseconds(1))
                let gone = try await firstEvent(events, "the peer to be closed") { $0.kind == .peerDisconnected }
                #expect(network.clock.elapsed == .milliseconds(300))
                let reason = try #require(gone.reason)
                #expect(reason.code == .idleTimeout)
                #expect(reason.message == "peer \(connected.address) sent nothing for 300 ms")
                let metrics = await server.metrics()
                #expect(metrics.idleTimeouts == 1)
                #expect(metrics.handshakeTimeouts == 0)
                #expect(metrics.connectedPeers == 0)
                await quiet.close()
            }
        }
    }

    @Test("the idle timeout counts from the last byte received, not from the last check")
    func idleFromLastByte() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: {
                $0.idleTimeout = .milliseconds(600)
                $0.handshakeTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let connection = try await Connection.connect(to: endpoint, configuration: networkConfiguration(network))
                #expect(try await connection.request(Request(type: 0x402)).type == 0x402)
                // Early in the first period, the second frame: the first check, at 600 ms,
                // then finds activity and must re-arm for the last read plus the timeout.
                await network.advance(by: .milliseconds(150))
                #expect(try await connection.request(Request(type: 0x402)).type == 0x402)
                await network.advance(by: .milliseconds(600) - .nanoseconds(1))
                #expect(server.peerCount == 1, "ended sooner than the timeout after the last byte")
                #expect(await server.metrics().idleTimeouts == 0)
                await network.advance(by: .nanoseconds(1))
                let gone = try await firstEvent(events, "the peer to be closed") { $0.kind == .peerDisconnected }
                #expect(network.clock.elapsed == .milliseconds(750))
                #expect(gone.reason?.code == .idleTimeout)
                #expect(await server.metrics().idleTimeouts == 1)
                await connection.close()
            }
        }
    }

    @Test("bytes first read by a late idle check count as activity: the peer is not closed for idleness")
    func idleCheckReadsLateBytes() async throws {
        let timeout: Duration = .seconds(1)   // long enough that a busy machine reads the first frame within it
        let idle = MonotonicTime.nanoseconds(of: timeout)
        let client = Lock<RawSocket?>(nil)
        let written = Lock<Bool>(false)
        try await withServer(configure: {
            $0.idleTimeout = timeout
            $0.handshakeTimeout = nil
        }, handlers: { server in
            // Runs on the peer's loop in the turn that read the first frame, which is after
            // the idle check was armed.
            server.handle(type: 0x402) { request, peer in
                guard request.serial == 1 else { return Response() }
                let read = MonotonicTime.now()
                // The client's second frame is written by a timer due before the idle check;
                // then the loop is held until both are due, as a busy machine can hold it, so
                // they fire in one turn whose wait saw no bytes: the check reads them itself.
                _ = peer.loop.schedule(at: read &+ idle / 2) {
                    try? client.withLock { $0 }?.write(seedBytes(type: 0x402, serial: 2))
                    written.withLock { $0 = true }
                }
                peer.loop.execute {
                    while MonotonicTime.now() < read &+ idle &+ idle / 10 {}
                }
                return Response()
            }
        }) { server, endpoint in
            let events = server.events
            let socket = try RawSocket.connect(to: endpoint)
            client.withLock { $0 = socket }
            try socket.write(seedBytes(type: 0x402, serial: 1))
            #expect(try await socket.readFrame()?.serial == 1)
            // Sent within the timeout of the close, so not idle: it is read and answered.
            #expect(try await socket.readFrame()?.serial == 2)
            #expect(written.withLock { $0 })
            // Then idle for real.
            #expect(try await socket.waitForClose(timeout: eventBound))
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected }, "the peer to be closed")
            #expect(gone.first?.reason?.code == .idleTimeout)
            #expect(await server.metrics().framesIn == 2)
        }
    }

    @Test("heartbeats keep a peer alive across several idle timeouts")
    func idleResetByTraffic() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: {
                $0.idleTimeout = .milliseconds(800)
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let connection = try await Connection.connect(to: endpoint, configuration: networkConfiguration(network) {
                    $0.heartbeat = .every(.milliseconds(100), timeout: .seconds(2))
                })
                _ = try await firstEvent(events, "the peer to connect") { $0.kind == .peerConnected }
                // Over three idle timeouts, with nothing but heartbeats on the wire: one as the
                // connection opens, then one every 100 ms, 26 in all.
                await network.advance(by: .milliseconds(2500))
                #expect(await connection.currentState.phase == .connected)
                #expect(server.peerCount == 1)
                let quiet = await server.metrics()
                #expect(quiet.idleTimeouts == 0)
                #expect(quiet.heartbeatsAcked == 26)
                #expect(await connection.metrics.heartbeatsMissed == 0)
                #expect(quiet.framesIn == quiet.heartbeatsAcked)
                #expect(quiet.requestsHandled == 0)

                let reply = try await connection.request(Request(type: 0x402, json: ["alive": true]))
                #expect(reply.json == ["echo": ["alive": true]])
                await connection.close()
            }
        }
    }

    @Test("a peer that sends part of a header and stops is closed with handshakeTimeout at the timeout, not 1 ns before")
    func partialHeader() async throws {
        // Raw bytes over a real socket, the server's time on a test clock.
        let clock = TestClock()
        let group = clock.makeEventLoopGroup()
        defer { clock.shutdown() }
        try await withServer(configure: {
            $0.eventLoopGroup = group
            $0.handshakeTimeout = .milliseconds(300)
            $0.idleTimeout = nil
        }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let stuck = try RawSocket.connect(to: endpoint)
            defer { stuck.close() }
            let local = try port(of: stuck)
            _ = try await firstEvent(events, "the peer to connect") { $0.kind == .peerConnected }
            try stuck.write(Array(seedBytes(type: 0x402, serial: 1).prefix(3)))
            await clock.advance(by: .milliseconds(300) - .nanoseconds(1))
            #expect(server.peerCount == 1, "closed before its handshake timeout")
            await clock.advance(by: .nanoseconds(1))
            let gone = try await firstEvent(events, "the peer to be closed") { $0.kind == .peerDisconnected }
            #expect(clock.elapsed == .milliseconds(300))
            #expect(try await stuck.waitForClose())
            let reason = try #require(gone.reason)
            #expect(reason.code == .handshakeTimeout)
            #expect(reason.message == "peer 127.0.0.1:\(local) sent no complete frame within 300 ms of connecting")
            let metrics = await server.metrics()
            #expect(metrics.handshakeTimeouts == 1)
            #expect(metrics.idleTimeouts == 0)
            #expect(metrics.bytesIn == 3)
            #expect(metrics.framesIn == 0)
        }
    }

    @Test("a slowloris that trickles a header byte by byte is still closed with handshakeTimeout")
    func slowloris() async throws {
        // The server on a manual clock, and a byte every 50 ms of its time: the pace is
        // exact, and the close is checked at its instant and 1 ns before.
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        try await withServer(configure: {
            $0.eventLoopGroup = group
            $0.handshakeTimeout = .milliseconds(300)
            // Idle detection on too: the trickle keeps resetting it, the handshake timeout must
            // not care.
            $0.idleTimeout = .milliseconds(200)
        }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let loris = try RawSocket.connect(to: endpoint).sendingAtOnce()
            defer { loris.close() }
            _ = try await firstEvent(events, "the peer to connect") { $0.kind == .peerConnected }
            let start = clock.now
            // 112 bytes at one per 50 ms would take over 5 s: the frame is never complete in time.
            let frame = seedBytes(type: 0x402, serial: 1, payload: Array(repeating: 0x20, count: 100))
            var sent = 0
            for step in 1...6 {
                try loris.write([frame[sent]])
                sent += 1
                await clock.advance(by: .milliseconds(50) - (step == 6 ? .nanoseconds(1) : .zero))
            }
            #expect(server.peerCount == 1)
            await clock.advance(by: .nanoseconds(1))
            #expect(clock.now == start + 300_000_000)
            let gone = try await firstEvent(events, "the peer to be closed") { $0.kind == .peerDisconnected }
            let reason = try #require(gone.reason)
            #expect(reason.code == .handshakeTimeout)
            #expect(try await loris.waitForClose())

            // Once closed, the next bytes fail to send, and the trickle ends short of a frame.
            var failed = false
            while sent < frame.count {
                do {
                    try loris.write([frame[sent]])
                } catch {
                    failed = true
                    break
                }
                sent += 1
            }
            #expect(failed)
            #expect(sent < frame.count)
            let metrics = await server.metrics()
            #expect(metrics.handshakeTimeouts == 1)
            #expect(metrics.idleTimeouts == 0)
            #expect(metrics.framesIn == 0)
            #expect(metrics.bytesIn == 6)
        }
    }

    @Test("a complete first frame cancels the handshake timeout")
    func handshakeCompleted() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: {
                $0.handshakeTimeout = .milliseconds(300)
                $0.idleTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: networkConfiguration(network))
                #expect(try await connection.request(Request(type: 0x402)).type == 0x402)
                // More than twice the handshake timeout on the server's clock, and the peer stays.
                await network.advance(by: .milliseconds(800))
                #expect(server.peerCount == 1)
                #expect(try await connection.request(Request(type: 0x402)).type == 0x402)
                let metrics = await server.metrics()
                #expect(metrics.handshakeTimeouts == 0)
                #expect(metrics.connectedPeers == 1)
                #expect(metrics.requestsHandled == 2)
                await connection.close()
            }
        }
    }

    @Test("a connection over the limit is refused with tooManyConnections and counted; the others keep being served")
    func connectionLimit() async throws {
        // No handshake timeout: the two clients send nothing until the end, which a busy
        // machine can stretch past it.
        try await withServer(configure: { $0.maximumConnections = 2; $0.handshakeTimeout = nil }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let one = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let two = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            _ = try await collect(2, from: events.filter { $0.kind == .peerConnected }, "two peers to connect")
            let three = try RawSocket.connect(to: endpoint)
            let local = try port(of: three)
            #expect(try await three.waitForClose())
            let rejected = try await collect(1, from: events.filter { $0.kind == .peerRejected }, "the refusal")
            #expect(rejected.first?.reason?.code == .tooManyConnections)
            #expect(rejected.first?.reason?.message == "the server is at its limit of 2 connections")
            #expect(rejected.first?.address.port == local)
            let metrics = await server.metrics()
            #expect(metrics.rejectedConnections == 1)
            #expect(metrics.acceptedConnections == 2)
            #expect(metrics.connectedPeers == 2)
            #expect(try await one.request(Request(type: 0x402)).type == 0x402)
            #expect(try await two.request(Request(type: 0x402)).type == 0x402)
            await one.close()
            await two.close()
        }
    }

    @Test("metrics count frames, requests and bytes exactly, and keep the totals of peers that ended")
    func metrics() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let count = 25
            var bytesSent = 0
            var bytesReceived = 0
            for index in 0..<count {
                let request = Request(type: 0x402, json: ["index": .int(index)])
                let reply = try await connection.request(request)
                #expect(reply.json == ["echo": ["index": .int(index)]])
                bytesSent += 12 + request.payload.count
                bytesReceived += 12 + reply.payload.count
            }
            let expected = PeerMetrics(
                bytesIn: bytesSent,
                bytesOut: bytesReceived,
                framesIn: count,
                framesOut: count,
                requestsHandled: count,
                heartbeatsAcked: 0
            )
            let peer = try #require(server.peers.first)
            #expect(await peer.metrics == expected)

            let live = await server.metrics()
            #expect(live.connectedPeers == 1)
            #expect(live.acceptedConnections == 1)
            #expect(live.framesIn == count)
            #expect(live.framesOut == count)
            #expect(live.requestsHandled == count)
            #expect(live.bytesIn == bytesSent)
            #expect(live.bytesOut == bytesReceived)
            #expect(live.heartbeatsAcked == 0)

            await connection.close()
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected }, "the peer to be closed")
            #expect(gone.first?.peer == peer.id)
            #expect(server.peerCount == 0)
            var ended = live
            ended.connectedPeers = 0
            #expect(await server.metrics() == ended)
            #expect(await peer.metrics == expected)
        }
    }
}
