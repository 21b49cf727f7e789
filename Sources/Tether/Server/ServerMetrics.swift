/// Counters of one ``Peer``, for metrics and tests. Read them with ``Peer/metrics``.
///
/// Frame counts are kept as frames are decoded and encoded; byte counts are the socket's,
/// and stop when the peer ends (a graceful close may still flush queued bytes after that).
public struct PeerMetrics: Sendable, Hashable {
    /// Bytes read from the peer's socket.
    public var bytesIn = 0
    /// Bytes written to the peer's socket.
    public var bytesOut = 0
    /// Frames decoded from the peer: requests, notifications and heartbeats.
    public var framesIn = 0
    /// Frames queued for the peer: responses, heartbeat acks and pushes.
    public var framesOut = 0
    /// Responses queued for the peer, error responses included.
    public var requestsHandled = 0
    /// Heartbeats of the peer answered with an ack.
    public var heartbeatsAcked = 0
    /// Stored pushes written to the peer while its session caught up from its mailbox.
    public var notificationsReplayed = 0
    /// Times the server stopped reading the peer because it had
    /// ``ServerConfiguration/maximumRequestsPerPeer`` requests being handled.
    public var readPauses = 0
    /// Times the peer's client asked the server to hold its pushes because its app fell
    /// behind; see <doc:Sessions>.
    public var pushHolds = 0

    /// Counters with the given values, zero where not given: for an app's tests of code that
    /// reads metrics.
    ///
    /// - Parameters:
    ///   - bytesIn: Bytes read from the peer's socket.
    ///   - bytesOut: Bytes written to the peer's socket.
    ///   - framesIn: Frames decoded from the peer.
    ///   - framesOut: Frames queued for the peer.
    ///   - requestsHandled: Responses queued for the peer.
    ///   - heartbeatsAcked: Heartbeats of the peer answered.
    ///   - notificationsReplayed: Stored pushes replayed to the peer.
    ///   - readPauses: Times reading the peer was paused at its request limit.
    ///   - pushHolds: Times the peer's client asked for its pushes to be held.
    init(
        bytesIn: Int = 0,
        bytesOut: Int = 0,
        framesIn: Int = 0,
        framesOut: Int = 0,
        requestsHandled: Int = 0,
        heartbeatsAcked: Int = 0,
        notificationsReplayed: Int = 0,
        readPauses: Int = 0,
        pushHolds: Int = 0
    ) {
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
        self.framesIn = framesIn
        self.framesOut = framesOut
        self.requestsHandled = requestsHandled
        self.heartbeatsAcked = heartbeatsAcked
        self.notificationsReplayed = notificationsReplayed
        self.readPauses = readPauses
        self.pushHolds = pushHolds
    }

    /// Adds `other`'s counts to these.
    mutating func add(_ other: PeerMetrics) {
        readPauses += other.readPauses
        pushHolds += other.pushHolds
        notificationsReplayed += other.notificationsReplayed
        bytesIn += other.bytesIn
        bytesOut += other.bytesOut
        framesIn += other.framesIn
        framesOut += other.framesOut
        requestsHandled += other.requestsHandled
        heartbeatsAcked += other.heartbeatsAcked
    }
}

/// Counters of a ``Server`` since it started, for metrics and tests. Read them with
/// ``Server/metrics()``.
///
/// The traffic counts (bytes, frames, requests, heartbeats) are totals over every peer the
/// server has had: the ones that ended and the ones connected now. See ``PeerMetrics`` for
/// what each counts.
public struct ServerMetrics: Sendable, Hashable {
    /// Connections accepted as peers. Connections refused at the limit are not counted here
    /// but in ``rejectedConnections``.
    public var acceptedConnections = 0
    /// Connections refused because the server was at ``ServerConfiguration/maximumConnections``.
    public var rejectedConnections = 0
    /// Peers connected now: the ones ``Server/peers`` lists.
    public var connectedPeers = 0
    /// Peers closed because they sent nothing for ``ServerConfiguration/idleTimeout``.
    public var idleTimeouts = 0
    /// Peers closed because they sent no complete frame within
    /// ``ServerConfiguration/handshakeTimeout`` of connecting.
    public var handshakeTimeouts = 0
    /// Peers closed because they did not finish a frame within
    /// ``ServerConfiguration/frameCompletionTimeout`` of its first byte.
    public var frameTimeouts = 0
    /// Suspending handlers running now, over all peers; at most
    /// ``ServerConfiguration/maximumHandlers``.
    public var handlersInFlight = 0
    /// Times the server stopped reading a peer because it had
    /// ``ServerConfiguration/maximumRequestsPerPeer`` requests being handled.
    public var readPauses = 0
    /// Times session clients asked the server to hold their pushes because their apps fell
    /// behind; see <doc:Sessions>.
    public var pushHolds = 0
    /// Bytes read from peers' sockets.
    public var bytesIn = 0
    /// Bytes written to peers' sockets.
    public var bytesOut = 0
    /// Frames decoded from peers: requests, notifications and heartbeats.
    public var framesIn = 0
    /// Frames queued for peers: responses, heartbeat acks and pushes.
    public var framesOut = 0
    /// Responses queued for peers, error responses included.
    public var requestsHandled = 0
    /// Heartbeats of peers answered with an ack.
    public var heartbeatsAcked = 0
    /// Pushes stored in clients' mailboxes (``Server/push(_:toClient:)``).
    public var pushesStored = 0
    /// Of those, pushes stored for a client that was not connected.
    public var offlinePushes = 0
    /// Stored pushes written to peers while their sessions caught up.
    public var notificationsReplayed = 0
    /// Session hellos accepted.
    public var sessionsResumed = 0
    /// Session hellos refused by ``Server/authenticate(_:)``.
    public var sessionsRejected = 0
    /// Offline-push callbacks dropped because
    /// ``MailboxConfiguration/offlineCallbackBufferSize`` was full.
    public var offlineCallbacksDropped = 0
    /// Mailboxes removed by expiry because their clients were idle for longer than
    /// ``MailboxLimits/maximumAge``.
    public var mailboxesRemoved = 0
    /// Broadcasts the cluster could not take (``MailboxConfiguration/cluster``): only this
    /// server's peers got them.
    public var clusterBroadcastsFailed = 0

    /// Counters at zero, to set the fields of: for an app's tests of code that reads metrics.
    public init() {}

    /// Adds the traffic counts of one peer.
    mutating func add(_ peer: PeerMetrics) {
        readPauses += peer.readPauses
        pushHolds += peer.pushHolds
        notificationsReplayed += peer.notificationsReplayed
        bytesIn += peer.bytesIn
        bytesOut += peer.bytesOut
        framesIn += peer.framesIn
        framesOut += peer.framesOut
        requestsHandled += peer.requestsHandled
        heartbeatsAcked += peer.heartbeatsAcked
    }
}
