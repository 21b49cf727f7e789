#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization
import Tether
import TetherHTTP
import TetherPostgres
import TetherRedis
import TetherSQLite

/// `tether serve`: the seed demo server, until SIGINT or SIGTERM.
struct ServeCommand: Command {
    static let name = "serve"
    static let summary = "run the seed demo server (echo, pushes, heartbeat acks)"
    static let synopsis = """
        tether serve [--host HOST] [--port PORT] [--unix PATH [--unix-only] [--unix-mode MODE]] [--websocket-port PORT | --websocket-main-port] [--websocket-path PATH] [--profile NAME] [--push-every SECONDS [--push-type TYPE]] \
        [--store FILE | --postgres URL [--node NAME] | --redis URL [--node NAME]] [--mailbox-limit N] [--mailbox-age SECONDS] \
        [--token SECRET] [--max-mailboxes N] [--max-stored-bytes N] [--mailbox-expiry SECONDS] \
        [--idle-timeout SECONDS] [--handshake-timeout SECONDS] \
        [--max-requests-per-peer N] [--max-handlers N] [--frame-timeout SECONDS] [--drain-timeout SECONDS] \
        [--http-allow HOST[:PORT]]... [--http-timeout SECONDS] \
        \(ServerTLSOptions.synopsis)
        """
    static let help = """
        Runs the seed demo server until SIGINT or SIGTERM, then drains and exits 0: it
        stops accepting, tells every client to reconnect elsewhere (clients of seed,
        seed-extended and compact take the responses to what they sent, then reconnect
        with no failure counted), lets requests in flight be answered for up to
        --drain-timeout, answers those still running then with an error, and closes every
        connection. A second signal ends it at once.

          0x402  answers {"echo": <request content>}
          0x404  {"delay_ms": N}: waits N ms, then answers like 0x402
          0x407  counts the runs of its handler: {"runs": N}
          0x1    heartbeats are acked with the same serial
          other  answered with {"error": "unknown type 0x…"}

        Content that starts like a JSON array or object but is not JSON, or nests deeper
        than 512 levels, is answered with {"error": "…"} saying what and at which byte.

        It speaks the seed profile unless --profile names another (`tether profiles`).
        seed-extended and compact have the same types and handlers. marker and lines have
        one request type, 0x401, and neither heartbeats nor pushes:

          marker  answers {"echo": <request content>}, from the request's destination
                  address to its source (the profile swaps them)
          lines   answers each line with the line itself after `echo: `

        Sessions are on: a client that identifies (`tether listen --client-id ID`) gets a
        mailbox, and pushes to it are numbered, stored, written at once when it is
        connected and replayed when it comes back. The mailboxes are kept in memory, or in
        the SQLite file given with --store, which keeps them across restarts of the server.
        Sessions need a serial on the wire: with compact, marker and lines they are off
        (logged once on stderr), and --store and the mailbox options are refused.

        With --postgres it is one node of a cluster: every `tether serve` given the same
        database is a node of one service. The mailboxes live in the database; a push made
        on any node, or by `tether push`, is stored once and written to the client on
        whichever node it is connected to; a client that connects to another node takes its
        session over there and resumes after its last acknowledged push, and the node it
        left closes its older connection and logs it:

          listening on 127.0.0.1:9001 (node n1, PostgreSQL 127.0.0.1:5432)
          peer#1 (client alice) disconnected: client alice connected again on node n2; …

        It logs when the database stops answering (pushes and hellos fail meanwhile; past
        5 s without it the node closes its clients' connections so they come back where
        pushes reach them) and when it answers again. A database that cannot be reached at
        the start ends it with exit 1 and the reason.

        Every client id it accepts gets a mailbox. On a port strangers can reach, give
        --token: hellos without that token are rejected (`tether listen --token`), and
        logged. Without it, the store-wide bounds are what stop made-up client ids: past
        --max-mailboxes a new client's hello is refused for now (its client retries), and
        pushes that would pass --max-stored-bytes are not stored (the tick logs it).

        Prints `listening on HOST:PORT` on stdout once it accepts connections, followed by
        `(profile NAME)` for a profile other than seed; logs peers on stderr, with the
        reason each one left (an idle, handshake or frame timeout among them), and the
        client id each one identifies as.

        With --websocket-port it also serves WebSocket on that port, for clients on networks
        that only let web traffic through (`tether request ws://HOST:PORT/PATH`, or
        `--fallback ws://…`), and prints where on a second line:

          listening on 127.0.0.1:9000
          listening on ws://127.0.0.1:8080/tether

        With TLS (--tls-cert, --tls-key) the WebSocket port uses the same certificate:
        wss://, for `tether request wss://HOST:PORT/PATH`. With --websocket-main-port
        instead, WebSocket clients connect to the main port itself (ws:// or, with TLS,
        wss://): each connection's first four bytes, `GET ` or not, tell a WebSocket
        upgrade from Tether frames, within the handshake timeout.

        With --tls-cert and --tls-key it serves TLS (1.2 or 1.3) only, and says so:

          listening on 127.0.0.1:9443 (TLS, certificate server.pem)
          peer#1 connected from 127.0.0.1:53422
          peer#1 secured: TLSv1.3 TLS_AES_256_GCM_SHA384, client /CN=app (sha256/…)

        A peer whose TLS handshake fails, or takes longer than the handshake timeout, is
        closed and logged with the reason: `peer#2 disconnected: TLS handshake with …
        failed: …`.

        With --http-allow it performs HTTP requests for its clients (type 0x403,
        `tether request --http-get URL`), to the hosts named and no others, and logs each:

          peer#1 HTTP GET http://127.0.0.1:8080/status → 200 (17 bytes, 3 ms)
          peer#1 HTTP GET http://10.0.0.1/ refused: 10.0.0.1:80 is not on this server's allow-list

        options:
          --host HOST                   address to listen on (default 127.0.0.1)
          --port PORT                   port; 0 picks a free one (default 9000)
          --unix PATH                   also listen on a Unix domain socket at PATH, for
                                        clients on this machine (unix:///PATH); a socket
                                        file left there by a server that died is replaced
          --unix-only                   listen on the Unix domain socket only, not on
                                        --host and --port
          --unix-mode MODE              the socket file's permissions, in octal (default
                                        600: this user only; 660 lets the group in)
          --websocket-port PORT         also serve WebSocket on this port; 0 picks a free
                                        one; wss:// with the TLS options (default: no
                                        WebSocket)
          --websocket-main-port         also serve WebSocket on the main port, told apart
                                        from Tether frames by the first bytes
          --websocket-path PATH         the request path WebSocket clients must ask for,
                                        starting with / (default: any path)
        \(ProfileOption.help(column: 32))
          --push-every SECONDS          push tick n this often, content {"seq": n, "time":
                                        "<ISO 8601>"}: to every client id the server has
                                        seen, connected or not (its mailbox keeps it; the
                                        serial is the client's own sequence), and to every
                                        connected peer that never identified (serial n);
                                        logs `tick n: C clients (O offline)` on stderr;
                                        with --postgres, every client id of the cluster,
                                        from every node that ticks, and O counts those
                                        not on this node; refused in marker and lines,
                                        which have no pushes
          --push-type TYPE              its type, 0x2…0x400 (default 0x2)
          --store FILE                  keep the mailboxes in this SQLite file, created if
                                        missing (default: in memory, lost on exit)
          --postgres URL                join the cluster on this PostgreSQL database
                                        (postgresql://USER@HOST:PORT/DB or a libpq
                                        connection string); the tables are created if
                                        missing; not with --store
          --redis URL                   join the cluster on this Redis or Valkey server
                                        (redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]);
                                        not with --store or --postgres
          --node NAME                   this server's name in the cluster, 1 to 48
                                        letters, digits, '.', '-' or '_', unique in it;
                                        a node started under the name of one that
                                        stopped takes its place (default HOSTNAME-PORT,
                                        or HOSTNAME-pPID with --port 0)
          --mailbox-limit N             the most pushes one mailbox keeps; the oldest go
                                        first, and the client is told (default 10000)
          --mailbox-age SECONDS         drop pushes older than this; 0 or off keeps them
                                        until the limit (default 604800, 7 days)
          --token SECRET                accept only session hellos with this token; others
                                        are rejected and logged (default: any client id)
          --max-mailboxes N             the most mailboxes in all; a new client's hello
                                        beyond it is refused for now (default 100000)
          --max-stored-bytes N          the most bytes stored in all mailboxes, 64 counted
                                        per push beyond its content (default 67108864)
          --mailbox-expiry SECONDS      this often, drop expired pushes and remove the
                                        mailboxes of clients gone longer than
                                        --mailbox-age; 0 or off never (default 60)
          --idle-timeout SECONDS        close a peer that sends nothing at all, not even a
                                        heartbeat, for this long; 0 or off keeps quiet
                                        peers (default 60)
          --handshake-timeout SECONDS   close a new peer that has not sent a complete frame
                                        this long after connecting; 0 or off waits forever
                                        (default 10)
          --max-requests-per-peer N     requests of one peer handled at once; beyond them
                                        its socket is not read until one is answered
                                        (default 256)
          --max-handlers N              handlers that wait (0x404) running at once over
                                        all peers; the others wait their turn
                                        (default 10000)
          --frame-timeout SECONDS       close a peer that has not finished a frame this
                                        long after its first byte, however it trickles;
                                        0 or off waits forever (default 30)
          --drain-timeout SECONDS       on SIGINT or SIGTERM, how long requests in flight
                                        have to be answered before they are cancelled
                                        (default 30)
          --http-allow HOST[:PORT]      forward HTTP requests (type 0x403) to this host, on
                                        this port or any; repeat it for several; *.DOMAIN
                                        allows subdomains (default: no forwarding)
          --http-timeout SECONDS        the longest a forwarded HTTP exchange may take
                                        (default 30)
        \(ServerTLSOptions.help(column: 32))
          -h, --help                    show this help
        """

