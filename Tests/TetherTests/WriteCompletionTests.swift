import Synchronization
import Testing
import TetherTLS
import TetherTesting
@testable import Tether

/// A Tether client connected to a raw listener on 127.0.0.1, and the accepted raw socket.
private func rawPeer() async throws -> (Connection, RawSocket, RawSocket) {
    let (listener, endpoint) = try RawSocket.listen()
    async let accepted = listener.accept()
    let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
    return (connection, listener, try await accepted)
}

/// A payload of `count` bytes that differ from their neighbours.
private func pattern(_ count: Int, seed: Int = 0) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 31) &+ seed) }
}

/// Returns once the first progress of a large frame being sent is reported: part of it is
/// in the kernel. An event, awaited, where the bytes the connection wrote would be polled.
private func firstBytesSent(_ progress: Subscription<TransferProgress>) async throws {
    try await bounded("the frame to fill the socket") {
        for await step in progress where step.direction == .sending && step.bytes > 0 { return }
    }
}

@Suite("Sends that wait until written", .timeLimit(.guarded))
struct WriteCompletionTests {
    @Test("a send that waits until written returns once every byte of the frame is in the kernel; one that returns when queued has written none of it yet")
    func writtenMeansInTheKernel() async throws {
        let (connection, listener, peer) = try await rawPeer()
        defer { listener.close(); peer.close() }
        let payload = pattern(1 << 20)
        try await connection.send(Frame(type: 0x450, serial: 1, payload: payload), completion: .queued)
        let queued = await connection.metrics.bytesOut
        #expect(queued == 0)
        try await connection.send(Frame(type: 0x450, serial: 2, payload: payload), completion: .written(timeout: eventBound))
        // Both frames, 12 bytes of header each: the second one last.
        #expect(await connection.metrics.bytesOut == 2 * (12 + payload.count))
        let first = try #require(try await peer.readFrame())
        let second = try #require(try await peer.readFrame())
        #expect(first.serial == 1 && second.serial == 2)
        #expect(second.payload == payload)
        await connection.close()
    }

    @Test("a peer that does not read: the send times out naming the bytes still waiting, the frame stays queued and arrives whole once the peer reads; a frame queued behind it times out, is taken out and never sent")
    func timeoutBehindAPeerThatDoesNotRead() async throws {
        let (connection, listener, peer) = try await rawPeer()
        defer { listener.close(); peer.close() }
        let large = pattern(15 << 20, seed: 7)
        let error = await #expect(throws: TetherError.self) {
            try await connection.send(Frame(type: 0x451, serial: 1, payload: large), completion: .written(timeout: .milliseconds(300)))
        }
        #expect(error?.code == .timedOut)
        let message = error?.message ?? ""
        #expect(message.hasPrefix("frame 0x451 serial 1 (15728640 bytes) was not written to 127.0.0.1:"))
        #expect(message.contains(" within 300 ms: "))
        #expect(message.hasSuffix(" to be written, the peer is not reading them; it stays queued on this connection"))
        // Over the high-water mark: the next frame waits in the queue, and goes nowhere.
        let queued = await #expect(throws: TetherError.self) {
            try await connection.send(Frame(type: 0x451, serial: 2, payload: [1, 2, 3]), completion: .written(timeout: .milliseconds(100)))
        }
        #expect(queued?.code == .timedOut)
        #expect(queued?.message == "frame 0x451 serial 2 (3 bytes) was not sent to \(connection.endpoint) within 100 ms: it waited behind a full outbound buffer, and was taken out of the queue")
        #expect(await connection.metrics.queuedRequests == 0)
        // The peer reads: the large frame whole, then the next one sent, not the one taken out.
        let reading = Task { try await peer.readFrame(timeout: eventBound) }
        try await connection.send(Frame(type: 0x451, serial: 3, payload: [9]), completion: .written(timeout: eventBound))
        let first = try #require(try await reading.value)
        #expect(first.serial == 1)
        #expect(first.payload == large)
        let next = try #require(try await peer.readFrame())
        #expect(next.serial == 3)
        #expect(next.payload == [9])
        await connection.close()
    }

    @Test("the connection lost while the frame waits to be written: the send fails once with connectionLost; after close() with connectionClosed")
    func connectionEndsFirst() async throws {
        let (connection, listener, peer) = try await rawPeer()
        defer { listener.close() }
        let large = pattern(15 << 20)
        let progress = connection.transfers
        let sending = Task {
            try await connection.send(Frame(type: 0x452, serial: 1, payload: large), completion: .written(timeout: nil))
        }
        // Written into the channel, not all of it taken by the kernel: then the peer resets.
        try await firstBytesSent(progress)
        peer.reset()
        let error = await #expect(throws: TetherError.self) { try await sending.value }
        #expect(error?.code == .connectionLost)
        #expect(error?.message.hasPrefix("the connection to 127.0.0.1:") == true)
        #expect(error?.message.hasSuffix(" ended before frame 0x452 serial 1 was written; it may not have reached the peer") == true)
        await connection.close()

        let (other, otherListener, otherPeer) = try await rawPeer()
        defer { otherListener.close(); otherPeer.close() }
        let otherProgress = other.transfers
        let closing = Task {
            try await other.send(Frame(type: 0x452, serial: 2, payload: large), completion: .written(timeout: nil))
        }
        try await firstBytesSent(otherProgress)
        await other.close()
        let closed = await #expect(throws: TetherError.self) { try await closing.value }
        #expect(closed?.code == .connectionClosed)
    }

    @Test("a send waiting to be written ends with CancellationError when its task is cancelled, and the connection goes on")
    func cancelled() async throws {
        let (connection, listener, peer) = try await rawPeer()
        defer { listener.close(); peer.close() }
        let large = pattern(15 << 20)
        let progress = connection.transfers
        let sending = Task {
            try await connection.send(Frame(type: 0x453, serial: 1, payload: large), completion: .written(timeout: nil))
        }
        try await firstBytesSent(progress)
        sending.cancel()
        await #expect(throws: CancellationError.self) { try await sending.value }
        #expect(await connection.state.phase == .connected)
        let reading = Task { try await peer.readFrame(timeout: eventBound) }
        try await connection.send(Frame(type: 0x453, serial: 2, payload: [5]), completion: .written(timeout: eventBound))
        #expect(try await reading.value?.payload == large)
        #expect(try await peer.readFrame()?.serial == 2)
        await connection.close()
    }

    @Test("over wss://, TLS and WebSocket between the frame and the socket: the send returns once the frame's bytes, encrypted and framed, are in the kernel")
    func throughTheLayers() async throws {
        let certificates = try await TestCertificates.shared()
        let (handled, handling) = AsyncStream<Int>.makeStream()
        try await withSecureWebSocketServer(certificates, handlers: { server in
            server.handle(type: 0x454) { request, _ in
                handling.yield(request.payload.count)
                return .noReply
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: webSocketClientTLS(certificates))
            let before = await connection.metrics.bytesOut
            let payload = pattern(2 << 20)
            try await connection.send(Frame(type: 0x454, serial: 1, payload: payload), completion: .written(timeout: eventBound))
            let written = await connection.metrics.bytesOut - before
            // The payload, its WebSocket and TLS headers: all on the socket.
            #expect(written > payload.count)
            #expect(try await collect(1, from: handled, "the frame at the server") == [payload.count])
            await connection.close()
        }
    }
}

