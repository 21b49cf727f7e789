/// How the connection in use was opened: the address that won the race, how long
/// resolving and connecting took, and every address tried.
///
/// ``Connection/connectReport`` keeps the report of the current (or last) connection. A
/// host with both IPv6 and IPv4 addresses is raced (see
/// ``ConnectionConfiguration/connectionAttemptDelay``); the report says which family won and
/// what happened to the others, which is what to look at when connecting is slow on one
/// network:
///
/// ```swift
/// if let report = await connection.connectReport {
///     print(report)   // connected to 127.0.0.1:9000 (IPv4) in 1.2 ms; …
/// }
/// ```
public struct ConnectReport: Sendable, Hashable, CustomStringConvertible {
    /// One connection attempt to one address.
    public struct Attempt: Sendable, Hashable, CustomStringConvertible {
        /// How an attempt ended.
        public enum Outcome: Sendable, Hashable {
            /// It connected first: its socket is the connection.
            case connected
            /// It failed, for this reason (refused, timed out, unreachable).
            case failed(TetherError)
            /// It was still pending when another attempt won, and was abandoned.
            case abandoned
        }

        /// The address tried.
        public var address: TetherSocketAddress
        /// When it started, after connecting began (``ConnectReport/resolutionTime``).
        public var startedAfter: Duration
        /// How it ended.
        public var outcome: Outcome
        /// How long it took to connect or fail; `nil` for an abandoned attempt.
        public var duration: Duration?

        /// `[::1]:9000 after 0 ms: failed (…)`.
        public var description: String {
            let start = "\(address) after \(precise(startedAfter))"
            switch outcome {
            case .connected: return "\(start): connected in \(precise(duration ?? .zero))"
            case .failed(let error): return "\(start): failed in \(precise(duration ?? .zero)): \(error.message)"
            case .abandoned: return "\(start): abandoned"
            }
        }
    }

    /// The endpoint connected to: the main one or an alternate.
    public var endpoint: Endpoint
    /// The address that connected.
    public var address: TetherSocketAddress
    /// How long resolving the host took: from the start of the attempt until connecting
    /// began, on the first answer of the AAAA and A lookups (or, when the A answer came
    /// first, when the AAAA answer came within the 50 ms resolution delay, or the delay
    /// ended). Zero for a numeric address and `localhost`, which need no lookup.
    public var resolutionTime: Duration
    /// From the start of the attempt (resolution included) until the TCP connection was
    /// up; TLS and the session hello come after it.
    public var connectTime: Duration
    /// Every address tried, in the order they were started (at most one per address).
    public var attempts: [Attempt]

    /// `IPv6`, `IPv4` or `Unix`: the family of ``address``.
    public var family: String { address.unixPath != nil ? "Unix" : address.isIPv6 ? "IPv6" : "IPv4" }

    /// `connected to 127.0.0.1:9000 (IPv4) in 1.2 ms (resolved in 0.1 ms); 2 attempts: …`.
    public var description: String {
        var text = "connected to \(address) (\(family)) in \(precise(connectTime)) (resolved in \(precise(resolutionTime)))"
        if attempts.count > 1 {
            text += "; \(attempts.count) attempts: " + attempts.map(\.description).joined(separator: "; ")
        }
        return text
    }
}

/// A duration to the microsecond, for times that are often below a millisecond:
/// `0.123 ms`, `250.000 ms`, `1.500 s`.
private func precise(_ duration: Duration) -> String {
    let (seconds, attoseconds) = duration.components
    let micros = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    if micros < 1_000_000 {
        let fraction = String(micros % 1000)
        return "\(micros / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction) ms"
    }
    let millis = micros / 1000
    let fraction = String(millis % 1000)
    return "\(millis / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction) s"
}