    static let briefHelp: String? = """
        Runs the seed demo server until SIGINT or SIGTERM, then drains and exits 0. It
        answers 0x402 with {"echo": <request content>}, 0x404 {"delay_ms": N} the same
        after N ms, and acks heartbeats. Prints `listening on HOST:PORT` on stdout once it
        accepts connections, and logs peers on stderr. Clients that identify get a mailbox.

          tether serve --port 9000 --push-every 1
          tether serve --port 9001 --websocket-port 8080 --websocket-path /tether

        common options:
        \(optionHelp(commonOptions, column: 32))
        """

    /// The options `--help` lists, in a line each.
    private static let commonOptions: [(option: String, text: String)] = [
        ("--host HOST", "address to listen on (default 127.0.0.1)"),
        ("--port PORT", "port; 0 picks a free one (default 9000)"),
        ("--unix PATH", "also listen on a Unix domain socket at PATH"),
        ("--websocket-port PORT", "also serve WebSocket on this port (0: a free one)"),
        ("--websocket-path PATH", "the path WebSocket clients ask for (default: any)"),
        ("--profile NAME", "the wire format (default seed; `tether profiles`)"),
        ("--push-every SECONDS", "push tick n to every client this often"),
        ("--store FILE", "keep the mailboxes in this SQLite file"),
        ("--postgres URL", "join the cluster on this PostgreSQL database"),
        ("--token SECRET", "accept only session hellos with this token"),
        ("--idle-timeout SECONDS", "close a peer silent for this long (default 60)"),
        ("--drain-timeout SECONDS", "on a signal, time left for requests (default 30)"),
        ("--http-allow HOST[:PORT]", "forward HTTP (type 0x403) to this host; repeatable"),
        ("--tls-cert FILE", "serve TLS only, with this PEM certificate"),
        ("--tls-key FILE", "the private key of --tls-cert (PEM, not encrypted)"),
    ]

