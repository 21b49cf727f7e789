import Testing
import TetherTLS
@testable import Tether

/// The framed channel over the in-memory transport pair: no sockets, one event loop.
@Suite("Framed channel over in-memory transports", .timeLimit(.guarded))
struct FrameChannelTests {
    /// Runs `body` with a loop of its own, shut down afterwards.
    private func withLoop<T: Sendable>(_ body: (EventLoop) async throws -> T) async throws -> T {
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        return try await body(group.next())
    }

    /// Two probes with channels over the two ends of a pair.
    private func connectedProbes(
        on loop: EventLoop,
        capacity: Int = 256 << 10,
        maximumOutboundBytes: Int = 1 << 20
    ) async throws -> (client: ChannelProbe, server: ChannelProbe) {
        let (a, b) = InMemoryTransport.makePair(on: loop, capacity: capacity)
        let client = ChannelProbe(loop: loop)
        let server = ChannelProbe(loop: loop)
        try await client.attach(a, maximumOutboundBytes: maximumOutboundBytes)
        try await server.attach(b, role: .server, maximumOutboundBytes: maximumOutboundBytes)
        return (client, server)
    }

    /// A probe's channel over one end, and a raw sink on the other.
    private func probeAndSink(on loop: EventLoop, role: FrameChannel<ChannelProbe>.Role = .client) async throws -> (ChannelProbe, ByteSink) {
        let (a, b) = InMemoryTransport.makePair(on: loop)
        let probe = ChannelProbe(loop: loop)
        try await probe.attach(a, role: role)
        let sink = try await loop.submit { () throws(TetherError) in
            let sink = ByteSink(b)
            try b.start()
            return sink
        }
        return (probe, sink)
    }

    /// Sends raw bytes from the sink's end, then ends its stream when asked.
    private func send(_ bytes: [UInt8], from sink: ByteSink, thenClose close: Bool, on loop: EventLoop) async throws {
        try await loop.submit {
            sink.transport.buffers.outbound.writeBytes(bytes)
            if close { sink.transport.shutdownOutput() } else { sink.transport.flush() }
        }
    }

    @Test("frames go both ways with their types, serials and payloads, in order; both ends count the same bytes")
    func framesBothWays() async throws {
        try await withLoop { loop in
            let (client, server) = try await connectedProbes(on: loop)
            let requests = (1...5).map { Frame(type: 0x402, serial: UInt32($0), payload: Array(repeating: UInt8($0), count: $0 * 100)) }
            #expect(await client.write(requests).written == 5)
            let received = try await collect(5, from: server.events, "requests at the server")
            #expect(received == requests.map(ProbeEvent.frame))

            let replies = requests.reversed().map { Frame(type: 0x402, serial: $0.serial, payload: $0.payload.reversed()) }
            #expect(await server.write(replies).written == 5)
            let answers = try await collect(5, from: client.events, "replies at the client")
            #expect(answers == replies.map(ProbeEvent.frame))

            let requestBytes = requests.reduce(0) { $0 + 12 + $1.payload.count }
            #expect(await client.bytesWritten == requestBytes)
            #expect(await server.bytesRead == requestBytes)
            #expect(await server.bytesWritten == requestBytes)
            #expect(await client.bytesRead == requestBytes)
            #expect(await client.lateEvents == 0)
        }
    }

    @Test("a peer that closes in the middle of a frame: the frames before it arrive, then a truncated-frame error that says how much and from where")
    func closedMidFrame() async throws {
        try await withLoop { loop in
            let (probe, sink) = try await probeAndSink(on: loop)
            let whole = seedBytes(type: 0x402, serial: 7, payload: [1, 2, 3])
            let cut = Array(seedBytes(type: 0x402, serial: 8, payload: Array(repeating: 9, count: 10)).prefix(16))
            try await send(whole + cut, from: sink, thenClose: true, on: loop)
            let events = try await collect(2, from: probe.events, "the frame and the end")
            #expect(events.first == .frame(Frame(type: 0x402, serial: 7, payload: [1, 2, 3])))
            guard case .closed(let code, let message) = events.last else {
                Issue.record("expected the end, got \(events)")
                return
            }
            #expect(code == .truncatedFrame)
            #expect(message == "stream ended inside a frame: 16 bytes of an incomplete frame from 127.0.0.1:2")
            #expect(await probe.closedEvents == 1)
        }
    }

    @Test("bytes that are no frame end the channel with an error that names the peer's address")
    func garbage() async throws {
        try await withLoop { loop in
            let (probe, sink) = try await probeAndSink(on: loop)
            // A seed header that claims a payload of 4 GiB - 1, over the 1 MiB limit.
            try await send([0, 0, 4, 2, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF], from: sink, thenClose: false, on: loop)
            let events = try await collect(1, from: probe.events, "the end")
            guard case .closed(let code, let message) = events.first else {
                Issue.record("expected the end, got \(events)")
                return
            }
            #expect(code == .frameTooLarge)
            #expect(message.hasSuffix(" from 127.0.0.1:2"))
            // The other end sees the channel close.
            _ = try await collect(1, from: sink.endings, "the sink's end")
            #expect(sink.end?.code == .peerClosed)
        }
    }

