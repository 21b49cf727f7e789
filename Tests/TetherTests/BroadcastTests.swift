#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
@testable import Tether

/// `Server.broadcast(_:)` over real sockets: what it returns, which peers get the frame, in
/// which order among a peer's other writes, and what a peer that does not read costs.
@Suite("Broadcast")
struct BroadcastTests {
    @Test(
        "a peer that does not read misses the broadcasts that would take its buffer past maximumOutboundBytes, stays connected, and the count says exactly who got each one",
        .timeLimit(.guarded)
    )
    func slowPeer() async throws {
        try await withServer(configure: {
            $0.limits.maximumOutboundBytes = 64 << 10
            // The peers send nothing, and the test may take a while on a busy machine.
            $0.handshakeTimeout = nil
            $0.idleTimeout = nil
        }) { server, endpoint in
            let events = server.events
            let readers = try (0..<2).map { _ in try RawSocket.connect(to: endpoint) }
            // A small receive window, so the kernel holds little for it and the server's
            // own buffer fills sooner.
            let slow = try RawSocket.connect(to: endpoint, receiveBuffer: 4096)
            defer { for socket in readers + [slow] { socket.close() } }
            _ = try await collect(3, from: events.filter { $0.kind == .peerConnected }, "the three peers")

            // Over half the bound: once one frame waits for the slow peer, the next misses.
            let payload = [UInt8](repeating: 0x61, count: 48 << 10)
            var counts: [Int] = []
            var missed = 0
            // The readers take each frame before the next broadcast, so only the slow peer
            // ever has anything waiting.
            while missed < 3 {
                try #require(counts.count < 2_000, "the slow peer's buffer never filled")
                let serial = UInt32(counts.count + 1)
                let count = await server.broadcast(Frame(type: 0x2, serial: serial, payload: payload))
                try #require(count == 2 || count == 3, "broadcast \(serial) reached \(count) peers")
                counts.append(count)
                if count == 2 { missed += 1 }
                let frames = try await offThread { try readers.map { try $0.readFrameBlocking() } }
                let intact = frames.allSatisfy { $0?.type == 0x2 && $0?.serial == serial && $0?.payload == payload }
                try #require(intact, "a reader did not get broadcast \(serial) intact")
            }
            let queuedForSlow = counts.indices.filter { counts[$0] == 3 }.map { UInt32($0 + 1) }
            #expect(queuedForSlow.count >= 1)

            // It gets exactly the frames counted for it, in order.
            let got = try await offThread {
                try queuedForSlow.map { _ in try slow.readFrameBlocking() }
            }
            #expect(got.map { $0?.serial } == queuedForSlow)
            let intact = got.allSatisfy { $0?.type == 0x2 && $0?.payload == payload }
            #expect(intact)

            // Having read it all, nothing waits for it: the next broadcast reaches all three.
            let marker = Frame(type: 0x3, serial: 9, payload: [9])
            #expect(await server.broadcast(marker) == 3)
            #expect(try await slow.readFrame() == marker)
            for reader in readers { #expect(try await reader.readFrame() == marker) }
            #expect(await server.metrics().framesOut == counts.reduce(0, +) + 3)
        }
    }

    @Test(
        "a broadcast keeps its place among a peer's other writes: a handler's push before it, a push after it and the handler's response arrive in that order, on peers of both loops",
        .timeLimit(.guarded)
    )
    func ordering() async throws {
        let group = TetherEventLoopGroup(loopCount: 2)
        try await withServer(configure: {
            $0.eventLoopGroup = group
            // The second peer sends nothing, and the test may take a while on a busy machine.
            $0.handshakeTimeout = nil
            $0.idleTimeout = nil
        }, handlers: { server in
            server.handle(type: 0x405) { [unowned server] request, peer in
                try await peer.push(Frame(type: 0x2, serial: 1, payload: [1]))
                let count = await server.broadcast(Frame(type: 0x3, serial: 2, payload: [2]))
                try await peer.push(Frame(type: 0x2, serial: 3, payload: [UInt8(count)]))
                return Response(payload: [4])
            }
        }) { server, endpoint in
            let events = server.events
            let first = try RawSocket.connect(to: endpoint)
            let second = try RawSocket.connect(to: endpoint)
            defer { first.close(); second.close() }
            let connected = try await collect(2, from: events.filter { $0.kind == .peerConnected }, "the two peers")
            let ids = try connected.map { try #require($0.peer) }

            // From a handler, on the loop of the first peer; the second is on the other loop.
            try first.write(seedBytes(type: 0x405, serial: 9))
            #expect(try await first.readFrame() == Frame(type: 0x2, serial: 1, payload: [1]))
            #expect(try await first.readFrame() == Frame(type: 0x3, serial: 2, payload: [2]))
            #expect(try await first.readFrame() == Frame(type: 0x2, serial: 3, payload: [2]))
            #expect(try await first.readFrame() == Frame(type: 0x405, serial: 9, payload: [4]))
            #expect(try await second.readFrame() == Frame(type: 0x3, serial: 2, payload: [2]))

            // From a task on no loop, between pushes to each peer.
            for id in ids { try await server.push(Frame(type: 0x2, serial: 10, payload: [10]), to: id) }
            #expect(await server.broadcast(Frame(type: 0x3, serial: 11, payload: [11])) == 2)
            for id in ids { try await server.push(Frame(type: 0x2, serial: 12, payload: [12]), to: id) }
            for socket in [first, second] {
                #expect(try await socket.readFrame() == Frame(type: 0x2, serial: 10, payload: [10]))
                #expect(try await socket.readFrame() == Frame(type: 0x3, serial: 11, payload: [11]))
                #expect(try await socket.readFrame() == Frame(type: 0x2, serial: 12, payload: [12]))
            }
        }
        try await offThread { group.shutdown() }
    }

    @Test(
        "a broadcast skips a peer the server has closed, and a frame too large to encode reaches nobody, counts 0 and leaves every peer connected",
        .timeLimit(.guarded)
    )
    func closedPeersAndUnencodableFrames() async throws {
        let (counted, report) = AsyncStream<Int>.makeStream()
        try await withServer(configure: {
            $0.limits.maximumPayloadLength = 1024
            // The staying peer sends nothing.
            $0.handshakeTimeout = nil
            $0.idleTimeout = nil
        }, handlers: { server in
            server.handle(type: 0x406) { [unowned server] request, peer in
                await peer.close()
                report.yield(await server.broadcast(Frame(type: 0x3, serial: 5, payload: [5])))
                return Response()
            }
        }) { server, endpoint in
            let events = server.events
            let closing = try RawSocket.connect(to: endpoint)
            let staying = try RawSocket.connect(to: endpoint)
            defer { closing.close(); staying.close() }
            _ = try await collect(2, from: events.filter { $0.kind == .peerConnected }, "the two peers")

            try closing.write(seedBytes(type: 0x406, serial: 1))
            #expect(try await collect(1, from: counted, "the broadcast's count") == [1])
            #expect(try await staying.readFrame() == Frame(type: 0x3, serial: 5, payload: [5]))
            // Closed after nothing: no frame, then the end of the stream.
            #expect(try await closing.readFrame() == nil)

            #expect(await server.broadcast(Frame(type: 0x3, serial: 6, payload: [UInt8](repeating: 6, count: 2048))) == 0)
            #expect(await server.broadcast(Frame(type: 0x3, serial: 7, payload: [7])) == 1)
            #expect(try await staying.readFrame() == Frame(type: 0x3, serial: 7, payload: [7]))
        }
    }

    @Test(
        "one broadcast with serial 77 reaches a plain peer with serial 77 and an identified client with serial 0",
        .timeLimit(.guarded)
    )
    func plainAndIdentifiedPeers() async throws {
        try await withServer(configure: {
            $0.mailboxes = .inMemory
            // The plain peer says nothing: a busy machine must not reach the handshake timeout.
            $0.handshakeTimeout = nil
        }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let plain = try RawSocket.connect(to: endpoint)
            defer { plain.close() }
            _ = try await firstEvent(events, "the plain peer") { $0.kind == .peerConnected }
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("ivy"))
            let notifications = connection.notifications
            try await awaitClient("ivy", on: server)

            let frame = Frame(type: 0x2, serial: 77, payload: Array("both".utf8))
            #expect(await server.broadcast(frame) == 2)
            #expect(try await plain.readFrame() == frame)
            #expect(try await collect(1, from: notifications, "the broadcast") == [Frame(type: 0x2, serial: 0, payload: Array("both".utf8))])
            #expect(await connection.lastSequence == 0)
            await connection.close()
        }
    }

    @Test(
        "queueBroadcast: bursts queued from a handler and from a task on no loop reach every peer of both loops in call order, in their place among pushes, responses and awaited broadcasts, and each call returns the number of peers",
        .timeLimit(.guarded)
    )
    func queuedBurstsKeepOrder() async throws {
        let group = TetherEventLoopGroup(loopCount: 2)
        let (counted, report) = AsyncStream<[Int]>.makeStream()
        try await withServer(configure: {
            $0.eventLoopGroup = group
            // The second peer sends nothing, and the test may take a while on a busy machine.
            $0.handshakeTimeout = nil
            $0.idleTimeout = nil
        }, handlers: { server in
            server.handle(type: 0x407) { [unowned server] request, peer in
                try await peer.push(Frame(type: 0x2, serial: 1, payload: [1]))
                let counts = (0..<50).map { server.queueBroadcast(Frame(type: 0x3, serial: UInt32(100 + $0), payload: [UInt8($0)])) }
                try await peer.push(Frame(type: 0x2, serial: 2, payload: [2]))
                report.yield(counts)
                return Response(payload: [4])
            }
        }) { server, endpoint in
            let events = server.events
            let first = try RawSocket.connect(to: endpoint)
            let second = try RawSocket.connect(to: endpoint)
            defer { first.close(); second.close() }
            _ = try await collect(2, from: events.filter { $0.kind == .peerConnected }, "the two peers")
            let burst = (0..<50).map { Frame(type: 0x3, serial: UInt32(100 + $0), payload: [UInt8($0)]) }

            // From a handler, on the first peer's loop; the second peer is on the other loop.
            try first.write(seedBytes(type: 0x407, serial: 9))
            #expect(try await collect(1, from: counted, "the counts") == [Array(repeating: 2, count: 50)])
            #expect(try await first.readFrame() == Frame(type: 0x2, serial: 1, payload: [1]))
            for frame in burst { #expect(try await first.readFrame() == frame) }
            #expect(try await first.readFrame() == Frame(type: 0x2, serial: 2, payload: [2]))
            #expect(try await first.readFrame() == Frame(type: 0x407, serial: 9, payload: [4]))
            for frame in burst { #expect(try await second.readFrame() == frame) }

            // From a task on no loop, then an awaited broadcast, which comes after them all.
            let counts = burst.map { server.queueBroadcast(Frame(type: 0x4, serial: $0.serial, payload: $0.payload)) }
            #expect(counts == Array(repeating: 2, count: 50))
            #expect(await server.broadcast(Frame(type: 0x5, serial: 1, payload: [5])) == 2)
            for socket in [first, second] {
                for frame in burst { #expect(try await socket.readFrame() == Frame(type: 0x4, serial: frame.serial, payload: frame.payload)) }
                #expect(try await socket.readFrame() == Frame(type: 0x5, serial: 1, payload: [5]))
            }
            #expect(await server.metrics().framesOut == 2 + 50 * 2 + 1 + 50 * 2 + 2)
        }
        try await offThread { group.shutdown() }
    }

    @Test(
        "queueBroadcast: a peer that does not read holds at most maximumOutboundBytes however many bursts are queued; it gets its frames in order, the readers get every frame, and it stays connected",
        .timeLimit(.guarded)
    )
    func queuedBurstsAndASlowPeer() async throws {
        try await withServer(configure: {
            $0.limits.maximumOutboundBytes = 64 << 10
            $0.handshakeTimeout = nil
            $0.idleTimeout = nil
        }) { server, endpoint in
            let events = server.events
            let readers = try (0..<2).map { _ in try RawSocket.connect(to: endpoint) }
            let slow = try RawSocket.connect(to: endpoint, receiveBuffer: 4096)
            defer { for socket in readers + [slow] { socket.close() } }
            _ = try await collect(3, from: events.filter { $0.kind == .peerConnected }, "the three peers")

            // Each burst fits the bound, so readers that have read the one before get all of
            // it; the slow peer's bytes pile up (in the kernel, then in the server) until
            // bursts no longer fit. An awaited broadcast ends each burst and says whether the
            // slow peer still takes frames.
            let payload = [UInt8](repeating: 0x61, count: 8 << 10)
            var serial: UInt32 = 0
            var missed = 0
            while missed < 3 {
                try #require(serial < 20_000, "the slow peer's buffer never filled")
                var sent: [UInt32] = []
                for _ in 0..<7 {
                    serial += 1
                    #expect(server.queueBroadcast(Frame(type: 0x2, serial: serial, payload: payload)) == 3)
                    sent.append(serial)
                }
                serial += 1
                let count = await server.broadcast(Frame(type: 0x3, serial: serial, payload: [1]))
                try #require(count == 2 || count == 3, "broadcast \(serial) reached \(count) peers")
                if count == 2 { missed += 1 }
                sent.append(serial)
                let expected = sent
                let got = try await offThread { try readers.map { reader in try expected.map { _ in try reader.readFrameBlocking()?.serial } } }
                try #require(got == [expected, expected])
            }
            let written = await server.metrics().framesOut
            let forSlow = written - 2 * Int(serial)
            #expect(forSlow < Int(serial), "the slow peer took every frame: nothing was bounded")

            // It gets exactly as many frames as were written for it, in order, intact.
            let frames = try await offThread { try (0..<forSlow).map { _ in try slow.readFrameBlocking() } }
            let serials = frames.compactMap { $0?.serial }
            #expect(serials.count == forSlow && serials == serials.sorted() && Set(serials).count == forSlow)
            #expect(frames.allSatisfy { $0?.payload == payload || $0?.payload == [1] })
            // Having read it all, it is still connected: the next broadcast reaches all three.
            let last = Frame(type: 0x3, serial: 10, payload: [10])
            #expect(await server.broadcast(last) == 3)
            #expect(try await slow.readFrame() == last)
        }
    }
}

extension RawSocket {
    /// Connects to `endpoint` with `SO_RCVBUF` set to `receiveBuffer` before the handshake,
    /// so the window it offers stays small.
    static func connect(to endpoint: Endpoint, receiveBuffer: Int32, timeout: Duration = eventBound) throws -> RawSocket {
        let address = TetherSocketAddress(ipAddress: endpoint.host, port: endpoint.port)!
        let fd = socket(address.isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        precondition(fd >= 0)
        let socket = RawSocket(fd: fd)
        var size = receiveBuffer
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var bound = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, socklen_t(MemoryLayout<timeval>.size))
        guard address.withSockAddr({ Glibc.connect(fd, $0, $1) }) == 0 else {
            throw TimedOut(what: "connecting to \(endpoint)")
        }
        return socket
    }
}
