import Testing
@testable import Tether
import TetherTesting

/// One end of a link in these tests: keeps each read as a piece, with the loop's time,
/// and the end it heard.
private final class PieceSink: ByteTransportHandler, @unchecked Sendable {
    // @unchecked Sendable: the fields are behind the lock; the handler methods run on the loop.
    struct Piece: Equatable {
        var bytes: [UInt8]
        var at: UInt64
    }

    private let state = Lock<(pieces: [Piece], end: TetherError?)>(([], nil))
    let transport: InMemoryTransport

    init(_ transport: InMemoryTransport) {
        self.transport = transport
        transport.handler = self
    }

    var pieces: [Piece] { state.withLock { $0.pieces } }
    var sizes: [Int] { pieces.map(\.bytes.count) }
    var bytes: [UInt8] { pieces.flatMap(\.bytes) }
    var end: TetherError.Code? { state.withLock { $0.end?.code } }

    func transportRead() {
        let received = Array(transport.buffers.inbound.readableBytesView)
        transport.buffers.inbound.clear()
        let now = transport.loop.now
        state.withLock { $0.pieces.append(Piece(bytes: received, at: now)) }
    }

    func transportClosed(_ error: TetherError) {
        state.withLock { $0.end = error }
    }

    func transportWritable() {}
    func transportSecured() {}
}

/// A link on a manual clock's loop, both ends started with a ``PieceSink`` each.
private struct LinkFixture {
    let clock: ManualClock
    let loop: EventLoop
    let link: MemoryLink
    let client: PieceSink
    let server: PieceSink
    /// The clock's time when the link was made.
    let start: UInt64

    /// Writes `bytes` from `end` and flushes them, then lets the loop settle.
    func write(_ bytes: [UInt8], from end: InMemoryTransport) async throws {
        try await loop.submit {
            end.buffers.outbound.writeBytes(bytes)
            end.flush()
        }
        await clock.settle()
    }

    /// Ends `end`'s stream (after its pending bytes), then lets the loop settle.
    func shutdownOutput(of end: InMemoryTransport) async throws {
        try await loop.submit { end.shutdownOutput() }
        await clock.settle()
    }

    /// Sets the faults and lets the loop apply them.
    func setFaults(_ change: (inout MemoryLinkFaults) -> Void) async {
        link.updateFaults(change)
        await clock.settle()
    }

    /// Reads a loop-thread value of the loop.
    func onLoop<T: Sendable>(_ body: @escaping @Sendable () -> T) async throws -> T {
        try await loop.submit { body() }
    }

    /// `milliseconds` after the start, on the clock.
    func at(_ milliseconds: UInt64) -> UInt64 { start + milliseconds * 1_000_000 }
}

private func withLink(
    capacity: Int = 256 << 10,
    _ change: (inout MemoryLinkFaults) -> Void = { _ in },
    _ body: (LinkFixture) async throws -> Void
) async throws {
    try await withManualLoop { clock, group in
        let loop = group.loops[0]
        let (a, b) = InMemoryTransport.makePair(
            on: loop,
            clientAddress: TetherSocketAddress(ipAddress: "127.0.9.1", port: 49152)!,
            serverAddress: TetherSocketAddress(ipAddress: "127.0.10.1", port: 30000)!,
            capacity: capacity,
            clientSealed: false,
            serverSealed: false
        )
        var faults = MemoryLinkFaults()
        change(&faults)
        let link = MemoryLink(id: 1, endpoint: Endpoint(host: "server", port: 30000), client: a, server: b, faults: faults)
        let (client, server) = try await loop.submit { () throws(TetherError) in
            let sinks = (PieceSink(a), PieceSink(b))
            try a.start()
            try b.start()
            return sinks
        }
        await clock.settle()
        try await body(LinkFixture(clock: clock, loop: loop, link: link, client: client, server: server, start: clock.now))
    }
}

