#if canImport(Glibc)
import Glibc
#endif
import Foundation
import TetherTLS
@testable import Tether

/// A child process for interoperability tests, such as `openssl s_server` or `openssl s_client`.
///
/// The child's stdin is one end of a Unix socket pair that `write(_:)` sends to and
/// `closeInput()` closes. Its stdout and stderr are **merged** into one other socket pair,
/// so ``output`` holds both, in the order the child wrote them (OpenSSL's command-line
/// tools print their diagnostics on stderr and relayed data on stdout; a test wants both).
///
/// A reader thread of its own drains the output and wakes the tasks waiting on it or on the
/// exit: every wait is event-driven, and bounded. The reader also reaps the child.
/// ``kill()`` (and `deinit`) sends SIGKILL, then joins the reader, which by then has reaped
/// the child and closed its descriptors: nothing outlives a killed `ChildProcess`.
///
/// The child inherits the environment and no descriptor other than 0, 1 and 2, and starts
/// with SIGPIPE at its default disposition and no signal blocked.
final class ChildProcess: Sendable {
    /// The command line, for messages.
    let command: String
    let pid: pid_t
    private let shared: Shared
    private let descriptors: Lock<Descriptors>
    private let reader: Joinable

    private struct Descriptors {
        /// Our end of the child's stdin, nonblocking; -1 once closed.
        var input: Int32
        /// Our end of the socket pair that tells the reader to stop; -1 once used.
        var wake: Int32
    }

