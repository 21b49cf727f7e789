import Synchronization
import Testing
import TetherTesting
@testable import Tether

/// The pieces of large frames (``FrameChunk``) and how they are put back together.
@Suite("Frame chunks")
struct FrameChunkTests {
    private func chunks(of frame: Frame, size: Int) -> [Frame] {
        var pieces: [Frame] = []
        var offset = 0
        repeat {
            let (chunk, count) = FrameChunk.chunk(of: frame, at: offset, size: size)
            pieces.append(chunk)
            offset += count
        } while offset < frame.payload.count
        return pieces
    }

    @Test("a frame cut into chunks of any size comes back whole, with its type, serial and fields", arguments: [1, 7, 4_096, 32_768])
    func roundTrip(size: Int) throws {
        let payload = patterned(100_003)
        let frame = Frame(type: 0x402, serial: 77, payload: payload, fields: ["version": 2])
        let pieces = chunks(of: frame, size: size)
        #expect(pieces.count == (payload.count + size - 1) / size)
        #expect(pieces.allSatisfy { $0.type == FrameChunk.frameType && $0.serial == 77 && $0.fields == ["version": 2] })
        #expect(pieces[0].payload.count == FrameChunk.firstPrefixLength + min(size, payload.count))
        var assembler = ChunkAssembler(maximumPayloadLength: 1 << 20)
        var whole: Frame?
        for (index, piece) in pieces.enumerated() {
            whole = try assembler.take(piece)
            #expect((whole == nil) == (index < pieces.count - 1))
        }
        #expect(whole?.type == 0x402)
        #expect(whole?.serial == 77)
        #expect(whole?.fields == ["version": 2])
        #expect(whole?.payload == payload)
        #expect(assembler.current == nil)
    }

    @Test("chunks that break the rules end the connection with a message that says how, before the frame's declared length is held")
    func hostileChunks() throws {
        let frame = Frame(type: 0x402, serial: 5, payload: [UInt8](repeating: 1, count: 300))
        let pieces = chunks(of: frame, size: 100)
        func fails(_ sequence: [Frame], limit: Int = 1 << 20, _ expected: TetherError.Code, _ words: String) {
            var assembler = ChunkAssembler(maximumPayloadLength: limit)
            do {
                for piece in sequence { _ = try assembler.take(piece) }
                Issue.record("no error for \(words)")
            } catch {
                #expect(error.code == expected)
                #expect(error.message.contains(words), "\(error.message)")
            }
        }
        fails([pieces[1]], .protocolError, "continues no chunked frame")
        fails([pieces[0], pieces[0]], .protocolError, "began before frame 0x402 serial 5 finished")
        fails([pieces[0], pieces[1], pieces[1], pieces[2]], .protocolError, "carries more than the 300 bytes it declared")
        var short = pieces[2]
        short.payload.removeLast()
        fails([pieces[0], pieces[1], short], .protocolError, "ended after 299 of the 300 bytes")
        fails([pieces[0]], limit: 299, .frameTooLarge, "declares 300 bytes")
        var stranger = pieces[1]
        stranger.serial = 6
        fails([pieces[0], stranger], .protocolError, "serial 6 came inside frame 0x402 serial 5")
        fails([Frame(type: FrameChunk.frameType, serial: 1, payload: [0x04])], .protocolError, "no valid marker")
        fails([Frame(type: FrameChunk.frameType, serial: 1, payload: [0x01, 0, 0])], .protocolError, "shorter than its 13-byte prefix")

        // A frame that declares 16 MiB and sends 100 bytes holds about 100 bytes.
        var lying = pieces[0]
        lying.payload.replaceSubrange(5..<13, with: [0, 0, 0, 0, 1, 0, 0, 0])
        var assembler = ChunkAssembler(maximumPayloadLength: 1 << 24)
        #expect(try assembler.take(lying) == nil)
        #expect(assembler.current?.declared == 1 << 24)
        #expect(try #require(assembler.current).frame.payload.capacity < 4_096)
    }

    @Test("only the profiles that match responses by serial carry chunks")
    func profiles() {
        #expect(FrameChunk.carried(by: .seed))
        #expect(FrameChunk.carried(by: .seedExtended))
        #expect(!FrameChunk.carried(by: .compact))
        #expect(!FrameChunk.carried(by: .lines))
    }
}

/// `count` bytes of a pattern that repeats every 251 bytes, made with copies of one block
/// rather than a closure per byte: a handler that makes them does not hold its event loop.
func patterned(_ count: Int) -> [UInt8] {
    let block = (0..<(251 * 64)).map { UInt8(truncatingIfNeeded: $0 % 251) }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(count)
    while bytes.count + block.count <= count { bytes.append(contentsOf: block) }
    bytes.append(contentsOf: block[0..<(count - bytes.count)])
    return bytes
}

