/// How far a large frame has moved: sent to the kernel, or received from the peer.
///
/// A connection reports the frames of at least ``ProgressConfiguration/minimumFrameSize``
/// bytes in ``Connection/transfers``, a step of ``ProgressConfiguration/step`` bytes at a
/// time and once more when the frame is complete. Byte counts are of the frame as it
/// crosses the wire: its header and payload as the profile encodes them.
public struct TransferProgress: Sendable, Hashable, CustomStringConvertible {
    /// Which way the frame goes.
    public enum Direction: Sendable, Hashable {
        /// From this end: bytes handed to the kernel (over TLS or WebSocket, estimated
        /// from what the layers beneath have written of it).
        case sending
        /// To this end: bytes of the frame received so far.
        case receiving
    }

    /// Which way the frame goes.
    public var direction: Direction
    /// The frame's type.
    public var type: UInt32
    /// The frame's serial.
    public var serial: UInt32
    /// Bytes of the frame moved so far.
    public var bytes: Int
    /// The frame's size on the wire.
    public var total: Int

    /// A report.
    ///
    /// - Parameters:
    ///   - direction: Which way the frame goes.
    ///   - type: The frame's type.
    ///   - serial: The frame's serial.
    ///   - bytes: Bytes moved so far.
    ///   - total: The frame's size on the wire.
    init(direction: Direction, type: UInt32, serial: UInt32, bytes: Int, total: Int) {
        self.direction = direction
        self.type = type
        self.serial = serial
        self.bytes = bytes
        self.total = total
    }

    /// Whether the whole frame has moved.
    public var isComplete: Bool { bytes >= total }

    /// The part moved, from 0 to 1.
    public var fractionCompleted: Double { total > 0 ? Double(bytes) / Double(total) : 1 }

    /// `sending 0x30 serial 4: 12582912 of 52428800 bytes (24 %)`.
    public var description: String {
        let way = direction == .sending ? "sending" : "receiving"
        return "\(way) \(hex(type)) serial \(serial): \(bytes) of \(counted(total, "byte")) (\(Int((fractionCompleted * 100).rounded(.down))) %)"
    }
}

/// Which frames report their progress, and how often.
public struct ProgressConfiguration: Sendable, Hashable {
    /// Frames of at least this many bytes on the wire report progress; smaller ones cost
    /// nothing. Default 1 MiB.
    public var minimumFrameSize: Int = 1 << 20
    /// A report each time this many more bytes of a frame have moved, and one when it is
    /// complete. Default 256 KiB.
    public var step: Int = 256 << 10

    /// The defaults.
    public init() {}

    /// Reports for frames of at least `minimumFrameSize` bytes, every `step` bytes.
    ///
    /// - Parameters:
    ///   - minimumFrameSize: The smallest frame that reports.
    ///   - step: Bytes between reports.
    public init(minimumFrameSize: Int, step: Int) {
        self.minimumFrameSize = minimumFrameSize
        self.step = step
    }
}