    /// Starts `executable` (a path, or a name looked up in `PATH`) with `arguments`, in
    /// `workingDirectory` if given (else in ours).
    init(_ executable: String, _ arguments: [String], workingDirectory: String? = nil) throws {
        command = ([executable] + arguments).joined(separator: " ")
        var input: [Int32] = [-1, -1]
        var output: [Int32] = [-1, -1]
        var wake: [Int32] = [-1, -1]
        defer {
            // Whatever is still open here belongs to the child or was not handed over.
            for fd in [input[1], output[1]] where fd >= 0 { Glibc.close(fd) }
        }
        // Socket pairs rather than pipes: `socketpair` sets close-on-exec atomically (`pipe2`
        // would too, but is a GNU extension that Swift's Glibc does not import), so no child
        // that a parallel test starts inherits them; and `send` takes MSG_NOSIGNAL, so
        // writing to a child that has gone fails with EPIPE instead of killing the tests.
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &input) == 0 else {
            throw Errno.current
        }
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &output) == 0 else {
            let error = Errno.current
            Glibc.close(input[0])
            throw error
        }
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &wake) == 0 else {
            let error = Errno.current
            for fd in [input[0], output[0]] { Glibc.close(fd) }
            throw error
        }
        do {
            pid = try Self.spawn(executable, arguments, in: workingDirectory, stdin: input[1], output: output[1])
        } catch {
            for fd in [input[0], output[0], wake[0], wake[1]] { Glibc.close(fd) }
            throw error
        }
        for fd in [input[0], output[0]] {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        shared = Shared()
        descriptors = Lock(Descriptors(input: input[0], wake: wake[1]))
        let (state, child, outputFD, wakeFD) = (shared, pid, output[0], wake[0])
        reader = Joinable(BlockingThread(name: "child-process-reader") {
            Self.readUntilExit(shared: state, pid: child, output: outputFD, wake: wakeFD)
        })
    }

    deinit { kill() }

    private static func spawn(
        _ executable: String,
        _ arguments: [String],
        in workingDirectory: String?,
        stdin: Int32,
        output: Int32
    ) throws -> pid_t {
        func check(_ status: Int32) throws {
            guard status == 0 else { throw Errno(rawValue: status) }
        }
        var actions = posix_spawn_file_actions_t()
        try check(posix_spawn_file_actions_init(&actions))
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let workingDirectory {
            let addChangeDirectory = glibcExtension("posix_spawn_file_actions_addchdir_np", as: AddChangeDirectory.self)
            try check(addChangeDirectory?(&actions, workingDirectory) ?? ENOSYS)
        }
        try check(posix_spawn_file_actions_adddup2(&actions, stdin, 0))
        try check(posix_spawn_file_actions_adddup2(&actions, output, 1))
        try check(posix_spawn_file_actions_adddup2(&actions, output, 2))
        // Descriptors other tests opened without close-on-exec (sockets, say) must not
        // live on in the child: a peer would never see them close.
        let addCloseFrom = glibcExtension("posix_spawn_file_actions_addclosefrom_np", as: AddCloseFrom.self)
        try check(addCloseFrom?(&actions, 3) ?? ENOSYS)

        var attributes = posix_spawnattr_t()
        try check(posix_spawnattr_init(&attributes))
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        try check(posix_spawnattr_setsigmask(&attributes, &none))
        try check(posix_spawnattr_setsigdefault(&attributes, &defaults))
        try check(posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)))

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        let environment: [UnsafeMutablePointer<CChar>?] = ProcessInfo.processInfo.environment.map { strdup("\($0)=\($1)") } + [nil]
        defer { for variable in environment { free(variable) } }
        var pid: pid_t = 0
        try check(posix_spawnp(&pid, executable, &actions, &attributes, argv, environment))
        return pid
    }

    // MARK: - Input

    /// Sends `bytes` to the child's stdin; throws ``TimedOut`` if the child does not take
    /// them within ``eventBound`` (it does not read its input), or `Errno` if it is gone.
    func write(_ bytes: [UInt8]) throws {
        try descriptors.withLock { descriptors in
            guard descriptors.input >= 0 else { throw Errno(rawValue: EBADF) }
            let fd = descriptors.input
            var offset = 0
            while offset < bytes.count {
                let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent >= 0 {
                    offset += sent
                    continue
                }
                let error = Errno.current
                if error == .interrupted { continue }
                guard error.isWouldBlock else { throw error }
                var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                guard Glibc.poll(&descriptor, 1, milliseconds(eventBound)) > 0 else {
                    throw TimedOut(what: "\(command) to read its input")
                }
            }
        }
    }

    /// Closes the child's stdin: it reads end of file. Idempotent.
    func closeInput() {
        descriptors.withLock { descriptors in
            if descriptors.input >= 0 { Glibc.close(descriptors.input) }
            descriptors.input = -1
        }
    }

    // MARK: - Output

    /// Everything the child wrote to stdout and stderr so far.
    var output: [UInt8] { shared.state.withLock { $0.output } }

    /// ``output`` as UTF-8 (invalid sequences replaced).
    var outputText: String { String(decoding: output, as: UTF8.self) }

    /// Waits until the output contains `text`, at most `limit`, and returns all of the
    /// output so far. Throws ``TimedOut``, whose description has the output so far, or
    /// ``ChildProcessEnded`` as soon as the output ends without `text`.
    func waitForOutput(containing text: String, within limit: Duration) async throws -> String {
        let needle = Array(text.utf8)
        return try await waitForOutput("\"\(text)\"", within: limit) { output in
            output.firstRange(of: needle) == nil ? nil : String(decoding: output, as: UTF8.self)
        }
    }

    /// Waits until the output has at least `count` bytes after `offset`, at most `limit`,
    /// and returns exactly those `count` bytes (``output`` has any that follow). Throws
    /// like ``waitForOutput(containing:within:)``.
    func waitForOutputBytes(count: Int, from offset: Int, within limit: Duration) async throws -> [UInt8] {
        try await waitForOutput("\(count) bytes after offset \(offset)", within: limit) { output in
            output.count >= offset + count ? Array(output[offset..<(offset + count)]) : nil
        }
    }

    /// Waits until `match` finds what it looks for in the output (it is given all of the
    /// output each time more arrives), at most `limit`. Throws ``TimedOut`` with the output
    /// so far, or ``ChildProcessEnded`` as soon as the output ends without a match.
    func waitForOutput<T: Sendable>(
        _ what: String,
        within limit: Duration,
        match: @escaping @Sendable ([UInt8]) -> T?
    ) async throws -> T {
        let command = command
        return try await wait(for: "\(what) in the output of \(command)", within: limit) { state in
            if let found = match(state.output) { return .success(found) }
            guard state.outputEnded else { return nil }
            return .failure(ChildProcessEnded(command: command, expected: what, output: state.output))
        }
    }

    // MARK: - Exit

    /// Waits for the child to exit, at most `limit`, and returns its exit status: the exit
    /// code, or 128 + the signal number if a signal ended it (137 after ``kill()``), the
    /// way shells report it.
    func waitForExit(within limit: Duration) async throws -> Int32 {
        try await wait(for: "\(command) to exit", within: limit) { state in
            state.exitStatus.map { .success($0) }
        }
    }

    /// ``waitForExit(within:)`` for synchronous code: blocks the calling thread, at most
    /// `limit`. The reader thread resumes it, so it needs no cooperative thread to finish.
    func waitForExitBlocking(within limit: Duration) throws -> Int32 {
        let exited = DispatchSemaphore(value: 0)
        let attempt: @Sendable (State) -> (@Sendable () -> Void)? = { state in
            guard state.exitStatus != nil else { return nil }
            return { exited.signal() }
        }
        let waiter = Waiter(attempt: attempt, fail: { _ in }, timer: nil)
        let id = shared.newID()
        shared.register(waiter, id: id, honoringCancellation: false)
        _ = exited.wait(timeout: .now() + .nanoseconds(Int(nanoseconds(limit))))
        shared.remove(id)
        guard let status = shared.state.withLock({ $0.exitStatus }) else {
            throw TimedOut(what: "\(command) to exit; output so far:\n\(outputText)")
        }
        return status
    }

    /// Sends SIGKILL unless the child was already reaped, then waits for the reader thread,
    /// which reaps the child and closes the descriptors. Idempotent; `deinit` does it too.
    func kill() {
        shared.state.withLock { state in
            // Under the lock that the reaping also takes, so the pid cannot be reused
            // between the check and the signal.
            if !state.reaped { _ = Glibc.kill(pid, SIGKILL) }
        }
        let wake = descriptors.withLock { descriptors -> Int32 in
            if descriptors.input >= 0 { Glibc.close(descriptors.input) }
            descriptors.input = -1
            defer { descriptors.wake = -1 }
            return descriptors.wake
        }
        if wake >= 0 {
            // In case something else holds the output open (a grandchild): the reader must
            // not wait for an end of file that may never come.
            var byte: UInt8 = 1
            _ = send(wake, &byte, 1, Int32(MSG_NOSIGNAL))
        }
        reader.join()
        if wake >= 0 { Glibc.close(wake) }
    }

    // MARK: - Waiting

    private func wait<T: Sendable>(
        for what: String,
        within limit: Duration,
        until check: @escaping @Sendable (State) -> Result<T, any Error>?
    ) async throws -> T {
        let shared = shared
        let id = shared.newID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                let timer = Task {
                    try? await Task.sleep(for: limit)
                    if Task.isCancelled { return }
                    shared.fail(id) { state in
                        TimedOut(what: "\(what); output so far:\n\(String(decoding: state.output, as: UTF8.self))")
                    }
                }
                let attempt: @Sendable (State) -> (@Sendable () -> Void)? = { state in
                    guard let result = check(state) else { return nil }
                    return { continuation.resume(with: result) }
                }
                let waiter = Waiter(attempt: attempt, fail: { continuation.resume(throwing: $0) }, timer: timer)
                shared.register(waiter, id: id, honoringCancellation: true)
            }
        } onCancel: {
            shared.fail(id) { _ in CancellationError() }
        }
    }

    /// The reader thread: drains the output until it ends or `kill()` wakes it, then waits
    /// for the child to exit and reaps it. It blocks in `poll` without a timeout: the output
    /// and the wake-up are the only events it needs.
    private static func readUntilExit(shared: Shared, pid: pid_t, output: Int32, wake: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var descriptors = [pollfd(fd: output, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
        reading: while true {
            guard Glibc.poll(&descriptors, 2, -1) >= 0 else {
                if Errno.current == .interrupted { continue }
                break
            }
            if descriptors[1].revents != 0 { break }
            guard descriptors[0].revents != 0 else { continue }
            let got = buffer.withUnsafeMutableBytes { Glibc.read(output, $0.baseAddress, $0.count) }
            switch got {
            case 1...:
                shared.append(buffer[..<got])
            case 0:
                break reading
            default:
                let error = Errno.current
                if error == .interrupted || error.isWouldBlock { continue }
                break reading
            }
        }
        shared.endOutput()
        // Wait for the exit without reaping, so that `kill()` never signals a reused pid.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0, Errno.current == .interrupted {}
        shared.reap(pid)
        Glibc.close(output)
        Glibc.close(wake)
    }
}

/// The output ended (the child closed it or exited) without what a test waited for.
struct ChildProcessEnded: Error, CustomStringConvertible {
    var command: String
    var expected: String
    var output: [UInt8]

    var description: String {
        "\(command) ended its output without \(expected); its output:\n\(String(decoding: output, as: UTF8.self))"
    }
}

// MARK: - Shared state

/// What the reader thread and the waiting tasks share.
private struct State {
    var output: [UInt8] = []
    var outputEnded = false
    var exitStatus: Int32?
    var reaped = false
    var waiters: [Int: Waiter] = [:]
    var nextID = 0
}

private struct Waiter {
    /// Returns how to resume the waiter if `state` settles it, or nil to keep waiting.
    var attempt: @Sendable (State) -> (@Sendable () -> Void)?
    var fail: @Sendable (any Error) -> Void
    var timer: Task<Void, Never>?
}

private final class Shared: Sendable {
    let state = Lock(State())

    func newID() -> Int {
        state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
    }

    /// Registers `waiter` as `id`, or resumes it at once if the state already settles it
    /// (or, `honoringCancellation`, if the task is cancelled: its cancellation handler ran
    /// before there was a waiter to fail).
    func register(_ waiter: Waiter, id: Int, honoringCancellation: Bool) {
        let resume = state.withLock { state -> (@Sendable () -> Void)? in
            if let resume = waiter.attempt(state) { return resume }
            if honoringCancellation, Task.isCancelled { return { waiter.fail(CancellationError()) } }
            state.waiters[id] = waiter
            return nil
        }
        if let resume {
            waiter.timer?.cancel()
            resume()
        }
    }

    func remove(_ id: Int) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.timer?.cancel()
    }

    /// Fails the waiter `id`, if it still waits, with the error `make` builds from the state.
    func fail(_ id: Int, _ make: (State) -> any Error) {
        let settled = state.withLock { state -> (Waiter, any Error)? in
            guard let waiter = state.waiters.removeValue(forKey: id) else { return nil }
            return (waiter, make(state))
        }
        guard let (waiter, error) = settled else { return }
        waiter.timer?.cancel()
        waiter.fail(error)
    }

    func append(_ bytes: ArraySlice<UInt8>) {
        update { $0.output += bytes }
    }

    func endOutput() {
        update { $0.outputEnded = true }
    }

    /// Reaps the child, which has exited (or cannot be waited for).
    func reap(_ pid: pid_t) {
        update { state in
            var status: Int32 = 0
            let reaped = waitpid(pid, &status, 0) == pid
            let signal = status & 0x7f
            // -1 if the status is lost (SIGCHLD ignored, say, so the kernel reaped it).
            state.exitStatus = !reaped ? -1 : signal == 0 ? (status >> 8) & 0xff : 128 + signal
            state.reaped = true
        }
    }

    /// Changes the state, then resumes every waiter that the new state settles.
    private func update(_ change: (inout State) -> Void) {
        let settled = state.withLock { state -> [(Waiter, @Sendable () -> Void)] in
            change(&state)
            var settled: [(Waiter, @Sendable () -> Void)] = []
            for (id, waiter) in state.waiters {
                if let resume = waiter.attempt(state) {
                    state.waiters[id] = nil
                    settled.append((waiter, resume))
                }
            }
            return settled
        }
        for (waiter, resume) in settled {
            waiter.timer?.cancel()
            resume()
        }
    }
}

