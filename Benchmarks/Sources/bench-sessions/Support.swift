import BenchCore
import Synchronization
import Tether

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Prints why the run failed and ends the process with status 1: a wrong or missing push
/// must never turn into a figure.
func fail(_ message: String) -> Never {
    printError("bench-sessions: \(message)")
    exit(1)
}

/// A count of pushes received across subscriber tasks, and one waiter for it to reach a
/// target.
final class Tally: Sendable {
    private let count = Atomic<Int>(0)
    private let target = Atomic<Int>(Int.max)
    private let waiter = Mutex<CheckedContinuation<Void, Never>?>(nil)
    private let firstError = Mutex<String?>(nil)
    private let errors = Atomic<Int>(0)

    /// Pushes counted so far.
    var value: Int { count.load(ordering: .sequentiallyConsistent) }

    /// Counts `amount` pushes, waking the waiter once its target is reached.
    func add(_ amount: Int = 1) {
        let now = count.add(amount, ordering: .sequentiallyConsistent).newValue
        if now >= target.load(ordering: .sequentiallyConsistent) { wake() }
    }

    /// Records a wrong push and wakes the waiter: the run fails at once.
    func error(_ description: String) {
        errors.add(1, ordering: .sequentiallyConsistent)
        firstError.withLock { if $0 == nil { $0 = description } }
        wake()
    }

    /// The number of wrong pushes and the first, if any.
    var failure: (count: Int, first: String)? {
        let count = errors.load(ordering: .sequentiallyConsistent)
        guard count > 0 else { return nil }
        return (count, firstError.withLock { $0 } ?? "?")
    }

    /// Returns once `total` pushes have been counted or one was wrong (see ``failure``);
    /// ends the process after `timeout` seconds, printing what `progress` says, when neither
    /// happened.
    func wait(until total: Int, timeout: Double, progress: @escaping @Sendable () async -> String) async {
        let watchdog = Task {
            try await Task.sleep(for: .milliseconds(Int(timeout * 1000)))
            var message = "stalled: \(value) of \(total) pushes after \(format(timeout, decimals: 0)) s; \(await progress())"
            if let failure { message += "; \(failure.count) wrong, first: \(failure.first)" }
            fail(message)
        }
        await withCheckedContinuation { continuation in
            waiter.withLock { $0 = continuation }
            target.store(total, ordering: .sequentiallyConsistent)
            if value >= total || failure != nil { wake() }
        }
        target.store(Int.max, ordering: .sequentiallyConsistent)
        watchdog.cancel()
    }

    private func wake() {
        waiter.withLock { waiter in
            defer { waiter = nil }
            return waiter
        }?.resume()
    }
}

/// Raises the soft limit on open files to the hard one: 1,000 connections need more than
/// 2,000 descriptors in one process.
/// The open-file limit now: the soft one, after ``raiseOpenFileLimit()``.
func openFileLimit() -> Int {
    var limit = rlimit()
    #if canImport(Glibc)
    let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    let resource = RLIMIT_NOFILE
    #endif
    guard getrlimit(resource, &limit) == 0 else { return 1024 }
    return Int(clamping: limit.rlim_cur)
}

func raiseOpenFileLimit() {
    var limit = rlimit()
    #if canImport(Glibc)
    let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    let resource = RLIMIT_NOFILE
    #endif
    guard getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
    limit.rlim_cur = limit.rlim_max
    _ = setrlimit(resource, &limit)
}

/// A fresh directory under `$TMPDIR` (or `/tmp`) for a store, removed by ``remove()``.
struct TemporaryDirectory {
    let path: String

    init() {
        let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        var template = Array("\(base)/tether-sessions.XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            fail("cannot create a temporary directory in \(base): errno \(errno)")
        }
        path = String(cString: made)
    }

    /// Deletes `files` (names in the directory), then the directory.
    func remove(_ files: [String]) {
        for file in files { unlink("\(path)/\(file)") }
        rmdir(path)
    }
}

/// Starts `server` on 127.0.0.1 and returns the task running it and its endpoint.
func start(_ server: Server) async throws -> (Task<Void, Never>, Endpoint) {
    let task = Task {
        do {
            try await server.run()
        } catch {
            fail("the server failed: \(error)")
        }
    }
    let address = try await server.listeningAddress()
    return (task, Endpoint(host: "127.0.0.1", port: address.port))
}

/// A client configuration for the runs: a session for `clientID`, no heartbeats.
func sessionConfiguration(_ clientID: String) -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration()
    configuration.heartbeat = .disabled
    configuration.session = SessionConfiguration(clientID: clientID)
    return configuration
}

/// Seconds between two ``monotonicNanoseconds()`` readings.
func seconds(from start: UInt64, to end: UInt64) -> Double {
    Double(end - start) / 1e9
}