    @Test("a server channel answers an HTTP request with a 400 that says what the port speaks, then closes with a protocol error")
    func httpRequestAtServer() async throws {
        try await withLoop { loop in
            let (probe, sink) = try await probeAndSink(on: loop, role: .server)
            try await send(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8), from: sink, thenClose: false, on: loop)
            let events = try await collect(1, from: probe.events, "the end")
            guard case .closed(let code, let message) = events.first else {
                Issue.record("expected the end, got \(events)")
                return
            }
            #expect(code == .protocolError)
            #expect(message.contains("127.0.0.1:2 sent an HTTP request (\"GET / HTTP/1.1\")"))
            _ = try await collect(1, from: sink.endings, "the sink's end")
            #expect(sink.bytes == ForeignProtocol.httpAnswer(profile: "seed"))
        }
    }

    @Test("a peer that does not read: the in-memory queue fills, writes wait, and the outbound bound then fails a write; reading again drains it and says so")
    func outboundBound() async throws {
        try await withLoop { loop in
            let (client, server) = try await connectedProbes(on: loop, capacity: 1024, maximumOutboundBytes: 4096)
            await server.pauseReading()
            let frames = (1...6).map { Frame(type: 0x2, serial: UInt32($0), payload: Array(repeating: UInt8($0), count: 1000)) }
            // In one turn, nothing is flushed yet: four frames fit under 4096 bytes, the fifth not.
            let first = await client.write(Array(frames[0..<5]))
            #expect(first.written == 4)
            #expect(first.error?.code == .outboundBufferFull)
            #expect(first.error?.message == "4048 bytes are waiting to be written to 127.0.0.1:2, over the 4 KiB limit")
            // After the turn's flush, the peer's queue holds 1024 bytes and the rest waits here.
            try await loop.submit {}
            #expect(await client.pendingOutboundBytes == 4048 - 1024)
            let second = await client.write(Array(frames[4..<6]))
            #expect(second.written == 1)
            #expect(second.error?.code == .outboundBufferFull)

            await client.setWritableThreshold(0)
            await server.resumeReading()
            let received = try await collect(5, from: server.events, "the five frames")
            #expect(received == frames[0..<5].map(ProbeEvent.frame))
            let writable = try await collect(1, from: client.events, "writable")
            #expect(writable == [.writable])
            #expect(await client.pendingOutboundBytes == 0)
            #expect(await client.write([frames[5]]).written == 1)
            #expect(try await collect(1, from: server.events, "the sixth frame") == [.frame(frames[5])])
        }
    }

    @Test("close is final: frames already on their way are not delivered, the owner hears nothing more, the peer hears the end once")
    func closeExactlyOnce() async throws {
        try await withLoop { loop in
            let (client, server) = try await connectedProbes(on: loop)
            #expect(await client.write([Frame(type: 0x402, serial: 1)]).written == 1)
            #expect(try await collect(1, from: server.events, "the first frame") == [.frame(Frame(type: 0x402, serial: 1))])
            // The server's frames reach the client's queue at the end of this turn; the
            // client has closed by then.
            try await loop.submit {
                server.assumeIsolated { _ = $0.write([Frame(type: 0x402, serial: 2), Frame(type: 0x402, serial: 3)]) }
                client.assumeIsolated { $0.close(); $0.close() }
            }
            let end = try await collect(1, from: server.events, "the server's end")
            guard case .closed(let code, _) = end.first else {
                Issue.record("expected the end, got \(end)")
                return
            }
            #expect(code == .connectionReset || code == .peerClosed)
            // Two more turns: anything queued for the client would have run.
            try await loop.submit {}
            try await loop.submit {}
            #expect(await client.lateEvents == 0)
            #expect(await client.closedEvents == 0)
            #expect(await server.closedEvents == 1)
            #expect(await server.lateEvents == 0)
        }
    }

    @Test("a graceful close delivers every frame written before it, then the end of the stream")
    func gracefulClose() async throws {
        try await withLoop { loop in
            let (client, server) = try await connectedProbes(on: loop, capacity: 4096)
            let frames = (1...20).map { Frame(type: 0x20, serial: UInt32($0), payload: Array(repeating: UInt8($0), count: 1000)) }
            // Written and closed in one turn: 20 KB against a 4 KiB queue, so most of it is
            // still waiting here when the close is asked for.
            try await loop.submit {
                client.assumeIsolated { probe in
                    _ = probe.write(frames)
                    probe.closeGracefully()
                }
            }
            let events = try await collect(21, from: server.events, "twenty frames and the end")
            #expect(Array(events.prefix(20)) == frames.map(ProbeEvent.frame))
            #expect(events.last == .closed(.peerClosed, "peer 127.0.0.1:1 closed the connection"))
            #expect(await client.lateEvents == 0)
        }
    }

    @Test("at the end of the stream, frames still in the buffer are decoded and delivered before the end")
    func endOfStreamDeliversBuffered() async throws {
        try await withLoop { loop in
            let (probe, sink) = try await probeAndSink(on: loop)
            await probe.setAccepting(false)
            let frames = (1...3).map { Frame(type: 0x20, serial: UInt32($0), payload: [UInt8($0)]) }
            try await send(frames.flatMap { seedBytes(type: $0.type, serial: $0.serial, payload: $0.payload) }, from: sink, thenClose: true, on: loop)
            let events = try await collect(4, from: probe.events, "three frames and the end")
            #expect(Array(events.prefix(3)) == frames.map(ProbeEvent.frame))
            guard case .closed(let code, let message) = events.last else {
                Issue.record("expected the end, got \(events)")
                return
            }
            #expect(code == .peerClosed)
            #expect(message == "peer 127.0.0.1:2 closed the connection")
            #expect(await probe.closedEvents == 1)
        }
    }

    @Test("a half-closed end still reads: bytes its peer wrote before seeing the end arrive, then the peer's own end")
    func halfClose() async throws {
        try await withLoop { loop in
            let (a, b) = InMemoryTransport.makePair(on: loop)
            let (first, second) = try await loop.submit { () throws(TetherError) in
                let sinks = (ByteSink(a), ByteSink(b))
                try a.start()
                try b.start()
                return sinks
            }
            try await loop.submit {
                a.buffers.outbound.writeBytes([1, 2, 3])
                a.shutdownOutput()
                b.buffers.outbound.writeBytes([4, 5])
                b.flush()
            }
            _ = try await collect(1, from: second.endings, "the end at b")
            _ = try await collect(1, from: first.endings, "the end at a")
            #expect(second.bytes == [1, 2, 3])
            #expect(first.bytes == [4, 5])
            #expect(second.end?.code == .peerClosed)
            #expect(first.end?.code == .peerClosed)
        }
    }

    @Test("an end that closes with bytes it has not read resets the connection: the peer gets connectionReset, not an end of stream")
    func closeWithUnreadBytesResets() async throws {
        try await withLoop { loop in
            let (a, b) = InMemoryTransport.makePair(on: loop)
            let (first, _) = try await loop.submit { () throws(TetherError) in
                let sinks = (ByteSink(a), ByteSink(b))
                try a.start()
                try b.start()
                return sinks
            }
            try await loop.submit {
                b.pauseReading()
                a.buffers.outbound.writeBytes([1, 2, 3])
                a.flush()
                b.close()
            }
            _ = try await collect(1, from: first.endings, "the end at a")
            #expect(first.end?.code == .connectionReset)
            #expect(first.end?.message == "connection with 127.0.0.1:2 was reset while reading from it")
            #expect(first.bytes.isEmpty)
        }
    }

    @Test("TLS is a layer over any transport: a handshake, frames both ways and a close_notify over the in-memory pair")
    func tlsOverMemory() async throws {
        let certificates = try await TestCertificates.shared()
        let serverTLS = TLSConfiguration.server(options: TLSServerOptions(certificate: certificates.server))
        var clientOptions = TLSClientOptions()
        clientOptions.trustRoots = .file(certificates.caCertificate)
        clientOptions.serverName = "localhost"
        let clientTLS = TLSConfiguration.client(options: clientOptions)
        try serverTLS.provider.prepare()
        try clientTLS.provider.prepare()
        try await withLoop { loop in
            let (a, b) = InMemoryTransport.makePair(on: loop, sealed: true)
            let clientLayer = TLSTransport(over: a, session: try clientTLS.provider.makeSession(host: "localhost", remoteAddress: a.remoteAddress), loop: loop)
            let serverLayer = TLSTransport(over: b, session: try serverTLS.provider.makeSession(host: nil, remoteAddress: b.remoteAddress), loop: loop)
            let client = ChannelProbe(loop: loop)
            let server = ChannelProbe(loop: loop)
            try await server.attach(serverLayer, role: .server, tlsHandshakeTimeout: .seconds(30))
            try await client.attach(clientLayer, tlsHandshakeTimeout: .seconds(30))
            #expect(try await collect(1, from: client.events, "the client's handshake") == [.secured])
            #expect(await client.tlsDetails != nil)

            let requests = (1...3).map { Frame(type: 0x402, serial: UInt32($0), payload: Array(repeating: UInt8($0), count: 5000)) }
            #expect(await client.write(requests).written == 3)
            let received = try await collect(4, from: server.events, "the server's handshake and the requests")
            #expect(received == [.secured] + requests.map(ProbeEvent.frame))
            #expect(await server.write([Frame(type: 0x402, serial: 9, payload: [7])]).written == 1)
            #expect(try await collect(1, from: client.events, "the reply") == [.frame(Frame(type: 0x402, serial: 9, payload: [7]))])

            // Ciphertext crossed the pair: more bytes than the plaintext, counted below TLS.
            #expect(await server.bytesRead > requests.reduce(0) { $0 + 12 + $1.payload.count })

            await client.closeGracefully()
            let end = try await collect(1, from: server.events, "the server's end")
            #expect(end == [.closed(.peerClosed, "peer 127.0.0.1:1 closed the connection")])
        }
    }
}