@Suite("Faults of an in-memory link, at the transport", .timeLimit(.guarded))
struct MemoryLinkTests {
    @Test("a stalled direction holds bytes and its end of stream with no error, the other direction flows, and clearing the stall delivers them in order")
    func stall() async throws {
        try await withLink({ $0.toServer.stalled = true }) { f in
            try await f.write([1, 2, 3], from: f.link.client)
            try await f.write([4, 5], from: f.link.client)
            try await f.write([6], from: f.link.server)
            try await f.shutdownOutput(of: f.link.client)
            await f.clock.advance(by: .seconds(60))
            #expect(f.server.pieces == [])
            #expect(f.server.end == nil)
            #expect(f.client.bytes == [6])
            #expect(f.link.bytesToServer == 0)
            #expect(f.link.bytesToClient == 1)
            // Taken by the link, as a socket's send buffer takes them.
            #expect(try await f.onLoop { f.link.client.bytesWritten } == 5)
            #expect(f.link.isOpen)

            await f.setFaults { $0.toServer.stalled = false }
            #expect(f.server.pieces == [.init(bytes: [1, 2, 3, 4, 5], at: f.at(60_000))])
            #expect(f.server.end == .peerClosed)
            #expect(f.link.bytesToServer == 5)
            // The server's end closed on reading the end, and the client then read its end.
            #expect(f.client.end == .peerClosed)
        }
    }

    @Test("bytes a stall holds count against the reader's capacity: the writer keeps the rest until the reader takes some")
    func stallFillsCapacity() async throws {
        try await withLink(capacity: 10, { $0.toServer = .init(); $0.toServer.stalled = true }) { f in
            try await f.write(Array(0..<25), from: f.link.client)
            #expect(try await f.onLoop { f.link.client.bytesWritten } == 10)
            #expect(try await f.onLoop { f.link.client.buffers.pendingOutboundBytes } == 15)
            // A later flush finds no room either: the held bytes fill it.
            try await f.write(Array(25..<30), from: f.link.client)
            #expect(try await f.onLoop { f.link.client.bytesWritten } == 10)
            #expect(try await f.onLoop { f.link.client.buffers.pendingOutboundBytes } == 20)
            #expect(f.server.pieces == [])

            await f.setFaults { $0.toServer.stalled = false }
            #expect(f.server.bytes == Array(0..<30))
            #expect(f.server.sizes == [10, 10, 10])
            #expect(try await f.onLoop { f.link.client.buffers.pendingOutboundBytes } == 0)
        }
    }

    @Test("a maximum write cuts each delivery into pieces of at most that size, each a read of its own, then the end")
    func pieces() async throws {
        try await withLink({ $0.toServer.maximumWrite = 3 }) { f in
            try await f.write(Array(0..<10), from: f.link.client)
            #expect(f.server.sizes == [3, 3, 3, 1])
            #expect(f.server.bytes == Array(0..<10))
            #expect(try await f.onLoop { f.link.server.reads } == 4)
            // The other direction is whole.
            try await f.write(Array(0..<10), from: f.link.server)
            #expect(f.client.sizes == [10])
            try await f.write(Array(10..<12), from: f.link.client)
            try await f.shutdownOutput(of: f.link.client)
            #expect(f.server.sizes == [3, 3, 3, 1, 2])
            #expect(f.server.end == .peerClosed)
        }
    }

    @Test("coalescing holds bytes until the minimum has gathered or the oldest waited flushAfter, then delivers them in one piece; the end of stream flushes")
    func coalescing() async throws {
        try await withLink({ $0.toServer.coalesce = .init(minimum: 8, flushAfter: .milliseconds(50)) }) { f in
            try await f.write([1, 2, 3], from: f.link.client)
            await f.clock.advance(by: .milliseconds(20))
            try await f.write([4, 5, 6], from: f.link.client)
            await f.clock.advance(by: .milliseconds(30) - .nanoseconds(1))
            #expect(f.server.pieces == [])
            #expect(f.link.bytesToServer == 0)
            await f.clock.advance(by: .nanoseconds(1))
            #expect(f.server.pieces == [.init(bytes: [1, 2, 3, 4, 5, 6], at: f.at(50))])

            // Enough gathered: at once, with no time passing.
            try await f.write([7, 8, 9, 10, 11], from: f.link.client)
            #expect(f.server.pieces.count == 1)
            try await f.write([12, 13, 14], from: f.link.client)
            #expect(f.server.pieces.last == .init(bytes: [7, 8, 9, 10, 11, 12, 13, 14], at: f.at(50)))

            try await f.write([15, 16], from: f.link.client)
            #expect(f.server.pieces.count == 2)
            try await f.shutdownOutput(of: f.link.client)
            #expect(f.server.pieces.last == .init(bytes: [15, 16], at: f.at(50)))
            #expect(f.server.end == .peerClosed)
            #expect(f.link.bytesToServer == 16)
        }
    }