/// Records the requests it sees start, get written and end, as lines.
private final class WriteObserver: ConnectionObserver {
    typealias RequestSpan = Int
    private let lines = Mutex<[String]>([])
    private let changed: AsyncStream<Void>.Continuation
    private let changes: AsyncStream<Void>

    init() {
        (changes, changed) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    var recorded: [String] { lines.withLock { $0 } }

    private func record(_ line: String) -> Int {
        let count = lines.withLock { lines in
            lines.append(line)
            return lines.count
        }
        changed.yield()
        return count
    }

    func requestStarted(_ request: ObservedRequest) -> Int {
        record("started \(hex(request.type))")
    }

    func requestWritten(_ request: ObservedRequest, span: Int) {
        _ = record("written \(hex(request.type)) serial \(request.serial) span \(span)")
    }

    func requestEnded(_ request: ObservedRequest, outcome: RequestOutcome, span: Int) {
        _ = record("ended \(hex(request.type)) serial \(request.serial) span \(span)")
    }

    /// Waits, within the bound, for a line that starts with `prefix`.
    func waitFor(_ prefix: String) async throws {
        try await bounded("an observed line starting \(prefix)") { [self] in
            if recorded.contains(where: { $0.hasPrefix(prefix) }) { return }
            for await _ in changes where recorded.contains(where: { $0.hasPrefix(prefix) }) { return }
        }
    }
}

extension WriteCompletionTests {
    @Test("an observer hears when a request is written, with its serial and its span, whether it went at once or waited in the queue; a request that timed out before its bytes went is said to be written only when they go, after its end")
    func observerHearsWrites() async throws {
        let observer = WriteObserver()
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.observer = observer })
            _ = try await connection.request(Request(type: 0x402, json: ["first": true]))
            try await observer.waitFor("written 0x402 serial 1")
            #expect(observer.recorded.contains("written 0x402 serial 1 span 1"))
            #expect(observer.recorded.contains("ended 0x402 serial 1 span 1"))
            await connection.close()
        }

        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        async let accepted = listener.accept()
        let silent = WriteObserver()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.observer = silent })
        let peer = try await accepted
        defer { peer.close() }
        let error = await #expect(throws: TetherError.self) {
            try await connection.request(Request(type: 0x402, payload: pattern(15 << 20)), timeout: .milliseconds(300))
        }
        #expect(error?.code == .timedOut)
        // A small request behind it is queued (the outbound buffer is full), then written
        // once the peer reads.
        let reading = Task {
            var frames: [Frame] = []
            while frames.count < 2, let frame = try await peer.readFrame() { frames.append(frame) }
            return frames.map(\.serial)
        }
        let small = Task { try await connection.request(Request(type: 0x402, json: [:]), timeout: .milliseconds(500)) }
        try await silent.waitFor("written 0x402 serial 2")
        #expect(try await reading.value == [1, 2])
        _ = try? await small.value
        await connection.close()
        let lines = silent.recorded
        let ended = try #require(lines.firstIndex(of: "ended 0x402 serial 1 span 1"))
        let written = try #require(lines.firstIndex(of: "written 0x402 serial 1 span 1"))
        #expect(ended < written, "\(lines)")
        #expect(lines.contains("written 0x402 serial 2 span 3"))
    }
}
