public import Tether
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A UDP socket on one of Tether's event loops: send datagrams to any address, and read the
/// datagrams that arrive, with their senders, as an async sequence.
///
/// ```swift
/// let socket = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
/// try socket.send(Array("ping".utf8), to: peerAddress)
/// for try await datagram in socket.datagrams {
///     print(datagram.sender, datagram.bytes)
/// }
/// ```
///
/// Everything the socket holds is bounded by its ``DatagramConfiguration``: at most
/// ``DatagramConfiguration/receiveBufferCount`` datagrams wait for the reader (the newest
/// is dropped and counted in ``droppedDatagrams`` when that many do), and a datagram larger
/// than ``DatagramConfiguration/maximumDatagramSize`` is neither sent nor delivered cut.
/// Sends never wait: a datagram the kernel has no room for fails at once. Close the socket
/// with ``close()`` (or let it go: its `deinit` closes it), which ends ``datagrams``.
public final class DatagramSocket: Sendable {
    let channel: DatagramChannel

    /// The address the socket is bound to, with the port the system chose for port 0.
    public var localAddress: TetherSocketAddress { channel.localAddress }

    /// The address given to ``connect(to:)``, or `nil` while the socket is not connected.
    public var remoteAddress: TetherSocketAddress? { channel.state.withLock { $0.remote } }

    /// The datagrams that arrived while ``DatagramConfiguration/receiveBufferCount`` were
    /// already waiting for the reader, and were dropped.
    public var droppedDatagrams: Int { channel.state.withLock { $0.inbox.droppedCount } }

    /// The datagrams that arrived larger than ``DatagramConfiguration/maximumDatagramSize``,
    /// were cut by the kernel, and were dropped.
    public var truncatedDatagrams: Int { channel.state.withLock { $0.inbox.truncatedCount } }

    /// Whether ``close()`` was called.
    public var isClosed: Bool { channel.state.withLock { $0.inbox.isClosed } }

    private init(channel: DatagramChannel) {
        self.channel = channel
    }

    deinit {
        channel.close()
    }

    /// Opens a UDP socket bound to a numeric IPv4 or IPv6 address, registered with one of
    /// the configuration's event loops.
    ///
    /// An IPv6 socket receives IPv6 datagrams only (`IPV6_V6ONLY`). Bind to `0.0.0.0` or
    /// `::` to receive on every address of the host, or to a loopback address to receive
    /// from this host only.
    ///
    /// - Parameters:
    ///   - host: A numeric address: `127.0.0.1`, `0.0.0.0`, `::1`, `::`.
    ///   - port: The UDP port, or 0 for one the system chooses (read ``localAddress``).
    ///   - configuration: The bounds and the event loops.
    /// - Returns: The open socket, reading from now on.
    /// - Throws: ``Tether/TetherError/Code/invalidArgument`` for a host that is not a numeric
    ///   address, a port out of range or a bound below 1; ``Tether/TetherError/Code/bindFailed``
    ///   when the address cannot be bound (in use, not an address of this host).
    public static func bind(host: String, port: Int, configuration: DatagramConfiguration = .init()) async throws(TetherError) -> DatagramSocket {
        guard configuration.maximumDatagramSize >= 1, configuration.receiveBufferCount >= 1 else {
            throw TetherError(
                code: .invalidArgument,
                message: "a udp socket needs maximumDatagramSize and receiveBufferCount of at least 1, not \(configuration.maximumDatagramSize) and \(configuration.receiveBufferCount)"
            )
        }
        guard (0...65535).contains(port) else {
            throw TetherError(code: .invalidArgument, message: "udp port \(port) is out of range (0 to 65535)")
        }
        guard let address = TetherSocketAddress(ipAddress: host, port: port) else {
            throw TetherError(code: .invalidArgument, message: "udp host '\(host)' is not a numeric IPv4 or IPv6 address")
        }
        let loop = configuration.eventLoopGroup.next()
        let channel = try DatagramChannel(binding: address, configuration: configuration, loop: loop)
        try await loop.submit { () throws(TetherError) in try channel.start() }
        return DatagramSocket(channel: channel)
    }

    /// Sends one datagram to `address`.
    ///
    /// The datagram goes to the kernel before the call returns, or the call throws: nothing
    /// is queued in the socket. Delivery is not confirmed; UDP may lose datagrams.
    ///
    /// - Parameters:
    ///   - bytes: The whole datagram, at most ``DatagramConfiguration/maximumDatagramSize`` bytes.
    ///   - address: Where to send it.
    /// - Throws: ``Tether/TetherError/Code/frameTooLarge`` for a datagram over the maximum size
    ///   (before any system call); ``Tether/TetherError/Code/outboundBufferFull`` when the
    ///   kernel's send buffer has no room now (try again later);
    ///   ``Tether/TetherError/Code/connectionRefused`` on a connected socket when the kernel holds
    ///   a refusal of an earlier datagram; ``Tether/TetherError/Code/connectionClosed`` after
    ///   ``close()``; ``Tether/TetherError/Code/systemCall`` for another failure of `sendto(2)`.
    public func send(_ bytes: [UInt8], to address: TetherSocketAddress) throws(TetherError) {
        try channel.send(bytes, to: address)
    }