    @Test("a delay delivers each write that long after it was flushed, in order, and the end of stream after them")
    func delay() async throws {
        try await withLink({ $0.toClient.delay = .milliseconds(100) }) { f in
            try await f.write([1], from: f.link.server)
            await f.clock.advance(by: .milliseconds(30))
            try await f.write([2, 3], from: f.link.server)
            await f.clock.advance(by: .milliseconds(70) - .nanoseconds(1))
            #expect(f.client.pieces == [])
            await f.clock.advance(by: .nanoseconds(1))
            #expect(f.client.pieces == [.init(bytes: [1], at: f.at(100))])
            await f.clock.advance(by: .milliseconds(30))
            #expect(f.client.pieces == [.init(bytes: [1], at: f.at(100)), .init(bytes: [2, 3], at: f.at(130))])

            try await f.write([4], from: f.link.server)
            try await f.shutdownOutput(of: f.link.server)
            await f.clock.advance(by: .milliseconds(100) - .nanoseconds(1))
            #expect(f.client.pieces.count == 2)
            #expect(f.client.end == nil)
            await f.clock.advance(by: .nanoseconds(1))
            #expect(f.client.pieces.last == .init(bytes: [4], at: f.at(230)))
            #expect(f.client.end == .peerClosed)
        }
    }

    @Test("clearing a delay releases the writes it held at once, in order")
    func delayCleared() async throws {
        try await withLink({ $0.toServer.delay = .seconds(1) }) { f in
            try await f.write([1], from: f.link.client)
            await f.clock.advance(by: .milliseconds(10))
            try await f.write([2], from: f.link.client)
            await f.setFaults { $0.toServer.delay = nil }
            #expect(f.server.pieces == [.init(bytes: [1, 2], at: f.at(10))])
        }
    }

    @Test("a cut after n bytes delivers exactly n, then resets the link: both ends read connectionReset")
    func cutAfterResets() async throws {
        try await withLink({ $0.toServer.cutAfter = 5 }) { f in
            try await f.write([1, 2, 3], from: f.link.client)
            #expect(f.link.isOpen)
            try await f.write([4, 5, 6, 7, 8], from: f.link.client)
            #expect(f.server.bytes == [1, 2, 3, 4, 5])
            #expect(f.server.end == .connectionReset)
            #expect(f.client.end == .connectionReset)
            #expect(f.link.bytesToServer == 5)
            #expect(!f.link.isOpen)
        }
    }

    @Test("a cut after n bytes that is not a reset ends both streams in order after the n bytes")
    func cutAfterCloses() async throws {
        try await withLink({ $0.toClient.cutAfter = 4; $0.toClient.resetOnCut = false }) { f in
            try await f.write([9], from: f.link.client)
            try await f.write(Array(0..<10), from: f.link.server)
            #expect(f.client.bytes == [0, 1, 2, 3])
            #expect(f.client.end == .peerClosed)
            #expect(f.server.bytes == [9])
            #expect(f.server.end == .peerClosed)
        }
    }

    @Test("a cut counts the bytes delivered from when it was set, and 0 breaks the link at once")
    func cutCountsFromNow() async throws {
        try await withLink { f in
            try await f.write(Array(0..<10), from: f.link.client)
            await f.setFaults { $0.toServer = .init(); $0.toServer.cutAfter = 4 }
            #expect(f.server.end == nil)
            try await f.write(Array(10..<20), from: f.link.client)
            #expect(f.server.bytes == Array(0..<14))
            #expect(f.server.end == .connectionReset)
        }
        try await withLink { f in
            await f.setFaults { $0.toClient.cutAfter = 0 }
            #expect(f.client.end == .connectionReset)
            #expect(f.server.end == .connectionReset)
        }
    }

    @Test("cut() ends both streams after what was delivered, drops what the link held, and writes after it go nowhere")
    func cut() async throws {
        try await withLink({ $0.toClient.stalled = true }) { f in
            try await f.write([1, 2], from: f.link.client)
            try await f.write([3], from: f.link.server)
            f.link.cut()
            await f.clock.settle()
            #expect(f.server.bytes == [1, 2])
            #expect(f.server.end == .peerClosed)
            #expect(f.client.bytes == [])
            #expect(f.client.end == .peerClosed)
            #expect(!f.link.isOpen)
            #expect(f.link.bytesToClient == 0)
        }
    }

