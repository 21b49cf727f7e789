import Tether

/// `tether ping`: heartbeats and their round-trip times.
struct PingCommand: Command {
    static let name = "ping"
    static let summary = "send heartbeats and print their round-trip times"
    static let synopsis = """
        tether ping (HOST:PORT | ws://HOST:PORT/PATH | wss://HOST:PORT/PATH) [--profile NAME] [--count N] [--heartbeat fixed|adaptive] [--heartbeat-interval SECONDS] [--heartbeat-timeout SECONDS] \
        [--max-missed N] \(VerboseOption.synopsis) \(FallbackOption.synopsis) \(ProxyOption.synopsis) \(ClientTLSOptions.synopsis)
        """
    static let briefHelp: String? = """
        Connects with heartbeats every INTERVAL and prints one line per ack or miss, then a
        summary. A heartbeat not acked within TIMEOUT (by default half the interval) counts
        as missed. Exits 1 when no heartbeat was acked.

          tether ping 127.0.0.1:9000 --count 3
          heartbeat 1 from 127.0.0.1:9000: rtt 0.123 ms

        common options:
        \(optionHelp([
            ("HOST:PORT", "the server: 127.0.0.1:9000, [::1]:9000, or ws://HOST:PORT/PATH, wss://…"),
            ("--count N", "heartbeats to wait for (default 4)"),
            ("--heartbeat-interval SECONDS", "time between heartbeats (default 1)"),
            ("--heartbeat-timeout SECONDS", "how long each ack may take (default half the interval)"),
            ("--max-missed N", "misses in a row that count the connection as lost, and reconnect"),
            ("--profile NAME", "the wire format (default seed; `tether profiles`)"),
            ("--verbose", "print on stderr how each connection was opened"),
            ("--tls", "connect with TLS; --ca FILE trusts other CAs than the system's"),
        ], column: 33))
        """
    static let help = """
        Connects with heartbeats every INTERVAL and prints one line per ack or miss, then a
        summary. A heartbeat not acked within TIMEOUT (by default half the interval) counts
        as missed. Exits 1 when no heartbeat was acked.

          heartbeat 1 from 127.0.0.1:9000: rtt 0.123 ms

        With TLS, the second line says what the handshake settled:

          TLS 127.0.0.1:9443: TLSv1.3 TLS_AES_256_GCM_SHA384, server /CN=localhost (sha256/…)

        With --max-missed, that many misses in a row count the connection as lost, as they
        would for an app: it reconnects by itself (after 1 s, then longer) and the count
        goes on with the heartbeats of the new connection (numbered from 1 again). Every
        state change after the first connect is printed on stderr:

          tether: reconnecting (attempt 1 in 1.1 s): no heartbeat ack from 127.0.0.1:9000 …

        With --profile it speaks another wire format (`tether profiles`) with heartbeats:
        seed-extended or compact (marker and lines have none).

        With --verbose, how each connection was opened is printed on stderr: the address
        and family that won (a host's IPv6 and IPv4 addresses are raced), the connect,
        resolution and ready times, and every address tried when there were several:

          tether: connected to 127.0.0.1:9000 (IPv4) in 0.412 ms, resolved in 0.095 ms, ready in 0.530 ms

        A TLS failure on the first connect (a certificate that does not verify, a host name
        or pin that does not match, a client certificate the server requires or refuses)
        ends the ping with exit 1 and the reason.

        arguments:
          HOST:PORT                      the server: 127.0.0.1:9000, [::1]:9000
          ws://HOST:PORT/PATH            the server's WebSocket endpoint (ws://127.0.0.1:8080/tether)
          wss://HOST:PORT/PATH           the same over TLS (port 443 by default); turns TLS on
                                         with the options below
        \(ProfileOption.help(column: 33))
          --count N                      heartbeats to wait for (default 4)
          --heartbeat fixed|adaptive     fixed (the default): every INTERVAL; adaptive:
                                         from 30 s, 60 s longer after every two acks in
                                         a row with nothing else in between, up to 9 min
                                         (timeout 10 s); refuses --heartbeat-interval
          --heartbeat-interval SECONDS   time between heartbeats (default 1); also
                                         --interval SECONDS
          --heartbeat-timeout SECONDS    how long each ack may take (default half the
                                         interval)
          --max-missed N                 misses in a row that count the connection as lost
                                         (default: COUNT + 1, so every miss is reported)
        \(VerboseOption.help(column: 33))
        \(FallbackOption.help(column: 33))
        \(ProxyOption.help(column: 33))
        \(ClientTLSOptions.help(column: 33))
          -h, --help                     show this help
        """

