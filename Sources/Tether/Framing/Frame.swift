/// One unit of the wire protocol: a type, a serial and a payload.
///
/// In the ``Profile/seed`` profile a frame is a 12-byte big-endian header
/// `type: UInt32 | serial: UInt32 | length: UInt32` followed by `length` bytes of payload.
public struct Frame: Sendable, Hashable, CustomStringConvertible {
    /// What the frame is: a heartbeat, a notification or a request/response, by profile rules.
    public var type: UInt32
    /// Matches a response to its request; numbers heartbeats and, optionally, pushes.
    public var serial: UInt32
    /// The content bytes (UTF-8 JSON by convention in the seed profile).
    public var payload: [UInt8]

    /// Creates a frame.
    ///
    /// - Parameters:
    ///   - type: The frame type.
    ///   - serial: The serial number.
    ///   - payload: The content bytes.
    public init(type: UInt32, serial: UInt32 = 0, payload: [UInt8] = []) {
        self.type = type
        self.serial = serial
        self.payload = payload
    }

    /// `frame 0x402 serial 7, 12 bytes`.
    public var description: String {
        "frame \(hex(type)) serial \(serial), \(payload.count) bytes"
    }
}