    @Test("reset() makes both ends read connectionReset after what was delivered")
    func reset() async throws {
        try await withLink { f in
            try await f.write([1, 2], from: f.link.client)
            try await f.write([3], from: f.link.server)
            // Delivered and not yet read: the reset comes after them.
            try await f.loop.submit {
                f.link.client.buffers.outbound.writeBytes([4])
                f.link.client.flush()
                f.link.reset()
            }
            await f.clock.settle()
            #expect(f.server.bytes == [1, 2, 4])
            #expect(f.server.end == .connectionReset)
            #expect(f.client.bytes == [3])
            #expect(f.client.end == .connectionReset)
        }
    }

    @Test("injected bytes reach the reader past the faults and ahead of what the link holds, and count as delivered")
    func inject() async throws {
        try await withLink({ $0.toServer.stalled = true }) { f in
            try await f.write([1, 2], from: f.link.client)
            f.link.inject([0xFF, 0xFE], towardServer: true)
            await f.clock.settle()
            #expect(f.server.bytes == [0xFF, 0xFE])
            #expect(f.link.bytesToServer == 2)
            await f.setFaults { $0.toServer.stalled = false }
            #expect(f.server.bytes == [0xFF, 0xFE, 1, 2])
            #expect(f.link.bytesToServer == 4)
            f.link.inject([7], towardServer: false)
            await f.clock.settle()
            #expect(f.client.bytes == [7])
            #expect(f.link.bytesToClient == 1)
        }
    }

    @Test("an end that closes marks the link closed; without faults, bytes go straight through and are counted")
    func plainLink() async throws {
        try await withLink { f in
            try await f.write(Array(0..<100), from: f.link.client)
            #expect(f.server.sizes == [100])
            #expect(f.link.bytesToServer == 100)
            #expect(f.link.isOpen)
            try await f.loop.submit { f.link.client.close() }
            await f.clock.settle()
            #expect(!f.link.isOpen)
            #expect(f.server.end == .peerClosed)
        }
    }
}

/// A server on an in-memory network on a manual clock, with a reverse handler (type 0x500:
/// the payload reversed) and the echo handlers, for connections to dial.
private struct NetworkFixture {
    let clock: ManualClock
    let group: TetherEventLoopGroup
    let network: MemoryNetwork
    let endpoint: Endpoint
    let server: Server

    /// A connection to the server, not connected, on the network.
    func connection(_ change: (inout ConnectionConfiguration) -> Void = { _ in }) -> Connection {
        Connection(to: endpoint, configuration: testConfiguration {
            $0.eventLoopGroup = group
            $0.network = network
            change(&$0)
        })
    }

    /// Link `number`, once made.
    func link(_ number: Int) async throws -> MemoryLink {
        try await bounded("link \(number)") { await network.waitForLinks(number) }
        return network.links[number - 1]
    }

    /// Makes a request 0x500 and returns its key once it has been written and flushed.
    func startRequest(_ payload: [UInt8], on connection: Connection) async throws -> (Connection.RequestKey, Task<Result<Response, any Error>, Never>) {
        let (made, feed) = AsyncStream<Connection.RequestKey>.makeStream()
        let pending = Task {
            await connection.observedRequest(Request(type: 0x500, payload: payload), timeout: .seconds(60), made: { _, key in feed.yield(key) }, ended: { _, _ in })
        }
        let key = try await collect(1, from: made, "the request to be made")[0]
        // The write is flushed at the end of the loop turn that made it.
        await clock.settle()
        return (key, pending)
    }
}

private func withNetworkServer(_ body: (NetworkFixture) async throws -> Void) async throws {
    try await withManualLoop { clock, group in
        let network = MemoryNetwork(loop: group.loops[0])
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.eventLoopGroup = group
        configuration.network = network
        let server = Server(configuration: configuration)
        echoHandlers(server)
        server.handle(type: 0x500) { request, _ in Response(payload: request.payload.reversed()) }
        let running = Task { try await server.run() }
        let result: Result<Void, any Error>
        do {
            let address = try await bounded("server to listen") { try await server.listeningAddress() }
            let fixture = NetworkFixture(clock: clock, group: group, network: network, endpoint: Endpoint(host: "127.0.0.1", port: address.port), server: server)
            result = .success(try await body(fixture))
        } catch {
            result = .failure(error)
        }
        running.cancel()
        try await bounded("the server to stop after cancellation") { try await running.value }
        try result.get()
    }
}

