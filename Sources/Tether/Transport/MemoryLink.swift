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
    private let faultState: Lock<LinkFaults>

    init(id: Int, endpoint: Endpoint, client: InMemoryTransport, server: InMemoryTransport, faults: LinkFaults) {
        self.id = id
        self.endpoint = endpoint
        self.client = client
        self.server = server
        self.faultState = Lock(faults)
    }

    /// The faults in force on the link now.
    package var faults: LinkFaults {
        get { faultState.withLock { $0 } }
        set { faultState.withLock { $0 = newValue } }
    }
}

/// What a ``MemoryLink`` does to the bytes of each direction.
package struct LinkFaults: Sendable, Equatable {
    /// From the client to the server.
    package var toServer = DirectionFaults()
    /// From the server to the client.
    package var toClient = DirectionFaults()

    package init() {}
}

/// What a link does to the bytes of one direction; all off by default, so bytes pass as
/// they would through a socket pair.
package struct DirectionFaults: Sendable, Equatable {
    /// Bytes are held back (a black hole that keeps the connection up) until cleared.
    package var stalled = false
    /// Each delivery carries at most this many bytes, so the reader sees small pieces.
    package var maximumWrite: Int?
    /// Bytes are held until at least `minimum` wait, or the oldest has waited `flushAfter`.
    package var coalesce: Coalescing?
    /// Each write reaches the reader this long after it was made.
    package var delay: Duration?
    /// After this many more bytes have been delivered, the link is reset.
    package var cutAfter: Int?

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
