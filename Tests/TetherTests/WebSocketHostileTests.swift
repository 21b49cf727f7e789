#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
import TetherTesting
@testable import Tether

/// The bytes of `count` masked client pings of 125 bytes each, the last one's payload ending
/// in `last` (the others in zeros), so the pong that answers the last can be told apart.
private func pingFlood(count: Int, last: UInt32, masked: Bool) -> [UInt8] {
    var buffer = FrameBuffer()
    let key: UInt32? = masked ? 0x3779_1A2B : nil
    WebSocketWriter.write(.ping, [UInt8](repeating: 0x70, count: 121) + [0, 0, 0, 0], maskKey: key, into: &buffer)
    let one = Array(buffer.readableBytesView)
    var bytes: [UInt8] = []
    bytes.reserveCapacity(one.count * count)
    for _ in 1..<count { bytes += one }
    var final = FrameBuffer()
    let tail = withUnsafeBytes(of: last.bigEndian) { Array($0) }
    WebSocketWriter.write(.ping, [UInt8](repeating: 0x70, count: 121) + tail, maskKey: key, into: &final)
    bytes += final.readableBytesView
    return bytes
}

/// Keeps the kernel's receive buffer of `socket` small, so that what its peer writes and it
/// does not read waits in the peer's process rather than in the kernel.
private func shrinkReceiveBuffer(_ socket: RawSocket) {
    var size: Int32 = 4_096
    setsockopt(socket.fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
}

/// The pings of the floods: more than the kernel's buffers on loopback hold as pongs.
private let floodPings = 60_000

@Suite("WebSocket peers that flood control frames or trickle fragments", .timeLimit(.guarded))
struct WebSocketHostileTests {
    @Test("a WebSocket client that floods pings and reads nothing makes the server hold at most the control-frame bound; once it reads, the latest ping is answered")
    func pingFloodAgainstTheServer() async throws {
        let (marks, mark) = AsyncStream<Void>.makeStream()
        try await withWebSocketServer(configure: { $0.idleTimeout = nil }, handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x403) { _, _ in
                mark.yield()
                return Response(json: ["after": "pings"])
            }
        }) { server, endpoint in
            let socket = try RawSocket.connect(to: Endpoint(host: endpoint.host, port: endpoint.port))
            shrinkReceiveBuffer(socket)
            try await offThread { try socket.upgrade() }
            let last: UInt32 = 0xC0FF_EE01
            // The pings, then a request: its handler runs once the server has read every ping.
            let marker = clientFrame(opcode: 2, payload: seedBytes(type: 0x403, serial: 1, payload: Array("{}".utf8)))
            let flood = pingFlood(count: floodPings, last: last, masked: true) + marker
            try await offThread { try socket.write(flood) }
            try await bounded("the request after the pings") {
                for await _ in marks { return }
            }
            let peer = try #require(server.peers.first)
            let pending = await peer.pendingOutboundBytesForTesting
            // The pongs waiting, one answer to the latest ping held back, and the response.
            #expect(pending <= WebSocketTransport.maximumPendingControlBytes + 1_024, "\(pending) bytes wait to be written to a peer that reads nothing")
            var size: Int32 = 1 << 20
            setsockopt(socket.fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))

            // Reading now: pongs, the response, and a pong for the last ping, in the end.
            let (pongs, answered, sawLast) = try await offThread { () throws -> (Int, Bool, Bool) in
                var pongs = 0
                var answered = false
                var sawLast = false
                while !(answered && sawLast) {
                    guard let frame = try socket.readWebSocketFrame() else { break }
                    if frame.opcode == 0xA {
                        pongs += 1
                        if frame.payload.suffix(4).elementsEqual(withUnsafeBytes(of: last.bigEndian) { Array($0) }) { sawLast = true }
                    } else if frame.opcode == 0x2 {
                        answered = true
                    }
                }
                return (pongs, answered, sawLast)
            }
            #expect(answered)
            #expect(sawLast, "the latest ping was never answered")
            #expect(pongs < floodPings, "every one of \(floodPings) pings got its pong: none were coalesced")
            #expect(server.peerCount == 1)
        }
    }

    @Test("a ws:// server that floods pings and reads nothing makes the client hold at most the control-frame bound; the connection still delivers, and its heartbeat finds the server deaf")
    func pingFloodAgainstTheClient() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let (listener, endpoint) = try RawSocket.listen()
        var configuration = ConnectionConfiguration()
        configuration.eventLoopGroup = group
        configuration.heartbeat.interval = .seconds(1)
        configuration.heartbeat.timeout = .seconds(1)
        configuration.heartbeat.maximumMissed = 2
        configuration.reconnect.isEnabled = false
        let target = Endpoint(host: endpoint.host, port: endpoint.port, webSocketPath: "/tether")
        let connecting = Task { try await Connection.connect(to: target, configuration: configuration) }
        let socket = try await listener.accept()
        shrinkReceiveBuffer(socket)
        let head = try await offThread { try socket.readHead() }
        let key = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("sec-websocket-key:") }
            .map { $0.dropFirst("sec-websocket-key:".count).trimmingCharacters(in: .whitespaces) } ?? ""
        let answer = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(WebSocketHandshake.accept(forKey: key))\r\n\r\n"
        try socket.write(Array(answer.utf8))
        let connection = try await bounded("the connection") { try await connecting.value }
        let notifications = connection.notifications
        let last: UInt32 = 0xC0FF_EE02
        var push = FrameBuffer()
        WebSocketWriter.write(.binary, seedBytes(type: 0x20, serial: 0, payload: Array("after the pings".utf8)), maskKey: nil, into: &push)
        let flood = pingFlood(count: floodPings, last: last, masked: false) + Array(push.readableBytesView)
        try await offThread { try socket.write(flood) }
        let received = try await bounded("the push after the pings") { () -> Frame? in
            for await frame in notifications { return frame }
            return nil
        }
        #expect(received.map { String(decoding: $0.payload, as: UTF8.self) } == "after the pings")
        let pending = await connection.pendingOutboundBytesForTesting
        #expect(pending <= WebSocketTransport.maximumPendingControlBytes + 1_024, "\(pending) bytes wait to be written to a server that reads nothing")
        #expect(await connection.state.phase == .connected)
        // The server reads none of the heartbeats: the connection ends, saying why.
        let states = connection.states
        for _ in 0..<6 { await clock.advance(by: .seconds(1)) }
        let lost = try await bounded("the end of the connection to a deaf server") { () -> ConnectionState? in
            for await state in states where state.phase != .connected { return state }
            return nil
        }
        #expect(lost?.reason?.code == .heartbeatTimeout, "\(String(describing: lost))")
        await connection.close()
    }

    @Test("a WebSocket client that keeps pinging but reads nothing is closed with idleTimeout once it has taken none of what waits for it for the idle timeout")
    func pingingPeerThatReadsNothing() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let (marks, mark) = AsyncStream<Void>.makeStream()
        try await withWebSocketServer(configure: {
            $0.eventLoopGroup = group
            $0.idleTimeout = .milliseconds(300)
        }, handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x403) { _, _ in
                mark.yield()
                return Response(json: [:])
            }
        }) { server, endpoint in
            let events = server.events
            let socket = try RawSocket.connect(to: Endpoint(host: endpoint.host, port: endpoint.port))
            shrinkReceiveBuffer(socket)
            try await offThread { try socket.upgrade() }
            let marker = clientFrame(opcode: 2, payload: seedBytes(type: 0x403, serial: 1, payload: Array("{}".utf8)))
            // Answers that the kernel's buffers cannot hold: 8 echoes of 1 MB.
            let large = Array("{\"a\":\"\(String(repeating: "x", count: 1 << 20))\"}".utf8)
            let flood = (0..<8).flatMap { clientFrame(opcode: 2, payload: seedBytes(type: 0x402, serial: UInt32(10 + $0), payload: large)) } + marker
            try await offThread { try socket.write(flood) }
            try await bounded("the request after the flood") {
                for await _ in marks { return }
            }
            for _ in 0..<10 {
                await clock.advance(by: .milliseconds(200))
                if server.peerCount == 0 { break }
                // Still sending: a ping and a request, whose handler says it was read.
                guard (try? socket.write(clientFrame(opcode: 9, payload: []) + marker)) != nil else { break }
                try await bounded("the request of the next round") {
                    for await _ in marks { return }
                }
            }
            let ended = try await firstEvent(events, "the end of the peer that reads nothing") { $0.kind == .peerDisconnected }
            #expect(ended.reason?.code == .idleTimeout, "\(String(describing: ended.reason))")
            #expect(ended.reason?.message.contains("took none of the") == true, "\(String(describing: ended.reason))")
        }
    }

    @Test("a fragmented message of empty frames is a started frame: it is closed with frameTimeout at the frame-completion timeout, not left to the idle timeout")
    func emptyFragmentsStartAFrame() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        try await withWebSocketServer(configure: {
            $0.eventLoopGroup = group
            $0.frameCompletionTimeout = .milliseconds(300)
            $0.idleTimeout = .seconds(60)
        }) { server, endpoint in
            let events = server.events
            let socket = try RawSocket.connect(to: Endpoint(host: endpoint.host, port: endpoint.port))
            try await offThread { try socket.upgrade() }
            // A message begun and continued with nothing, then a ping whose pong says the
            // server has read them.
            var bytes = clientFrame(opcode: 2, payload: [], fin: false)
            for _ in 0..<10 { bytes += clientFrame(opcode: 0, payload: [], fin: false) }
            bytes += clientFrame(opcode: 9, payload: [7])
            try socket.write(bytes)
            let pong = try await offThread { try socket.readWebSocketFrame() }
            #expect(pong?.opcode == 0xA)
            await clock.advance(by: .milliseconds(300) - .nanoseconds(1))
            #expect(server.peerCount == 1)
            await clock.advance(by: .nanoseconds(1))
            let gone = try await firstEvent(events, "the end of the peer whose message never ends") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .frameTimeout, "\(String(describing: gone.reason))")
        }
    }

    @Test("pings are activity: a WebSocket peer kept alive by pings alone is not closed as idle; once the pings stop, it is, at the idle timeout")
    func pingsKeepAPeerAlive() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        try await withWebSocketServer(configure: {
            $0.eventLoopGroup = group
            $0.idleTimeout = .milliseconds(300)
        }) { server, endpoint in
            let events = server.events
            let socket = try RawSocket.connect(to: Endpoint(host: endpoint.host, port: endpoint.port))
            try await offThread { try socket.upgrade() }
            for round in 0..<5 {
                await clock.advance(by: .milliseconds(200))
                try socket.write(clientFrame(opcode: 9, payload: [UInt8(round)]))
                let pong = try await offThread { try socket.readWebSocketFrame() }
                #expect(pong?.opcode == 0xA)
                #expect(pong?.payload == [UInt8(round)])
            }
            #expect(server.peerCount == 1)
            await clock.advance(by: .milliseconds(300))
            let gone = try await firstEvent(events, "the end of the peer that stopped pinging") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .idleTimeout, "\(String(describing: gone.reason))")
        }
    }
}
