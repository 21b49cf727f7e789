#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether

/// `tether listen`: print pushes as JSON lines, across reconnects.
struct ListenCommand: Command {
    static let name = "listen"
    static let summary = "print the server's pushes as JSON lines; reconnects by itself"
    static let synopsis = """
        tether listen HOST:PORT [--type TYPE] [--count N] [--max-attempts N] [--reconnect-delay SECONDS] \
        [--heartbeat-interval SECONDS] [--heartbeat-timeout SECONDS] [--max-missed N]
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

        Heartbeats find a peer that stopped answering: by default one every 10 s, 5 s for
        its ack, and the connection counts as lost (and reconnects) after 3 misses in a row.

        Exits 0 after N pushes, or on SIGINT or SIGTERM (the connection is closed first).
        Exits 1 when the first connect fails, or when the connection ends by itself: after
        N failed reconnect attempts in a row with --max-attempts.

        arguments:
          HOST:PORT                      the server: 127.0.0.1:9000, [::1]:9000
          --type TYPE                    only pushes of this type (0x2…0x400)
          --count N                      stop after N pushes
          --max-attempts N               give up after N failed reconnect attempts in a
                                         row (default: never; 0 never reconnects)
          --reconnect-delay SECONDS      wait before the first reconnect attempt (default 1)
          --heartbeat-interval SECONDS   time between heartbeats (default 10)
          --heartbeat-timeout SECONDS    how long each ack may take (default 5, or half
                                         the interval when --heartbeat-interval is given)
          --max-missed N                 misses in a row that count the connection as
                                         lost (default 3)
          -h, --help                     show this help
        """

    var endpoint: Endpoint
    var type: UInt32?
    var count: Int?
    var maximumAttempts: Int?
    var reconnectDelay: Duration = .seconds(1)
    var heartbeat = HeartbeatOptions()

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        if let type = try arguments.option("--type") {
            let value = try Parse.frameType(type, option: "--type")
            guard Profile.seed.classify(value) == .notification else {
                throw ArgumentError("--type \(hex(value)) is not a notification type (0x2…0x400)")
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
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
    }

    /// The policy the options ask for: the library's backoff from `--reconnect-delay`,
    /// bounded by `--max-attempts`.
    var reconnectPolicy: ReconnectPolicy {
        if maximumAttempts == 0 { return .disabled }
        var policy = ReconnectPolicy()
        policy.initialDelay = reconnectDelay
        policy.maximumAttempts = maximumAttempts
        return policy
    }

    /// What ended one of the listen tasks.
    private enum Outcome: Sendable {
        /// `--count` pushes were printed.
        case counted
        /// The connection reached a final state by itself (the state sequence ended).
        case ended
        case signal(Int32)
        case idle
    }

    func run() async throws -> ExitStatus {
        var configuration = ConnectionConfiguration()
        configuration.reconnect = reconnectPolicy
        if !heartbeat.isEmpty {
            configuration.heartbeat = heartbeat.applied(to: configuration.heartbeat)
        }
        // Caught from here on: a signal during the first connect takes effect once it is over.
        let watcher = SignalWatcher([SIGINT, SIGTERM])
        defer { watcher.cancel() }
        let signals = watcher.signals

        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        let pushes = type.map { connection.notifications(ofType: $0) } ?? connection.notifications
        let states = connection.states
        let count = count

        let outcome = await withTaskGroup(of: Outcome.self) { group in
            group.addTask {
                var received = 0
                for await push in pushes {
                    Console.out(#"{"type":\#(push.type),"serial":\#(push.serial),"content":\#(embeddedJSON(push.payload))}"#)
                    received += 1
                    if let count, received >= count { return .counted }
                }
                // The connection ended; the state task reports how.
                return .idle
            }
            group.addTask {
                for await state in states {
                    Console.err("tether: \(state)")
                }
                // Cancelled, or the connection reached its final state, printed last.
                return Task.isCancelled ? .idle : .ended
            }
            group.addTask {
                for await number in signals { return .signal(number) }
                return .idle
            }
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
        case .idle:
            await connection.close()
            return .failure
        }
    }
}
