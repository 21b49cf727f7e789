#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
@testable import Tether

/// A framed channel (a ``ChannelProbe``) over a real TCP socket on 127.0.0.1, and the raw
/// socket at the other end.
private func withTCPProbe<T: Sendable>(
    maximumPayloadLength: Int = 1 << 20,
    maximumOutboundBytes: Int = 1 << 20,
    smallSocketBuffers: Bool = false,
    _ body: (ChannelProbe, RawSocket) async throws -> T
) async throws -> T {
    let group = TetherEventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let (listener, endpoint) = try RawSocket.listen()
    defer { listener.close() }
    let peer = try RawSocket.connect(to: endpoint)
    defer { peer.close() }
    let accepted = try await listener.accept()
    let descriptor = dup(accepted.fd)
    accepted.close()
    _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
    if smallSocketBuffers {
        // Fixed sizes (no autotuning): the kernel holds little of what is written.
        try Syscall.setOption(descriptor, level: SOL_SOCKET, name: SO_SNDBUF, value: 32 << 10)
        try Syscall.setOption(peer.fd, level: SOL_SOCKET, name: SO_RCVBUF, value: 32 << 10)
    }
    let probe = ChannelProbe(loop: group.next())
    try await probe.attachTCP(descriptor: descriptor, maximumPayloadLength: maximumPayloadLength, maximumOutboundBytes: maximumOutboundBytes)
    defer { Task { await probe.close() } }
    return try await body(probe, peer)
}

/// Waits until the probe's channel has read `count` bytes in all: awaited, not polled, so
/// the wait holds no thread; bounded by ``eventBound``.
private func read(_ count: Int, by probe: ChannelProbe) async throws {
    try await bounded("the channel to read \(count) bytes") { await probe.waitUntilRead(count) }
    guard await probe.readPendingCount() >= count else { throw TimedOut(what: "the channel to read \(count) bytes, before it ended") }
}

/// The payload of test frame `index`: a pattern of period 251 (a byte out of place shows),
/// marked with the index at both ends.
private func payload(_ length: Int, index: Int) -> [UInt8] {
    var bytes = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
        for offset in 0..<length { buffer[offset] = UInt8(offset % 251) }
        initialized = length
    }
    bytes[0] = UInt8(truncatingIfNeeded: index)
    bytes[length - 1] = UInt8(truncatingIfNeeded: index >> 8)
    return bytes
}

@Suite("Large payloads over TCP: bodies read into their own storage, payloads written from theirs", .timeLimit(.guarded))
struct LargePayloadTests {
    @Test("a frame with a large body split in two at every byte boundary arrives whole, each one after the channel read the first part")
    func splitAtEveryBoundary() async throws {
        let length = LargePayloads.threshold + 3
        let base = payload(length, index: 0)
        try await withTCPProbe { probe, peer in
            var sent = 0
            for split in 1..<(SeedCodec.headerLength + length) {
                var body = base
                body[0] = UInt8(truncatingIfNeeded: split)
                body[length - 1] = UInt8(truncatingIfNeeded: split >> 8)
                let frame = Frame(type: 0x402, serial: UInt32(split), payload: body)
                let bytes = seedBytes(type: frame.type, serial: frame.serial, payload: body)
                try peer.write(Array(bytes[..<split]))
                try await read(sent + split, by: probe)
                try peer.write(Array(bytes[split...]))
                sent += bytes.count
                let event = try await collect(1, from: probe.events, "frame \(split)").first
                guard event == .frame(frame) else {
                    Issue.record("split at \(split): \(String(describing: event).prefix(200))")
                    return
                }
            }
            #expect(await probe.largeBodyStorage == nil)
            #expect(await probe.bufferedInboundBytes == 0)
        }
    }

    @Test("large and small frames of many lengths written in one go arrive exactly, in order")
    func streamOfLengths() async throws {
        let lengths = [0, 64, LargePayloads.threshold - 1, LargePayloads.threshold, 5, 1 << 20, 3, 300_001, LargePayloads.threshold + 1, 1 << 20, 0, 77_777]
        let frames = lengths.enumerated().map { index, length in
            Frame(type: 0x402, serial: UInt32(index + 1), payload: length == 0 ? [] : payload(length, index: index))
        }
        let bytes = frames.flatMap { seedBytes(type: $0.type, serial: $0.serial, payload: $0.payload) }
        try await withTCPProbe(maximumPayloadLength: 1 << 20) { probe, peer in
            let writing = Task { try await offThread { try peer.write(bytes) } }
            let received = try await collect(frames.count, from: probe.events, "the frames")
            try await writing.value
            #expect(received == frames.map(ProbeEvent.frame))
            #expect(await probe.readPendingCount() == bytes.count)
            #expect(await probe.largeBodyStorage == nil)
        }
    }

