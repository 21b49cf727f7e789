#if canImport(Glibc)
import Glibc
#endif
import Foundation
@testable import Tether
@testable import TetherPostgres

/// PostgreSQL for tests: one server per test process, started on first use, with a fresh
/// database for each test that asks.
enum PostgresFixture {
    /// The shared server; started once, by the first test that needs it, and stopped when
    /// the process exits (see ``PostgresInstance``).
    private static let server = Task { try await PostgresInstance.start() }
    /// Creates the databases, one statement at a time.
    private static let administration = Lock<PostgresDatabase?>(nil)
    private static let counter = Lock(0)

    /// A fresh, empty database on the shared server: its URL.
    static func freshDatabase() async throws -> String {
        let instance = try await server.value
        let database = administration.withLock { database -> PostgresDatabase in
            if let database { return database }
            var configuration = PostgresConfiguration(url: instance.url())
            configuration.connections = 1
            let made = PostgresDatabase(configuration: configuration)
            database = made
            return made
        }
        let name = counter.withLock { count -> String in
            count += 1
            return "tether_test_\(count)"
        }
        try await database.withSession { session in
            _ = try session.execute("CREATE DATABASE \(name)")
        }
        return instance.url(database: name)
    }
}

struct PostgresFixtureError: Error, CustomStringConvertible {
    var description: String
}

/// A PostgreSQL server of a test's own, in a temporary directory, on 127.0.0.1 and a free
/// port, which the test can stop, restart and kill.
///
/// The cluster is made with `initdb` (user `tether`, trust authentication, no `fsync`) and
/// run with `pg_ctl`, as the `postgres` user when the tests run as root (PostgreSQL refuses
/// to run as root). It is stopped and its directory removed when the instance is released,
/// when the process exits (an `atexit` handler), and when the process dies without exiting:
/// a watchdog shell, in a session of its own, waits for the end of its standard input (which
/// this process holds) and then stops the server.
final class PostgresInstance: Sendable {
    /// The port the server listens on, on 127.0.0.1.
    let port: UInt16
    /// The temporary directory: the cluster in `data`, the log in `log`, the Unix socket.
    let directory: String
    private let binaries: String
    private let watchdog: ChildProcess

    private init(port: UInt16, directory: String, binaries: String, watchdog: ChildProcess) {
        self.port = port
        self.directory = directory
        self.binaries = binaries
        self.watchdog = watchdog
    }

    deinit {
        watchdog.kill()
        Self.destroy(directory)
        running.withLock { _ = $0.remove(directory) }
    }

    /// The URL of a database on this server.
    func url(database: String = "postgres") -> String {
        "postgresql://tether@127.0.0.1:\(port)/\(database)"
    }

