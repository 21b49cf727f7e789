#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization
import Tether

/// `tether listen`: print pushes as JSON lines, across reconnects.
struct ListenCommand: Command {
    static let name = "listen"
    static let summary = "print the server's pushes as JSON lines; reconnects by itself"
    static let synopsis = """
        tether listen (HOST:PORT | ws://HOST:PORT/PATH | wss://HOST:PORT/PATH) [--profile NAME] [--client-id ID [--token TOKEN] [--state FILE]] [--type TYPE] [--count N] \
        [--max-attempts N] [--reconnect-delay SECONDS] \
        [--heartbeat fixed|adaptive] [--heartbeat-interval SECONDS] [--heartbeat-timeout SECONDS] [--max-missed N] \
        \(VerboseOption.synopsis) \(FallbackOption.synopsis) \(ProxyOption.synopsis) \(ClientTLSOptions.synopsis)
        """
    static let briefHelp: String? = """
        Connects and prints each notification (push) as one JSON line on stdout, and each
        change of the connection's state on stderr; reconnects by itself with backoff when
        the connection breaks or the server restarts. With --client-id it has a session: the
        server keeps its pushes while it is away and replays them when it comes back.

          tether listen 127.0.0.1:9000 --count 3
          {"type":2,"serial":7,"content":{"seq":7,"time":"…"}}

        Exits 0 after N pushes, or on SIGINT or SIGTERM; 1 when the first connect fails.

        common options:
        \(optionHelp([
            ("HOST:PORT", "the server: 127.0.0.1:9000, [::1]:9000, or ws://HOST:PORT/PATH, wss://…"),
            ("--client-id ID", "identify as this client and resume where it left off"),
            ("--token TOKEN", "a credential sent with the client id"),
            ("--type TYPE", "only pushes of this type (0x2…0x400)"),
            ("--count N", "stop after N pushes"),
            ("--max-attempts N", "give up after N failed reconnect attempts in a row"),
            ("--profile NAME", "the wire format (default seed; `tether profiles`)"),
            ("--verbose", "print on stderr how each connection was opened"),
            ("--fallback URL", "a ws:// or wss:// endpoint for when HOST:PORT cannot connect"),
            ("--tls", "connect with TLS; --ca FILE trusts other CAs than the system's"),
        ], column: 23))
        """
    static let help = """
        Connects and prints each notification (push) as one JSON line on stdout:

          {"type":2,"serial":7,"content":{"seq":7,"time":"…"}}

        The content is embedded as JSON when it parses, as a string otherwise, and is null
        when empty.

        Keeps listening when the connection breaks or the server restarts: it reconnects by
        itself after --reconnect-delay, then 1.6 times longer per failed attempt up to
        120 s (±20 % jitter), and prints the state at the start and every change of it on
        stderr, one line each:

          tether: connected
          tether: reconnecting (attempt 2 in 1.6 s): connection refused by 127.0.0.1:9000

        With TLS, every connect does a TLS handshake, and the state line says what it
        settled:

          tether: connected, TLSv1.3 TLS_AES_256_GCM_SHA384, server /CN=localhost (sha256/…)

        With --verbose, each connected line is followed by how that connection was opened:
        the address and family that won (a host's IPv6 and IPv4 addresses are raced), the
        connect and resolution times, and every address tried when there were several:

          tether: connected
          tether: connected to 127.0.0.1:9000 (IPv4) in 0.412 ms, resolved in 0.095 ms

        A TLS failure on the first connect ends it with exit 1 and the reason: a certificate
        that does not verify, a host name or pin that does not match, a client certificate
        the server requires or refuses. Later, a failed handshake (after a restart with
        another certificate, say) is retried like a refused connect, with backoff and
        within --max-attempts.

        With --client-id it identifies to the server (`tether serve`) with a session: the
        server keeps the pushes for that client id in a mailbox while it is away and
        replays them, in order, when it comes back, after a broken connection or a restart
        of this command. The serial printed is the push's sequence in the client's mailbox:
        1, 2, 3, … with no repeats, across any number of reconnects. Only the session's
        pushes are printed: a push the server sends to the connection rather than to the
        client id (serial 0, `tether serve`'s tick before the client identified) is not.
        The sequence of the last push printed is saved in a state file, and the next start
        resumes after it. Pushes are acknowledged (the server may delete them) only once
        saved. Session events are printed on stderr:

          tether: session resumed after 12; 3 waiting
          tether: session lost 13…20 (overflow): the server no longer had them

        With --profile it speaks another wire format (`tether profiles`): seed-extended or
        compact (marker and lines have no pushes). Sessions need a serial on the wire, so
        compact refuses --client-id.

        Heartbeats find a peer that stopped answering: by default one every 10 s, 5 s for
        its ack, and the connection counts as lost (and reconnects) after 3 misses in a row.
        With --heartbeat adaptive the interval adapts to the network, for a link behind a
        NAT that forgets idle connections: it starts at 30 s and grows by 60 s after every
        two acked heartbeats with nothing else in between, up to 9 min; after a connection
        dies silently it goes back to the last interval that worked (10 s for each ack; the
        next heartbeat goes out at once after a miss).

        Exits 0 after N pushes, or on SIGINT or SIGTERM (the connection is closed first).
        Exits 1 when the first connect fails, or when the connection ends by itself: after
        N failed reconnect attempts in a row with --max-attempts. An attempt counts as
        failed until the server answers with a valid frame (a heartbeat ack, a push; with
        --client-id, the session's acceptance): a peer that accepts and then closes, or
        answers with HTTP, spends the attempts like one that refuses. With --client-id it
        also exits 1 when another listener with the same client id takes the session over:
        it says so and stops, rather than take the session back from the newer one.

        arguments:
          HOST:PORT                      the server: 127.0.0.1:9000, [::1]:9000
          ws://HOST:PORT/PATH            the server's WebSocket endpoint (ws://127.0.0.1:8080/tether)
          wss://HOST:PORT/PATH           the same over TLS (port 443 by default); turns TLS on
                                         with the options below
        \(ProfileOption.help(column: 33))
          --client-id ID                 identify as this client and resume where it left
                                         off (1 to 256 bytes)
          --token TOKEN                  a credential sent with the client id
          --state FILE                   where the last sequence is kept (default
                                         $HOME/.tether/listen-ID.state)
          --type TYPE                    only pushes of this type (0x2…0x400)
          --count N                      stop after N pushes
          --max-attempts N               give up after N failed reconnect attempts in a
                                         row (default: never; 0 never reconnects)
          --reconnect-delay SECONDS      wait before the first reconnect attempt (default 1)
          --heartbeat fixed|adaptive     a fixed interval (the default) or one that adapts
                                         to the network; adaptive refuses
                                         --heartbeat-interval
          --heartbeat-interval SECONDS   time between heartbeats (default 10)
          --heartbeat-timeout SECONDS    how long each ack may take (default 5, or half
                                         the interval when --heartbeat-interval is given)
          --max-missed N                 misses in a row that count the connection as
                                         lost (default 3)
        \(VerboseOption.help(column: 33))
        \(FallbackOption.help(column: 33))
        \(ProxyOption.help(column: 33))
        \(ClientTLSOptions.help(column: 33))
          -h, --help                     show this help
        """