/// A thread joined at most once, by whoever asks first.
private final class Joinable: @unchecked Sendable {
    // @unchecked Sendable: `thread` is only taken with `lock` held.
    private var thread: BlockingThread?
    private let lock = Lock(())

    init(_ thread: consuming BlockingThread) {
        self.thread = consume thread
    }

    func join() {
        lock.withLock { _ in
            if let thread = thread.take() { thread.join() }
        }
    }
}

// Glibc's GNU extensions, which Swift's Glibc module does not import, looked up at run time.
private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
private typealias AddChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

private func glibcExtension<Function>(_ name: String, as type: Function.Type) -> Function? {
    // A null handle is RTLD_DEFAULT: the symbol wherever the process has it.
    guard let address = dlsym(nil, name) else { return nil }
    return unsafeBitCast(address, to: type)
}

private func nanoseconds(_ duration: Duration) -> Int64 {
    duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
}

private func milliseconds(_ duration: Duration) -> Int32 {
    Int32(clamping: nanoseconds(duration) / 1_000_000)
}

// MARK: - openssl s_server

extension ChildProcess {
    /// Starts `openssl s_server` on 127.0.0.1 with `certificate` and `extraArguments` added
    /// (e.g. `-Verify 1 -CAfile ca.pem -verify_return_error`, `-alpn tether/1`,
    /// `-naccept 1`), returning the process and the port it listens on.
    ///
    /// The server binds `127.0.0.1:0`, so the system picks a free port, and prints it on its
    /// `ACCEPT 127.0.0.1:<port>` line (flushed at once), which is checked to name 127.0.0.1.
    /// Arguments that would choose another address (`-accept`, `-port`, `-unix`) are refused.
    ///
    /// How s_server behaves: it serves one connection at a time, then accepts the next,
    /// until killed (or after `-naccept n` connections). While a client is connected it
    /// relays what is written to its stdin to the client, and prints what the client sends;
    /// at the end of its input (`closeInput()`) it ends the connection and exits, unless
    /// `-ign_eof`. Only the first certificate of the chain file is sent. Without
    /// `-verify_return_error`, `-verify`/`-Verify` only log verification errors and let
    /// the client in anyway.
    static func startOpenSSLServer(
        certificate: TLSCertificateFiles,
        extraArguments: [String] = []
    ) async throws -> (process: ChildProcess, port: Int) {
        if let argument = extraArguments.first(where: { ["-accept", "-port", "-unix"].contains($0) }) {
            throw OpenSSLServerFailed(reason: "\(argument) would move s_server off 127.0.0.1", output: "")
        }
        let process = try TestCertificates.openSSLProcess([
            "s_server", "-accept", "127.0.0.1:0",
            "-cert", certificate.certificateChain, "-key", certificate.privateKey,
        ] + extraArguments)
        do {
            let address = try await process.waitForOutput("the ACCEPT line", within: eventBound) { output in
                acceptedAddress(in: output)
            }
            guard address.host == "127.0.0.1", let port = Int(address.port), (1...65_535).contains(port) else {
                throw OpenSSLServerFailed(reason: "it listens on \(address.host):\(address.port)", output: process.outputText)
            }
            return (process, port)
        } catch {
            process.kill()
            throw error
        }
    }

    /// The address on s_server's complete `ACCEPT <host>:<port>` line, if it printed it.
    private static func acceptedAddress(in output: [UInt8]) -> (host: String, port: String)? {
        let lines = String(decoding: output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        guard let line = lines.first(where: { $0.hasPrefix("ACCEPT ") }) else { return nil }
        let address = line.dropFirst("ACCEPT ".count)
        guard let colon = address.lastIndex(of: ":") else { return (String(address), "") }
        return (String(address[..<colon]), String(address[address.index(after: colon)...]))
    }
}

struct OpenSSLServerFailed: Error, CustomStringConvertible {
    var reason: String
    var output: String
    var description: String { "openssl s_server: \(reason); its output:\n\(output)" }
}
