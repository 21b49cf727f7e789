// Support for the tests that run the articles' examples: what an example prints is
// recorded, so a test can check the output its article shows in a comment.

import Synchronization

/// The lines the examples print while a test listens with ``withPrintedLines(_:)``.
final class PrintedLines: Sendable {
    @TaskLocal static var current: PrintedLines?

    private let lines = Mutex<[String]>([])

    /// Every line printed so far, in order.
    var all: [String] { lines.withLock { $0 } }

    fileprivate func append(_ line: String) {
        lines.withLock { $0.append(line) }
    }
}

/// Prints like `Swift.print`, and records the line for the test listening, if any.
///
/// The snippet files route their `print` here with a file-private `print` of their own, so
/// an example reads exactly as its article shows it.
func recordAndPrint(_ items: [Any], separator: String, terminator: String) {
    let line = items.map { String(describing: $0) }.joined(separator: separator)
    PrintedLines.current?.append(line)
    Swift.print(line, terminator: terminator)
}

/// Runs `body` and returns what it printed, line by line.
func withPrintedLines(_ body: () async throws -> Void) async rethrows -> [String] {
    let lines = PrintedLines()
    try await PrintedLines.$current.withValue(lines) {
        try await body()
    }
    return lines.all
}
