/// When and how often a connection that broke reconnects: exponential backoff with jitter.
///
/// After the connection is lost, attempt 1 starts after ``initialDelay``; each failed
/// attempt multiplies the delay by ``multiplier``, up to ``maximumDelay``, and each delay
/// is moved by up to ±``jitter`` of itself at random, so clients that lost the same server
/// do not all return at the same instant. A close you ask for (``Connection/close()``)
/// never reconnects.
public struct ReconnectPolicy: Sendable, Hashable {
    /// Whether a lost connection reconnects. Default `true`.
    public var isEnabled: Bool = true
    /// The delay before the first attempt. Default 1 s.
    public var initialDelay: Duration = .seconds(1)
    /// The factor between one delay and the next. Default 1.6.
    public var multiplier: Double = 1.6
    /// The largest delay. Default 120 s.
    public var maximumDelay: Duration = .seconds(120)
    /// The fraction by which each delay moves at random, up or down. Default 0.2 (±20 %).
    public var jitter: Double = 0.2
    /// Attempts in a row that may fail before the connection gives up and ends in
    /// ``ConnectionState/Phase/failed``; `nil` never gives up. Default `nil`.
    ///
    /// An attempt counts as failed unless its connection proves healthy: a valid frame
    /// (a heartbeat ack, a response, a push) arrives after the TLS handshake and, with a
    /// ``ConnectionConfiguration/session``, the server's acceptance of the hello is that
    /// frame. Only then do the count and the backoff start again. A peer that accepts and
    /// then fails (a web server on the wrong port, a proxy whose backend is down, a server
    /// at its connection limit) spends the attempts as one that refuses does.
    public var maximumAttempts: Int?
    /// Whether the first connect (``Connection/connect(to:configuration:)``,
    /// ``Connection/connect()``) also retries by this policy when it fails, instead of
    /// throwing at once. Default `true`.
    ///
    /// With it, a server that is down or a network that is missing when the app starts is
    /// treated like one lost a moment later: ``Connection/states`` shows
    /// ``ConnectionState/Phase/reconnecting`` with the reason and the next attempt, and
    /// `connect` returns once connected, or throws when ``maximumAttempts`` failed in a row
    /// (or the task is cancelled, or ``Connection/close()`` is called). Set it to `false` for
    /// a command-line tool or a health check that should report a dead server at once;
    /// the first connect then throws its error and the connection ends in
    /// ``ConnectionState/Phase/closed``. A policy that is not enabled never retries.
    public var appliesToFirstConnect: Bool = true

    /// The defaults: 1 s, ×1.6 per attempt, at most 120 s, ±20 %, no attempt limit, the
    /// first connect included.
    public init() {}

    /// Never reconnect: a lost connection ends in ``ConnectionState/Phase/closed``.
    public static var disabled: ReconnectPolicy {
        var policy = ReconnectPolicy()
        policy.isEnabled = false
        return policy
    }

    /// Exponential backoff with the given parameters.
    ///
    /// - Parameters:
    ///   - initialDelay: The delay before the first attempt.
    ///   - multiplier: The factor between one delay and the next.
    ///   - maximumDelay: The largest delay.
    ///   - jitter: The fraction by which each delay moves at random.
    ///   - maximumAttempts: Failed attempts in a row before giving up; `nil` for never.
    /// - Returns: The policy.
    public static func backoff(
        initialDelay: Duration,
        multiplier: Double = 1.6,
        maximumDelay: Duration = .seconds(120),
        jitter: Double = 0.2,
        maximumAttempts: Int? = nil
    ) -> ReconnectPolicy {
        var policy = ReconnectPolicy()
        policy.initialDelay = initialDelay
        policy.multiplier = multiplier
        policy.maximumDelay = maximumDelay
        policy.jitter = jitter
        policy.maximumAttempts = maximumAttempts
        return policy
    }

