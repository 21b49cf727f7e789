/// The last frame a server writes to a connection it closes for a reason of its own, so that
/// the client can say why instead of reporting "peer closed the connection".
///
/// It is a message frame of type `0xFFFFFFFF` with serial 0, which no request uses, and a
/// JSON payload: `{"closed": code, "error": "…"}` for a connection the server served and
/// now ends (a timeout, a protocol error, a failed authentication, a session taken over, a
/// drain's deadline), `{"refused": "tooManyConnections", "error": "…"}` for one it will not
/// serve at all (at its connection limit). `code` is a ``TetherError/Code/description``.
///
/// Only profiles that match responses by serial carry it (``carried(by:)``: ``Profile/seed``,
/// ``Profile/seedExtended``); in the others (``Profile/compact``, ``Profile/marker``,
/// ``Profile/lines``, which answer in order) the server closes without a word. A server with TLS writes it once the handshake is done; the refusal at the
/// connection limit comes before any handshake, so there it is only logged.
///
/// A client that does not know the notice counts it as a late response and drops it (a
/// client of the first version that knew the refusal read `refused` only before its
/// connection proved healthy, and never `closed`).
struct CloseNotice: Equatable, Sendable {
    /// The frame type of a notice.
    static let frameType: UInt32 = 0xFFFF_FFFF
    /// The longest message a client reads from a notice; longer ones are cut there.
    static let maximumMessageLength = 1_024

    /// The error code the notice names, as ``TetherError/Code/description`` spells it.
    var code: String
    /// The server's reason.
    var message: String
    /// Whether the server refused the connection rather than closing one it served: the
    /// notice's key is then `refused`, as older clients read it.
    var refused: Bool

    /// A notice for `reason`.
    ///
    /// - Parameters:
    ///   - reason: Why the server closes the connection: its code and message go out.
    ///   - refused: Whether the server never served the connection.
    init(_ reason: TetherError, refused: Bool = false) {
        code = reason.code.description
        message = reason.message
        self.refused = refused
    }

    /// A refusal at the connection limit.
    ///
    /// - Parameter message: The server's reason.
    init(tooManyConnections message: String) {
        self.init(TetherError(code: .tooManyConnections, message: message), refused: true)
    }

    /// Reads a notice from a frame; `nil` when the frame is something else.
    ///
    /// - Parameter frame: A decoded frame.
    init?(_ frame: Frame) {
        guard frame.type == Self.frameType, frame.serial == 0, frame.payload.first == UInt8(ascii: "{"),
              let json = try? JSONValue(parsing: frame.payload), let message = json["error"]?.stringValue else { return nil }
        if let code = json["closed"]?.stringValue {
            self.code = code
            refused = false
        } else if let code = json["refused"]?.stringValue {
            self.code = code
            refused = true
        } else {
            return nil
        }
        self.message = String(message.prefix(Self.maximumMessageLength))
    }

    /// The frame.
    var frame: Frame {
        Frame(type: Self.frameType, serial: 0, payload: JSONValue.object([refused ? "refused" : "closed": .string(code), "error": .string(message)]).encoded)
    }

    /// Whether `profile` has room for a notice: it matches responses by serial, so a frame
    /// with serial 0 answers no request, and the notice's type is a message in it.
    ///
    /// - Parameter profile: The server's profile.
    /// - Returns: Whether its clients can be told.
    static func carried(by profile: Profile) -> Bool {
        profile.correlation == .bySerial && profile.classify(frameType) == .message
    }

    /// The bytes of the frame in `profile`, or `nil` when the profile cannot carry it.
    ///
    /// - Parameter profile: The server's profile.
    /// - Returns: The encoded frame.
    func bytes(in profile: Profile) -> [UInt8]? {
        guard Self.carried(by: profile) else { return nil }
        var buffer = FrameBuffer()
        guard (try? profile.makeCodec(1 << 16).encode(frame, into: &buffer)) != nil else { return nil }
        return Array(buffer.readableBytesView)
    }

    /// The error a client reports for this notice from `peer`: the server's code (or
    /// ``TetherError/Code/connectionReset`` for one this version does not know) and a
    /// message with the server's address and its words.
    ///
    /// - Parameter peer: The server's address.
    /// - Returns: The error, such as `127.0.0.1:9000 closed the connection: …`.
    func error(from peer: String) -> TetherError {
        let known = TetherError.Code(named: code)
        if refused {
            if known == .tooManyConnections {
                return TetherError(code: .tooManyConnections, message: "\(peer) is at its connection limit and refused the connection: \(message)")
            }
            return TetherError(code: known ?? .connectionReset, message: "\(peer) refused the connection (\(code)): \(message)")
        }
        if let known { return TetherError(code: known, message: "\(peer) closed the connection: \(message)") }
        return TetherError(code: .connectionReset, message: "\(peer) closed the connection (\(code)): \(message)")
    }
}