    var endpoint: Endpoint
    var profile = Profile.seed
    var type: UInt32?
    var count: Int?
    var maximumAttempts: Int?
    var reconnectDelay: Duration = .seconds(1)
    var heartbeat = HeartbeatOptions()
    var clientID: String?
    var token: String?
    var statePath: String?
    var tls = ClientTLSOptions()
    var verbose = false
    var fallback: FallbackPolicy?
    var proxy: HTTPProxy?

    /// The longest client id, in bytes of UTF-8.
    static let maximumClientIDLength = 256

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        profile = try ProfileOption.parse(&arguments)
        guard let pushTypes = profile.typeList(of: .notification) else {
            throw ArgumentError("the \(profile.name) profile has no pushes to listen for")
        }
        if let clientID = try arguments.option("--client-id") {
            guard profile.supportsSessions else {
                throw ArgumentError("--client-id identifies with a session, and the \(profile.name) profile has no sessions: they need a serial on the wire")
            }
            guard (1...Self.maximumClientIDLength).contains(clientID.utf8.count) else {
                throw ArgumentError("--client-id must be 1 to \(Self.maximumClientIDLength) bytes")
            }
            self.clientID = clientID
        }
        if let token = try arguments.option("--token") {
            guard clientID != nil else { throw ArgumentError("--token needs --client-id") }
            self.token = token
        }
        if let path = try arguments.option("--state") {
            guard clientID != nil else { throw ArgumentError("--state needs --client-id") }
            guard !path.isEmpty else { throw ArgumentError("--state needs a file name") }
            statePath = path
        }
        if let type = try arguments.option("--type") {
            let value = try Parse.frameType(type, option: "--type")
            guard profile.kind(of: value) == .notification else {
                throw ArgumentError("--type \(hex(value)) is not a notification type in the \(profile.name) profile (\(pushTypes))")
            }
            self.type = value
        }
        if let count = try arguments.option("--count") {
            self.count = try Parse.count(count, option: "--count")
        }
        if let attempts = try arguments.option("--max-attempts") {
            maximumAttempts = try Parse.countOrZero(attempts, option: "--max-attempts")
        }
        if let delay = try arguments.option("--reconnect-delay") {
            reconnectDelay = try Parse.seconds(delay, option: "--reconnect-delay")
        }
        heartbeat = try HeartbeatOptions(parsing: &arguments)
        tls = try ClientTLSOptions(parsing: &arguments)
        verbose = arguments.flag("--verbose")
        fallback = try FallbackOption.parse(&arguments)
        proxy = try ProxyOption.parse(&arguments)
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
        try tls.check(for: [endpoint, fallback?.endpoint])
    }

    /// The policy the options ask for: the library's backoff from `--reconnect-delay`,
    /// bounded by `--max-attempts`.
    var reconnectPolicy: ReconnectPolicy {
        if maximumAttempts == 0 { return .disabled }
        var policy = ReconnectPolicy()
        policy.initialDelay = reconnectDelay
        policy.maximumAttempts = maximumAttempts
        // A server that is not there at the start is reported at once, with exit 1.
        policy.appliesToFirstConnect = false
        return policy
    }

    /// What ended one of the listen tasks.
    private enum Outcome: Sendable {
        /// `--count` pushes were printed.
        case counted
        /// The connection reached a final state by itself (the state sequence ended).
        case ended
        case signal(Int32)
        /// The state file could not be written, or TLS with the server does not work.
        case failed(TetherError)
        case idle
    }

    func run() async throws -> ExitStatus {
        var configuration = ConnectionConfiguration(profile: profile)
        configuration.fallback = fallback
        configuration.webSocket.proxy = proxy
        configuration.reconnect = reconnectPolicy
        configuration.tls = tls.configuration()
        if !heartbeat.isEmpty {
            configuration.heartbeat = heartbeat.applied(to: configuration.heartbeat)
        }
        var stateFile: SequenceFile?
        if let clientID {
            let file = try SequenceFile(path: statePath ?? SequenceFile.defaultPath(for: clientID))
            var session = SessionConfiguration(clientID: clientID, token: token, resumeAfter: file.latest)
            // Acknowledged once saved, so a push is never deleted before it is on disk.
            session.acknowledgesAutomatically = false
            configuration.session = session
            stateFile = file
        }
        // Caught from here on: a signal during the first connect takes effect once it is over.
        let watcher = SignalWatcher([SIGINT, SIGTERM])
        defer { watcher.cancel() }
        let signals = watcher.signals

        if let stateFile {
            // Subscribed before connecting: the first connect already replays what was missed.
            let connection = Connection(to: endpoint, configuration: configuration)
            let pushes = connection.notifications
            let events = connection.sessionEvents
            try await connection.connect()
            return await listen(on: connection, pushes: pushes, events: events, saving: stateFile, signals: signals)
        }
        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        let pushes = type.map { connection.notifications(ofType: $0) } ?? connection.notifications
        let states = connection.states
        let count = count

        let outcome = await withTaskGroup(of: Outcome.self) { group in
            group.addTask {
                var received = 0
                for await push in pushes {
                    Console.out(Self.line(for: push, serial: UInt64(push.serial)))
                    received += 1
                    if let count, received >= count { return .counted }
                }
                // The connection ended; the state task reports how.
                return .idle
            }
            Self.watch(connection, states, signals, verbose: verbose, in: &group)
            return await Self.first(of: &group)
        }
        return await Self.finish(connection, outcome)
    }

    /// Listens with a session: prints each push, saves its sequence, and acknowledges what
    /// is saved.
    private func listen(
        on connection: Connection,
        pushes: Subscription<Frame>,
        events: Subscription<SessionEvent>,
        saving file: SequenceFile,
        signals: AsyncStream<Int32>
    ) async -> ExitStatus {
        let states = connection.states
        let count = count
        let type = type
        let (saves, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        wake.yield()

        let outcome = await withTaskGroup(of: Outcome.self) { group in
            group.addTask {
                var received = 0
                for await push in pushes {
                    // Serial 0: a push outside the session (sent to this connection rather than
                    // to the client id, or written before the server accepted the hello). The
                    // session's pushes carry everything the server sent the client, in order;
                    // printing these too would show a tick twice, with no sequence.
                    guard push.serial != 0 else { continue }
                    let sequence = file.sequence(of: push.serial)
                    if type == nil || push.type == type {
                        Console.out(Self.line(for: push, serial: sequence))
                        received += 1
                    }
                    file.advance(to: sequence, force: true)
                    wake.yield()
                    if let count, received >= count { return .counted }
                }
                return .idle
            }
            group.addTask {
                for await event in events {
                    Console.err("tether: session \(event)" + Self.explanation(of: event))
                    // A gap moves the sequence on. After a reset the next push sets it (its
                    // serial is read near the old sequence, which finds the lower one), so a
                    // push printed before this event is handled is never saved as unseen.
                    if event.kind == .gap {
                        file.advance(to: event.lastSequence)
                        wake.yield()
                    }
                }
                return .idle
            }
            group.addTask {
                // Writes the state file whenever it is behind, then acknowledges what it wrote.
                for await _ in saves {
                    do throws(TetherError) {
                        if let saved = try file.save() { await connection.acknowledge(through: saved) }
                    } catch {
                        return .failed(error)
                    }
                }
                return .idle
            }
            Self.watch(connection, states, signals, verbose: verbose, in: &group)
            return await Self.first(of: &group)
        }
        wake.finish()
        do throws(TetherError) {
            if let saved = try file.save() { await connection.acknowledge(through: saved) }
        } catch {
            return await Self.finish(connection, .failed(error))
        }
        return await Self.finish(connection, outcome)
    }

    /// Adds the tasks both ways of listening share: state changes printed on stderr (ending
    /// with the final state; `connected` with what the TLS handshake settled), and the
    /// signals that stop it.
    private static func watch(
        _ connection: Connection,
        _ states: Subscription<ConnectionState>,
        _ signals: AsyncStream<Int32>,
        verbose: Bool,
        in group: inout TaskGroup<Outcome>
    ) {
        group.addTask {
            for await state in states {
                if state.phase == .connected, let details = await connection.tlsDetails {
                    Console.err("tether: \(state), \(tlsSummary(details, peer: "server"))")
                } else {
                    Console.err("tether: \(state)")
                }
                if verbose, state.phase == .connected { await VerboseOption.print(connection) }
                if state.reason?.code == .sessionTakenOver, state.isFinal {
                    Console.err("tether: displaced: a newer connection with the same client id took the session over; not reconnecting, so the two do not take it from each other")
                }
            }
            // Cancelled, or the connection reached its final state, printed last.
            return Task.isCancelled ? .idle : .ended
        }
        group.addTask {
            for await number in signals { return .signal(number) }
            return .idle
        }
    }

    /// The first outcome that ends listening; the other tasks are cancelled.
    private static func first(of group: inout TaskGroup<Outcome>) async -> Outcome {
        var outcome = Outcome.idle
        for await next in group {
            if case .idle = next { continue }
            outcome = next
            break
        }
        // Stops the state task before close(), so our own close is not reported.
        group.cancelAll()
        return outcome
    }

    /// Closes the connection as `outcome` asks, and says how to exit.
    private static func finish(_ connection: Connection, _ outcome: Outcome) async -> ExitStatus {
        switch outcome {
        case .counted:
            await connection.close()
            return .success
        case .signal(let number):
            Console.err("\(SignalWatcher.name(of: number)): closing the connection")
            await connection.close()
            return .success
        case .ended:
            // Its state line, just printed, says why.
            return .failure
        case .failed(let error):
            Console.fail(error.message)
            await connection.close()
            return .failure
        case .idle:
            await connection.close()
            return .failure
        }
    }

    /// `{"type":2,"serial":7,"content":{…}}`.
    private static func line(for push: Frame, serial: UInt64) -> String {
        #"{"type":\#(push.type),"serial":\#(serial),"content":\#(embeddedJSON(push.payload))}"#
    }

    /// What a session event means for the pushes printed.
    private static func explanation(of event: SessionEvent) -> String {
        switch event.kind {
        case .gap: ": the server no longer had them"
        case .reset: ": the server's mailbox was replaced or emptied"
        default: ""
        }
    }
}

