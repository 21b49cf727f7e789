import Testing
@testable import Tether

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
    func setFaults(_ change: (inout LinkFaults) -> Void) async {
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
    _ change: (inout LinkFaults) -> Void = { _ in },
    _ body: (LinkFixture) async throws -> Void
) async throws {
    try await withManualLoop { clock, group in
        let loop = group.loops[0]
        let (a, b) = InMemoryTransport.makePair(
            on: loop,
            clientAddress: SocketAddress(ipAddress: "127.0.9.1", port: 49152)!,
            serverAddress: SocketAddress(ipAddress: "127.0.10.1", port: 30000)!,
            capacity: capacity,
            clientSealed: false,
            serverSealed: false
        )
        var faults = LinkFaults()
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

@Suite("Faults of an in-memory link, at the transport", .timeLimit(.minutes(1)))
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
            #expect(f.server.pieces == [])

            await f.setFaults { $0.toServer.stalled = false }
            #expect(f.server.bytes == Array(0..<25))
            #expect(f.server.sizes == [10, 10, 5])
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
