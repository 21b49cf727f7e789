#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CSQLite
import Dispatch
import Testing
@testable import Tether
import TetherSQLite

/// A mailbox store that holds the thread of every call of the kinds it is told to hold (the way a store on a slow disk or a
/// blocking database client does) until the test releases it, then lets the in-memory store
/// answer it; it records when each call ran, on the monotonic clock.
///
/// A call held longer than 15 s goes on by itself: a bound on a bug (a call that holds the
/// thread of the loop the test needs), so the test fails instead of hanging.
final class BlockingStore: MailboxStore {
    /// One call: what it was, and when it started and ended (nanoseconds, ``MonotonicTime``).
    struct Call: Sendable {
        var name: String
        var start: UInt64
        var end: UInt64?
        /// Whether it ran on the thread of one of ``loops``.
        var onLoop: Bool
    }

    let inner = InMemoryMailboxStore()
    /// The event loops no call may run on.
    let loops: [EventLoop]
    private let calls = Lock<[Call]>([])
    private let starts: AsyncStream<String>.Continuation
    /// The name of each call as it starts.
    let started: AsyncStream<String>

    private let gate = DispatchSemaphore(value: 0)
    private let released = Lock(false)

    /// The names of the calls held; the others go on at once.
    let held: Set<String>

    init(watching groups: [TetherEventLoopGroup], holding held: Set<String>) {
        loops = groups.flatMap(\.loops)
        self.held = held
        (started, starts) = AsyncStream.makeStream()
    }

    /// Every call so far, in the order they started.
    var history: [Call] { calls.withLock { $0 } }

    /// Lets the held calls, and every later one, go on.
    func release() {
        released.withLock { $0 = true }
        gate.signal()
    }

    /// Whether a call holds its thread now.
    var holding: Bool { calls.withLock { $0.contains { $0.end == nil } } }

    /// How many calls of `name` have ended.
    func finished(_ name: String) -> Int {
        calls.withLock { $0.filter { $0.name == name && $0.end != nil }.count }
    }

    private func blocking<T>(_ name: String, _ body: () async throws -> T) async rethrows -> T {
        let index = calls.withLock { calls in
            calls.append(Call(name: name, start: MonotonicTime.now(), onLoop: loops.contains { $0.inLoop }))
            return calls.count - 1
        }
        starts.yield(name)
        if held.contains(name), !released.withLock({ $0 }) {
            _ = gate.wait(timeout: .now() + 15)
            // Each call let go lets the next held one go.
            gate.signal()
        }
        defer { calls.withLock { $0[index].end = MonotonicTime.now() } }
        return try await body()
    }

    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws -> [UInt64] {
        try await blocking("append") { try await inner.append(messages, limits: limits, now: now) }
    }

    func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> MailboxSummary {
        try await blocking("openMailbox") { try await inner.openMailbox(for: clientID, limits: limits, now: now) }
    }

    func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage] {
        try await blocking("messages") { try await inner.messages(for: clientID, after: sequence, limit: limit) }
    }

    func acknowledge(_ clientID: String, through sequence: UInt64) async throws {
        try await blocking("acknowledge") { try await inner.acknowledge(clientID, through: sequence) }
    }

    func clientIDs() async throws -> [String] {
        try await blocking("clientIDs") { try await inner.clientIDs() }
    }

    func removeExpired(limits: MailboxLimits, now: MailboxTime, keeping connected: Set<String>) async throws -> [String] {
        try await blocking("removeExpired") { try await inner.removeExpired(limits: limits, now: now, keeping: connected) }
    }
}

/// The round trips of one connection: each heartbeat's and each request's start and end,
/// on the monotonic clock, and the type and serial of what answered it.
struct RoundTrips {
    var spans: [(start: UInt64, end: UInt64)] = []
    var sent: [String] = []
    var answered: [String] = []

    var summary: String {
        spans.map { String(format: "%.1f", Double($0.end - $0.start) / 1e6) }.joined(separator: " ") + " ms"
    }
}