    /// Sends one datagram to the address given to ``connect(to:)``.
    ///
    /// - Parameter bytes: The whole datagram, at most ``DatagramConfiguration/maximumDatagramSize`` bytes.
    /// - Throws: ``Tether/TetherError/Code/notConnected`` when the socket is not connected; else
    ///   as ``send(_:to:)``.
    public func send(_ bytes: [UInt8]) throws(TetherError) {
        try channel.send(bytes, to: nil)
    }

    /// Connects the socket to one peer: ``send(_:)`` sends there, only that peer's
    /// datagrams are received from now on, and the kernel reports the peer's refusals.
    ///
    /// A connected UDP socket learns from the ICMP "port unreachable" answer to a datagram
    /// that nothing listens at the peer's port. The reader of ``datagrams`` gets that as a
    /// ``Tether/TetherError/Code/connectionRefused`` error, once per refusal, in the order of
    /// arrival (or, when the kernel reports it to a send first, that send throws it). The
    /// socket stays open: send again, or read ``datagrams`` again, once the peer listens.
    /// Connecting again replaces the peer.
    ///
    /// - Parameter address: The peer, of the same family as ``localAddress``.
    /// - Throws: ``Tether/TetherError/Code/connectFailed`` when the system refuses the address
    ///   (another family, unreachable); ``Tether/TetherError/Code/connectionClosed`` after ``close()``.
    public func connect(to address: TetherSocketAddress) throws(TetherError) {
        try channel.connect(to: address)
    }

    /// The datagrams that arrive, in the order the socket reads them, each with its sender.
    ///
    /// Up to ``DatagramConfiguration/receiveBufferCount`` datagrams wait for the reader;
    /// more are dropped (the newest) and counted in ``droppedDatagrams``. The sequence ends
    /// when the socket closes, dropping what was held. On a connected socket it throws
    /// ``Tether/TetherError/Code/connectionRefused`` when the peer refused a datagram; a loop over
    /// it ends then, and a new loop over `datagrams` goes on with the datagrams after the
    /// refusal. Several loops may read at once: each datagram goes to one of them.
    public var datagrams: DatagramSequence {
        DatagramSequence(channel: channel)
    }

    /// Closes the socket: ``datagrams`` ends (what was held is dropped), and later sends
    /// throw ``Tether/TetherError/Code/connectionClosed``. Idempotent.
    public func close() {
        channel.close()
    }

    /// Waits until the socket has read `count` datagrams from the kernel in all (delivered,
    /// held, dropped or truncated), or has closed.
    package func waitForReads(_ count: Int) async {
        await channel.waitForReads(count)
    }
}

/// The datagrams a ``DatagramSocket`` receives: an async sequence that ends when the socket
/// closes.
///
/// Its buffer is the socket's: at most ``DatagramConfiguration/receiveBufferCount``
/// datagrams, the newest dropped beyond that (see ``DatagramSocket/droppedDatagrams``).
public struct DatagramSequence: AsyncSequence, Sendable {
    /// The sequence throws only a receive failure, such as a refusal on a connected socket.
    public typealias Failure = TetherError

    let channel: DatagramChannel

    /// The iterator of the datagrams.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let channel: DatagramChannel

        /// The next datagram, waiting for one; `nil` once the socket closed or the waiting
        /// task was cancelled.
        ///
        /// - Returns: The oldest datagram held, or `nil` at the end.
        /// - Throws: ``Tether/TetherError/Code/connectionRefused`` when the peer of a connected
        ///   socket refused a datagram; ``Tether/TetherError/Code/systemCall`` for another receive
        ///   failure. The socket stays open.
        public mutating func next() async throws(TetherError) -> Datagram? {
            try Self.unwrap(await channel.next())
        }

        /// The next datagram, without leaving the caller's actor.
        ///
        /// - Parameter actor: The actor the caller is isolated to, or `nil`.
        /// - Returns: The oldest datagram held, or `nil` at the end.
        /// - Throws: As ``next()``.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(TetherError) -> Datagram? {
            try Self.unwrap(await channel.next())
        }

        private static func unwrap(_ event: DatagramEvent) throws(TetherError) -> Datagram? {
            switch event {
            case .datagram(let datagram): return datagram
            case .failure(let error): throw error
            case .end: return nil
            }
        }
    }

    /// Makes the iterator that a `for try await` loop uses.
    ///
    /// - Returns: An iterator over the datagrams held and to come.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(channel: channel)
    }
}
