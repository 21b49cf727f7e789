/// How a ``Server`` listens and what it allows. A value: copy it, change fields, pass it in.
public struct ServerConfiguration: Sendable {
    /// The address to listen on: a numeric IPv4 or IPv6 address, or a name such as `localhost`.
    /// Default `127.0.0.1`: only this machine can connect until you choose otherwise.
    public var host: String = "127.0.0.1"
    /// The port; 0 lets the system choose one (read it from ``Server/listeningAddress()``). Default 9000.
    public var port: Int = 9000
    /// The wire protocol. Default ``Profile/seed``.
    public var profile: Profile = .seed
    /// Size limits per peer connection.
    public var limits = Limits()
    /// How many peers may be connected at once; connections beyond it are closed at once,
    /// reported as ``ServerEvent/Kind/peerRejected`` with ``TetherError/Code/tooManyConnections``
    /// and counted in ``ServerMetrics/rejectedConnections``. Default 10,000.
    public var maximumConnections: Int = 10_000
    /// The `listen(2)` backlog. Default 1,024.
    public var backlog: Int = 1_024
    /// Whether to set `TCP_NODELAY` on accepted sockets. Default `true`.
    public var noDelay: Bool = true
    /// How long a closing peer may take to flush what it has queued. Default 5 s.
    public var drainTimeout: Duration = .seconds(5)
    /// How long a peer may send nothing at all (not a frame, not a heartbeat, not a byte)
    /// before the server closes it with ``TetherError/Code/idleTimeout``; `nil` keeps quiet
    /// peers forever. A client with heartbeats on at a shorter interval is never idle.
    /// Default 60 s.
    ///
    /// Over WebSocket, every frame counts, pings and empty fragments included.
    ///
    /// The same timeout bounds a peer that keeps sending but reads nothing: one that has
    /// taken none of the bytes waiting to be written to it (answers, pushes, heartbeat acks,
    /// pongs) for this long is closed with ``TetherError/Code/idleTimeout`` too, between one
    /// and two timeouts after it stopped reading, with a message that says so.
    ///
    /// The check costs one clock read per socket read, and one timer per peer that fires
    /// about once per timeout; a peer is closed within the timeout (plus scheduling delay)
    /// of its last byte.
    public var idleTimeout: Duration? = .seconds(60)
    /// How long a new peer may take to send its first complete frame before the server
    /// closes it with ``TetherError/Code/handshakeTimeout``; `nil` waits forever. Bytes that
    /// do not complete a frame do not count, so a client that trickles a header byte by
    /// byte cannot hold a connection open with it. Default 10 s.
    ///
    /// A first frame still under way at this timeout (a large first request on a slow
    /// link) is left to the ``frameCompletionTimeout`` and ``minimumFrameRate`` from then
    /// on: it is closed unless it keeps arriving at that pace, and the handshake ends when
    /// it completes. Without a frame completion timeout or a minimum rate, this timeout is
    /// a hard limit.
    ///
    /// A client that sends nothing until its first heartbeat must have a heartbeat interval
    /// well below this timeout.
    public var handshakeTimeout: Duration? = .seconds(10)
    /// The event loops to run on. Default ``TetherEventLoopGroup/shared``.
    public var eventLoopGroup: TetherEventLoopGroup = .shared
    /// Sees each handler run from its start to its outcome, and each ``ServerEvent``, as
    /// they happen, on the loops: for logging and tracing (see <doc:Bridging>). Default
    /// `nil`: nothing is observed, and nothing is spent on it.
    public var observer: (any ServerObserver)?
    /// Where the bottom transports come from: the system's sockets (``SocketNetwork``:
    /// TCP, or a Unix domain socket for a `unix://` endpoint), or the in-memory network
    /// `TetherTesting` sets, together with ``eventLoopGroup``.
    package var network: any StreamNetwork = SocketNetwork()
    /// Mailboxes for identified clients: with them the server accepts session hellos,
    /// numbers and stores each push to a client id (``Server/push(_:toClient:)``), and
    /// replays what a client missed when it comes back. Default `nil`: no sessions.
    public var mailboxes: MailboxConfiguration?
    /// Channels: named topics with a history, which clients subscribe to
    /// (``Connection/subscribe(to:from:info:presenceEvents:)``) and the server publishes to
    /// (``Server/publish(_:to:timeToLive:)``). Default `nil`: no channels, and their frame types
    /// (``ChannelWireTypes``) are free for handlers.
    public var channels: ChannelConfiguration?
    /// TLS for every peer: make one with `.server(…)` from the `TetherTLS` module. Its
    /// certificate and key are loaded when the server starts. A peer's TLS handshake must
    /// finish within ``TLSConfiguration/handshakeTimeout``; one that fails or stalls closes
    /// that peer only. Default `nil`: plain TCP.
    public var tls: TLSConfiguration?
    /// A WebSocket port next to the TCP port: clients that connect to a `ws://` endpoint
    /// there are served like TCP peers (``WebSocketServerConfiguration``). Default `nil`:
    /// no WebSocket port.
    public var webSocket: WebSocketServerConfiguration?
    /// A Unix domain socket to listen on beside the TCP port, or instead of it
    /// (``UnixSocketConfiguration/replacesPort``): for a sidecar or a daemon on this
    /// machine, reached with ``Endpoint/init(unixSocket:)``. Its peers are served like the
    /// TCP port's, with ``tls`` when set. Default `nil`: none.
    public var unixSocket: UnixSocketConfiguration?
    /// How ``Server/drain(deadline:reconnectAfter:)`` stops the server gracefully: the
    /// deadline for handlers in flight (default 30 s) and the reconnect hint clients get
    /// (default 0).
    public var drain = DrainConfiguration()
    /// Whether session clients' requests to hold their pushes are ignored, as a server that
    /// predates them would: for tests of the client's last resort, which stops reading.
    var ignoresPushHolds = false