@Suite("Faults of an in-memory link, between a real server and connection", .timeLimit(.guarded))
struct MemoryLinkEndToEndTests {
    @Test("frames cut into 1-byte pieces both ways still decode: the handshake and a request of 300 bytes, each byte a read of its own")
    func bytePieces() async throws {
        try await withNetworkServer { f in
            f.network.defaultFaults.toServer.maximumWrite = 1
            f.network.defaultFaults.toClient.maximumWrite = 1
            let connection = f.connection()
            try await connection.connect()
            let link = try await f.link(1)
            let payload = (0..<300).map { UInt8($0 % 251) }
            let response = try await bounded("the response") { try await connection.request(Request(type: 0x500, payload: payload)) }
            #expect(response.payload == payload.reversed())
            await f.clock.settle()
            let (serverReads, clientReads) = try await f.group.loops[0].submit { (link.server.reads, link.client.reads) }
            #expect(serverReads == link.bytesToServer)
            #expect(clientReads == link.bytesToClient)
            #expect(link.bytesToServer > 300)
            await connection.close()
        }
    }

    @Test("a link cut in the middle of a request fails it with connectionLost; the connection reconnects on a new link and the next request succeeds")
    func cutMidRequest() async throws {
        try await withNetworkServer { f in
            let connection = f.connection {
                $0.reconnect = .backoff(initialDelay: .seconds(1), multiplier: 2, jitter: 0)
            }
            let watcher = StateWatcher(connection)
            try await connection.connect()
            let first = TestLink(try await f.link(1))
            #expect(first.number == 1)
            #expect(first.endpoint == f.endpoint)
            let before = first.bytesToServer
            first.faults.toServer = .cut(after: 3)

            let outcome = try await bounded("the cut request") { () async -> Result<Response, any Error> in
                do {
                    return .success(try await connection.request(Request(type: 0x500, payload: Array(repeating: 7, count: 100))))
                } catch {
                    return .failure(error)
                }
            }
            #expect(throws: TetherError.self) { try outcome.get() }
            if case .failure(let error as TetherError) = outcome {
                #expect(error.code == .connectionLost)
                #expect((error.underlying as? TetherError)?.code == .connectionReset)
            }
            #expect(first.bytesToServer == before + 3)
            #expect(!first.isOpen)

            try await watcher.next(.reconnecting)
            await f.clock.advance(by: .seconds(1))
            let second = TestLink(try await f.link(2))
            try await watcher.next(.connected)
            #expect(second.isOpen)
            #expect(second.faults == .none)
            let response = try await bounded("the request after the reconnect") { try await connection.request(Request(type: 0x500, payload: [1, 2, 3])) }
            #expect(response.payload == [3, 2, 1])
            #expect(f.network.links.count == 2)
            await connection.close()
        }
    }

    @Test("a stalled link keeps the connection up until its heartbeats miss: it ends interval × (misses + 1) after the last ack, not 1 ns sooner")
    func stallDetectedByHeartbeats() async throws {
        try await withNetworkServer { f in
            let interval: Duration = .seconds(10)
            let connection = f.connection {
                $0.heartbeat = .every(interval, timeout: interval, maximumMissed: 3)
            }
            let heartbeats = HeartbeatLog(connection)
            let watcher = StateWatcher(connection)
            try await connection.connect()
            let start = f.clock.now
            // The first heartbeat goes out at once and is answered before the stall.
            #expect(try await heartbeats.take(2).map(\.outcome) == [.sent, .acked])
            let link = TestLink(try await f.link(1))
            link.faults = .both(.stalled)
            await f.clock.settle()

            await f.clock.advance(by: interval * 4 - .nanoseconds(1))
            #expect(await connection.currentState.phase == .connected)
            #expect(link.isOpen)
            await f.clock.advance(by: .nanoseconds(1))
            #expect(f.clock.now == start + 40_000_000_000)
            let closed = try await watcher.next(.closed)
            #expect(closed.reason?.code == .heartbeatTimeout)
            #expect(await connection.metrics.heartbeatsMissed == 3)
        }
    }

