#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether

/// One `tether` subcommand: parsed from its arguments, then run.
protocol Command: Sendable {
    /// The word after `tether`.
    static var name: String { get }
    /// One line for the top-level help.
    static var summary: String { get }
    /// The synopsis line, without `usage: `.
    static var synopsis: String { get }
    /// The full help text printed by `--help-all`, after the synopsis.
    static var help: String { get }
    /// What `--help` prints after the synopsis when ``help`` is longer than a screen: what
    /// the command does and its common options. `nil` (the default) when ``help`` is short
    /// enough to be printed by `--help` itself.
    static var briefHelp: String? { get }

    /// Reads the options and positionals this command takes.
    ///
    /// - Throws: ``ArgumentError`` for a missing, malformed or unknown argument.
    init(parsing arguments: inout Arguments) throws(ArgumentError)

    /// Does the work.
    ///
    /// - Returns: The exit status.
    /// - Throws: ``TetherError`` (exit status 1 with its message) or another error.
    func run() async throws -> ExitStatus
}

extension Command {
    static var briefHelp: String? { nil }
}

/// The exit statuses of `tether`.
struct ExitStatus: Hashable, Sendable {
    var code: Int32

    /// It worked.
    static let success = ExitStatus(code: 0)
    /// A runtime failure: refused, timed out, error response, …
    static let failure = ExitStatus(code: 1)
    /// The command line was wrong.
    static let usage = ExitStatus(code: 2)
}

/// Output to stdout and stderr, written with `write(2)` a line at a time, so pipes see
/// each line at once and lines from concurrent tasks never interleave.
enum Console {
    /// Prints a line on stdout.
    static func out(_ line: String) {
        write(line + "\n", to: STDOUT_FILENO)
    }

    /// Prints a line on stderr.
    static func err(_ line: String) {
        write(line + "\n", to: STDERR_FILENO)
    }

    /// Writes bytes on stdout as they are.
    static func write(_ bytes: [UInt8]) {
        write(bytes[...], to: STDOUT_FILENO)
    }

    /// Whether stderr is a terminal: progress lines are drawn only there.
    static var errIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }

    /// Draws `tether: <line>` over the current line of stderr, ending the line when `done`.
    static func progress(_ line: String, done: Bool) {
        write("\r\u{1B}[Ktether: \(line)\(done ? "\n" : "")", to: STDERR_FILENO)
    }

    /// Prints `tether: <message>` on stderr.
    static func fail(_ message: String) {
        err("tether: \(message)")
    }

    private static func write(_ text: String, to fd: Int32) {
        write(Array(text.utf8)[...], to: fd)
    }

    private static func write(_ bytes: ArraySlice<UInt8>, to fd: Int32) {
        var bytes = bytes
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }
}

/// `write(2)`, under a name that `Console.write` does not shadow.
private func systemWrite(_ fd: Int32, _ bytes: UnsafeRawPointer?, _ count: Int) -> Int {
    write(fd, bytes, count)
}

// MARK: Timeouts

/// Runs `body`, failing with ``TetherError/Code/timedOut`` if it has not finished within `limit`.
///
/// The losing side is cancelled; `body` must end when cancelled (every Tether wait does).
///
/// - Parameters:
///   - limit: How long `body` may take.
///   - what: What is waited for, for the error message: `3 heartbeat acks`.
///   - body: The work.
/// - Returns: What `body` returns.
func withTimeout<T: Sendable>(
    _ limit: Duration,
    waitingFor what: String,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw TetherError(code: .timedOut, message: "\(what) did not come within \(format(limit))")
        }
        return value
    }
}

// MARK: Formatting

/// `0x402`.
func hex(_ type: UInt32) -> String {
    "0x" + String(type, radix: 16)
}

/// A duration in milliseconds, as a number.
func milliseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1e3 + Double(attoseconds) / 1e15
}

/// `0.123` (milliseconds, three decimals).
func formatMilliseconds(_ value: Double) -> String {
    let thousandths = Int((value * 1000).rounded())
    let fraction = String(thousandths % 1000)
    return "\(thousandths / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction)"
}

/// `500 ms`, `2 s`, `1.5 s`.
func format(_ duration: Duration) -> String {
    let millis = milliseconds(duration)
    if millis < 1000 { return "\(Int(millis.rounded())) ms" }
    let seconds = millis / 1000
    if seconds == seconds.rounded() { return "\(Int(seconds)) s" }
    return "\(Int(seconds)).\(Int((seconds * 10).rounded()) % 10) s"
}

/// The payload as one JSON value: itself when it parses as JSON, a string otherwise, `null` when empty.
func embeddedJSON(_ payload: [UInt8]) -> String {
    if payload.isEmpty { return "null" }
    if let json = try? JSONValue(parsing: payload) { return json.description }
    return JSONValue.string(String(decoding: payload, as: UTF8.self)).description
}
