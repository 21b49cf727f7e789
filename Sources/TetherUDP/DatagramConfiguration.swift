public import Tether
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// How a ``DatagramSocket`` sends, receives and bounds what it holds.
///
/// Every field has a default, so `DatagramConfiguration()` is a working configuration; change
/// the fields you care about:
///
/// ```swift
/// var configuration = DatagramConfiguration()
/// configuration.receiveBufferCount = 64
/// ```
public struct DatagramConfiguration: Sendable {
    /// The largest datagram, in bytes, that the socket sends or receives. Default 65,507,
    /// the largest UDP payload over IPv4.
    ///
    /// A send of more bytes throws ``Tether/TetherError/Code/frameTooLarge`` before any system
    /// call. The socket reads into a buffer of this size (allocated once, when it is
    /// bound): a datagram that arrives larger is cut by the kernel, and is dropped and
    /// counted in ``DatagramSocket/truncatedDatagrams`` rather than delivered cut. At
    /// least 1.
    public var maximumDatagramSize: Int

    /// The most received datagrams held for the reader of ``DatagramSocket/datagrams``.
    /// Default 1,024.
    ///
    /// When that many are waiting, each datagram that arrives is dropped (the newest, so
    /// what is held keeps its order and nothing already held is lost) and counted in
    /// ``DatagramSocket/droppedDatagrams``, until the reader takes some. At most
    /// `receiveBufferCount` times ``maximumDatagramSize`` bytes are held. At least 1.
    public var receiveBufferCount: Int

    /// The event loops to run on. Default ``Tether/TetherEventLoopGroup/shared``.
    public var eventLoopGroup: TetherEventLoopGroup

    /// A configuration with every default.
    ///
    /// - Parameters:
    ///   - maximumDatagramSize: The largest datagram sent or received, in bytes.
    ///   - receiveBufferCount: The most received datagrams held for the reader.
    ///   - eventLoopGroup: The event loops to run on.
    public init(maximumDatagramSize: Int = 65_507, receiveBufferCount: Int = 1_024, eventLoopGroup: TetherEventLoopGroup = .shared) {
        self.maximumDatagramSize = maximumDatagramSize
        self.receiveBufferCount = receiveBufferCount
        self.eventLoopGroup = eventLoopGroup
    }
}

/// One datagram received by a ``DatagramSocket``: its bytes, and who sent it.
public struct Datagram: Sendable, Hashable {
    /// The datagram's bytes, whole: a datagram cut by the kernel is never delivered.
    public var bytes: [UInt8]
    /// The address the datagram came from: send a reply there.
    public var sender: TetherSocketAddress

    /// Creates a datagram.
    ///
    /// - Parameters:
    ///   - bytes: The datagram's bytes.
    ///   - sender: The address it came from.
    public init(bytes: [UInt8], sender: TetherSocketAddress) {
        self.bytes = bytes
        self.sender = sender
    }
}
