public import Tether

/// One connection on a test network: the client's end, the server's end, and the faults
/// between them, which a test changes while the connection runs.
///
/// Each time a client dials a server on the network, the network makes a link; a test
/// finds it by its number (from 1, in the order links were made) and shapes the bytes of
/// each direction with ``faults``: it stalls them, cuts them into small pieces, gathers
/// them, delays them, or breaks the link after a number of bytes. It can also break the
/// link at once (``cut()``, ``reset()``) or slip bytes into one end (``inject(_:toward:)``).
///
/// Every fault acts on the network's event loop, so timers (a delay, a coalescing
/// deadline) fire only as the test's clock advances. Every member may be used from any
/// thread or task; changes take effect on the loop, before anything the loop does after
/// the call returns.
///
/// ```swift
/// let link = await network.link(1)
/// link.faults.toClient = .stalled      // replies stop arriving; the connection stays up
/// await network.advance(by: .seconds(30))
/// link.faults.toClient = .none         // and are delivered, in order
/// ```
public final class TestLink: Sendable {
    private let link: MemoryLink

    /// Wraps one link of an in-memory network.
    ///
    /// - Parameter link: The link.
    package init(_ link: MemoryLink) {
        self.link = link
    }

    /// The link's number on its network: 1 for the first connection made, and so on.
    public var number: Int { link.id }

    /// The host and port the client dialed.
    public var endpoint: Endpoint { link.endpoint }

    /// The client's address, as the server sees it: a port from 49152 up on 127.0.9.1.
    public var clientAddress: TetherSocketAddress { link.server.remoteAddress }

    /// The server's address, as the client sees it: an address in 127.0.10.0/24 for the
    /// server's host name, with the port it listens on.
    public var serverAddress: TetherSocketAddress { link.client.remoteAddress }

    /// The faults in force on the link; none (``LinkFaults/none``) unless the network's
    /// default faults or the test set some.
    ///
    /// Setting them takes effect at once: clearing a stall or a delay releases the bytes
    /// it held, in order; a new ``DirectionFaults/cutAfter`` counts the bytes delivered
    /// from then on. To change one field, assign it (`link.faults.toServer.stalled = true`)
    /// or use ``updateFaults(_:)``.
    public var faults: LinkFaults {
        get { LinkFaults(link.faults) }
        set { link.faults = newValue.memoryFaults }
    }

    /// Changes the faults in one step, with no other change in between.
    ///
    /// - Parameter change: Changes the faults in force; called once, at once.
    public func updateFaults(_ change: (inout LinkFaults) -> Void) {
        link.updateFaults { faults in
            var mirror = LinkFaults(faults)
            change(&mirror)
            faults = mirror.memoryFaults
        }
    }

    /// Closes the link both ways in order, as two hosts that both close their sockets do.
    ///
    /// Each end reads the bytes already delivered to it, then the end of the stream
    /// (``Tether/TetherError/Code/peerClosed``). Bytes the link still held (stalled, delayed,
    /// gathering) are dropped; bytes written afterwards go nowhere.
    public func cut() {
        link.cut()
    }

    /// Resets the link, as a middlebox that drops the connection does.
    ///
    /// Each end reads the bytes already delivered to it, then fails with
    /// ``Tether/TetherError/Code/connectionReset``. Bytes the link still held are dropped.
    public func reset() {
        link.reset()
    }

    /// Puts `bytes` in one end's receive queue as if the other end had written them.
    ///
    /// They arrive ahead of whatever the link holds in that direction and pass none of
    /// its faults; on a link that was cut or reset, they are dropped.
    ///
    /// - Parameters:
    ///   - bytes: The bytes, in the order the end reads them.
    ///   - direction: ``LinkDirection/toServer`` for the server's end to read them,
    ///     ``LinkDirection/toClient`` for the client's.
    public func inject(_ bytes: [UInt8], toward direction: LinkDirection) {
        link.inject(bytes, towardServer: direction == .toServer)
    }

    /// The bytes delivered to the server's end so far, injected ones included; bytes the
    /// link holds back are not counted until they are delivered.
    public var bytesToServer: Int { link.bytesToServer }

    /// The bytes delivered to the client's end so far, injected ones included; bytes the
    /// link holds back are not counted until they are delivered.
    public var bytesToClient: Int { link.bytesToClient }

    /// Whether the link still carries bytes: `false` once it was cut or reset, by a call
    /// or by ``DirectionFaults/cutAfter``, or once either end closed.
    public var isOpen: Bool { link.isOpen }
}

/// One of the two directions of a ``TestLink``.
public enum LinkDirection: Sendable, Hashable {
    /// From the client to the server.
    case toServer
    /// From the server to the client.
    case toClient
}