    /// The delay before attempt `attempt` (1 for the first), with `random` in -1...1
    /// choosing where in the jitter band it falls (0 is the centre).
    ///
    /// - Parameters:
    ///   - attempt: The attempt number, from 1.
    ///   - random: Where in the jitter band the delay falls, from -1 to 1.
    /// - Returns: The delay in whole milliseconds, never negative and never above
    ///   ``maximumDelay`` plus its jitter.
    public func delay(forAttempt attempt: Int, random: Double) -> Duration {
        let initial = Self.seconds(initialDelay)
        let ceiling = Self.seconds(maximumDelay)
        var base = initial
        var step = 1
        while step < attempt && base < ceiling {
            base *= max(1, multiplier)
            step += 1
        }
        base = min(base, ceiling)
        let spread = max(0, min(1, jitter)) * max(-1, min(1, random))
        let seconds = max(0, base * (1 + spread))
        // Whole milliseconds: the delay a state prints (`0.253 seconds`) is then the one its
        // description names (`253 ms`), with no nanoseconds of jitter after it.
        return .milliseconds(Int64((seconds * 1e3).rounded()))
    }

    /// The delay before attempt `attempt`, with the jitter drawn from `generator`.
    func delay(forAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        delay(forAttempt: attempt, random: Double.random(in: -1...1, using: &generator))
    }

    private static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

/// Heartbeat settings: how often to send one and when to give up on a silent peer.
public struct HeartbeatConfiguration: Sendable, Hashable {
    /// Whether heartbeats are sent. Default `true`.
    public var isEnabled: Bool = true
    /// Time between heartbeats; the first goes out as soon as the connection is up. Default 10 s.
    public var interval: Duration = .seconds(10)
    /// How long to wait for an ack before the heartbeat counts as missed. Default 5 s.
    public var timeout: Duration = .seconds(5)
    /// How many heartbeats in a row may be missed before the connection closes with
    /// ``TetherError/Code/heartbeatTimeout``. Default 3.
    public var maximumMissed: Int = 3
    /// An interval that adapts to the network instead of ``interval``: it starts at
    /// ``AdaptiveHeartbeat/minimum``, lengthens while heartbeats prove the connection
    /// survives the silence, and steps back after a silent death; see ``AdaptiveHeartbeat``.
    /// Default `nil`: the fixed ``interval``.
    public var adaptive: AdaptiveHeartbeat?

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