    var endpoint: Endpoint
    var profile = Profile.seed
    var count = 4
    var heartbeat = HeartbeatOptions()
    var tls = ClientTLSOptions()
    var verbose = false
    var fallback: FallbackPolicy?
    var proxy: HTTPProxy?

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        profile = try ProfileOption.parse(&arguments)
        guard profile.heartbeatType != nil else {
            throw ArgumentError("the \(profile.name) profile has no heartbeats")
        }
        if let count = try arguments.option("--count") {
            self.count = try Parse.count(count, option: "--count")
        }
        let interval = try arguments.option("--interval")
        heartbeat = try HeartbeatOptions(parsing: &arguments)
        if let interval {
            guard heartbeat.interval == nil else {
                throw ArgumentError("--interval and --heartbeat-interval are the same option; give one of them")
            }
            heartbeat.interval = try Parse.seconds(interval, option: "--interval")
            try heartbeat.checkInterval()
        }
        tls = try ClientTLSOptions(parsing: &arguments)
        verbose = arguments.flag("--verbose")
        fallback = try FallbackOption.parse(&arguments)
        proxy = try ProxyOption.parse(&arguments)
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
        try tls.check(for: [endpoint, fallback?.endpoint])
    }

    func run() async throws -> ExitStatus {
        var configuration = ConnectionConfiguration(profile: profile)
        configuration.fallback = fallback
        configuration.webSocket.proxy = proxy
        // By default, report every miss instead of closing after the library's default of three.
        configuration.heartbeat = heartbeat.applied(to: .every(.seconds(1), maximumMissed: count + 1))
        configuration.tls = tls.configuration()
        // A server that is not there at the start is reported at once.
        configuration.reconnect.appliesToFirstConnect = false
        let settings = configuration.heartbeat
        let clock = ContinuousClock()
        let started = clock.now
        // Subscribed before connecting: the first heartbeat goes out as the connection opens,
        // and its ack may arrive before connect() returns.
        let connection = Connection(to: endpoint, configuration: configuration)
        let beats = connection.heartbeats
        try await connection.connect()
        if verbose { await VerboseOption.print(connection, readyIn: clock.now - started) }
        let verbose = verbose
        // Changes after the replayed current state (`connected`): reconnects after misses.
        let states = connection.states
        let stateReporter = Task { () -> TetherError? in
            for await state in states.dropFirst() {
                Console.err("tether: \(state)")
                if verbose, state.phase == .connected { await VerboseOption.print(connection) }
            }
            return nil
        }
        let peer = await connection.remoteAddress?.description ?? endpoint.description
        var roundTrips: [Double] = []
        var missed = 0
        let every = settings.adaptive.map { "adaptive from \(format($0.minimum)) up to \(format($0.maximum))" } ?? "every \(format(settings.interval))"
        var header = "PING \(peer): heartbeat \(every), timeout \(format(settings.timeout))"
        if settings.maximumMissed <= count { header += ", lost after \(settings.maximumMissed) missed in a row" }
        Console.out(header)
        if let details = await connection.tlsDetails {
            Console.out("TLS \(peer): \(tlsSummary(details, peer: "server"))")
        }
        for await beat in beats {
            switch beat.outcome {
            case .acked:
                let rtt = beat.roundTripTime.map(milliseconds) ?? 0
                roundTrips.append(rtt)
                Console.out("heartbeat \(beat.serial) from \(peer): rtt \(formatMilliseconds(rtt)) ms")
            case .missed:
                missed += 1
                Console.out("heartbeat \(beat.serial) from \(peer): no ack within \(format(settings.timeout))")
            default:
                continue
            }
            if roundTrips.count + missed >= count { break }
        }
        let closeReason = await connection.currentState.reason
        // Stopped before close(), so our own close is not reported.
        stateReporter.cancel()
        await connection.close()
        let tlsFailure = await stateReporter.value
        let sent = roundTrips.count + missed
        var summary = "--- \(peer): \(sent) heartbeats, \(roundTrips.count) acked, \(missed) missed"
        if let minimum = roundTrips.min(), let maximum = roundTrips.max() {
            let average = roundTrips.reduce(0, +) / Double(roundTrips.count)
            summary += "; rtt min/avg/max = \(formatMilliseconds(minimum))/\(formatMilliseconds(average))/\(formatMilliseconds(maximum)) ms"
        }
        Console.out(summary)
        if let tlsFailure { throw tlsFailure }
        if sent < count, let closeReason { throw closeReason }
        guard !roundTrips.isEmpty else {
            throw TetherError(code: .heartbeatTimeout, message: "no heartbeat acked by \(peer)")
        }
        return .success
    }
}
