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

    /// How responses find their requests.
    public enum Correlation: Sendable, Hashable {
        /// A response carries its request's serial: responses may come in any order.
        case bySerial
        /// The wire has no serial: the server answers the requests of each type in the
        /// order it received them, and a response goes to the oldest request of its type
        /// still waiting for one.
        case inOrderPerType
        /// The wire has no serial and no type to tell requests apart: every response goes to
        /// the oldest request still waiting for one.
        case inOrder
    }

    /// A short name for messages and the command line: `seed`.
    public var name: String
    /// The type of heartbeat frames; `nil` when the profile has none (then a connection
    /// sends no heartbeats, whatever ``ConnectionConfiguration/heartbeat`` says).
    public var heartbeatType: UInt32?
    /// Makes a fresh codec for one connection, given the maximum payload length.
    public var makeCodec: @Sendable (_ maximumPayloadLength: Int) -> any FrameCodec
    /// Says what a frame of a given type is.
    public var classify: @Sendable (_ type: UInt32) -> FrameKind
    /// How responses find their requests.
    public var correlation: Correlation
    /// The largest serial the wire carries; serials wrap after it.
    public var maximumSerial: UInt32
    /// The header fields of a server's response, from its request's: by default the same
    /// (version, content type…); a profile with addresses swaps source and destination.
    /// Fields a handler sets in ``Response/fields`` win over these.
    public var replyFields: @Sendable (_ requestFields: [String: UInt64]) -> [String: UInt64]
    /// The layout the codec comes from, for profiles described by one.
    package var layout: FrameLayout?

    /// Creates a profile from a codec of its own.
    ///
    /// - Parameters:
    ///   - name: A short name for messages.
    ///   - heartbeatType: The type of heartbeat frames, or `nil` for none.
    ///   - correlation: How responses find their requests.
    ///   - maximumSerial: The largest serial the wire carries.
    ///   - makeCodec: Makes a fresh codec for one connection.
    ///   - classify: Says what a frame of a given type is.
    public init(
        name: String,
        heartbeatType: UInt32?,
        correlation: Correlation = .bySerial,
        maximumSerial: UInt32 = .max,
        makeCodec: @escaping @Sendable (_ maximumPayloadLength: Int) -> any FrameCodec,
        classify: @escaping @Sendable (_ type: UInt32) -> FrameKind
    ) {
        self.name = name
        self.heartbeatType = heartbeatType
        self.correlation = correlation
        self.maximumSerial = maximumSerial
        self.makeCodec = makeCodec
        self.classify = classify
        self.replyFields = { $0 }
        self.layout = nil
    }

    /// Creates a profile from a ``FrameLayout``.
    ///
    /// The layout is checked here, once; its codec is made for every connection.
    ///
    /// - Parameters:
    ///   - name: A short name for messages.
    ///   - layout: The wire format.
    ///   - heartbeatType: The type of heartbeat frames, or `nil` for none.
    ///   - correlation: How responses find their requests; `nil` picks ``Correlation/bySerial``
    ///     when the layout has a serial field, ``Correlation/inOrderPerType`` when it has a
    ///     type field, and ``Correlation/inOrder`` otherwise.
    ///   - replyFields: The header fields of a response, from its request's.
    ///   - classify: Says what a frame of a given type is.
    /// - Throws: ``TetherError`` with ``TetherError/Code/invalidArgument`` when the layout is
    ///   not valid, or asks for serial correlation without a serial field.
    public init(
        name: String,
        layout: FrameLayout,
        heartbeatType: UInt32?,
        correlation: Correlation? = nil,
        replyFields: @escaping @Sendable (_ requestFields: [String: UInt64]) -> [String: UInt64] = { $0 },
        classify: @escaping @Sendable (_ type: UInt32) -> FrameKind
    ) throws(TetherError) {
        try layout.validate()
        let chosen = correlation ?? (layout.carriesSerial ? .bySerial : layout.carriesType ? .inOrderPerType : .inOrder)
        if chosen == .bySerial, !layout.carriesSerial {
            throw TetherError(code: .invalidArgument, message: "profile \(name) matches responses by serial, but its layout has no serial field")
        }
        self.init(
            name: name,
            heartbeatType: heartbeatType,
            correlation: chosen,
            maximumSerial: layout.maximumSerial,
            makeCodec: { maximum in
                // Validated above: making the codec cannot fail.
                try! layout.makeCodec(maximumPayloadLength: maximum)
            },
            classify: classify
        )
        self.replyFields = replyFields
        self.layout = layout
    }

    /// The seed's type ranges: `0x1` heartbeat, `0x2…0x400` notifications, above `0x400`
    /// requests and responses, `0` invalid.
    ///
    /// - Parameter type: A frame type.
    /// - Returns: What a frame of that type is.
    public static func seedKind(of type: UInt32) -> FrameKind {
        switch type {
        case 0x1: .heartbeat
        case 0x2...0x400: .notification
        case 0: .invalid
        default: .message
        }
    }

    /// The seed protocol: the seed codec framing; type `0x1` heartbeat, `0x2…0x400`
    /// notifications, above `0x400` requests and responses; type `0` is invalid.
    public static let seed = Profile(
        name: "seed",
        heartbeatType: 0x1,
        makeCodec: { SeedCodec(maximumPayloadLength: $0) },
        classify: seedKind(of:)
    )
}

extension Profile {
    /// Every profile that ships with Tether, in the order the documentation lists them.
    public static var builtIn: [Profile] { [.seed, .seedExtended, .marker, .compact, .lines] }

    /// The built-in profile with this name (``name``), or `nil`.
    ///
    /// - Parameter name: A profile name such as `seed`.
    /// - Returns: The profile, or `nil` when no built-in profile has that name.
    public static func named(_ name: String) -> Profile? {
        builtIn.first { $0.name == name }
    }
}