/// What a ``TestLink`` does to the bytes of each direction.
///
/// ```swift
/// link.faults = LinkFaults(toServer: .pieces(of: 1), toClient: .delayed(by: .milliseconds(50)))
/// ```
public struct LinkFaults: Sendable, Equatable {
    /// What happens to the bytes from the client to the server; none by default.
    public var toServer: DirectionFaults
    /// What happens to the bytes from the server to the client; none by default.
    public var toClient: DirectionFaults

    /// Faults for each direction.
    ///
    /// - Parameters:
    ///   - toServer: For the bytes from the client to the server; none by default.
    ///   - toClient: For the bytes from the server to the client; none by default.
    public init(toServer: DirectionFaults = .none, toClient: DirectionFaults = .none) {
        self.toServer = toServer
        self.toClient = toClient
    }

    /// No faults: the bytes pass as through a socket pair.
    public static let none = LinkFaults()

    /// The same faults both ways.
    ///
    /// - Parameter faults: The faults for each direction.
    /// - Returns: Faults with `faults` for both directions.
    public static func both(_ faults: DirectionFaults) -> LinkFaults {
        LinkFaults(toServer: faults, toClient: faults)
    }

    /// The faults of the directions by name.
    ///
    /// - Parameter direction: Which direction.
    /// - Returns: The faults of that direction.
    public subscript(direction: LinkDirection) -> DirectionFaults {
        get { direction == .toServer ? toServer : toClient }
        set {
            if direction == .toServer { toServer = newValue } else { toClient = newValue }
        }
    }

    /// The faults of an in-memory link, as this value.
    ///
    /// - Parameter faults: The link's faults.
    package init(_ faults: MemoryLinkFaults) {
        self.init(toServer: DirectionFaults(faults.toServer), toClient: DirectionFaults(faults.toClient))
    }

    /// This value as the faults of an in-memory link.
    package var memoryFaults: MemoryLinkFaults {
        var faults = MemoryLinkFaults()
        faults.toServer = toServer.memoryFaults
        faults.toClient = toClient.memoryFaults
        return faults
    }
}

/// What a ``TestLink`` does to the bytes of one direction; every fault is off by default,
/// so bytes pass as they would through a socket pair.
///
/// The faults act in this order: each write waits its ``delay``; bytes then gather
/// (``coalesce``); a ``stalled-swift.property`` direction holds them; they are delivered in pieces of at
/// most ``maximumWrite`` bytes; after ``cutAfter`` delivered bytes, the link breaks. Bytes
/// the link holds count against the receiving end's buffer (256 KiB), as bytes in flight
/// fill a socket's buffers: a writer whose bytes are held stops writing once it is full.
/// An orderly end of the stream follows the bytes through every fault (and flushes what
/// gathers); a reset overtakes them.
public struct DirectionFaults: Sendable, Equatable {
    /// Whether bytes are held back, not delivered and with no error, as a black hole that
    /// keeps the connection up does; `false` by default. Clearing it delivers them in order.
    public var stalled: Bool
    /// The most bytes one delivery carries, so the reader sees small pieces, each read on
    /// its own; `nil` (whole writes, up to 64 KiB a read) by default. Values below 1 count
    /// as 1.
    public var maximumWrite: Int?
    /// Holding bytes back until enough have gathered; `nil` (each write goes on at once)
    /// by default.
    public var coalesce: Coalescing?
    /// How long each write takes to reach the reader, in order; `nil` (no delay) by
    /// default. The delay runs on the network's clock.
    public var delay: Duration?
    /// After this many more bytes have been delivered, the link breaks (``resetOnCut``
    /// says how); `nil` (never) by default. Counted from when the fault was set; 0 breaks
    /// the link at once.
    public var cutAfter: Int?
    /// Whether the break at ``cutAfter`` resets the link (both ends fail with
    /// ``Tether/TetherError/Code/connectionReset``), rather than closing it in order (both read
    /// the end of the stream); `true` by default.
    public var resetOnCut: Bool
    /// The most bytes a second delivered, on the network's clock, as over a slow link; `nil`
    /// (as fast as the reader takes them) by default. Bytes held back fill the reader's
    /// capacity, so the writer's own buffer grows as a socket's would.
    public var bytesPerSecond: Int?

    /// Holding bytes back until enough have gathered, as Nagle's algorithm or a batching
    /// middlebox does.
    public struct Coalescing: Sendable, Equatable {
        /// How many bytes must wait before they go on, together.
        public var minimum: Int
        /// How long the oldest waiting byte waits at most, on the network's clock; then
        /// whatever waits goes on, together.
        public var flushAfter: Duration

