#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization
import Testing
@testable import Tether

/// Holds every handler that waits on it until the test opens it, and counts how many run
/// at once.
private final class Gate: Sendable {
    private struct State {
        var open = false
        var waiters: [CheckedContinuation<Void, Never>] = []
        var running = 0
        var peak = 0
        var started = 0
    }

    private let state = Lock(State())
    /// One element each time a handler starts.
    let starts: AsyncStream<Void>
    private let startFeed: AsyncStream<Void>.Continuation

    init() {
        (starts, startFeed) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    /// The most handlers that ever ran at once, and how many started in all.
    var counts: (peak: Int, started: Int) { state.withLock { ($0.peak, $0.started) } }

    /// Runs one handler's wait: counted while it lasts.
    func pass() async {
        state.withLock { state in
            state.running += 1
            state.started += 1
            state.peak = max(state.peak, state.running)
        }
        startFeed.yield()
        // A handler cancelled as its server stops opens the gate, so that a test which
        // failed before opening it does not hold the server up as well.
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let passNow = state.withLock { state -> Bool in
                    if state.open { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if passNow { continuation.resume() }
            }
        } onCancel: {
            open()
        }
        state.withLock { $0.running -= 1 }
    }

    /// Lets every waiting handler and every later one through.
    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

/// Handlers for the flood tests: 0x404 waits at the gate, then answers with its serial;
/// 0x402 echoes at once, like the standard test server.
private func gatedHandlers(_ gate: Gate) -> (Server) -> Void {
    { server in
        echoHandlers(server)
        server.handle(type: 0x404) { _, _ in
            await gate.pass()
            return Response(json: ["done": true])
        }
    }
}

/// Reads `count` frames from a raw socket and returns their serials, sorted.
private func serials(of count: Int, from socket: RawSocket) async throws -> [UInt32] {
    var serials: [UInt32] = []
    for _ in 0..<count {
        let frame = try #require(try await socket.readFrame())
        #expect(frame.type == 0x404)
        serials.append(frame.serial)
    }
    return serials.sorted()
}

/// The local port of a raw socket, as the server sees it in its messages.
private func port(of socket: RawSocket) throws -> Int {
    try Syscall.localAddress(socket.fd).port
}

@Suite("Hostile peers", .timeLimit(.guarded))
struct HostilePeerTests {
    @Test("a peer flooding slow requests without reading has at most maximumRequestsPerPeer handled at once; others are answered; every request is answered in the end")
    func floodOfSlowRequests() async throws {
        let gate = Gate()
        try await withServer(configure: {
            $0.maximumRequestsPerPeer = 4
        }, handlers: gatedHandlers(gate)) { server, endpoint in
            let flooder = try RawSocket.connect(to: endpoint)
            // 40 small frames fit in the socket buffers, so the write never blocks even
            // when the server stops reading.
            try flooder.write((1...40).flatMap { seedBytes(type: 0x404, serial: UInt32($0)) })
            _ = try await collect(4, from: gate.starts, "four handlers to start")

            // Another client is answered meanwhile, by an immediate handler and by a
            // suspending one.
            let other = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let echo = try await bounded("the other client's echo") {
                try await other.request(Request(type: 0x402, json: ["alive": true]))
            }
            #expect(echo.json?["echo"]?["alive"] == true)
            server.handle(type: 0x406) { _, _ in
                await Task.yield()
                return Response(json: ["ok": true])
            }
            let suspended = try await bounded("the other client's suspending request") {
                try await other.request(Request(type: 0x406))
            }
            #expect(suspended.json?["ok"] == true)

            let during = await server.metrics()
            #expect(gate.counts.started == 4)
            #expect(during.handlersInFlight == 4)
            #expect(during.readPauses >= 1)

            gate.open()
            #expect(try await serials(of: 40, from: flooder) == Array(1...40))
            #expect(gate.counts.peak == 4)
            #expect(gate.counts.started == 40)
            let after = await server.metrics()
            #expect(after.handlersInFlight == 0)
            await other.close()
        }
    }

    @Test("handlers of all peers together stay within maximumHandlers, and every request is answered in the end")
    func serverWideCap() async throws {
        let gate = Gate()
        try await withServer(configure: {
            $0.maximumRequestsPerPeer = 4
            $0.maximumHandlers = 6
        }, handlers: gatedHandlers(gate)) { server, endpoint in
            let first = try RawSocket.connect(to: endpoint)
            let second = try RawSocket.connect(to: endpoint)
            try first.write((1...10).flatMap { seedBytes(type: 0x404, serial: UInt32($0)) })
            try second.write((1...10).flatMap { seedBytes(type: 0x404, serial: UInt32($0)) })
            _ = try await collect(6, from: gate.starts, "six handlers to start")

            // A third peer's immediate request needs no handler task: answered at once.
            let other = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let echo = try await bounded("the other client's echo") {
                try await other.request(Request(type: 0x402, json: ["alive": true]))
            }
            #expect(echo.json?["echo"]?["alive"] == true)
            #expect(gate.counts.started == 6)
            #expect(await server.metrics().handlersInFlight == 6)

            gate.open()
            #expect(try await serials(of: 10, from: first) == Array(1...10))
            #expect(try await serials(of: 10, from: second) == Array(1...10))
            #expect(gate.counts.peak == 6)
            #expect(gate.counts.started == 20)
            #expect(await server.metrics().handlersInFlight == 0)
            await other.close()
        }
    }

    @Test("quick requests queued behind slow ones at the limit are answered while the slow ones still run")
    func quickRequestsAtTheLimit() async throws {
        let gate = Gate()
        try await withServer(configure: {
            $0.maximumRequestsPerPeer = 4
        }, handlers: gatedHandlers(gate)) { server, endpoint in
            let client = try RawSocket.connect(to: endpoint)
            // In one write: two slow requests, then ten quick ones that queue behind them
            // and fill the limit before the first batch starts.
            let slow = (1...2).flatMap { seedBytes(type: 0x404, serial: UInt32($0)) }
            let quick = (3...12).flatMap { seedBytes(type: 0x402, serial: UInt32($0)) }
            try client.write(slow + quick)
            var answered: [UInt32] = []
            for _ in 3...12 {
                let frame = try #require(try await client.readFrame())
                #expect(frame.type == 0x402)
                answered.append(frame.serial)
            }
            #expect(answered == Array(3...12))
            #expect(gate.counts.started == 2)
            gate.open()
            #expect(try await serials(of: 2, from: client) == [1, 2])
            #expect(await server.metrics().handlersInFlight == 0)
        }
    }

    @Test("a peer that ends while it waits for a place among the handlers gives up its turn; the place serves the next peer")
    func peerEndsWhileWaitingForAPlace() async throws {
        let gate = Gate()
        try await withServer(configure: {
            $0.maximumHandlers = 1
        }, handlers: gatedHandlers(gate)) { server, endpoint in
            let events = server.events
            let holder = try RawSocket.connect(to: endpoint)
            try holder.write(seedBytes(type: 0x404, serial: 1))
            _ = try await collect(1, from: gate.starts, "the first handler to start")
            let leaver = try RawSocket.connect(to: endpoint)
            // Heartbeats are acked as they are decoded, even behind a request that waits: the
            // first ack shows the request was decoded, the second that the peer's run loop
            // has had turns since to ask for a place.
            try leaver.write(seedBytes(type: 0x404, serial: 1) + seedBytes(type: 0x1, serial: 2))
            #expect(try await leaver.readFrame()?.serial == 2)
            try leaver.write(seedBytes(type: 0x1, serial: 3))
            #expect(try await leaver.readFrame()?.serial == 3)
            #expect(await server.metrics().handlersInFlight == 1)
            leaver.close()
            _ = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
            gate.open()
            #expect(try await serials(of: 1, from: holder) == [1])

            let next = try RawSocket.connect(to: endpoint)
            try next.write(seedBytes(type: 0x404, serial: 7))
            #expect(try await serials(of: 1, from: next) == [7])
            #expect(gate.counts.started == 2)
            #expect(await server.metrics().handlersInFlight == 0)
        }
    }

    @Test("while the server does not read a peer at its limit, neither its idle timeout nor its frame timeout runs; the frame's time starts when it is read again")
    func pausedPeerIsNotTimedOut() async throws {
        let gate = Gate()
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        try await withServer(configure: {
            $0.eventLoopGroup = group
            $0.maximumRequestsPerPeer = 1
            $0.frameCompletionTimeout = .milliseconds(300)
            // Later than the frame timeout, so that once the peer is read again the stalled
            // frame closes it, whatever the load.
            $0.idleTimeout = .milliseconds(600)
            $0.handshakeTimeout = nil
        }, handlers: gatedHandlers(gate)) { server, endpoint in
            let events = server.events
            let client = try RawSocket.connect(to: endpoint)
            // A slow request, then the first bytes of the next frame, which the server has
            // read but does not decode while the slow one holds the only place.
            let next = seedBytes(type: 0x402, serial: 2, payload: Array("{}".utf8))
            try client.write(seedBytes(type: 0x404, serial: 1) + next.prefix(6))
            _ = try await collect(1, from: gate.starts, "the slow handler to start")
            // Well past both timeouts on the server's clock, and the peer stays.
            await clock.advance(by: .milliseconds(1_500))
            #expect(server.peerCount == 1)
            let during = await server.metrics()
            #expect(during.frameTimeouts == 0)
            #expect(during.idleTimeouts == 0)
            #expect(during.readPauses == 1)

            gate.open()
            #expect(try await serials(of: 1, from: client) == [1])
            // Read again, the six bytes are a frame under way, and nothing completes it: the
            // frame's time starts now, so the peer is closed 300 ms later and not sooner.
            await clock.advance(by: .milliseconds(300) - .nanoseconds(1))
            #expect(server.peerCount == 1)
            #expect(await server.metrics().frameTimeouts == 0)
            await clock.advance(by: .nanoseconds(1))
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
            let reason = try #require(gone.first?.reason)
            #expect(reason.code == .frameTimeout)
            #expect(reason.message.hasSuffix("did not finish a frame within 300 ms of its first byte (6 bytes of it received)"))
        }
    }

    @Test("a peer that sends requests and never reads the answers is closed with outboundBufferFull once they fill its buffer")
    func answersNeverRead() async throws {
        try await withServer(configure: {
            $0.limits.maximumOutboundBytes = 64 << 10
        }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let reader = try RawSocket.connect(to: endpoint)
            // The writes fail after a bound instead of blocking if the server stops reading.
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(reader.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let text = String(repeating: "x", count: 60_000)
            let request = seedBytes(type: 0x402, serial: 1, payload: Array(#"{"text":"\#(text)"}"#.utf8))
            // 30 MB of answers: far more than the socket buffers and the 64 KiB limit hold.
            // On a thread of its own: a blocked write must not hold a cooperative thread.
            let flood = Task {
                try? await offThread {
                    for _ in 0..<500 { try reader.write(request) }
                }
            }
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
            let reason = try #require(gone.first?.reason)
            #expect(reason.code == .outboundBufferFull)
            #expect(reason.message.contains("over the 64 KiB limit"))
            try await bounded("the flood to end") { await flood.value }
        }
    }

    @Test("a peer that starts a frame and sends nothing more is closed with frameTimeout at the timeout after the frame's first byte, and the reason is reported")
    func stalledFrame() async throws {
        // Raw bytes over a real socket, the server's time on a manual clock.
        try await withManualLoop { clock, group in
            try await withServer(configure: {
                $0.eventLoopGroup = group
                $0.frameCompletionTimeout = .milliseconds(200)
                $0.handshakeTimeout = nil
                $0.idleTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let socket = try RawSocket.connect(to: endpoint)
                defer { socket.close() }
                let local = try port(of: socket)
                try socket.write(seedBytes(type: 0x402, serial: 1))
                #expect(try await socket.readFrame()?.serial == 1)
                let start = clock.now
                // 10 ms later, the first 12 bytes of a second frame, and nothing more; the
                // advance reads them before it moves the time.
                await clock.advance(by: .milliseconds(10))
                try socket.write(Array(seedBytes(type: 0x402, serial: 2, payload: Array(repeating: 0x20, count: 100)).prefix(12)))
                await clock.advance(by: .milliseconds(200) - .nanoseconds(1))
                #expect(server.peerCount == 1, "ended sooner than the timeout after the frame's first byte")
                #expect(await server.metrics().frameTimeouts == 0)
                await clock.advance(by: .nanoseconds(1))
                #expect(clock.now == start + 210_000_000)
                let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected }, "the peer to be closed")
                #expect(try await socket.waitForClose())
                let reason = try #require(gone.first?.reason)
                #expect(reason.code == .frameTimeout)
                #expect(reason.message == "peer 127.0.0.1:\(local) did not finish a frame within 200 ms of its first byte (12 bytes of it received)")
                let metrics = await server.metrics()
                #expect(metrics.frameTimeouts == 1)
                #expect(metrics.idleTimeouts == 0)
                #expect(metrics.framesIn == 1)
            }
        }
    }

    @Test("a frame trickled byte by byte after a first frame is closed with frameTimeout, although the trickle keeps the peer from being idle")
    func trickledFrame() async throws {
        // The server on a manual clock, a byte of the second frame every 20 ms of its time:
        // the close is checked at the frame's first byte plus the timeout, and 1 ns before.
        let frame = seedBytes(type: 0x402, serial: 2, payload: Array(repeating: 0x20, count: 100))
        try await withManualLoop { clock, group in
            try await withServer(configure: {
                $0.eventLoopGroup = group
                $0.frameCompletionTimeout = .milliseconds(300)
                // Longer than the frame timeout: the trickle keeps resetting it, and must not
                // save the peer from the frame timeout.
                $0.idleTimeout = .seconds(1)
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let socket = try RawSocket.connect(to: endpoint).sendingAtOnce()
                defer { socket.close() }
                try socket.write(seedBytes(type: 0x402, serial: 1))
                #expect(try await socket.readFrame()?.serial == 1)
                // The first byte of the frame goes at `start`, then one every 20 ms; the 15th
                // would go at 300 ms, when the peer is closed.
                let start = clock.now
                var sent = 0
                for step in 0..<15 {
                    try socket.write([frame[sent]])
                    sent += 1
                    await clock.advance(by: .milliseconds(20) - (step == 14 ? .nanoseconds(1) : .zero))
                }
                #expect(server.peerCount == 1, "ended sooner than the timeout after the frame's first byte")
                #expect(await server.metrics().frameTimeouts == 0)
                await clock.advance(by: .nanoseconds(1))
                #expect(clock.now == start + 300_000_000)
                let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
                let reason = try #require(gone.first?.reason)
                #expect(reason.code == .frameTimeout)
                #expect(reason.message.hasSuffix("did not finish a frame within 300 ms of its first byte (15 bytes of it received)"))
                #expect(try await socket.waitForClose())
                #expect(sent < frame.count)
                let metrics = await server.metrics()
                #expect(metrics.frameTimeouts == 1)
                #expect(metrics.idleTimeouts == 0)
                #expect(metrics.framesIn == 1)
            }
        }
    }
}