    var host = "127.0.0.1"
    var port = 9000
    var profile = Profile.seed
    var pushInterval: Duration?
    var pushType = SeedService.pushType
    var idleTimeout = ServerConfiguration().idleTimeout
    var handshakeTimeout = ServerConfiguration().handshakeTimeout
    // What a hostile peer may make the server hold.
    var maximumRequestsPerPeer = ServerConfiguration().maximumRequestsPerPeer
    var maximumHandlers = ServerConfiguration().maximumHandlers
    var frameCompletionTimeout = ServerConfiguration().frameCompletionTimeout
    var drainTimeout = ServerConfiguration().drain.deadline
    var storePath: String?
    var postgres: PostgresOptions?
    var redis: RedisOptions?
    var redisNode: String?
    var mailboxLimits = MailboxLimits()
    // Mailboxes for strangers: a required token, store-wide bounds, expiry.
    var token: String?
    var expiryInterval = MailboxConfiguration.inMemory.expiryInterval
    var tls: ServerTLSOptions?
    var httpAllowed: [HTTPAllowedHost] = []
    var httpTimeout: Duration?
    /// The WebSocket port and path, with --websocket-port.
    var webSocket: WebSocketServerConfiguration?
    /// The Unix domain socket, with --unix.
    var unixSocket: UnixSocketConfiguration?

