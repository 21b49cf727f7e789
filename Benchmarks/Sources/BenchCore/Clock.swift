#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#else
#error("unsupported platform")
#endif

/// Monotonic time in nanoseconds, read with `clock_gettime(CLOCK_MONOTONIC)` (a vDSO call
/// on Linux: no syscall, a few nanoseconds).
@inline(__always)
public func monotonicNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
}

/// The measured interval of a run: completions before `start` are warm-up and ignored;
/// workers stop issuing requests once a completion lands at or after `end`.
public struct Window: Sendable {
    /// When measuring begins, in ``monotonicNanoseconds()``.
    public let start: UInt64
    /// When measuring ends.
    public let end: UInt64

    /// A window that opens after `warmup` seconds from now and lasts `duration` seconds.
    ///
    /// - Parameters:
    ///   - warmup: Seconds of unmeasured load first.
    ///   - duration: Seconds measured.
    public init(warmup: Double, duration: Double) {
        let now = monotonicNanoseconds()
        start = now + UInt64(warmup * 1e9)
        end = start + UInt64(duration * 1e9)
    }

    /// Seconds measured.
    public var seconds: Double { Double(end - start) / 1e9 }
}

/// What one worker (a connection or a task) measured.
public struct Stats: Sendable {
    /// Responses completed inside the window.
    public var requests: UInt64 = 0
    /// Latencies of those responses.
    public var latencies = Histogram()
    /// Failed requests, wrong responses and lost connections.
    public var errors: UInt64 = 0
    /// The first error seen, for the log.
    public var firstError: String?

    /// Empty stats.
    public init() {}

    /// Counts a response sent at `sent` and received at `received`, if it falls in `window`.
    ///
    /// - Parameters:
    ///   - sent: When the request was written.
    ///   - received: When its response arrived.
    ///   - window: The measured interval.
    @inline(__always)
    public mutating func record(sent: UInt64, received: UInt64, in window: Window) {
        guard received >= window.start, received < window.end else { return }
        requests &+= 1
        latencies.record(received &- sent)
    }

    /// Counts an error.
    ///
    /// - Parameter description: What went wrong.
    public mutating func fail(_ description: String) {
        errors += 1
        if firstError == nil { firstError = description }
    }

    /// Adds `other` to these stats.
    ///
    /// - Parameter other: Another worker's stats.
    public mutating func merge(_ other: Stats) {
        requests += other.requests
        latencies.merge(other.latencies)
        errors += other.errors
        if firstError == nil { firstError = other.firstError }
    }

    /// The machine-readable line every client prints last, the same as the C client's:
    /// `RESULT impl=… conns=… inflight=… size=… requests=… seconds=… rps=… mbps=… p50_us=… …`.
    ///
    /// `mbps` is megabytes (10^6) of payload per second in one direction.
    ///
    /// - Parameters:
    ///   - impl: The client implementation.
    ///   - connections: Connections used.
    ///   - inFlight: Requests in flight per connection.
    ///   - size: Payload bytes per request.
    ///   - window: The measured interval.
    /// - Returns: The line, without a newline.
    public func resultLine(impl: String, connections: Int, inFlight: Int, size: Int, window: Window) -> String {
        let seconds = window.seconds
        let rps = Double(requests) / seconds
        let mbps = rps * Double(size) / 1e6
        func us(_ quantile: Double) -> String { format(Double(latencies.value(atQuantile: quantile)) / 1000, decimals: 1) }
        return "RESULT impl=\(impl) conns=\(connections) inflight=\(inFlight) size=\(size)"
            + " requests=\(requests) seconds=\(format(seconds, decimals: 3)) rps=\(format(rps, decimals: 0))"
            + " mbps=\(format(mbps, decimals: 1)) p50_us=\(us(0.5)) p90_us=\(us(0.9)) p99_us=\(us(0.99))"
            + " p999_us=\(us(0.999)) max_us=\(format(Double(latencies.maximum) / 1000, decimals: 1)) errors=\(errors)"
    }
}

/// `value` with a fixed number of decimals, without Foundation.
///
/// - Parameters:
///   - value: The number.
///   - decimals: Digits after the point, 0 to 6.
/// - Returns: The text, such as `12.5`.
public func format(_ value: Double, decimals: Int) -> String {
    guard value.isFinite else { return "0" }
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let scaled = (abs(value) * scale).rounded()
    let whole = Int(scaled / scale)
    let sign = value < 0 && scaled > 0 ? "-" : ""
    guard decimals > 0 else { return "\(sign)\(whole)" }
    let fraction = Int(scaled - Double(whole) * scale)
    var digits = String(fraction)
    while digits.count < decimals { digits = "0" + digits }
    return "\(sign)\(whole).\(digits)"
}
