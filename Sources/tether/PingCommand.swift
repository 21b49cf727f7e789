import Tether

/// `tether ping`: heartbeats and their round-trip times.
struct PingCommand: Command {
    static let name = "ping"
    static let summary = "send heartbeats and print their round-trip times"
    static let synopsis = "tether ping HOST:PORT [--count N] [--interval SECONDS]"
    static let help = """
        Connects with heartbeats every INTERVAL and prints one line per ack or miss, then a
        summary. A heartbeat not acked within half the interval counts as missed. Exits 1
        when no heartbeat was acked.

          heartbeat 1 from 127.0.0.1:9000: rtt 0.123 ms

        arguments:
          HOST:PORT            the server: 127.0.0.1:9000, [::1]:9000
          --count N            heartbeats to wait for (default 4)
          --interval SECONDS   time between heartbeats (default 1)
          -h, --help           show this help
        """

    var endpoint: Endpoint
    var count = 4
    var interval: Duration = .seconds(1)

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        if let count = try arguments.option("--count") {
            self.count = try Parse.count(count, option: "--count")
        }
        if let interval = try arguments.option("--interval") {
            self.interval = try Parse.seconds(interval, option: "--interval")
        }
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
    }

    func run() async throws -> ExitStatus {
        var configuration = ConnectionConfiguration()
        // Report every miss instead of closing after the library's default of three.
        configuration.heartbeat = .every(interval, maximumMissed: count + 1)
        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        let beats = connection.heartbeats
        let peer = await connection.remoteAddress?.description ?? endpoint.description
        var roundTrips: [Double] = []
        var missed = 0
        Console.out("PING \(peer): heartbeat every \(format(interval)), timeout \(format(configuration.heartbeat.timeout))")
        for await beat in beats {
            switch beat.outcome {
            case .acked:
                let rtt = beat.roundTripTime.map(milliseconds) ?? 0
                roundTrips.append(rtt)
                Console.out("heartbeat \(beat.serial) from \(peer): rtt \(formatMilliseconds(rtt)) ms")
            case .missed:
                missed += 1
                Console.out("heartbeat \(beat.serial) from \(peer): no ack within \(format(configuration.heartbeat.timeout))")
            default:
                continue
            }
            if roundTrips.count + missed >= count { break }
        }
        let closeReason = await connection.currentState.reason
        await connection.close()
        let sent = roundTrips.count + missed
        var summary = "--- \(peer): \(sent) heartbeats, \(roundTrips.count) acked, \(missed) missed"
        if let minimum = roundTrips.min(), let maximum = roundTrips.max() {
            let average = roundTrips.reduce(0, +) / Double(roundTrips.count)
            summary += "; rtt min/avg/max = \(formatMilliseconds(minimum))/\(formatMilliseconds(average))/\(formatMilliseconds(maximum)) ms"
        }
        Console.out(summary)
        if sent < count, let closeReason { throw closeReason }
        guard !roundTrips.isEmpty else {
            throw TetherError(code: .heartbeatTimeout, message: "no heartbeat acked by \(peer)")
        }
        return .success
    }
}