    // MARK: Hostile peers

    /// How many requests of one peer may be handled at once: handlers running, plus
    /// requests decoded and waiting for one. At the limit the server stops reading the
    /// peer's socket (backpressure) until a handler finishes, so nothing is lost or refused:
    /// the peer's later bytes wait in its own socket buffers, and a client that keeps
    /// sending sees its writes slow down. Frames behind them (heartbeats included) are read
    /// when the peer is read again. Handlers that never suspend
    /// (``Server/ImmediateHandler``) count while they wait behind others. A value below 1
    /// counts as 1. Default 256.
    public var maximumRequestsPerPeer: Int = 256
    /// How many suspending handlers may run at once over all peers. A peer whose next
    /// request finds every place taken waits for one, in the order the peers asked; while it
    /// waits its requests count against ``maximumRequestsPerPeer``, which in time stops its
    /// reading too. A value below 1 counts as 1. Default 10,000.
    public var maximumHandlers: Int = 10_000
    /// How long a peer may take to send the rest of a frame once its first byte has arrived
    /// before the server closes it with ``TetherError/Code/frameTimeout``, unless the frame
    /// keeps arriving at ``minimumFrameRate``; `nil` waits forever.
    ///
    /// The rule follows progress, not the clock alone: at each timeout the server looks at
    /// what arrived since the frame started, or since the last look. A frame still arriving
    /// at ``minimumFrameRate`` or faster (a large frame on a slow link) gets another
    /// timeout, for as long as it keeps that pace; one that arrived slower than that (a
    /// byte at a time) is closed there. Bytes that trickle in do not move the deadline, so a
    /// client that sends a frame one byte at a time cannot hold a connection open past it,
    /// whatever the ``idleTimeout``; with ``tls``, part of a record counts as part of a
    /// frame. Time during which the server itself does not read the peer (at
    /// ``maximumRequestsPerPeer``) does not count. Default 30 s.
    public var frameCompletionTimeout: Duration? = .seconds(30)
    /// The pace, in bytes a second, at which a frame still arriving at its
    /// ``frameCompletionTimeout`` (or the first frame at the ``handshakeTimeout``) counts as
    /// progressing, and is given more time: 16 MiB take 4.5 hours at this pace. `nil` makes
    /// both timeouts hard limits, whatever arrives. Default 1,024 (1 KiB/s).
    public var minimumFrameRate: Int? = 1_024

    /// The defaults.
    public init() {}

    /// The defaults with another address and profile.
    ///
    /// - Parameters:
    ///   - host: The address to listen on.
    ///   - port: The port; 0 lets the system choose.
    ///   - profile: The wire protocol.
    public init(host: String = "127.0.0.1", port: Int, profile: Profile = .seed) {
        self.host = host
        self.port = port
        self.profile = profile
    }
}

/// Identifies one peer connection of a server.
public struct PeerID: Hashable, Sendable, CustomStringConvertible, Comparable {
    /// A number unique within the server.
    public let rawValue: UInt64

    /// Wraps a number.
    ///
    /// - Parameter rawValue: The number.
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// A short textual form, for logs and messages.
    public var description: String { "peer#\(rawValue)" }

    /// Orders peers by the order in which they connected.
    ///
    /// - Parameters:
    ///   - lhs: A peer.
    ///   - rhs: Another peer of the same server.
    /// - Returns: Whether `lhs` connected before `rhs`.
    public static func < (lhs: PeerID, rhs: PeerID) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Something that happened on a server: it started listening, or a peer came or went.
public struct ServerEvent: Sendable, Hashable, CustomStringConvertible {
    /// What happened.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        enum Value: Hashable, Sendable {
            case listening, peerConnected, peerSecured, peerDisconnected, peerRejected
            case sessionIdentified, sessionResumed, sessionEnded, sessionTakenOver
        }
        let value: Value