/// Connects a raw client to `endpoint` and makes `count` heartbeats and `count` echo
/// requests, alternately, each waiting for its answer; all on a thread of its own with
/// blocking reads, so the times taken do not depend on the Swift concurrency pool.
func timedRoundTrips(to endpoint: Endpoint, count: Int) async throws -> RoundTrips {
    try await offThread {
        let socket = try RawSocket.connect(to: endpoint)
        defer { socket.close() }
        var trips = RoundTrips()
        for index in 1...UInt32(count) {
            for (type, serial) in [(UInt32(0x1), index), (UInt32(0x402), 1000 + index)] {
                let payload: [UInt8] = type == 0x402 ? Array(#"{"n":\#(index)}"#.utf8) : []
                let start = MonotonicTime.now()
                try socket.write(seedBytes(type: type, serial: serial, payload: payload))
                guard let answer = try socket.readFrameBlocking() else {
                    throw TimedOut(what: "the answer to frame \(serial)")
                }
                let end = MonotonicTime.now()
                trips.spans.append((start, end))
                trips.sent.append("\(type)/\(serial)")
                trips.answered.append("\(answer.type)/\(answer.serial)")
            }
        }
        return trips
    }
}

/// Store calls never run on an event loop thread: a store that blocks holds up the
/// clients waiting for it, never the other connections of the loop.
@Suite("A store that blocks", .timeLimit(.guarded))
struct BlockingStoreTests {
    /// The store threads of these tests' servers.
    static let storeThreads = StoreExecutor(threads: StoreExecutor.threadCount)

    /// A server on one event loop of its own, with mailboxes in `store`.
    private func configure(_ configuration: inout ServerConfiguration, _ store: BlockingStore, group: TetherEventLoopGroup) {
        var mailboxes = MailboxConfiguration(store: store)
        // Threads of their own: the calls these tests hold would otherwise hold up the store
        // calls of every other server in the process meanwhile.
        mailboxes.storeExecutor = Self.storeThreads
        mailboxes.replayBatchSize = 1
        mailboxes.expiryInterval = nil
        configuration.mailboxes = mailboxes
        configuration.eventLoopGroup = group
    }

    @Test("a replay read by a store that holds its thread: 20 heartbeats and 20 requests of another connection on the same loop are all answered while it holds")
    func replay() async throws {
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let store = BlockingStore(watching: [group, .shared], holding: ["messages"])
        let stored = 6
        let drafts = (0..<stored).map { MailboxMessage.Draft(clientID: "alice", type: 0x10, payload: Array("\($0)".utf8)) }
        _ = try await store.inner.append(drafts, limits: MailboxLimits(), now: .now())
        try await withServer(configure: { configure(&$0, store, group: group) }, handlers: echoHandlers) { _, endpoint in
            let reads = store.started.filter { $0 == "messages" }
            // Not awaited yet: the welcome is written on the loop just before the replay starts.
            let connecting = Task { try await Connection.connect(to: endpoint, configuration: sessionConfiguration("alice")) }
            // One page per call: the replay takes 6 calls of 500 ms.
            _ = try await collect(1, from: reads, "the replay's first read")
            let trips = try await timedRoundTrips(to: endpoint, count: 20)
            let pagesRead = store.finished("messages")
            Attachment.record("round trips: \(trips.summary); pages read meanwhile: \(pagesRead)", named: "replay-round-trips.txt")
            #expect(trips.answered == trips.sent)
            #expect(store.holding, "the round trips waited for the store to let go of its thread")
            store.release()
            #expect(store.history.filter(\.onLoop).map(\.name) == [])
            let alice = try await bounded("the connection") { try await connecting.value }
            let replayed = try await collect(stored, from: alice.notifications, "the replay")
            #expect(replayed.map(index(of:)) == Array(0..<stored))
            #expect(replayed.map(\.serial) == Array(1...UInt32(stored)))
            await alice.close()
        }
    }

    @Test("a handler asks for the client ids while the store holds its thread: heartbeats and requests of another connection on the same loop are all answered meanwhile")
    func clientIDsFromHandler() async throws {
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let store = BlockingStore(watching: [group, .shared], holding: ["clientIDs"])
        try await withServer(configure: { configure(&$0, store, group: group) }, handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x420) { [weak server] _, _ in
                Response(json: ["clients": .int(try await server?.clientIDs().count ?? -1)])
            }
        }) { _, endpoint in
            let lookups = store.started.filter { $0 == "clientIDs" }
            let asker = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let asking = Task {
                for _ in 0..<6 { _ = try await asker.request(Request(type: 0x420, json: [:]), timeout: .seconds(20)) }
            }
            _ = try await collect(1, from: lookups, "the first lookup")
            let trips = try await timedRoundTrips(to: endpoint, count: 20)
            let lookedUp = store.finished("clientIDs")
            Attachment.record("round trips: \(trips.summary); lookups meanwhile: \(lookedUp)", named: "client-ids-round-trips.txt")
            #expect(trips.answered == trips.sent)
            #expect(store.holding, "the round trips waited for the store to let go of its thread")
            store.release()
            #expect(store.history.filter(\.onLoop).map(\.name) == [])
            try await bounded("the lookups", .seconds(20)) { try await asking.value }
            #expect(store.finished("clientIDs") == 6)
            await asker.close()
        }
    }

    @Test("pushes appended by a store that holds its thread, on a server run from a task that prefers its event loop: heartbeats and requests of another connection on that loop are all answered meanwhile")
    func appends() async throws {
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let store = BlockingStore(watching: [group, .shared], holding: ["append"])
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        configure(&configuration, store, group: group)
        let server = Server(configuration: configuration)
        echoHandlers(server)
        // The server's own tasks, the one that writes to the store among them, inherit the
        // preference for the loop.
        let running = Task(executorPreference: group.loops[0].taskExecutor) { try await server.run() }
        defer { running.cancel() }
        let address = try await bounded("server to listen") { try await server.listeningAddress() }
        let endpoint = Endpoint(host: address.ipAddress, port: address.port)

        let appends = store.started.filter { $0 == "append" }
        let bob = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("bob"))
        let notifications = bob.notifications
        try await awaitClient("bob", on: server)
        let pushing = Task {
            for number in 0..<6 { try await server.push(indexed(number), toClient: "bob") }
        }
        _ = try await collect(1, from: appends, "the first append")
        let trips = try await timedRoundTrips(to: endpoint, count: 20)
        Attachment.record("round trips: \(trips.summary); appends meanwhile: \(store.finished("append"))", named: "append-round-trips.txt")
        #expect(trips.answered == trips.sent)
        #expect(store.holding, "the round trips waited for the store to let go of its thread")
        store.release()
        #expect(store.history.filter(\.onLoop).map(\.name) == [])
        try await bounded("the pushes", .seconds(20)) { try await pushing.value }
        let received = try await collect(6, from: notifications, "the pushes")
        #expect(received.map(index(of:)) == Array(0..<6))
        await bob.close()
        running.cancel()
        try await bounded("the server to stop after cancellation") { try await running.value }
    }

    @Test("a SQLite store call that waits for another program's write lock suspends its caller: the caller's event loop runs 20 jobs while the call still waits")
    func sqliteCallerFree() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        let store = try SQLiteMailboxStore(path: path)
        // Another program holds the write lock: the store's append waits for it, up to 5 s.
        let writer = try SQLiteConnection(path: path)
        try writer.execute("BEGIN IMMEDIATE")
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let loop = group.loops[0]
        let (started, start) = AsyncStream<Void>.makeStream()
        let appended = Lock(false)
        let appending = Task(executorPreference: loop.taskExecutor) {
            start.yield()
            // Ended, either way: a call that held the loop would end (when the lock wait
            // times out, after 5 s) before the jobs below could run.
            defer { appended.withLock { $0 = true } }
            let sequences = try await store.append([MailboxMessage.Draft(clientID: "a", type: 0x10, payload: [1])], limits: MailboxLimits(), now: .now())
            return sequences
        }
        _ = try await collect(1, from: started, "the append to be made on the loop")
        // Twenty jobs queued on the loop at once: the last one reads whether the append has
        // ended, and at once lets the lock go, so no hop back to this task (which a busy
        // machine can stretch past the lock's 5 s) stands between the two.
        let queued = MonotonicTime.now()
        let (ranWhileWaiting, waited, released) = await withCheckedContinuation { (continuation: CheckedContinuation<(Bool, UInt64, Bool), Never>) in
            for index in 0..<20 {
                loop.execute {
                    guard index == 19 else { return }
                    let waiting = !appended.withLock { $0 }
                    let elapsed = MonotonicTime.now() - queued
                    let released = (try? writer.execute("ROLLBACK")) != nil
                    continuation.resume(returning: (waiting, elapsed, released))
                }
            }
        }
        Attachment.record(String(format: "20 jobs ran in %.2f ms", Double(waited) / 1e6), named: "loop-waits.txt")
        #expect(ranWhileWaiting, "the jobs ran only once the append had ended: it held the loop, or did not wait for the lock")
        #expect(released)
        #expect(try await bounded("the append") { try await appending.value } == [1])
    }
}

/// A connection to a SQLite file of the test's own, as another program would have.
///
/// `@unchecked Sendable`: its handle is used by one thread at a time (the test's, or a job on
/// a loop while the test waits for that job), and SQLite's default threading mode is serialized.
final class SQLiteConnection: @unchecked Sendable {
    struct Failure: Error { var message: String }

    private var handle: OpaquePointer?

    init(path: String) throws {
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK else {
            defer { sqlite3_close_v2(handle) }
            throw Failure(message: "opening \(path): \(String(cString: sqlite3_errmsg(handle)))")
        }
    }

    deinit { sqlite3_close_v2(handle) }

    func execute(_ sql: String) throws {
        guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else {
            throw Failure(message: "\(sql): \(String(cString: sqlite3_errmsg(handle)))")
        }
    }
}