    /// Makes a cluster in a new temporary directory and starts it.
    static func start() async throws -> PostgresInstance {
        installExitHandler
        let binaries = try findBinaries()
        var template = Array("/tmp/tether-pg-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw PostgresFixtureError(description: "mkdtemp failed: errno \(errno)") }
        let directory = String(cString: made)
        running.withLock { _ = $0.insert(directory) }
        if getuid() == 0 {
            guard let user = getpwnam("postgres") else {
                throw PostgresFixtureError(description: "running as root, and there is no postgres user to run PostgreSQL as")
            }
            guard chown(directory, user.pointee.pw_uid, user.pointee.pw_gid) == 0 else {
                throw PostgresFixtureError(description: "chown \(directory) failed: errno \(errno)")
            }
        }
        try await run("\(binaries)/initdb", [
            "-D", "\(directory)/data", "-U", "tether", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync",
        ])
        let script = """
            cat > /dev/null
            pid=$(head -n 1 '\(directory)/data/postmaster.pid' 2>/dev/null)
            if [ -n "$pid" ] && grep -q postgres /proc/$pid/cmdline 2>/dev/null; then
                kill -QUIT "$pid"; sleep 2; kill -KILL "$pid" 2>/dev/null
            fi
            rm -rf '\(directory)'
            """
        let watchdog = try ChildProcess("setsid", ["sh", "-c", script])
        var lastError: (any Error)?
        for _ in 0..<5 {
            let port = try freePort()
            let instance = PostgresInstance(port: port, directory: directory, binaries: binaries, watchdog: watchdog)
            do {
                try await instance.restart()
                return instance
            } catch {
                lastError = error
                // Another process may have taken the port meanwhile: try another.
                let log = (try? String(contentsOfFile: "\(directory)/log", encoding: .utf8)) ?? ""
                guard log.contains("could not bind") || log.contains("Address already in use") else { throw error }
            }
        }
        throw lastError ?? PostgresFixtureError(description: "PostgreSQL did not start")
    }

    /// Starts the server (again) on the same port with the same data, and returns once it
    /// accepts connections (`pg_ctl start -w`, bounded).
    func restart() async throws {
        do {
            try await start()
        } catch {
            let log = (try? String(contentsOfFile: "\(directory)/log", encoding: .utf8)) ?? ""
            let tail = log.split(separator: "\n").suffix(8).joined(separator: "\n")
            throw PostgresFixtureError(description: "\(error)\nthe server's log ends with:\n\(tail)")
        }
    }

    private func start() async throws {
        try await Self.run("\(binaries)/pg_ctl", [
            "-D", "\(directory)/data", "-l", "\(directory)/log", "-w", "-t", "60",
            "-o", "-h 127.0.0.1 -p \(port) -k \(directory) -c fsync=off -c full_page_writes=off -c max_connections=300",
            "start",
        ])
    }

    /// Stops the server, closing every connection (`pg_ctl stop -m fast -w`).
    func stop() async throws {
        try await Self.run("\(binaries)/pg_ctl", ["-D", "\(directory)/data", "-m", "fast", "-w", "-t", "60", "stop"])
    }

    /// Kills the server with SIGKILL, as a crash would, and its processes with it; returns
    /// once they are gone.
    func kill() async {
        guard let postmaster = Self.postmaster(in: directory) else { return }
        let children = Self.children(of: postmaster)
        _ = Glibc.kill(postmaster, SIGKILL)
        for child in children { _ = Glibc.kill(child, SIGKILL) }
        _ = try? await offThread {
            Self.waitUntilGone([postmaster] + children, within: eventBound)
        }
        // The killed postmaster may stay a zombie for a while (nothing here is its parent to
        // reap it), and a zombie's pid still passes PostgreSQL's check that its lock files
        // is stale: remove it, and the socket's, as the postmaster would on a clean stop.
        for file in ["data/postmaster.pid", ".s.PGSQL.\(port).lock", ".s.PGSQL.\(port)"] {
            unlink("\(directory)/\(file)")
        }
    }

    // MARK: Processes

    private static func findBinaries() throws -> String {
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap(Int.init).sorted()
        if let newest = versions.last { return "/usr/lib/postgresql/\(newest)/bin" }
        if let output = try? runBlocking("pg_config", ["--bindir"]), !output.isEmpty {
            return output.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        throw PostgresFixtureError(description: "PostgreSQL's programs are not installed (no /usr/lib/postgresql/*/bin, no pg_config)")
    }

    /// Runs a PostgreSQL program to its end, as the postgres user when running as root.
    private static func run(_ program: String, _ arguments: [String]) async throws {
        let (executable, all) = getuid() == 0 ? ("runuser", ["-u", "postgres", "--", program] + arguments) : (program, arguments)
        let process = try ChildProcess(executable, all)
        let status = try await process.waitForExit(within: .seconds(90))
        guard status == 0 else {
            throw PostgresFixtureError(description: "\(process.command) failed with status \(status): \(process.outputText)")
        }
    }

    private static func runBlocking(_ executable: String, _ arguments: [String]) throws -> String {
        let process = try ChildProcess(executable, arguments)
        _ = try process.waitForExitBlocking(within: eventBound)
        return process.outputText
    }

    /// A port free on 127.0.0.1 now.
    static func freePort() throws -> UInt16 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw PostgresFixtureError(description: "socket failed: errno \(errno)") }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw PostgresFixtureError(description: "bind failed: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }

    /// The postmaster's pid, from its pid file, if it runs.
    fileprivate static func postmaster(in directory: String) -> pid_t? {
        guard let text = try? String(contentsOfFile: "\(directory)/data/postmaster.pid", encoding: .utf8),
              let line = text.split(separator: "\n").first, let pid = pid_t(line), isAlive(pid)
        else { return nil }
        return pid
    }

    /// The processes whose parent is `parent` (a postmaster's backends).
    private static func children(of parent: pid_t) -> [pid_t] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap(pid_t.init).filter { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let end = stat.lastIndex(of: ")")
            else { return false }
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            return fields.count > 1 && pid_t(fields[1]) == parent
        }
    }

    /// Whether `pid` is a process that has not ended (a zombie has).
    fileprivate static func isAlive(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(after: end)...].split(separator: " ").first
        return state != "Z" && state != "X"
    }

    /// Waits, at most `limit`, until none of `pids` runs. They are not our children, so no
    /// event tells of their end: their state is read every 10 ms.
    fileprivate static func waitUntilGone(_ pids: [pid_t], within limit: Duration) {
        let deadline = ContinuousClock.now + limit
        while pids.contains(where: isAlive), ContinuousClock.now < deadline {
            usleep(10_000)
        }
    }

    /// Stops the server in `directory` at once (SIGQUIT, which is `pg_ctl stop -m
    /// immediate`; SIGKILL if it lingers) and removes the directory.
    fileprivate static func destroy(_ directory: String) {
        if let postmaster = postmaster(in: directory) {
            _ = Glibc.kill(postmaster, SIGQUIT)
            waitUntilGone([postmaster], within: .seconds(5))
            _ = Glibc.kill(postmaster, SIGKILL)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// The directories of the servers running, for the exit handler.
private let running = Lock<Set<String>>([])

/// Installs, once, the handler that stops every server still running when the process exits.
private let installExitHandler: Void = {
    atexit {
        for directory in running.withLock({ $0 }) { PostgresInstance.destroy(directory) }
    }
}()