/// The last sequence `listen --client-id` has printed, kept in a small file across runs:
/// the number in decimal and a newline, replaced atomically (a temporary file, fsync, then
/// rename) each time it is saved.
final class SequenceFile: Sendable {
    /// The file.
    let path: String

    private struct State {
        /// The sequence printed last.
        var latest: UInt64
        /// The sequence the file holds.
        var saved: UInt64
    }

    private let state: Lock<State>
    /// Held while the file is written, so two saves never interleave.
    private let writing = Lock<Void>(())

    /// Reads the file, a missing one meaning 0, and writes it back: a file that cannot be
    /// written fails now rather than at the first push.
    ///
    /// - Throws: ``TetherError`` when the file cannot be read or written, or does not hold
    ///   a sequence.
    init(path: String) throws(TetherError) {
        self.path = path
        let sequence = try Self.load(path)
        try Self.store(sequence, to: path)
        state = Lock(State(latest: sequence, saved: sequence))
    }

    /// `$HOME/.tether/listen-ID.state`, creating `$HOME/.tether`. Bytes of the client id
    /// other than letters, digits, `.`, `_` and `-` are written as `%XX`.
    ///
    /// - Throws: ``TetherError`` when `HOME` is not set or the directory cannot be made.
    static func defaultPath(for clientID: String) throws(TetherError) -> String {
        guard let home = getenv("HOME").map({ String(cString: $0) }), !home.isEmpty else {
            throw TetherError(code: .invalidArgument, message: "HOME is not set: give the state file with --state FILE")
        }
        let directory = home + "/.tether"
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw TetherError(code: .systemCall, message: "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        var name = ""
        for byte in clientID.utf8 {
            let safe = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2E || byte == 0x5F || byte == 0x2D
            if safe {
                name.append(Character(Unicode.Scalar(byte)))
            } else {
                let digits = String(byte, radix: 16, uppercase: true)
                name += "%" + (digits.count == 1 ? "0" : "") + digits
            }
        }
        return "\(directory)/listen-\(name).state"
    }

    /// The sequence printed last.
    var latest: UInt64 { state.withLock { $0.latest } }

    /// The 64-bit sequence a push's 32-bit serial stands for: the one nearest the last.
    func sequence(of serial: UInt32) -> UInt64 {
        let near = latest
        let delta = Int64(Int32(bitPattern: serial &- UInt32(truncatingIfNeeded: near)))
        if delta < 0, UInt64(-delta) > near { return UInt64(serial) }
        return delta < 0 ? near - UInt64(-delta) : near + UInt64(delta)
    }

    /// Moves the sequence to `sequence`: only forward, unless `force` (a push or a reset
    /// decides where the sequence is, a gap only moves it on).
    func advance(to sequence: UInt64, force: Bool = false) {
        state.withLock { state in
            if force || sequence > state.latest { state.latest = sequence }
        }
    }

    /// Writes the sequence if the file is behind.
    ///
    /// - Returns: The sequence written, or `nil` when the file was up to date.
    /// - Throws: ``TetherError`` when the file cannot be written.
    func save() throws(TetherError) -> UInt64? {
        try writing.withLock { _ throws(TetherError) -> UInt64? in
            let sequence = state.withLock { $0.saved == $0.latest ? nil : $0.latest }
            guard let sequence else { return nil }
            try Self.store(sequence, to: path)
            state.withLock { $0.saved = sequence }
            return sequence
        }
    }

    private static func load(_ path: String) throws(TetherError) -> UInt64 {
        guard let text = try StateFile.load(path) else { return 0 }
        let words = text.split(whereSeparator: \.isWhitespace)
        guard words.count == 1, let sequence = UInt64(words[0]) else {
            throw StateFile.malformed(path, expected: "the last sequence (a whole number)", found: text)
        }
        return sequence
    }

    private static func store(_ sequence: UInt64, to path: String) throws(TetherError) {
        try StateFile.save("\(sequence)\n", to: path)
    }

}

/// A small file that keeps where a command left off: read whole, replaced atomically.
enum StateFile {
    /// The file's text, or `nil` when there is no file; at most 256 bytes are taken.
    static func load(_ path: String) throws(TetherError) -> String? {
        let fd = open(path, O_RDONLY)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw failure("cannot read the state file \(path)")
        }
        // Closed when it goes out of scope, on every way out.
        let file = Socket(adopting: fd)
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while bytes.count <= 256 {
            let count = buffer.withUnsafeMutableBytes { read(file.descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw failure("cannot read the state file \(path)")
            }
            if count == 0 { break }
            bytes += buffer[..<count]
        }
        let text = String(decoding: bytes, as: UTF8.self)
        guard bytes.count <= 256 else { throw malformed(path, expected: "a line of at most 256 bytes", found: text) }
        return text
    }

    /// Replaces the file with `text`: written to `path.tmp`, synced, then renamed.
    static func save(_ text: String, to path: String) throws(TetherError) {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw failure("cannot write the state file \(temporary)") }
        // Closed on every way out, by the owner's end of life.
        let file = Socket(adopting: fd)
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(file.descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                throw failure("cannot write the state file \(temporary)")
            }
            bytes = bytes.dropFirst(written)
        }
        if fsync(file.descriptor) != 0 {
            throw failure("cannot write the state file \(temporary)")
        }
        file.close()
        guard rename(temporary, path) == 0 else { throw failure("cannot replace the state file \(path)") }
    }

    /// The error for a file whose text is not what the command keeps there.
    static func malformed(_ path: String, expected: String, found text: String) -> TetherError {
        let shown = String(text.prefix(20)).debugDescription + (text.count > 20 ? "…" : "")
        return TetherError(code: .decodingFailed, message: "the state file \(path) is malformed: expected \(expected), found \(shown); fix or delete it")
    }

    /// `message: <strerror(errno)>`.
    private static func failure(_ message: String) -> TetherError {
        TetherError(code: .systemCall, message: "\(message): \(String(cString: strerror(errno)))")
    }
}