        /// The server is accepting connections on ``ServerEvent/address``.
        public static let listening = Kind(value: .listening)
        /// A peer connected from ``ServerEvent/address``.
        public static let peerConnected = Kind(value: .peerConnected)
        /// A peer finished its TLS handshake; ``ServerEvent/tls`` says what it settled,
        /// including the client's certificate. Only with ``ServerConfiguration/tls``.
        public static let peerSecured = Kind(value: .peerSecured)
        /// A peer disconnected; ``ServerEvent/reason`` says why.
        public static let peerDisconnected = Kind(value: .peerDisconnected)
        /// A connection was refused because the server is at its connection limit.
        public static let peerRejected = Kind(value: .peerRejected)
        /// The server accepted the session hello of ``ServerEvent/clientID`` on the peer, a
        /// client that starts afresh (its hello resumes after sequence 0: a first connect,
        /// or an app that kept nothing). ``ServerEvent/pushesToReplay`` stored pushes follow
        /// the welcome. Only with ``ServerConfiguration/mailboxes``.
        public static let sessionIdentified = Kind(value: .sessionIdentified)
        /// The server accepted the session hello of ``ServerEvent/clientID`` on the peer, a
        /// client that resumes after pushes it already has; ``ServerEvent/pushesToReplay``
        /// stored pushes it missed follow the welcome.
        public static let sessionResumed = Kind(value: .sessionResumed)
        /// The identified peer of ``ServerEvent/clientID`` ended (``ServerEvent/reason`` says
        /// why); pushes to the client wait in its mailbox from now on. Published before the
        /// peer's ``peerDisconnected``.
        public static let sessionEnded = Kind(value: .sessionEnded)
        /// ``ServerEvent/clientID`` connected again on a newer connection (here, or on
        /// another node of a cluster), which took its session over: this older peer is being
        /// closed (``ServerEvent/reason``). Published instead of ``sessionEnded``, before the
        /// peer's ``peerDisconnected``.
        public static let sessionTakenOver = Kind(value: .sessionTakenOver)

        /// A short textual form, for logs and messages.
        public var description: String { String(describing: value) }
    }

    /// What happened.
    public var kind: Kind
    /// The listening address, or the peer's address.
    public var address: TetherSocketAddress
    /// The peer, for peer events.
    public var peer: PeerID?
    /// Why a peer disconnected.
    public var reason: TetherError?
    /// What a peer's TLS handshake settled, for ``Kind/peerSecured``.
    public var tls: TLSDetails?
    /// The client id of the peer's session: on the session events, and on
    /// ``Kind/peerDisconnected`` of a peer whose hello was accepted. `nil` for peers that
    /// never identified.
    public var clientID: String?
    /// How many stored pushes the server replays after the welcome, for
    /// ``Kind/sessionIdentified`` and ``Kind/sessionResumed``: those after the client's
    /// sequence, up to the mailbox's last (fewer arrive when some expire meanwhile).
    public var pushesToReplay: UInt64?

    /// A short textual form, for logs and messages.
    public var description: String {
        let who = peer.map { "\($0) " } ?? ""
        let client = clientID.map { "client \($0)" } ?? "the client"
        switch kind.value {
        case .listening: return "listening on \(address)"
        case .peerConnected: return "\(who)connected from \(address)"
        case .peerSecured: return "\(who)at \(address) secured: \(tls?.description ?? "TLS")"
        case .peerDisconnected:
            let identified = clientID.map { "(client \($0)) " } ?? ""
            return "\(who)\(identified)at \(address) disconnected: \(reason?.message ?? "closed")"
        case .sessionIdentified: return "\(who)identified as \(client), \(pushesToReplay ?? 0) stored pushes to replay"
        case .sessionResumed: return "\(who)resumed \(client), \(pushesToReplay ?? 0) stored pushes to replay"
        case .sessionEnded: return "\(who)ended the session of \(client): \(reason?.message ?? "closed")"
        case .sessionTakenOver: return "\(who)lost \(client) to a newer connection: \(reason?.message ?? "replaced")"
        case .peerRejected: return "refused \(address): \(reason?.message ?? "over the limit")"
        }
    }
}

/// A server's configuration in one object that its peers share.
final class SharedServerConfiguration: Sendable {
    /// The configuration.
    let value: ServerConfiguration

    /// Holds `value`.
    ///
    /// - Parameter value: The server's configuration.
    init(_ value: ServerConfiguration) {
        self.value = value
    }
}
