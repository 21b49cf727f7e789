/// Bounds on what one connection may hold. Every bound has a default and can be changed.
public struct Limits: Sendable, Hashable {
    /// The largest frame payload accepted or sent. Default 16 MiB.
    public var maximumPayloadLength: Int = 16 << 20
    /// How many requests may wait for a response at once. Default 65,536.
    public var maximumPendingRequests: Int = 65_536
    /// How many bytes may wait to be written before sends fail. Default 64 MiB.
    public var maximumOutboundBytes: Int = 64 << 20
    /// How many elements each subscriber of ``Connection/frames``, ``Connection/notifications``
    /// and ``Connection/heartbeats`` may have waiting. When a slow subscriber's buffer is
    /// full the oldest element is dropped for that subscriber and counted in
    /// ``ConnectionStatistics/droppedElements``. Default 4,096.
    public var subscriberBufferSize: Int = 4_096

    /// The defaults.
    public init() {}
}

/// Heartbeat settings: how often to send one and when to give up on a silent peer.
public struct HeartbeatConfiguration: Sendable, Hashable {
    /// Whether heartbeats are sent. Default `true`.
    public var isEnabled: Bool = true
    /// Time between heartbeats; the first goes out one interval after connecting. Default 10 s.
    public var interval: Duration = .seconds(10)
    /// How long to wait for an ack before the heartbeat counts as missed. Default 5 s.
    public var timeout: Duration = .seconds(5)
    /// How many heartbeats in a row may be missed before the connection closes with
    /// ``TetherError/Code/heartbeatTimeout``. Default 3.
    public var maximumMissed: Int = 3

    /// The defaults.
    public init() {}

    /// Heartbeats switched off.
    public static var disabled: HeartbeatConfiguration {
        var configuration = HeartbeatConfiguration()
        configuration.isEnabled = false
        return configuration
    }

    /// Heartbeats every `interval`, each waiting up to `timeout` for its ack.
    ///
    /// - Parameters:
    ///   - interval: Time between heartbeats.
    ///   - timeout: How long to wait for each ack; defaults to half the interval.
    ///   - maximumMissed: Misses in a row that close the connection.
    /// - Returns: The configuration.
    public static func every(_ interval: Duration, timeout: Duration? = nil, maximumMissed: Int = 3) -> HeartbeatConfiguration {
        var configuration = HeartbeatConfiguration()
        configuration.interval = interval
        configuration.timeout = timeout ?? interval / 2
        configuration.maximumMissed = maximumMissed
        return configuration
    }
}

/// How a ``Connection`` behaves. A value: copy it, change fields, pass it in.
public struct ConnectionConfiguration: Sendable {
    /// The wire protocol. Default ``Profile/seed``.
    public var profile: Profile = .seed
    /// How long connecting may take, across every address the host resolves to. Default 10 s.
    public var connectTimeout: Duration = .seconds(10)
    /// The timeout of requests that do not give one; `nil` waits forever. Default 30 s.
    public var requestTimeout: Duration? = .seconds(30)
    /// Heartbeats. Default: every 10 s, 5 s to answer, closed after 3 misses.
    public var heartbeat = HeartbeatConfiguration()
    /// Size limits.
    public var limits = Limits()
    /// Whether to set `TCP_NODELAY` so small frames go out at once. Default `true`.
    public var noDelay: Bool = true
    /// How long ``Connection/close()`` lets queued bytes drain before the socket is closed
    /// regardless. Default 5 s.
    public var drainTimeout: Duration = .seconds(5)
    /// The event loops to run on. Default ``EventLoopGroup/shared``.
    public var eventLoopGroup: EventLoopGroup = .shared

    /// The defaults.
    public init() {}

    /// The defaults with another profile.
    ///
    /// - Parameter profile: The wire protocol.
    public init(profile: Profile) {
        self.profile = profile
    }

    /// The defaults.
    public static var defaults: ConnectionConfiguration { ConnectionConfiguration() }
}