    @Test("a request's answer is as late as the link makes it: coalescing toward the server and a delay toward the client add up, to the nanosecond")
    func delayAndCoalescing() async throws {
        try await withNetworkServer { f in
            let connection = f.connection()
            try await connection.connect()
            let link = TestLink(try await f.link(1))
            link.faults = LinkFaults(
                toServer: .coalescing(minimum: 1 << 20, flushAfter: .milliseconds(20)),
                toClient: .delayed(by: .milliseconds(50))
            )
            await f.clock.settle()
            let start = f.clock.now
            let (key, pending) = try await f.startRequest([1, 2, 3, 4], on: connection)
            await f.clock.advance(by: .milliseconds(70) - .nanoseconds(1))
            #expect(await connection.isPending(key))
            await f.clock.advance(by: .nanoseconds(1))
            #expect(f.clock.now == start + 70_000_000)
            let outcome = try await bounded("the answer") { await pending.value }
            #expect(try outcome.get().payload == [4, 3, 2, 1])
            await connection.close()
        }
    }

    @Test("a link limited to 4,000 bytes a second toward the server delivers a 16 KB request in 3.9 s of the network's clock, a tenth of a second's bytes at a time")
    func bandwidthLimit() async throws {
        try await withNetworkServer { f in
            let connection = f.connection()
            try await connection.connect()
            let link = TestLink(try await f.link(1))
            link.faults = LinkFaults(toServer: .limited(bytesPerSecond: 4_000))
            await f.clock.settle()
            let before = link.bytesToServer
            let payload = [UInt8](repeating: 5, count: 16_000)
            let (key, pending) = try await f.startRequest(payload, on: connection)
            // A full bucket (400 bytes) at once, then 4,000 bytes a second.
            await f.clock.advance(by: .seconds(2))
            #expect(link.bytesToServer - before <= 400 + 8_000)
            #expect(link.bytesToServer - before >= 8_000)
            await f.clock.advance(by: .milliseconds(1_800))
            #expect(await connection.isPending(key))
            await f.clock.advance(by: .milliseconds(200))
            let outcome = try await bounded("the answer") { await pending.value }
            #expect(try outcome.get().payload == payload.reversed())
            #expect(link.bytesToServer - before == 16_012)
            await connection.close()
        }
    }

    @Test("part of a frame injected toward the server is dated when it was read: the server ends the peer exactly its frame completion timeout later")
    func partialFrameTimesOut() async throws {
        try await withNetworkServer { f in
            let connection = f.connection()
            let events = f.server.events
            try await connection.connect()
            let response = try await bounded("a first request") { try await connection.request(Request(type: 0x500, payload: [1])) }
            #expect(response.payload == [1])
            let link = TestLink(try await f.link(1))
            await f.clock.advance(by: .seconds(5))
            let start = f.clock.now
            link.inject(Array(seedBytes(type: 0x500, serial: 9, payload: [1, 2, 3]).prefix(5)), toward: .toServer)
            await f.clock.settle()
            await f.clock.advance(by: .seconds(30) - .nanoseconds(1))
            #expect(await f.server.metrics().frameTimeouts == 0)
            #expect(link.isOpen)
            await f.clock.advance(by: .nanoseconds(1))
            #expect(f.clock.now == start + 30_000_000_000)
            let gone = try await firstEvent(events, "the peer's end") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .frameTimeout)
            #expect(gone.reason?.message == "peer 127.0.9.1:49152 did not finish a frame within 30 s of its first byte (5 bytes of it received)")
            #expect(await f.server.metrics().frameTimeouts == 1)
        }
    }

    @Test("bytes injected toward a client that are no frame end its connection with a protocol error")
    func injectGarbage() async throws {
        try await withNetworkServer { f in
            let connection = f.connection()
            let watcher = StateWatcher(connection)
            try await connection.connect()
            let link = TestLink(try await f.link(1))
            await f.clock.settle()
            let before = link.bytesToClient
            link.inject(Array("HTTP/1.1 200 OK\r\n\r\n".utf8), toward: .toClient)
            let closed = try await watcher.next(.closed)
            #expect(closed.reason?.code == .protocolError)
            #expect(link.bytesToClient == before + 19)
        }
    }
}