    /// The longest `--mailbox-age`: ten years.
    static let maximumMailboxAge = 10 * 365 * 86_400

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        if let host = try arguments.option("--host") {
            guard !host.isEmpty else { throw ArgumentError("--host needs an address") }
            self.host = host
        }
        if let port = try arguments.option("--port") {
            self.port = try Parse.port(port, option: "--port")
        }
        if let path = try arguments.option("--unix") {
            guard path.hasPrefix("/") || path.hasPrefix("."), TetherSocketAddress(unixPath: path) != nil else {
                throw ArgumentError("--unix '\(path)' is not a socket file's path: give an absolute or ./ path of at most 107 bytes")
            }
            unixSocket = UnixSocketConfiguration(path: path)
        }
        if arguments.flag("--unix-only") {
            guard unixSocket != nil else { throw ArgumentError("--unix-only needs --unix PATH") }
            unixSocket?.replacesPort = true
        }
        if let mode = try arguments.option("--unix-mode") {
            guard unixSocket != nil else { throw ArgumentError("--unix-mode needs --unix PATH") }
            guard let bits = Int(mode, radix: 8), (0...0o777).contains(bits) else {
                throw ArgumentError("--unix-mode '\(mode)' is not permissions in octal (for example 600 or 660)")
            }
            unixSocket?.permissions = bits
        }
        if let port = try arguments.option("--websocket-port") {
            webSocket = WebSocketServerConfiguration(port: try Parse.port(port, option: "--websocket-port"))
        }
        if arguments.flag("--websocket-main-port") {
            guard webSocket == nil else { throw ArgumentError("--websocket-port and --websocket-main-port exclude each other: give one of them") }
            webSocket = WebSocketServerConfiguration()
            webSocket?.sharesMainPort = true
        }
        if unixSocket?.replacesPort == true, webSocket?.sharesMainPort == true {
            throw ArgumentError("--unix-only and --websocket-main-port exclude each other: with --unix-only there is no main port to share")
        }
        if let path = try arguments.option("--websocket-path") {
            guard webSocket != nil else { throw ArgumentError("--websocket-path needs --websocket-port or --websocket-main-port") }
            guard path.hasPrefix("/"), !path.contains(where: { $0 == " " || $0 == "?" || $0 == "#" }) else {
                throw ArgumentError("--websocket-path '\(path)' is not a request path: it starts with / and has no spaces, ? or #")
            }
            webSocket?.path = path
        }
        profile = try ProfileOption.parse(&arguments)
        if let every = try arguments.option("--push-every") {
            guard profile.hasPushes else {
                throw ArgumentError("--push-every: the \(profile.name) profile has no pushes (no notification types)")
            }
            pushInterval = try Parse.seconds(every, option: "--push-every")
        }
        if let type = try arguments.option("--push-type") {
            guard pushInterval != nil else { throw ArgumentError("--push-type needs --push-every") }
            pushType = try Parse.frameType(type, option: "--push-type")
        }
        if pushInterval != nil, profile.kind(of: pushType) != .notification {
            let types = profile.typeList(of: .notification) ?? "none"
            throw ArgumentError("--push-type \(hex(pushType)) is not a notification type in the \(profile.name) profile (\(types))")
        }
        if let path = try arguments.option("--store") {
            try requireSessions(for: "--store")
            guard !path.isEmpty else { throw ArgumentError("--store needs a file name") }
            storePath = path
        }
        redis = try RedisOptions.parse(&arguments)
        if redis != nil {
            try requireSessions(for: "--redis")
            guard storePath == nil else {
                throw ArgumentError("--store and --redis both say where the mailboxes live: give one (--store FILE for this server alone, --redis URL for a cluster)")
            }
            if let node = try arguments.option("--node") {
                guard PostgresOptions.isValidNodeName(node) else {
                    throw ArgumentError("--node '\(node)' cannot name a node: use 1 to \(PostgresOptions.maximumNodeNameLength) letters, digits, '.', '-' or '_'")
                }
                redisNode = node
            }
        }
        postgres = try PostgresOptions.parse(&arguments, nodes: redis == nil)
        if postgres != nil, redis != nil {
            throw ArgumentError("--postgres and --redis both name a cluster: give one")
        }
        if postgres != nil {
            try requireSessions(for: "--postgres")
            guard storePath == nil else {
                throw ArgumentError("--store and --postgres both say where the mailboxes live: give one (--store FILE for this server alone, --postgres URL for a cluster)")
            }
        }
        if let limit = try arguments.option("--mailbox-limit") {
            try requireSessions(for: "--mailbox-limit")
            mailboxLimits.maximumMessages = try Parse.count(limit, option: "--mailbox-limit")
        }
        if let age = try arguments.option("--mailbox-age") {
            try requireSessions(for: "--mailbox-age")
            mailboxLimits.maximumAge = try Parse.secondsOrOff(age, option: "--mailbox-age", maximum: Self.maximumMailboxAge)
        }
        try parseStrangerOptions(&arguments)
        if let timeout = try arguments.option("--idle-timeout") {
            idleTimeout = try Parse.secondsOrOff(timeout, option: "--idle-timeout")
        }
        if let timeout = try arguments.option("--handshake-timeout") {
            handshakeTimeout = try Parse.secondsOrOff(timeout, option: "--handshake-timeout")
        }
        if let limit = try arguments.option("--max-requests-per-peer") {
            maximumRequestsPerPeer = try Parse.count(limit, option: "--max-requests-per-peer")
        }
        if let limit = try arguments.option("--max-handlers") {
            maximumHandlers = try Parse.count(limit, option: "--max-handlers")
        }
        if let timeout = try arguments.option("--frame-timeout") {
            frameCompletionTimeout = try Parse.secondsOrOff(timeout, option: "--frame-timeout")
        }
        if let timeout = try arguments.option("--drain-timeout") {
            drainTimeout = try Parse.seconds(timeout, option: "--drain-timeout")
        }
        for entry in try arguments.options("--http-allow") {
            do {
                httpAllowed.append(try HTTPAllowedHost(parsing: entry))
            } catch {
                throw ArgumentError("--http-allow: \(error.message)")
            }
        }
        if let timeout = try arguments.option("--http-timeout") {
            guard !httpAllowed.isEmpty else { throw ArgumentError("--http-timeout needs --http-allow") }
            httpTimeout = try Parse.seconds(timeout, option: "--http-timeout")
        }
        if !httpAllowed.isEmpty, profile.kind(of: HTTPForwardingConfiguration().requestType) != .message {
            throw ArgumentError("--http-allow: 0x403 is not a request type in the \(profile.name) profile")
        }
        tls = try ServerTLSOptions.parse(&arguments)
    }

    /// `--token`, `--max-mailboxes`, `--max-stored-bytes`, `--mailbox-expiry`.
    private mutating func parseStrangerOptions(_ arguments: inout Arguments) throws(ArgumentError) {
        if let token = try arguments.option("--token") {
            try requireSessions(for: "--token")
            guard !token.isEmpty else { throw ArgumentError("--token needs a secret") }
            self.token = token
        }
        if let count = try arguments.option("--max-mailboxes") {
            try requireSessions(for: "--max-mailboxes")
            mailboxLimits.maximumMailboxes = try Parse.count(count, option: "--max-mailboxes")
        }
        if let bytes = try arguments.option("--max-stored-bytes") {
            try requireSessions(for: "--max-stored-bytes")
            mailboxLimits.maximumStoredBytes = try Parse.count(bytes, option: "--max-stored-bytes")
        }
        if let every = try arguments.option("--mailbox-expiry") {
            try requireSessions(for: "--mailbox-expiry")
            expiryInterval = try Parse.secondsOrOff(every, option: "--mailbox-expiry")
        }
    }

    /// Fails for `option`, which sets up the mailboxes, when the profile has no sessions.
    private func requireSessions(for option: String) throws(ArgumentError) {
        guard !profile.supportsSessions else { return }
        throw ArgumentError("\(option) sets up mailboxes, and the \(profile.name) profile has no sessions: they need a serial on the wire")
    }

    /// What ended one of the serve tasks.
    private enum Outcome: Sendable {
        case signal(Int32)
        case serverStopped
        case idle
    }

    func run() async throws -> ExitStatus {
        var configuration = ServerConfiguration(host: host, port: port, profile: profile)
        configuration.idleTimeout = idleTimeout
        configuration.handshakeTimeout = handshakeTimeout
        configuration.maximumRequestsPerPeer = maximumRequestsPerPeer
        configuration.maximumHandlers = maximumHandlers
        configuration.frameCompletionTimeout = frameCompletionTimeout
        configuration.drain.deadline = drainTimeout
        configuration.unixSocket = unixSocket
        // Only a profile with sessions takes --postgres.
        let engine = try await clusterEngine()
        if profile.supportsSessions {
            var mailboxes = try engine.map { MailboxConfiguration(cluster: $0.cluster) } ?? mailboxConfiguration()
            mailboxes.limits = mailboxLimits
            mailboxes.expiryInterval = expiryInterval
            configuration.mailboxes = mailboxes
        } else {
            Console.err("sessions are off: the \(profile.name) profile has no serial on the wire")
        }
        // Channels for every client, which may publish too, where the profile can carry them.
        let channelTypes = ChannelWireTypes()
        if profile.kind(of: channelTypes.subscribe) == .message, profile.kind(of: channelTypes.message) == .notification {
            var channels = ChannelConfiguration()
            channels.authorizePublish = { _ in }
            configuration.channels = channels
        }
        configuration.tls = tls?.configuration(handshakeTimeout: handshakeTimeout)
        // The WebSocket port is wss:// when the server has TLS (the main port's own TLS
        // applies when WebSocket shares it).
        configuration.webSocket = webSocket.map { webSocket in
            var secured = webSocket
            if !webSocket.sharesMainPort { secured.tls = configuration.tls }
            return secured
        }
        let webSocketScheme = configuration.tls == nil ? "ws" : "wss"
        let server = Server(configuration: configuration)
        SeedService.install(on: server, profile: profile)
        if !httpAllowed.isEmpty {
            var http = HTTPForwardingConfiguration(allowedHosts: httpAllowed)
            if let httpTimeout { http.timeout = httpTimeout }
            server.forwardHTTP(http) { record in Console.err(Self.logLine(for: record)) }
        }
        let book = PeerBook()
        let token = token
        server.authenticate { hello in
            if let token, hello.token != token {
                Console.err("\(hello.peer) rejected as client \(hello.clientID): \(hello.token == nil ? "no token" : "wrong token")")
                throw TetherError(code: .sessionRejected, message: "this server requires a token (tether listen --token)")
            }
            book.identified(hello.peer, as: hello.clientID)
            Console.err("\(hello.peer) identified as client \(hello.clientID), resuming after \(hello.lastSequence)")
        }
        let watcher = SignalWatcher([SIGINT, SIGTERM])
        defer { watcher.cancel() }
        let signals = watcher.signals
        let pushInterval = pushInterval
        let pushType = pushType
        let clusterNotes = engine?.notes ?? []
        let notes = (profile.name == Profile.seed.name ? [] : ["profile \(profile.name)"]) + clusterNotes + (tls.map { [$0.summary] } ?? [])
        let listeningNote = notes.isEmpty ? "" : " (\(notes.joined(separator: ", ")))"
        let sessions = configuration.mailboxes != nil

        do {
            try await withThrowingTaskGroup(of: Outcome.self) { group in
                group.addTask {
                    try await server.run()
                    return .serverStopped
                }
                group.addTask {
                    let address = try await server.listeningAddress()
                    Console.out("listening on \(address)\(listeningNote)")
                    if let unixSocket, !unixSocket.replacesPort {
                        Console.out("listening on unix://\(unixSocket.path)")
                    }
                    if let webSocket {
                        let ws = try await server.webSocketAddress()
                        let host = ws.ipAddress.contains(":") ? "[\(ws.ipAddress)]" : ws.ipAddress
                        Console.out("listening on \(webSocketScheme)://\(host):\(ws.port)\(webSocket.path ?? "/")")
                    }
                    #if DEBUG
                    // A load test of a debug build measures the build: say so where whoever
                    // runs `tether bench` against it sees it.
                    Console.err(Self.debugBuildWarning)
                    #endif
                    return .idle
                }
                group.addTask {
                    for await event in server.events {
                        if let line = Self.logLine(for: event, book: book) { Console.err(line) }
                        book.record(event)
                    }
                    return .idle
                }
                if let engine {
                    group.addTask {
                        try await engine.watch()
                        return .idle
                    }
                }
                if let pushInterval {
                    group.addTask {
                        try await Self.tick(on: server, book: book, every: pushInterval, type: pushType, sessions: sessions)
                        return .idle
                    }
                }
                group.addTask {
                    for await number in signals { return .signal(number) }
                    return .idle
                }
                var stopping = false
                while true {
                    let outcome: Outcome?
                    do {
                        outcome = try await group.next()
                    } catch is CancellationError where stopping {
                        continue
                    }
                    guard let outcome else { break }
                    switch outcome {
                    case .signal(let number):
                        Console.err("\(SignalWatcher.name(of: number)): draining for up to \(describe(drainTimeout))")
                        stopping = true
                        // run() returns once every connection is closed; a second signal
                        // ends the process at once.
                        await server.drain()
                        Console.err("drained: shutting down")
                        group.cancelAll()
                    case .serverStopped:
                        stopping = true
                        group.cancelAll()
                    case .idle:
                        continue
                    }
                }
            }
        } catch let error as TetherError where engine != nil {
            await engine?.close()
            throw error.onOneLine
        } catch {
            await engine?.close()
            throw error
        }
        await engine?.close()
        return .success
    }

    /// What a debug build prints once it listens.
    static let debugBuildWarning = "tether: warning: this tether is a debug build, which serves several times fewer requests than a release build (`swift run -c release tether serve …`)"

    /// The cluster of `--postgres` or `--redis`, joined as this server's node.
    private func clusterEngine() async throws(TetherError) -> ClusterEngine? {
        if let postgres {
            return .postgres(try await Self.cluster(postgres, port: port), endpoint: postgres.endpoint)
        }
        if let redis {
            let node = redisNode ?? PostgresOptions(url: "", node: nil).nodeName(port: port)
            do {
                return .redis(try await RedisCluster(configuration: RedisClusterConfiguration(redis: redis.configuration, node: node)), endpoint: redis.endpoint)
            } catch {
                throw error.onOneLine
            }
        }
        return nil
    }

    /// The mailboxes: in the `--store` file, or in memory.
    private func mailboxConfiguration() throws(TetherError) -> MailboxConfiguration {
        guard let storePath else { return .inMemory }
        return try .sqlite(path: storePath)
    }

    /// `peer#3 connected from 127.0.0.1:53422`, or `nil` for events not worth a line.
    private static func logLine(for event: ServerEvent, book: PeerBook) -> String? {
        var peer = event.peer.map(String.init(describing:)) ?? "peer"
        // Events carry the client id once the hello is accepted; the book knows it from the
        // hello's check on, for the lines in between.
        if let id = event.peer, let clientID = event.clientID ?? book.clientID(of: id) { peer += " (client \(clientID))" }
        let reason = event.reason.map { ": \($0.message)" } ?? ""
        switch event.kind {
        case .peerConnected: return "\(peer) connected from \(event.address)"
        case .peerSecured: return event.tls.map { "\(peer) secured: \(tlsSummary($0, peer: "client"))" }
        case .peerDisconnected: return "\(peer) disconnected\(reason)"
        case .peerRejected: return "rejected a connection from \(event.address)\(reason)"
        default: return nil
        }
    }

    /// `peer#1 HTTP GET http://127.0.0.1:8080/ → 200 (17 bytes, 3 ms)`, or the failure.
    static func logLine(for record: HTTPExchangeRecord) -> String {
        let millis = record.duration.components.seconds * 1000 + record.duration.components.attoseconds / 1_000_000_000_000_000
        switch record.outcome {
        case .success(let response):
            let what = record.request.map { "HTTP \($0.method) \($0.url)" } ?? "HTTP"
            return "\(record.peer) \(what) → \(response.status) (\(response.body.count) bytes, \(millis) ms)"
        case .failure(let failure):
            return "\(record.peer) \(failure.message)"
        }
    }

    /// `peer#3 secured: TLSv1.3 TLS_AES_256_GCM_SHA384, client /CN=app (sha256/…)`.
    private static func securedLine(_ id: PeerID, _ details: TLSDetails) -> String {
        "\(id) secured: \(tlsSummary(details, peer: "client"))"
    }

    /// Pushes tick after tick until cancelled: to every client id, stored in its mailbox
    /// (with `sessions`), and to every connected peer that has not identified.
    private static func tick(on server: Server, book: PeerBook, every interval: Duration, type: UInt32, sessions: Bool) async throws {
        _ = try await server.listeningAddress()
        var sequence: UInt32 = 0
        while true {
            try await Task.sleep(for: interval)
            sequence = sequence == .max ? 1 : sequence + 1
            let frame = SeedService.push(type: type, sequence: sequence, time: Date().ISO8601Format())
            // Without sessions there are no client ids: every peer is anonymous.
            if sessions {
                do {
                    let clients = try await server.clientIDs()
                    if !clients.isEmpty {
                        let offline = clients.count { server.peer(forClient: $0) == nil }
                        try await server.push(frame, toClients: clients)
                        Console.err("tick \(sequence): \(clients.count) client\(clients.count == 1 ? "" : "s") (\(offline) offline)")
                    }
                } catch {
                    Console.err("tick \(sequence): \(error.message)")
                }
            }
            // An identified client gets its tick from its mailbox only, not twice.
            for peer in server.peers where book.isAnonymous(peer.id) {
                try? await peer.push(frame)
            }
        }
    }
}

/// Which peers sent a session hello, and as whom: for the log, and so that the ticks for
/// anonymous peers skip them (theirs come from their mailboxes).
private final class PeerBook: Sendable {
    private let clientIDs = Lock<[PeerID: String]>([:])
    /// Forgets peers that left.
    func record(_ event: ServerEvent) {
        guard let peer = event.peer, event.kind == .peerDisconnected else { return }
        _ = clientIDs.withLock { $0.removeValue(forKey: peer) }
    }

    /// `peer` sent a session hello for `clientID`.
    func identified(_ peer: PeerID, as clientID: String) {
        clientIDs.withLock { $0[peer] = clientID }
    }

    /// The client id `peer` identified as, if it did.
    func clientID(of peer: PeerID) -> String? {
        clientIDs.withLock { $0[peer] }
    }

    /// Whether `peer` has not sent a session hello.
    func isAnonymous(_ peer: PeerID) -> Bool {
        clientIDs.withLock { $0[peer] == nil }
    }
}