    @Test("a body gets its own storage only once an eighth of it has arrived, at exactly the declared length; a stream that ends inside it is a truncated frame")
    func storageFollowsArrival() async throws {
        let length = 1 << 20
        let bytes = seedBytes(type: 0x402, serial: 9, payload: payload(length, index: 9))
        try await withTCPProbe(maximumPayloadLength: length) { probe, peer in
            let local = try Syscall.localAddress(peer.fd)
            // 100,000 bytes of the body: under an eighth, they wait in the buffer.
            try peer.write(Array(bytes[..<(12 + 100_000)]))
            try await read(12 + 100_000, by: probe)
            #expect(await probe.largeBodyStorage == nil)
            #expect(await probe.bufferedInboundBytes == 12 + 100_000)
            // Past an eighth: the body's own storage, at its final length.
            try peer.write(Array(bytes[(12 + 100_000)..<(12 + 140_000)]))
            try await read(12 + 140_000, by: probe)
            #expect(await probe.largeBodyStorage == length)
            #expect(await probe.bufferedInboundBytes == 12 + 140_000)
            peer.close()
            let events = try await collect(1, from: probe.events, "the end")
            #expect(events == [.closed(.truncatedFrame, "stream ended inside a frame: 140012 bytes of an incomplete frame from \(local)")])
            #expect(await probe.largeBodyStorage == nil)
        }
    }

    @Test("a header that declares more than the maximum payload ends the channel with frameTooLarge before anything is allocated for it")
    func lyingLength() async throws {
        try await withTCPProbe(maximumPayloadLength: 1 << 20) { probe, peer in
            let local = try Syscall.localAddress(peer.fd)
            var header = FrameBuffer()
            header.writeInteger(UInt32(0x402))
            header.writeInteger(UInt32(1))
            header.writeInteger(UInt32((1 << 20) + 1))
            try peer.write(Array(header.readableBytesView) + [UInt8](repeating: 7, count: 200_000))
            let events = try await collect(1, from: probe.events, "the end")
            #expect(events == [.closed(.frameTooLarge, "frame length 1048577 exceeds the 1 MiB limit from \(local)")])
            #expect(await probe.largeBodyStorage == nil)
            #expect(try await peer.waitForClose())
        }
    }

    @Test("large payloads go out from their own storage between small frames, in order, through a peer that reads slowly; the bytes pending count them until they are sent")
    func writesInOrder() async throws {
        let frames = [
            Frame(type: 0x402, serial: 1, payload: [1, 2, 3]),
            Frame(type: 0x402, serial: 2, payload: payload(100_000, index: 2)),
            Frame(type: 0x402, serial: 3, payload: []),
            Frame(type: 0x402, serial: 4, payload: payload((1 << 20) + 5, index: 4)),
            Frame(type: 0x402, serial: 5, payload: payload(LargePayloads.threshold, index: 5)),
            Frame(type: 0x402, serial: 6, payload: payload(LargePayloads.threshold - 1, index: 6)),
            Frame(type: 0x403, serial: 7, payload: [9]),
        ]
        let total = frames.reduce(0) { $0 + SeedCodec.headerLength + $1.payload.count }
        try await withTCPProbe(maximumPayloadLength: 2 << 20, maximumOutboundBytes: 2 << 20, smallSocketBuffers: true) { probe, peer in
            #expect(await probe.write(frames).written == frames.count)
            #expect(await probe.sendsLargePayloads)
            // More than the socket takes at once: the rest waits, counted.
            let pending = await probe.pendingOutboundBytes
            #expect(pending > 0 && pending <= total)
            // Over the bound with what is pending: refused, and nothing of it queued.
            let refused = await probe.write([Frame(type: 0x402, serial: 8, payload: payload(2 << 20, index: 8))])
            #expect(refused.written == 0)
            #expect(refused.error?.code == .outboundBufferFull)
            var received: [Frame] = []
            for _ in frames {
                guard let frame = try await peer.readFrame() else { break }
                received.append(frame)
            }
            #expect(received == frames)
            #expect(await probe.pendingOutboundBytes == 0)
            #expect(await probe.bytesWritten == total)
            #expect(await !probe.sendsLargePayloads)
        }
    }

