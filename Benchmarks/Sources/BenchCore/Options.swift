#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#else
#error("unsupported platform")
#endif

/// `--name value` command-line options, checked against the names a tool knows.
public struct Options {
    private var values: [String: String] = [:]
    private let usage: String

    /// Parses `arguments` (without the program name); exits with status 2 on an unknown
    /// option or a missing value.
    ///
    /// - Parameters:
    ///   - arguments: The command-line arguments.
    ///   - known: The option names without dashes.
    ///   - usage: Printed with every error and for `--help`.
    public init(_ arguments: [String], known: Set<String>, usage: String) {
        self.usage = usage
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            if argument == "--help" || argument == "-h" {
                print(usage)
                exit(0)
            }
            guard argument.hasPrefix("--"), known.contains(String(argument.dropFirst(2))) else {
                Self.fail("unknown argument \(argument)", usage: usage)
            }
            guard let value = iterator.next() else { Self.fail("\(argument) needs a value", usage: usage) }
            values[String(argument.dropFirst(2))] = value
        }
    }

    /// The text value of an option.
    ///
    /// - Parameters:
    ///   - name: The option without dashes.
    ///   - fallback: The value when it is absent; `nil` makes the option required.
    ///   - allowed: The values accepted, if limited.
    /// - Returns: The value.
    public func string(_ name: String, default fallback: String? = nil, allowed: [String]? = nil) -> String {
        guard let value = values[name] ?? fallback else { Self.fail("--\(name) is required", usage: usage) }
        if let allowed, !allowed.contains(value) {
            Self.fail("--\(name) must be one of \(allowed.joined(separator: ", ")), not \(value)", usage: usage)
        }
        return value
    }

    /// The integer value of an option.
    ///
    /// - Parameters:
    ///   - name: The option without dashes.
    ///   - fallback: The value when it is absent; `nil` makes the option required.
    /// - Returns: The value.
    public func int(_ name: String, default fallback: Int? = nil) -> Int {
        let text = string(name, default: fallback.map { String($0) })
        guard let value = Int(text), value >= 0 else { Self.fail("--\(name) needs a whole number, not \(text)", usage: usage) }
        return value
    }

    /// The number value of an option.
    ///
    /// - Parameters:
    ///   - name: The option without dashes.
    ///   - fallback: The value when it is absent; `nil` makes the option required.
    /// - Returns: The value.
    public func double(_ name: String, default fallback: Double? = nil) -> Double {
        let text = string(name, default: fallback.map { String($0) })
        guard let value = Double(text), value >= 0 else { Self.fail("--\(name) needs a number, not \(text)", usage: usage) }
        return value
    }

    /// Prints `message` and the usage to standard error and exits with status 2.
    ///
    /// - Parameters:
    ///   - message: What is wrong.
    ///   - usage: How to call the tool.
    public static func fail(_ message: String, usage: String) -> Never {
        printError("error: \(message)\n\(usage)")
        exit(2)
    }
}

/// Writes a line to standard error.
///
/// - Parameter line: The text, without a newline.
public func printError(_ line: String) {
    writeAll(2, line + "\n")
}

/// Writes a line to standard output and flushes it, so a script reading a pipe sees it now.
///
/// - Parameter line: The text, without a newline.
public func printNow(_ line: String) {
    writeAll(1, line + "\n")
}

/// Writes all of `text` to a file descriptor, unbuffered.
private func writeAll(_ descriptor: Int32, _ text: String) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        if written < 0, errno == EINTR { continue }
        guard written > 0 else { return }
        bytes = bytes.dropFirst(written)
    }
}