/// Echoes what it gets; 0x403 answers with `count` patterned bytes, asked as a decimal payload.
private func bulkHandlers(_ server: Server) {
    server.handle(type: 0x402) { request, _ in Response(payload: request.payload) }
    server.handle(type: 0x403) { request, _ in
        Response(payload: patterned(Int(String(decoding: request.payload, as: UTF8.self)) ?? 0))
    }
    server.handle(type: 0x405) { _, _ in Response(payload: Array("small".utf8)) }
    server.handle(type: 0x406) { request, _ in Response(payload: Array("\(request.payload.count)".utf8)) }
}

/// What a slow-link transfer showed: the small request's wait, and the heartbeats acked
/// while the large frame moved.
private struct TransferFigures: CustomStringConvertible {
    var transfer: Duration
    var smallRequest: Duration
    var heartbeatsAcked: Int
    var heartbeatsMissed: Int
    var longestRoundTrip: Duration

    var description: String {
        "transfer \(transfer), small request \(smallRequest), heartbeats acked \(heartbeatsAcked) (longest round trip \(longestRoundTrip)), missed \(heartbeatsMissed)"
    }
}

/// A flag set once, read from other tasks.
private final class Flag: Sendable {
    private let value = Atomic(false)
    func set() { value.store(true, ordering: .sequentiallyConsistent) }
    var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
}

/// The rate of the slow-link tests: a phone's slow uplink.
private let linkRate = 250_000
private let largeFrame = 12_000_000

/// Over the limited relay, with a session and every default: starts `large`, and once
/// `moved` says 3 MB of it crossed the relay, makes a small request. The small request must
/// be answered while the large frame is still under way, and heartbeats acked meanwhile.
private func slowLinkTransfer(
    clientID: String,
    large: @escaping @Sendable (Connection) async throws -> Int,
    moved: @escaping @Sendable (FaultProxy.Counters) -> Int
) async throws -> TransferFigures {
    try await withServer(configure: sessionServer, handlers: bulkHandlers) { _, endpoint in
        try await withFaultProxy(to: endpoint, mode: .limited(bytesPerSecond: linkRate)) { proxy in
            let connection = try await Connection.connect(to: proxy.endpoint, configuration: sessionClient(clientID))
            #expect(await connection.sendsChunksForTesting)
            let heartbeats = connection.heartbeats
            let finished = Flag()
            let clock = ContinuousClock()
            let started = clock.now
            let transfer = Task {
                let count = try await large(connection)
                finished.set()
                return count
            }
            let beats = Task { () -> (acked: Int, missed: Int, longest: Duration) in
                var acked = 0
                var missed = 0
                var longest = Duration.zero
                for await beat in heartbeats {
                    if finished.isSet { break }
                    switch beat.outcome {
                    case .acked:
                        acked += 1
                        longest = max(longest, beat.roundTripTime ?? .zero)
                    case .missed:
                        missed += 1
                    default:
                        break
                    }
                }
                return (acked, missed, longest)
            }
            try await proxy.waitUntil("3 MB of the large frame across the link", within: .seconds(300)) { moved($0) > 3_000_000 }
            let asked = clock.now
            let small = try await connection.request(Request(type: 0x405))
            let smallRequest = clock.now - asked
            #expect(small.payload == Array("small".utf8))
            let answeredAfter = finished.isSet
            #expect(!answeredAfter, "the small request was answered only after the large frame")
            #expect(moved(proxy.counters) < largeFrame / 2, "the small request waited for \(moved(proxy.counters)) bytes of the large frame")
            #expect(try await transfer.value == largeFrame)
            let duration = clock.now - started
            // One more heartbeat ends the count, whatever its outcome.
            let (acked, missed, longest) = try await bounded("a heartbeat after the transfer", .seconds(60)) { await beats.value }
            #expect(acked >= 2, "heartbeats acked while the frame moved: \(acked)")
            #expect(missed == 0)
            let metrics = await connection.metrics
            #expect(metrics.connects == 1)
            await connection.close()
            return TransferFigures(transfer: duration, smallRequest: smallRequest, heartbeatsAcked: acked, heartbeatsMissed: missed, longestRoundTrip: longest)
        }
    }
}

private func sessionServer(_ configuration: inout ServerConfiguration) {
    configuration.mailboxes = .inMemory
    // Every other default, the handshake timeout too.
    configuration.handshakeTimeout = ServerConfiguration().handshakeTimeout
}

private func sessionClient(_ clientID: String, _ change: (inout ConnectionConfiguration) -> Void = { _ in }) -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration()
    configuration.session = SessionConfiguration(clientID: clientID)
    configuration.reconnect.isEnabled = false
    configuration.requestTimeout = .seconds(600)
    // Guards, not measurements: the session hello's answer takes as long as the machine
    // makes it, and these tests time nothing but the transfers.
    configuration.connectTimeout = eventBound
    change(&configuration)
    return configuration
}

