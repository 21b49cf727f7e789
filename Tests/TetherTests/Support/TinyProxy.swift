import Foundation
@testable import Tether

/// A real HTTP proxy for tests: tinyproxy (`apt-get install tinyproxy`, which `.ci/run` does
/// when it is missing) on a free port of 127.0.0.1, with a configuration of its own in a
/// fresh directory, in the foreground, ended with SIGKILL.
final class TinyProxy: @unchecked Sendable {
    // @unchecked Sendable: immutable after init; the child process is thread-safe.

    /// The `tinyproxy` executable, if installed.
    static let executable: String? = {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "") + ":/usr/bin:/usr/sbin"
        return path.split(separator: ":").map { "\($0)/tinyproxy" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    /// Whether tinyproxy can be started.
    static var available: Bool { executable != nil }

    let process: ChildProcess
    let port: Int
    private let directory: URL

    /// Starts a proxy that asks for `user`/`password` with Basic authentication when given.
    static func start(credentials: (user: String, password: String)? = nil) async throws -> TinyProxy {
        let proxy = try TinyProxy(credentials: credentials)
        _ = try await proxy.process.waitForOutput(containing: "Starting main loop", within: eventBound)
        return proxy
    }

    private init(credentials: (user: String, password: String)?) throws {
        guard let executable = Self.executable else { throw TimedOut(what: "tinyproxy to be installed") }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyproxy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        port = Int(try PostgresInstance.freePort())
        var text = """
            Port \(port)
            Listen 127.0.0.1
            Timeout 30
            MaxClients 64
            Allow 127.0.0.1
            LogLevel Info

            """
        if let credentials { text += "BasicAuth \(credentials.user) \(credentials.password)\n" }
        let file = directory.appendingPathComponent("tinyproxy.conf")
        try text.write(to: file, atomically: true, encoding: .utf8)
        process = try ChildProcess(executable, ["-d", "-c", file.path])
    }

    /// The proxy, as the client configuration names it.
    var httpProxy: HTTPProxy { HTTPProxy(host: "127.0.0.1", port: port) }

    /// Waits until the proxy's log shows a CONNECT to `endpoint`.
    func waitForConnect(to endpoint: Endpoint) async throws {
        _ = try await process.waitForOutput(containing: "CONNECT \(endpoint.host):\(endpoint.port) HTTP/1.1", within: eventBound)
    }

    deinit {
        process.kill()
        try? FileManager.default.removeItem(at: directory)
    }
}
