import Testing
@testable import Tether

/// Starts `tether arguments`, the executable that the build puts beside the test bundle, as
/// a child process the way a user runs it; its stdout and stderr are merged in its output.
func tether(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> ChildProcess {
    let path = try #require(
        CLIProfileTests.executable,
        "no tether executable beside the test bundle: `swift build` makes it",
        sourceLocation: sourceLocation
    )
    return try ChildProcess(path, arguments)
}

/// Starts `tether serve --port 0` with `options` and waits for the line that says where it
/// listens.
///
/// - Returns: The server process (the caller kills it) and its endpoint on 127.0.0.1.
func tetherServe(_ options: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws -> (process: ChildProcess, endpoint: Endpoint) {
    let server = try tether(["serve", "--port", "0"] + options, sourceLocation: sourceLocation)
    do {
        let port = try await server.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            listeningPort(in: String(decoding: output, as: UTF8.self))
        }
        return (server, Endpoint(host: "127.0.0.1", port: port))
    } catch {
        server.kill()
        throw error
    }
}

/// The port on a complete `listening on 127.0.0.1:PORT<suffix>` line, once there is one.
func listeningPort(in output: String, suffix: String = "\n") -> Int? {
    let prefix = "listening on 127.0.0.1:"
    guard let start = output.range(of: prefix), let end = output.range(of: suffix, range: start.upperBound..<output.endIndex) else {
        return nil
    }
    return Int(output[start.upperBound..<end.lowerBound])
}
