import Synchronization

/// One connection on a ``MemoryNetwork``: the client's end and the server's end, and the
/// faults that shape the bytes between them.
package final class MemoryLink: Sendable {
    /// The link's number on its network, from 1, in the order links were made.
    package let id: Int
    /// The host and port the client dialed.
    package let endpoint: Endpoint
    /// The client's end.
    package let client: InMemoryTransport
    /// The server's end.
    package let server: InMemoryTransport
    /// The loop both ends run on, where every operation on the link takes place.
    package let loop: EventLoop
    private let toServer: LinkLane
    private let toClient: LinkLane
    private let faultState: Lock<MemoryLinkFaults>
    private let open = Atomic<Bool>(true)

    init(id: Int, endpoint: Endpoint, client: InMemoryTransport, server: InMemoryTransport, faults: MemoryLinkFaults) {
        self.id = id
        self.endpoint = endpoint
        self.client = client
        self.server = server
        self.loop = client.loop
        self.faultState = Lock(faults)
        toServer = LinkLane(loop: client.loop, faults: faults.toServer)
        toClient = LinkLane(loop: client.loop, faults: faults.toClient)
        // Neither end has been handed out yet: nothing else touches them now.
        toServer.reader = server
        toServer.link = self
        toClient.reader = client
        toClient.link = self
        client.lane = toServer
        server.lane = toClient
        server.readLimit = LinkLane.readLimit(for: faults.toServer)
        client.readLimit = LinkLane.readLimit(for: faults.toClient)
        if faults.toServer.cutAfter == 0 || faults.toClient.cutAfter == 0 {
            loop.execute { [toServer, toClient] in
                toServer.pump()
                toClient.pump()
            }
        }
    }

    /// The faults in force on the link now.
    ///
    /// Setting them takes effect on the loop at once: a cleared stall or delay releases
    /// what it held, in order, and a new ``MemoryDirectionFaults/cutAfter`` counts from then.
    package var faults: MemoryLinkFaults {
        get { faultState.withLock { $0 } }
        set { updateFaults { $0 = newValue } }
    }

    /// Changes the faults in one step, as ``faults`` does.
    ///
    /// - Parameter change: Changes the faults in force.
    package func updateFaults(_ change: (inout MemoryLinkFaults) -> Void) {
        // Applied on the loop in the order of the changes: the lock is held while queueing.
        faultState.withLock { faults in
            change(&faults)
            let now = faults
            loop.execute { [toServer, toClient] in
                toServer.apply(now.toServer)
                toClient.apply(now.toClient)
            }
        }
    }

    /// Whether the link still carries bytes: false once it was cut or reset, or either end
    /// closed.
    package var isOpen: Bool { open.load(ordering: .relaxed) }

    /// Bytes put into the server's receive queue so far, injected ones included.
    package var bytesToServer: Int { toServer.delivered.load(ordering: .relaxed) }

    /// Bytes put into the client's receive queue so far, injected ones included.
    package var bytesToClient: Int { toClient.delivered.load(ordering: .relaxed) }

    /// Closes the link both ways in order: each end reads what was delivered to it, then
    /// the end of the stream; what the link still held is dropped.
    package func cut() {
        loop.execute { [self] in sever(reset: false) }
    }

    /// Resets the link: each end reads what was delivered to it, then
    /// ``TetherError/Code/connectionReset``; what the link still held is dropped.
    package func reset() {
        loop.execute { [self] in sever(reset: true) }
    }

    /// Puts `bytes` in one end's receive queue as if the other end had written them, ahead
    /// of whatever the link holds in that direction and past its faults.
    ///
    /// - Parameters:
    ///   - bytes: The bytes.
    ///   - towardServer: Whether the server's end receives them, rather than the client's.
    package func inject(_ bytes: [UInt8], towardServer: Bool) {
        let lane = towardServer ? toServer : toClient
        loop.execute { lane.inject(bytes) }
    }

    /// Ends the link: both lanes drop what they hold, and both ends read the end. Loop
    /// thread only.
    func sever(reset: Bool) {
        guard !toServer.severed else { return }
        open.store(false, ordering: .relaxed)
        toServer.sever()
        toClient.sever()
        server.receiveEndOfStream(reset: reset)
        client.receiveEndOfStream(reset: reset)
    }

    /// One end closed. Loop thread only.
    func endClosed() {
        open.store(false, ordering: .relaxed)
    }
}

/// What a ``MemoryLink`` does to the bytes of each direction.
package struct MemoryLinkFaults: Sendable, Equatable {
    /// From the client to the server.
    package var toServer = MemoryDirectionFaults()
    /// From the server to the client.
    package var toClient = MemoryDirectionFaults()

    package init() {}
}

/// What a link does to the bytes of one direction; all off by default, so bytes pass as
/// they would through a socket pair.
package struct MemoryDirectionFaults: Sendable, Equatable {
    /// Bytes are held back (a black hole that keeps the connection up) until cleared.
    package var stalled = false
    /// Each delivery carries at most this many bytes, so the reader sees small pieces.
    package var maximumWrite: Int?
    /// Bytes are held until at least `minimum` wait, or the oldest has waited `flushAfter`.
    package var coalesce: Coalescing?
    /// Each write reaches the reader this long after it was made.
    package var delay: Duration?
    /// After this many more bytes have been delivered, the link breaks: a reset, or an
    /// orderly end both ways when ``resetOnCut`` is false.
    package var cutAfter: Int?
    /// Whether the break at ``cutAfter`` is a reset (the default) rather than an orderly
    /// end of the stream both ways.
    package var resetOnCut = true
    /// Bytes are delivered at most this fast, on the network's clock, as over a slow link.
    package var bytesPerSecond: Int?

    /// Holding bytes back until enough have gathered.
    package struct Coalescing: Sendable, Equatable {
        package var minimum: Int
        package var flushAfter: Duration

        package init(minimum: Int, flushAfter: Duration) {
            self.minimum = minimum
            self.flushAfter = flushAfter
        }
    }

    package init() {}
}