@Suite("Large frames in chunks over sockets", .timeLimit(.guarded))
struct ChunkedFrameSocketTests {
    @Test("a peer that never said it understands chunks gets a large frame whole, in exactly the bytes of the seed profile")
    func unannouncedPeerGetsWholeFrames() async throws {
        try await withServer(configure: sessionServer, handlers: bulkHandlers) { _, endpoint in
            let socket = try RawSocket.connect(to: endpoint)
            try socket.write(seedBytes(type: 0x403, serial: 9, payload: Array("200000".utf8)))
            let (header, body) = try await offThread { (try socket.read(12), try socket.read(200_000)) }
            #expect(header == [0, 0, 0x04, 0x03, 0, 0, 0, 9] + [0x00, 0x03, 0x0D, 0x40])
            #expect(body == patterned(200_000))
        }
    }

    @Test("a client that announced chunks and breaks their rules is closed with a notice that says how; the server goes on serving")
    func hostileChunksOverTheWire() async throws {
        try await withServer(configure: sessionServer, handlers: bulkHandlers) { _, endpoint in
            let raw = try RawSocket.connect(to: endpoint)
            defer { raw.close() }
            var hello = SessionWire.Hello(clientID: "H", token: nil, lastSequence: 0)
            hello.chunkBytes = 1_024
            try raw.write(seedBytes(type: 0x401, serial: 3, payload: SessionWire.encode(hello)))
            let answer = try #require(try await raw.readFrame())
            let welcome = try #require(SessionWire.decode(SessionWire.Welcome.self, from: answer.payload))
            #expect(welcome.chunkBytes == 32 << 10)
            let frame = Frame(type: 0x402, serial: 4, payload: [UInt8](repeating: 9, count: 5_000))
            let first = FrameChunk.chunk(of: frame, at: 0, size: 1_024).frame
            try raw.write(seedBytes(type: first.type, serial: first.serial, payload: first.payload))
            try raw.write(seedBytes(type: first.type, serial: first.serial, payload: first.payload))
            let notice = try #require(try await raw.readFrame())
            let reason = try #require(CloseNotice(notice))
            #expect(reason.code == "protocolError")
            #expect(reason.message.contains("a chunked frame (serial 4) began before frame 0x402 serial 4 finished"), "\(reason.message)")
            #expect(try await raw.waitForClose())

            // The next client is served, in chunks.
            let connection = try await Connection.connect(to: endpoint, configuration: sessionClient("after"))
            let payload = patterned(200_000)
            #expect(try await connection.request(Request(type: 0x402, payload: payload)).payload == payload)
            await connection.close()
        }
    }

    @Test("with a session both ways send large frames in chunks: 3 MB up and down arrive whole, and progress counts the whole frame")
    func chunkedBothWays() async throws {
        try await withServer(configure: sessionServer, handlers: bulkHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionClient("bulk") {
                $0.progress = ProgressConfiguration(minimumFrameSize: 1 << 20, step: 256 << 10)
            })
            let progress = connection.transfers
            let payload = patterned(3_000_000)
            let echoed = try await connection.request(Request(type: 0x402, payload: payload))
            #expect(echoed.payload == payload)
            let sent = try await bounded("the upload's last progress") { () -> TransferProgress? in
                for await step in progress where step.direction == .sending && step.bytes == step.total { return step }
                return nil
            }
            #expect(sent?.total == payload.count)
            let received = try await bounded("the download's last progress") { () -> TransferProgress? in
                for await step in progress where step.direction == .receiving && step.bytes == step.total { return step }
                return nil
            }
            #expect(received?.total == payload.count)
            #expect(await connection.sendsChunksForTesting)
            // The hello, the request and what else the session sends: not the request's 92
            // chunks, which make one frame.
            let framesIn = await server.metrics().framesIn
            #expect(framesIn < 10)
            await connection.close()
        }
    }

    @Test("12 MB up at 250 KB/s with every default: a small request made in the middle is answered while the upload goes on, and heartbeats are acked through it")
    func slowUpload() async throws {
        let payload = patterned(largeFrame)
        let figures = try await slowLinkTransfer(clientID: "uploader", large: { connection in
            let answer = try await connection.request(Request(type: 0x406, payload: payload))
            return Int(String(decoding: answer.payload, as: UTF8.self)) ?? 0
        }, moved: { $0.bytesUpstream })
        print("12 MB upload at 250 KB/s: \(figures)")
    }

    @Test("12 MB down at 250 KB/s with every default: a small request made in the middle is answered while the download goes on, and heartbeats are acked through it")
    func slowDownload() async throws {
        let figures = try await slowLinkTransfer(clientID: "downloader", large: { connection in
            let answer = try await connection.request(Request(type: 0x403, payload: Array("\(largeFrame)".utf8)))
            return answer.payload.count
        }, moved: { $0.bytesDownstream })
        print("12 MB download at 250 KB/s: \(figures)")
    }
}