    /// Heartbeats at an interval that adapts to the network: for phones and other clients
    /// behind NATs, where each wake-up of the radio costs battery.
    ///
    /// The interval starts at the last one that worked on the network, as `policy`'s memory
    /// remembers it, or at its ``AdaptiveHeartbeat/minimum``; see ``AdaptiveHeartbeat``.
    ///
    /// - Parameters:
    ///   - policy: How the interval grows and steps back, and where it is remembered.
    ///     Default ``AdaptiveHeartbeat/init()``: 30 s, +60 s after 2 healthy intervals, up
    ///     to 9 min.
    ///   - timeout: How long to wait for each ack. Default 10 s, room for a mobile radio
    ///     to wake up.
    ///   - maximumMissed: Misses in a row that close the connection. Default 3; after a
    ///     miss the next heartbeat goes out at once, so a dead connection is found within
    ///     `timeout` × `maximumMissed` of its first miss.
    /// - Returns: The configuration.
    public static func adaptive(
        _ policy: AdaptiveHeartbeat = AdaptiveHeartbeat(),
        timeout: Duration = .seconds(10),
        maximumMissed: Int = 3
    ) -> HeartbeatConfiguration {
        var configuration = HeartbeatConfiguration()
        configuration.adaptive = policy
        configuration.interval = policy.minimum
        configuration.timeout = timeout
        configuration.maximumMissed = maximumMissed
        return configuration
    }
}

/// How a ``Connection`` behaves. A value: copy it, change fields, pass it in.
public struct ConnectionConfiguration: Sendable {
    /// The wire protocol. Default ``Profile/seed``.
    public var profile: Profile = .seed
    /// How long connecting may take, resolving the host name included: the AAAA and A
    /// lookups and the whole race of attempts to every address they return
    /// (``connectionAttemptDelay``). Default 10 s.
    ///
    /// A host whose lookup has not answered by then (a DNS server that never answers) fails
    /// with ``TetherError/Code/connectTimedOut`` and the message `resolving HOST did not
    /// finish within …`; so does cancelling the task, at once, with
    /// ``TetherError/Code/connectFailed``. The lookup itself cannot be interrupted: it goes on
    /// on its own thread, one per host and address family at most, and its answer is dropped
    /// (or goes to the next attempt that asks the same question).
    public var connectTimeout: Duration = .seconds(10)
    /// How long an attempt to connect to one address has before the next address is tried
    /// beside it (Happy Eyeballs, RFC 8305). The addresses a host resolves to are tried in
    /// the system's order with the families interleaved (an IPv6 address, then an IPv4 one,
    /// and so on, starting with the system's first); each attempt that is still pending after
    /// this delay, or that fails, starts the next, and the first to connect wins while the
    /// others are closed. So a black-holed address costs this delay, not the connect timeout.
    /// Default 250 ms, as the RFC recommends.
    ///
    /// The two address families are looked up separately and at once, and the race starts
    /// on the first answer, except that an IPv4 answer first waits up to 50 ms (the RFC's
    /// resolution delay) for the IPv6 one; addresses that come later join the race.
    public var connectionAttemptDelay: Duration = .milliseconds(250)
    /// Runs on every new connection once it is up (after TLS and the session hello), before
    /// anything that waits is written, before ``ConnectionState/Phase/connected`` is
    /// published and before ``Connection/connect(to:configuration:)`` returns: for what the
    /// server keeps per connection, such as a login. Default `nil`.
    ///
    /// What it sends on the connection it is given (``Connection/request(_:timeout:)``,
    /// ``Connection/pipeline(_:timeout:)``, ``Connection/send(_:)``) goes at once; every
    /// other caller's requests and frames wait until it returns, and then go in order. If it throws, or runs longer
    /// than ``prepareTimeout``, the attempt fails with its error and the reconnect policy
    /// decides what follows, as for a failed handshake; if the connection is lost or closed
    /// meanwhile, its task is cancelled.
    ///
    /// ```swift
    /// configuration.prepare = { connection in
    ///     let answer = try await connection.request(Request(type: 0x410, json: ["user": "alice"]))
    ///     if let reason = answer.errorMessage { throw LoginRefused(reason: reason) }
    /// }
    /// ```
    public var prepare: (@Sendable (Connection) async throws -> Void)?
    /// How long ``prepare`` may run on a connection before the attempt fails with
    /// ``TetherError/Code/timedOut``. Default 10 s.
    public var prepareTimeout: Duration = .seconds(10)
    /// The frame types of channels (``Connection/subscribe(to:from:info:presenceEvents:)``); must match the
    /// server's ``ChannelConfiguration/wireTypes``.
    public var channelWireTypes = ChannelWireTypes()
    /// How many events of one channel subscription may wait to be read; more are dropped
    /// and counted in ``ChannelSubscription/dropped``, as are messages past
    /// ``Limits/maximumSubscriberBytes`` (64 MiB) of payload waiting. Default 4,096.
    public var channelBufferSize = 4_096
    /// Which frames report their progress in ``Connection/transfers``: by default those of
    /// 1 MiB or more, every 256 KiB; `nil` for none.
    public var progress: ProgressConfiguration? = ProgressConfiguration()
    /// The timeout of requests that give ``RequestTimeout/configured`` (the default of
    /// ``Connection/request(_:timeout:)``); `nil` waits forever. Default 30 s.
    public var requestTimeout: Duration? = .seconds(30)
    /// Heartbeats. Default: every 10 s, 5 s to answer, the connection lost after 3 misses.
    public var heartbeat = HeartbeatConfiguration()
    /// Size limits.
    public var limits = Limits()
    /// How a lost connection comes back, and whether the first connect retries too.
    /// Default: after 1 s, ×1.6 per attempt, at most 120 s, ±20 % jitter, never giving up,
    /// the first connect included.
    public var reconnect = ReconnectPolicy()
    /// More endpoints to try, in turn with ``Connection/endpoint``, in the list
    /// `[endpoint] + alternateEndpoints`, round and round: each failed attempt moves on to the
    /// next one. After a connection is lost, attempt 1 goes to the endpoint after the one it
    /// was connected to, not back to the one that just broke (likely a node that died), so
    /// failing over takes the first backoff delay only; a connection lost before it proved
    /// healthy counts as a failed attempt as well. Default none.
    public var alternateEndpoints: [Endpoint] = []
    /// An endpoint to dial at once, in the same attempt, when the one of the attempt cannot
    /// connect, and to leave again for the main one after
    /// ``FallbackPolicy/primaryRetryInterval``; see ``FallbackPolicy``. Default `nil`: none.
    public var fallback: FallbackPolicy?
    /// Whether requests made while the connection is down (reconnecting or suspended) wait
    /// for it, bounded by their own timeout and ``Limits/maximumQueuedRequests``; when
    /// `false` they fail at once with ``TetherError/Code/notConnected``. Default `true`.
    public var requestsWaitForConnection: Bool = true
    /// Who this client is, for a server with mailboxes: with a session the connection sends
    /// a hello first on every connection, resumes its pushes where it left off, and drops
    /// duplicates, so no push is lost or delivered twice across disconnects. Default `nil`.
    public var session: SessionConfiguration?
    /// TLS for the connection: make one with `.client(…)` from the `TetherTLS` module. The
    /// handshake runs on every connection, reconnects included, after TCP connects and
    /// before anything else; the connection counts as connected only once it has finished.
    /// A handshake that fails fails the attempt like a refused connect. Default `nil`: plain TCP.
    public var tls: TLSConfiguration?
    /// Whether to set `TCP_NODELAY` so small frames go out at once. Default `true`.
    public var noDelay: Bool = true
    /// How endpoints with a ``Endpoint/webSocketPath`` are reached: extra upgrade headers,
    /// the largest message, the handshake timeout. Endpoints without a path ignore it.
    /// Default ``WebSocketClientConfiguration/init()``.
    public var webSocket = WebSocketClientConfiguration()
    /// How long ``Connection/close()`` lets queued bytes drain before the socket is closed
    /// regardless. Default 5 s.
    public var drainTimeout: Duration = .seconds(5)
    /// How long the connection waits for the responses to its requests in flight once the
    /// server announced that it drains (``Server/drain(deadline:reconnectAfter:)``); past it
    /// they fail with ``TetherError/Code/connectionLost`` and the connection reconnects.
    /// Meanwhile new requests wait for the next connection. Default 60 s, twice a server's
    /// default drain deadline.
    public var serverDrainTimeout: Duration = .seconds(60)
    /// The event loops to run on. Default ``TetherEventLoopGroup/shared``.
    public var eventLoopGroup: TetherEventLoopGroup = .shared
    /// Sees each request from its start to its outcome (in the caller's task), each state
    /// change and each session event (on the loop), as they happen: for logging and
    /// tracing (see <doc:Bridging>). Default `nil`: nothing is observed, and nothing is
    /// spent on it.
    public var observer: (any ConnectionObserver)?
    /// Where the connection learns of the network path: it verifies itself with a heartbeat
    /// when the path changes, retries at once when a path comes back, and spends no
    /// reconnect attempts while there is none (``ConnectionState/Phase/waitingForNetwork``);
    /// see <doc:Resilience>. `nil` assumes a usable path that never changes.
    ///
    /// Default ``SystemPathMonitor/shared``: the operating system's view, watched once for
    /// the whole process, as an app on a phone needs it; where the system cannot be watched
    /// it reports a usable path, which is the same as `nil`. A connection whose endpoints are
    /// all loopback (`localhost`, 127.0.0.0/8, `::1`) follows no monitor.
    public var pathMonitor: (any PathMonitor)? = SystemPathMonitor.shared
    /// Where the bottom transports come from: the system's sockets (``SocketNetwork``:
    /// TCP, or a Unix domain socket for a `unix://` endpoint), or the in-memory network
    /// `TetherTesting` sets, together with ``eventLoopGroup``.
    package var network: any StreamNetwork = SocketNetwork()
    /// Resolves endpoints instead of the system's resolver (``SystemResolver/shared``), when
    /// set: for tests of the connection race with addresses and answers of their choosing.
    /// It is asked for every endpoint, numeric addresses and `localhost` included.
    package var resolver: (any NameResolver)?

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
