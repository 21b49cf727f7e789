/// The one frame a server writes to a connection it will not serve (it is at its connection
/// limit) before closing it, so that the client can say why instead of reporting a reset.
///
/// It is a message frame of type `0xFFFFFFFF` with serial 0, which no request uses, and a
/// JSON payload `{"refused": "tooManyConnections", "error": "…"}`. Only profiles that match
/// responses by serial carry it; a server with TLS cannot send it (the refusal comes before
/// any handshake), so there it is only logged. A client that does not know it counts it as
/// a late response and drops it.
struct ConnectionRefusal: Equatable {
    /// The frame type of a refusal.
    static let frameType: UInt32 = 0xFFFF_FFFF

    /// The error code the refusal names, as ``TetherError/Code/description`` spells it.
    var code: String
    /// The server's reason.
    var message: String

    /// A refusal at the connection limit.
    ///
    /// - Parameter message: The server's reason.
    init(tooManyConnections message: String) {
        code = TetherError.Code.tooManyConnections.description
        self.message = message
    }

    /// Reads a refusal from a frame; `nil` when the frame is something else.
    ///
    /// - Parameter frame: A decoded frame.
    init?(_ frame: Frame) {
        guard frame.type == Self.frameType, frame.serial == 0, frame.payload.first == UInt8(ascii: "{"),
              let json = try? JSONValue(parsing: frame.payload),
              let code = json["refused"]?.stringValue, let message = json["error"]?.stringValue else { return nil }
        self.code = code
        self.message = message
    }

    /// The frame.
    var frame: Frame {
        Frame(type: Self.frameType, serial: 0, payload: JSONValue.object(["refused": .string(code), "error": .string(message)]).encoded)
    }

    /// The bytes of the frame in `profile`, or `nil` when the profile cannot carry it.
    ///
    /// - Parameter profile: The server's profile.
    /// - Returns: The encoded frame.
    func bytes(in profile: Profile) -> [UInt8]? {
        guard profile.correlation == .bySerial, profile.classify(Self.frameType) == .message else { return nil }
        var buffer = FrameBuffer()
        guard (try? profile.makeCodec(1 << 16).encode(frame, into: &buffer)) != nil else { return nil }
        return Array(buffer.readableBytesView)
    }

    /// The error a client reports for this refusal by `peer`.
    ///
    /// - Parameter peer: The server's address.
    /// - Returns: ``TetherError/Code/tooManyConnections`` for a connection limit,
    ///   ``TetherError/Code/connectionReset`` for a reason this version does not know.
    func error(from peer: String) -> TetherError {
        if code == TetherError.Code.tooManyConnections.description {
            return TetherError(code: .tooManyConnections, message: "\(peer) is at its connection limit and refused the connection: \(message)")
        }
        return TetherError(code: .connectionReset, message: "\(peer) refused the connection (\(code)): \(message)")
    }
}