    @Test("a peer that sends more than an eighth of a large body and then stalls is closed with frameTimeout at the timeout after the frame's first byte; the bytes received count the body's")
    func stalledLargeBody() async throws {
        let frame = seedBytes(type: 0x402, serial: 2, payload: payload(1 << 20, index: 2))
        try await withManualLoop { clock, group in
            try await withServer(configure: {
                $0.eventLoopGroup = group
                $0.frameCompletionTimeout = .milliseconds(200)
                // A hard limit here: what arrives before the stall does not buy more time.
                $0.minimumFrameRate = nil
                $0.handshakeTimeout = nil
                $0.idleTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let socket = try RawSocket.connect(to: endpoint)
                defer { socket.close() }
                let local = try Syscall.localAddress(socket.fd).port
                try socket.write(seedBytes(type: 0x402, serial: 1))
                #expect(try await socket.readFrame()?.serial == 1)
                let start = clock.now
                await clock.advance(by: .milliseconds(10))
                // An eighth and more of the body: it is read into its own storage from here.
                try await offThread { try socket.write(Array(frame[..<(12 + 200_000)])) }
                await clock.advance(by: .milliseconds(100))
                try await offThread { try socket.write(Array(frame[(12 + 200_000)..<(12 + 300_000)])) }
                await clock.advance(by: .milliseconds(100) - .nanoseconds(1))
                #expect(server.peerCount == 1, "ended sooner than the timeout after the frame's first byte")
                await clock.advance(by: .nanoseconds(1))
                #expect(clock.now == start + 210_000_000)
                let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected }, "the peer to be closed")
                let reason = try #require(gone.first?.reason)
                #expect(reason.code == .frameTimeout)
                #expect(reason.message == "peer 127.0.0.1:\(local) did not finish a frame within 200 ms of its first byte (300012 bytes of it received)")
                #expect(try await socket.waitForClose())
                let metrics = await server.metrics()
                #expect(metrics.frameTimeouts == 1)
                #expect(metrics.framesIn == 1)
            }
        }
    }

    @Test("with the default minimum rate, a large body that arrives fast and then stalls gets one more timeout, and is closed at the end of it, saying it came too slowly")
    func stalledLargeBodyAfterProgress() async throws {
        let frame = seedBytes(type: 0x402, serial: 2, payload: payload(1 << 20, index: 2))
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
                let local = try Syscall.localAddress(socket.fd).port
                try socket.write(seedBytes(type: 0x402, serial: 1))
                #expect(try await socket.readFrame()?.serial == 1)
                let start = clock.now
                // 300,000 bytes in the first 200 ms: far above 1 KiB/s.
                try await offThread { try socket.write(Array(frame[..<(12 + 200_000)])) }
                await clock.advance(by: .milliseconds(100))
                try await offThread { try socket.write(Array(frame[(12 + 200_000)..<(12 + 300_000)])) }
                await clock.advance(by: .milliseconds(100))
                #expect(server.peerCount == 1, "a frame arriving at 1.5 MB/s was cut at its timeout")
                // Then nothing for a whole timeout.
                await clock.advance(by: .milliseconds(200) - .nanoseconds(1))
                #expect(server.peerCount == 1)
                await clock.advance(by: .nanoseconds(1))
                #expect(clock.now == start + 400_000_000)
                let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected }, "the peer to be closed")
                let reason = try #require(gone.first?.reason)
                #expect(reason.code == .frameTimeout)
                #expect(reason.message == "peer 127.0.0.1:\(local) sent less than 1024 bytes a second of an unfinished frame for 200 ms (300012 bytes of it received)")
            }
        }
    }

    @Test("profiles with other layouts carry large payloads exactly: a plain header (direct path) and one with a checksum (through the buffers)", arguments: [
        try! Profile(
            name: "plain-layout",
            layout: .header([.type(width: 2, endianness: .little), .value("flags", width: 2, default: 5), .serial(), .length(endianness: .little)]),
            heartbeatType: 0x1,
            classify: Profile.seedKind(of:)
        ),
        Profile.seedExtended,
    ])
    func otherLayouts(_ profile: Profile) async throws {
        try await withServer(configure: { $0.profile = profile }, handlers: { server in
            server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.profile = profile })
            for (index, size) in [(1 << 20) + 3, LargePayloads.threshold, 20_000].enumerated() {
                let sent = payload(size, index: index)
                let reply = try await connection.request(Request(type: 0x405, payload: sent))
                #expect(reply.payload == sent, "\(profile.name), \(size) bytes")
            }
            await connection.close()
        }
    }

    @Test("a client and a server echo payloads of 1 MiB and more, exactly")
    func echoEndToEnd() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let sizes = [1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 7, LargePayloads.threshold]
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, size) in sizes.enumerated() {
                    group.addTask {
                        let sent = payload(size, index: index)
                        let reply = try await connection.request(Request(type: 0x405, payload: sent))
                        #expect(reply.payload == sent)
                    }
                }
                try await group.waitForAll()
            }
            await connection.close()
        }
    }
}
