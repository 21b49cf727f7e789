/// A wire protocol: a codec plus the rules that say what each frame means.
///
/// The profile tells a connection which frames are heartbeats, which are pushes
/// (notifications) and which are requests and responses matched by serial.
/// ``seed`` is the default: the 12-byte `type | serial | length` protocol.
public struct Profile: Sendable {
    /// What a frame is, by the profile's rules.
    public struct FrameKind: Hashable, Sendable, CustomStringConvertible {
        enum Value: Hashable, Sendable { case heartbeat, notification, message, invalid }
        let value: Value

        /// A heartbeat; the peer answers with the same type and serial.
        public static let heartbeat = FrameKind(value: .heartbeat)
        /// A push from the server, not answering any request.
        public static let notification = FrameKind(value: .notification)
        /// A request (to a server) or a response (to a client), matched by serial.
        public static let message = FrameKind(value: .message)
        /// A frame type the profile does not allow; the connection ends with a protocol error.
        public static let invalid = FrameKind(value: .invalid)

        /// A short textual form, for logs and messages.
        public var description: String { String(describing: value) }
    }

    /// A short name for messages: `seed`.
    public var name: String
    /// The type of heartbeat frames.
    public var heartbeatType: UInt32
    /// Makes a fresh codec for one connection, given the maximum payload length.
    public var makeCodec: @Sendable (_ maximumPayloadLength: Int) -> any FrameCodec
    /// Says what a frame of a given type is.
    public var classify: @Sendable (_ type: UInt32) -> FrameKind

    /// Creates a profile.
    ///
    /// - Parameters:
    ///   - name: A short name for messages.
    ///   - heartbeatType: The type of heartbeat frames.
    ///   - makeCodec: Makes a fresh codec for one connection.
    ///   - classify: Says what a frame of a given type is.
    public init(
        name: String,
        heartbeatType: UInt32,
        makeCodec: @escaping @Sendable (_ maximumPayloadLength: Int) -> any FrameCodec,
        classify: @escaping @Sendable (_ type: UInt32) -> FrameKind
    ) {
        self.name = name
        self.heartbeatType = heartbeatType
        self.makeCodec = makeCodec
        self.classify = classify
    }

    /// The seed protocol: ``SeedCodec`` framing; type `0x1` heartbeat, `0x2…0x400`
    /// notifications, above `0x400` requests and responses; type `0` is invalid.
    public static let seed = Profile(
        name: "seed",
        heartbeatType: 0x1,
        makeCodec: { SeedCodec(maximumPayloadLength: $0) },
        classify: { type in
            switch type {
            case 0x1: .heartbeat
            case 0x2...0x400: .notification
            case 0: .invalid
            default: .message
            }
        }
    )
}

extension Profile {
    /// Every profile that ships with Tether, in the order the documentation lists them.
    public static var builtIn: [Profile] { [.seed] }

    /// The built-in profile with this name (``name``), or `nil`.
    ///
    /// - Parameter name: A profile name such as `seed`.
    /// - Returns: The profile, or `nil` when no built-in profile has that name.
    public static func named(_ name: String) -> Profile? {
        builtIn.first { $0.name == name }
    }
}