        /// A coalescing rule.
        ///
        /// - Parameters:
        ///   - minimum: How many bytes must wait before they go on.
        ///   - flushAfter: How long the oldest waiting byte waits at most.
        public init(minimum: Int, flushAfter: Duration) {
            self.minimum = minimum
            self.flushAfter = flushAfter
        }
    }

    /// Faults for one direction; every one is off unless given.
    ///
    /// - Parameters:
    ///   - stalled: Whether bytes are held back; `false` by default.
    ///   - maximumWrite: The most bytes one delivery carries; `nil` by default.
    ///   - coalesce: Holding bytes back until enough have gathered; `nil` by default.
    ///   - delay: How long each write takes to arrive; `nil` by default.
    ///   - cutAfter: The bytes delivered before the link breaks; `nil` by default.
    ///   - resetOnCut: Whether that break is a reset; `true` by default.
    ///   - bytesPerSecond: The most bytes a second delivered; `nil` by default.
    public init(
        stalled: Bool = false,
        maximumWrite: Int? = nil,
        coalesce: Coalescing? = nil,
        delay: Duration? = nil,
        cutAfter: Int? = nil,
        resetOnCut: Bool = true,
        bytesPerSecond: Int? = nil
    ) {
        self.bytesPerSecond = bytesPerSecond
        self.stalled = stalled
        self.maximumWrite = maximumWrite
        self.coalesce = coalesce
        self.delay = delay
        self.cutAfter = cutAfter
        self.resetOnCut = resetOnCut
    }

    /// No faults: bytes pass as through a socket pair.
    public static let none = DirectionFaults()

    /// Bytes are held back until the stall is cleared; the connection stays up.
    public static let stalled = DirectionFaults(stalled: true)

    /// Bytes arrive in pieces of at most `size` bytes, each read on its own.
    ///
    /// - Parameter size: The most bytes one piece carries (1 for byte by byte).
    /// - Returns: Faults that cut deliveries into pieces.
    public static func pieces(of size: Int) -> DirectionFaults {
        DirectionFaults(maximumWrite: size)
    }

    /// Bytes wait until `minimum` have gathered or the oldest has waited `flushAfter`,
    /// then arrive together.
    ///
    /// - Parameters:
    ///   - minimum: How many bytes must wait before they go on.
    ///   - flushAfter: How long the oldest waiting byte waits at most.
    /// - Returns: Faults that gather bytes.
    public static func coalescing(minimum: Int, flushAfter: Duration) -> DirectionFaults {
        DirectionFaults(coalesce: Coalescing(minimum: minimum, flushAfter: flushAfter))
    }

    /// Each write arrives `delay` after it was sent, in order.
    ///
    /// - Parameter delay: How long each write takes to arrive.
    /// - Returns: Faults that delay bytes.
    public static func delayed(by delay: Duration) -> DirectionFaults {
        DirectionFaults(delay: delay)
    }

    /// Bytes arrive at most `bytesPerSecond` a second, on the network's clock: a slow link.
    ///
    /// - Parameter bytesPerSecond: The link's rate.
    /// - Returns: Faults that limit the rate.
    public static func limited(bytesPerSecond: Int) -> DirectionFaults {
        DirectionFaults(bytesPerSecond: bytesPerSecond)
    }

    /// The link breaks once `count` more bytes have been delivered in this direction.
    ///
    /// - Parameters:
    ///   - count: The bytes delivered before the break; 0 breaks the link at once.
    ///   - reset: Whether the break is a reset (the default) rather than an orderly end
    ///     of the stream both ways.
    /// - Returns: Faults that break the link.
    public static func cut(after count: Int, reset: Bool = true) -> DirectionFaults {
        DirectionFaults(cutAfter: count, resetOnCut: reset)
    }

    /// The faults of one direction of an in-memory link, as this value.
    ///
    /// - Parameter faults: The direction's faults.
    package init(_ faults: MemoryDirectionFaults) {
        self.init(
            stalled: faults.stalled,
            maximumWrite: faults.maximumWrite,
            coalesce: faults.coalesce.map { Coalescing(minimum: $0.minimum, flushAfter: $0.flushAfter) },
            delay: faults.delay,
            cutAfter: faults.cutAfter,
            resetOnCut: faults.resetOnCut,
            bytesPerSecond: faults.bytesPerSecond
        )
    }

    /// This value as the faults of one direction of an in-memory link.
    package var memoryFaults: MemoryDirectionFaults {
        var faults = MemoryDirectionFaults()
        faults.stalled = stalled
        faults.maximumWrite = maximumWrite
        faults.coalesce = coalesce.map { MemoryDirectionFaults.Coalescing(minimum: $0.minimum, flushAfter: $0.flushAfter) }
        faults.delay = delay
        faults.cutAfter = cutAfter
        faults.resetOnCut = resetOnCut
        faults.bytesPerSecond = bytesPerSecond
        return faults
    }
}
