import Tether

/// `--verbose`: how each connection was opened (the address and family that won the race,
/// the connect time, every address tried), on stderr.
enum VerboseOption {
    static let synopsis = "[--verbose]"

    static func help(column: Int) -> String {
        optionHelp(
            [("--verbose", "print on stderr how each connection was opened: the address and family that won, the connect time and every address tried")],
            column: column
        )
    }

    /// The lines that describe `report`, with the time until the connection was ready
    /// (TLS and the session hello included) when known.
    static func lines(_ report: ConnectReport, readyIn ready: Duration? = nil) -> [String] {
        let over = report.endpoint.webSocketPath == nil ? "" : " over \(report.endpoint)"
        var first = "tether: connected to \(report.address) (\(report.family))\(over) in \(milliseconds(report.connectTime)) ms, resolved in \(milliseconds(report.resolutionTime)) ms"
        if let ready { first += ", ready in \(milliseconds(ready)) ms" }
        var lines = [first]
        if report.attempts.count > 1 || report.endpoint.host != report.address.ipAddress {
            for attempt in report.attempts {
                lines.append("tether:   tried \(attempt)")
            }
        }
        return lines
    }

    /// Prints how the current connection of `connection` was opened.
    static func print(_ connection: Connection, readyIn ready: Duration? = nil) async {
        guard let report = await connection.connectReport else { return }
        for line in lines(report, readyIn: ready) { Console.err(line) }
    }

    private static func milliseconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let micros = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        let fraction = String(micros % 1000)
        return "\(micros / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction)"
    }
}
