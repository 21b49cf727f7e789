#if canImport(Glibc)
import Glibc
#endif
import Foundation
@testable import Tether
@testable import TetherRedis

/// Redis for tests: one server per test process, started on first use; each test that asks
/// gets a key prefix of its own, so tests share the server without seeing each other.
enum RedisFixture {
    private static let server = Task { try await RedisInstance.start() }
    private static let counter = Lock(0)

    /// A configuration for a fresh, empty part of the shared server.
    static func freshConfiguration() async throws -> RedisConfiguration {
        let instance = try await server.value
        var configuration = RedisConfiguration(host: "127.0.0.1", port: Int(instance.port))
        let number = counter.withLock { count -> Int in
            count += 1
            return count
        }
        configuration.keyPrefix = "test\(number):"
        return configuration
    }
}

/// A `redis-server` of a test's own on 127.0.0.1 and a free port, without persistence
/// unless asked, which the test can kill and start again on the same port.
///
/// It runs under a shell that holds this process's end of its standard input: when this
/// process ends in any way, the shell's `cat` ends and it kills the server, so no server
/// outlives the tests.
final class RedisInstance: Sendable {
    let port: UInt16
    let directory: String
    let persistent: Bool
    /// More of `redis-server`'s options; with `tls`, the port is its TLS port.
    let options: [String]
    let tls: Bool
    private let shell: Lock<(process: ChildProcess, pid: pid_t)?>

    private init(port: UInt16, directory: String, persistent: Bool, options: [String], tls: Bool) {
        self.port = port
        self.directory = directory
        self.persistent = persistent
        self.options = options
        self.tls = tls
        self.shell = Lock(nil)
    }

    deinit {
        if let (process, pid) = shell.withLock({ $0 }) {
            _ = Glibc.kill(pid, SIGKILL)
            process.kill()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The server's process id while it runs.
    var serverPID: pid_t? { shell.withLock { $0?.pid } }

    /// The URL of the server.
    var url: String { "redis://127.0.0.1:\(port)" }

    /// Starts a server in a new temporary directory; `persistent` turns on the append-only
    /// file with an fsync per write.
    static func start(persistent: Bool = false, options: [String] = [], tls: Bool = false) async throws -> RedisInstance {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/redis-server") else {
            throw PostgresFixtureError(description: "redis-server is not installed (apt-get install redis-server)")
        }
        var template = Array("/tmp/tether-redis-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw PostgresFixtureError(description: "mkdtemp failed: errno \(errno)") }
        let directory = String(cString: made)
        var lastError: (any Error)?
        for _ in 0..<5 {
            let instance = RedisInstance(port: try PostgresInstance.freePort(), directory: directory, persistent: persistent, options: options, tls: tls)
            do {
                try await instance.restart()
                return instance
            } catch {
                lastError = error
            }
        }
        throw lastError ?? PostgresFixtureError(description: "redis-server did not start")
    }

    /// Starts the server (again) on the same port and directory; returns once it accepts
    /// connections.
    func restart() async throws {
        let persistence = persistent ? "--appendonly yes --appendfsync always" : "--appendonly no"
        let ports = tls ? "--port 0 --tls-port \(port)" : "--port \(port)"
        let more = options.map { "'\($0)'" }.joined(separator: " ")
        let script = """
            /usr/bin/redis-server \(ports) --bind 127.0.0.1 --dir '\(directory)' --save '' \(persistence) --protected-mode no \(more) &
            echo "pid=$!"
            cat > /dev/null
            kill -9 $! 2>/dev/null
            """
        let process = try ChildProcess("sh", ["-c", script])
        // The shell's line may come before or after redis-server's first lines: find it.
        let pid = try await process.waitForOutput("redis-server's pid", within: .seconds(30)) { (output: [UInt8]) -> pid_t? in
            String(decoding: output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
                .first { $0.hasPrefix("pid=") }.flatMap { pid_t($0.dropFirst("pid=".count)) }
        }
        shell.withLock { $0 = (process, pid) }
        do {
            _ = try await process.waitForOutput(containing: "Ready to accept connections", within: .seconds(30))
        } catch {
            throw PostgresFixtureError(description: "redis-server did not start: \(process.outputText)")
        }
    }

    /// Kills the server with SIGKILL, as a crash would; returns once it is gone.
    func kill() async {
        guard let (process, pid) = shell.withLock({ state -> (ChildProcess, pid_t)? in
            defer { state = nil }
            return state
        }) else { return }
        _ = Glibc.kill(pid, SIGKILL)
        process.closeInput()
        _ = try? await process.waitForExit(within: .seconds(30))
    }
}
