/// Bounds on what one connection may hold. Every bound has a default and can be changed,
/// and each one that is hit shows in ``ConnectionMetrics``.
public struct Limits: Sendable, Hashable {
    /// The largest frame payload accepted or sent. Default 16 MiB.
    public var maximumPayloadLength: Int = 16 << 20
    /// How many requests may be written and waiting for their response at once. Further
    /// requests wait in the queue until a response frees a place. Default 4,096.
    public var maximumInFlightRequests: Int = 4_096
    /// How many requests and frames may wait to be written: for a connection (while
    /// reconnecting), for a place in flight, or for the outbound buffer to drain. Beyond it,
    /// ``Connection/request(_:timeout:)`` fails at once with
    /// ``TetherError/Code/tooManyPendingRequests``. Default 4,096.
    public var maximumQueuedRequests: Int = 4_096
    /// Outbound bytes above which ``Connection/request(_:timeout:)`` and
    /// ``Connection/send(_:)`` wait (backpressure) until the peer has read enough for the
    /// buffer to fall to half of it. Default 1 MiB.
    public var outboundHighWaterMark: Int = 1 << 20
    /// How many bytes may wait to be written before writes fail with
    /// ``TetherError/Code/outboundBufferFull``: the hard limit behind the high-water mark,
    /// and the only one for a server's pushes to a peer that does not read. Default 64 MiB.
    public var maximumOutboundBytes: Int = 64 << 20
    /// How many elements each subscriber of ``Connection/frames``, ``Connection/notifications``
    /// and ``Connection/heartbeats`` may have waiting. When a slow subscriber's buffer is
    /// full the oldest element is dropped for that subscriber and counted in its
    /// ``Subscription/dropped`` and in ``ConnectionMetrics/droppedElements``. Default 4,096.
    ///
    /// With a ``ConnectionConfiguration/session`` the subscribers of
    /// ``Connection/notifications`` are not bounded by it: a push delivered there has been
    /// acknowledged to the server, so dropping it would lose it. A subscriber that stops
    /// consuming then holds every push that arrives for it.
    public var subscriberBufferSize: Int = 4_096
    /// How many payload bytes each subscriber of ``Connection/frames`` and
    /// ``Connection/notifications`` may have waiting. Past it the connection stops reading
    /// its socket (counted in ``ConnectionMetrics/readPauses``) until that subscriber is
    /// down to half of it, so a server sending large frames faster than the app takes them
    /// makes the client hold at most this much and one frame per subscription, not
    /// ``subscriberBufferSize`` frames of up to ``maximumPayloadLength`` each. While reading
    /// is stopped, responses and heartbeat acks wait too. With a
    /// ``ConnectionConfiguration/session``, a subscriber to notifications past it counts as
    /// lagging, as past ``SessionConfiguration/maximumPendingPushes``: the client asks the
    /// server to hold its pushes and stops reading only past twice it; pushes held for a
    /// subscriber to come are bounded by it as well. A subscription kept but not iterated
    /// holds what it is given: end it (leave its loop, or drop it) when it is not needed.
    /// Default 64 MiB.
    public var maximumSubscriberBytes: Int = 64 << 20
    /// The most payload bytes of a large frame sent in one piece, so that small frames
    /// (heartbeats, acknowledgements, small requests and responses) go out between the
    /// pieces instead of waiting for the whole frame; `nil` sends every frame whole.
    ///
    /// It applies on connections with a ``ConnectionConfiguration/session`` in profiles
    /// that match responses by serial (``Profile/seed``, ``Profile/seedExtended``), once both
    /// ends have said they understand chunks in the session hello and welcome; a peer that
    /// has not said so gets every frame whole. A frame written while a large one is under
    /// way waits behind at most one chunk in this process and one in the socket, which
    /// keeps at most this many bytes unsent (`TCP_NOTSENT_LOWAT`). Pushes keep their order:
    /// one written during a chunked push goes after it. At 32 KiB a small frame waits
    /// about a quarter of a second behind a large one on a 250 KB/s uplink, and each chunk
    /// adds 13 bytes or fewer to the frame, 0.04 %. Default 32 KiB.
    public var chunkSize: Int? = 32 << 10

    /// The defaults.
    public init() {}
}
