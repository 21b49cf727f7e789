#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import Tether
@testable import TetherPostgres

private let t0 = MailboxTime(millisecondsSince1970: 1_700_000_000_000)
private let roomy = MailboxLimits(maximumMessages: 1_000_000, maximumAge: nil)

private func draft(_ clientID: String, _ payload: String) -> MailboxMessage.Draft {
    MailboxMessage.Draft(clientID: clientID, type: 0x10, payload: Array(payload.utf8))
}

/// Runs `operation`, which must throw a ``TetherError``, and returns it.
private func failure(_ operation: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async -> TetherError? {
    do {
        try await operation()
        Issue.record("the call succeeded", sourceLocation: sourceLocation)
        return nil
    } catch let error as TetherError {
        return error
    } catch {
        Issue.record("threw \(error) instead of a TetherError", sourceLocation: sourceLocation)
        return nil
    }
}

/// A socket listening on 127.0.0.1 that never accepts: the kernel completes connections to
/// it, and nothing ever answers them.
private final class SilentListener {
    let descriptor: Int32
    let port: UInt16

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard fd >= 0, bound == 0, listen(fd, 16) == 0 else {
            if fd >= 0 { close(fd) }
            throw PostgresFixtureError(description: "could not listen on 127.0.0.1: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        descriptor = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(descriptor) }
}

@Suite("PostgreSQL mailbox store", .timeLimit(.guarded))
struct PostgresStoreTests {
    @Test("with no PostgreSQL on the port, opening the store fails at once with storeFailed, naming 127.0.0.1 and the port")
    func nothingListening() async throws {
        let port = try PostgresInstance.freePort()
        let started = ContinuousClock.now
        let error = await failure {
            _ = try await PostgresMailboxStore(url: "postgresql://tether@127.0.0.1:\(port)/postgres")
        }
        #expect(error?.code == .storeFailed)
        let message = error?.message ?? ""
        #expect(message.hasPrefix("creating the mailbox tables failed: PostgreSQL at 127.0.0.1:\(port) is unreachable: "), "\(message)")
        #expect(message.contains("Connection refused"), "\(message)")
        #expect(started.duration(to: .now) < .seconds(5))
    }

    @Test("a server that takes the connection and never answers: connecting gives up after connectTimeout, naming the server")
    func silentServer() async throws {
        let silent = try SilentListener()
        var configuration = PostgresConfiguration(url: "host=127.0.0.1 port=\(silent.port) user=tether dbname=postgres")
        configuration.connectTimeout = .milliseconds(500)
        let started = ContinuousClock.now
        let error = await failure {
            _ = try await PostgresMailboxStore(configuration: configuration)
        }
        let waited = started.duration(to: .now)
        #expect(error?.code == .storeFailed)
        #expect(error?.message == "creating the mailbox tables failed: PostgreSQL at 127.0.0.1:\(silent.port) is unreachable: no connection within 0.5 seconds")
        #expect(waited >= .milliseconds(500))
        #expect(waited < .seconds(5))
    }

    @Test("a statement that runs longer than queryTimeout is cancelled by the server, and the connection serves the next call")
    func queryTimeout() async throws {
        var configuration = PostgresConfiguration(url: try await PostgresFixture.freshDatabase())
        configuration.connections = 1
        configuration.queryTimeout = .milliseconds(200)
        let database = PostgresDatabase(configuration: configuration)
        let error = await failure {
            _ = try await database.withSession { try $0.execute("SELECT pg_sleep(10)") }
        }
        #expect(error?.code == .storeFailed)
        #expect(error?.message == "PostgreSQL at 127.0.0.1:\(try await port(of: configuration.url)): ERROR: canceling statement due to statement timeout")
        #expect((error?.underlying as? PostgresFailure)?.sqlState == "57014")
        #expect(try await database.withSession { try $0.execute("SELECT 41 + 1").int(0, 0) } == 42)
        await database.close()
    }

    @Test("PostgreSQL stopped: each call fails with storeFailed naming the step and 127.0.0.1:port; restarted: the next append succeeds and nothing stored before is lost")
    func restart() async throws {
        let instance = try await PostgresInstance.start()
        let store = try await PostgresMailboxStore(url: instance.url())
        var stored: [MailboxMessage.Draft: UInt64] = [:]
        for round in 0..<10 {
            let batch = (0..<3).map { draft("client-\($0)", "\(round)-\($0)") }
            for (message, sequence) in zip(batch, try await store.append(batch, limits: roomy, now: t0)) {
                stored[message] = sequence
            }
        }
        try await store.acknowledge("client-0", through: 4)

        try await instance.stop()
        let down = "PostgreSQL at 127.0.0.1:\(instance.port) is unreachable: "
        let calls: [(String, @Sendable () async throws -> Void)] = [
            ("appending 1 message", { _ = try await store.append([draft("client-0", "lost")], limits: roomy, now: t0) }),
            ("opening the mailbox of client \"client-1\"", { _ = try await store.openMailbox(for: "client-1", limits: roomy, now: t0) }),
            ("reading the mailbox of client \"client-1\"", { _ = try await store.messages(for: "client-1", after: 0, limit: 10) }),
            ("acknowledging sequence 5 of client \"client-0\"", { try await store.acknowledge("client-0", through: 5) }),
            ("listing the clients", { _ = try await store.clientIDs() }),
        ]
        for (step, call) in calls {
            let error = await failure(call)
            #expect(error?.code == .storeFailed)
            #expect(error?.message.hasPrefix("\(step) failed: \(down)") == true, "\(error?.message ?? "")")
        }

        try await instance.restart()
        #expect(try await store.append([draft("client-0", "after"), draft("client-3", "new")], limits: roomy, now: t0) == [11, 1])
        for client in 0..<3 {
            let clientID = "client-\(client)"
            let messages = try await store.messages(for: clientID, after: 0, limit: 100)
            let expected = stored.filter { $0.key.clientID == clientID && (client != 0 || $0.value > 4) }
                .sorted { $0.value < $1.value }
            let kept = messages.filter { client != 0 || $0.sequence <= 10 }
            #expect(kept.map(\.sequence) == expected.map(\.value))
            #expect(kept.map(\.payload) == expected.map(\.key.payload))
        }
        let summary = try await store.openMailbox(for: "client-0", limits: roomy, now: t0)
        #expect(summary.lastSequence == 11)
        #expect(summary.acknowledged == 4)
        #expect(summary.count == 7)
        await store.close()
    }

    @Test("PostgreSQL killed in the middle of appends from 4 tasks, then restarted: every append that returned is stored whole, and sequences go on without reuse")
    func crash() async throws {
        let instance = try await PostgresInstance.start()
        let store = try await PostgresMailboxStore(url: instance.url())
        let (progress, tick) = AsyncStream<Int>.makeStream()
        // Each task appends batches of 3 to its client until an append fails.
        let writers = (0..<4).map { writer in
            Task { () -> [MailboxMessage] in
                var stored: [MailboxMessage] = []
                var round = 0
                while true {
                    let batch = (0..<3).map { draft("writer-\(writer)", "\(round).\($0)") }
                    guard let sequences = try? await store.append(batch, limits: roomy, now: t0) else { return stored }
                    for (message, sequence) in zip(batch, sequences) {
                        stored.append(MailboxMessage(clientID: message.clientID, sequence: sequence, type: message.type, payload: message.payload, storedAt: t0))
                    }
                    tick.yield(writer)
                    round += 1
                }
            }
        }
        // Kill the server once every writer has appended a few batches.
        try await bounded("every writer to append 5 batches") {
            var rounds: [Int: Int] = [:]
            for await writer in progress {
                rounds[writer, default: 0] += 1
                if rounds.count == 4, rounds.values.allSatisfy({ $0 >= 5 }) { break }
            }
        }
        await instance.kill()
        var acknowledged: [String: [MailboxMessage]] = [:]
        for writer in writers {
            let stored = try await bounded("a writer to see the server gone") { await writer.value }
            acknowledged[stored.first?.clientID ?? "", default: []] += stored
        }
        #expect(acknowledged.count == 4)

        try await instance.restart()
        for (clientID, returned) in acknowledged {
            let messages = try await store.messages(for: clientID, after: 0, limit: 100_000)
            let bySequence = Dictionary(uniqueKeysWithValues: messages.map { ($0.sequence, $0) })
            #expect(messages.map(\.sequence) == Array(1...UInt64(messages.count)), "no gap, no reuse")
            for message in returned {
                #expect(bySequence[message.sequence] == message, "\(clientID) \(message.sequence) was acknowledged as stored")
            }
            let next = try await store.append([draft(clientID, "after")], limits: roomy, now: t0)
            #expect(next == [UInt64(messages.count) + 1])
        }
        await store.close()
    }

    @Test("statements waiting on the database hold all 4 connections: 20 heartbeats and 20 requests of a connection on the loop that called them are answered meanwhile, and the pushes queued behind them are delivered after")
    func slowDatabase() async throws {
        let url = try await PostgresFixture.freshDatabase()
        let store = try await PostgresMailboxStore(url: url)
        // Another connection holds an advisory lock that the statements below wait for.
        var holderConfiguration = PostgresConfiguration(url: url)
        holderConfiguration.connections = 1
        let holder = PostgresDatabase(configuration: holderConfiguration)
        _ = try await holder.withSession { try $0.execute("SELECT pg_advisory_lock(7)") }

        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let loop = group.loops[0]
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        var mailboxes = MailboxConfiguration(store: store)
        mailboxes.expiryInterval = nil
        configuration.mailboxes = mailboxes
        configuration.eventLoopGroup = group
        let server = Server(configuration: configuration)
        echoHandlers(server)
        let running = Task(executorPreference: loop.taskExecutor) { try await server.run() }
        defer { running.cancel() }
        let address = try await bounded("server to listen") { try await server.listeningAddress() }
        let endpoint = Endpoint(host: address.ipAddress, port: address.port)
        let bob = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("bob"))
        let notifications = bob.notifications
        try await awaitClient("bob", on: server)

        let (entered, enter) = AsyncStream<Void>.makeStream()
        let waiting = (0..<4).map { _ in
            Task(executorPreference: loop.taskExecutor) {
                try await store.database.withSession { session in
                    enter.yield()
                    try session.execute("SELECT pg_advisory_lock_shared(7)")
                    try session.execute("SELECT pg_advisory_unlock_shared(7)")
                }
            }
        }
        _ = try await collect(4, from: entered, "the 4 statements to start")
        // Entered is not yet waiting: each statement is sent after its task says so. Ask the
        // server until all 4 wait for the lock (each question is a round trip, not a pause).
        try await bounded("the 4 statements to wait for the lock") {
            while try await holder.withSession({
                try $0.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").int(0, 0)
            }) != 4 {}
        }
        let pushed = Lock(false)
        let pushing = Task(executorPreference: loop.taskExecutor) {
            for number in 0..<3 { try await server.push(indexed(number), toClient: "bob") }
            pushed.withLock { $0 = true }
        }

        let trips = try await timedRoundTrips(to: endpoint, count: 20)
        Attachment.record("round trips: \(trips.summary)", named: "slow-database-round-trips.txt")
        #expect(trips.answered == trips.sent)
        let blocked = try await holder.withSession {
            try $0.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").int(0, 0)
        }
        #expect(blocked == 4, "the 4 statements still waited when the round trips were done")
        #expect(!pushed.withLock { $0 }, "the pushes waited for a free connection")

        _ = try await holder.withSession { try $0.execute("SELECT pg_advisory_unlock(7)") }
        for statement in waiting {
            _ = try await bounded("a statement to end") { try await statement.value }
        }
        try await bounded("the pushes") { try await pushing.value }
        let received = try await collect(3, from: notifications, "the pushes")
        #expect(received.map(index(of:)) == [0, 1, 2])
        await bob.close()
        running.cancel()
        try await bounded("the server to stop after cancellation") { try await running.value }
        await holder.close()
        await store.close()
    }
}

@Suite("PostgreSQL mailbox store: tables and rows", .timeLimit(.guarded))
struct PostgresMailboxTableTests {
    @Test("acknowledgements of 20 clients in one call, 100 times, while 3 tasks append to the same clients: no deadlock, and every sequence is given once")
    func batchedAcknowledgementsBesideAppends() async throws {
        let store = try await PostgresMailboxStore(url: try await PostgresFixture.freshDatabase())
        let clients = (0..<20).map { "c\($0)" }
        _ = try await store.append(clients.map { draft($0, "first") }, limits: roomy, now: t0)
        let sequences = try await withThrowingTaskGroup(of: [String: [UInt64]].self) { group in
            for appender in 0..<3 {
                group.addTask {
                    var given: [String: [UInt64]] = [:]
                    for round in 0..<100 {
                        let client = clients[(round * 7 + appender * 3) % clients.count]
                        given[client, default: []] += try await store.append([draft(client, "\(round)")], limits: roomy, now: t0)
                    }
                    return given
                }
            }
            group.addTask {
                for round in 1...100 {
                    try await store.acknowledge(Dictionary(uniqueKeysWithValues: clients.map { ($0, UInt64(round)) }))
                }
                return [:]
            }
            var all: [String: [UInt64]] = [:]
            for try await given in group {
                for (client, numbers) in given { all[client, default: []] += numbers }
            }
            return all
        }
        for client in clients {
            let given = (sequences[client] ?? []).sorted()
            #expect(given == Array(2...UInt64(given.count + 1)), "\(client)")
        }
        await store.close()
    }

    @Test("two stores on one database, as two servers would be, append to the same clients at once: each client's sequences are 1…N with none given twice, and the mailbox bound counts both")
    func twoServers() async throws {
        let url = try await PostgresFixture.freshDatabase()
        let first = try await PostgresMailboxStore(url: url)
        let second = try await PostgresMailboxStore(url: url)
        let clients = ["a", "b", "c"]
        let given = try await withThrowingTaskGroup(of: [String: [UInt64]].self) { group in
            for store in [first, second] {
                for task in 0..<2 {
                    group.addTask {
                        var given: [String: [UInt64]] = [:]
                        for round in 0..<20 {
                            // Batches that touch the clients in different orders.
                            let batch = (round + task).isMultiple(of: 2) ? clients : clients.reversed()
                            let sequences = try await store.append(batch.map { draft($0, "\(round)") }, limits: roomy, now: t0)
                            for (clientID, sequence) in zip(batch, sequences) { given[clientID, default: []].append(sequence) }
                        }
                        return given
                    }
                }
            }
            var all: [String: [UInt64]] = [:]
            for try await part in group {
                for (clientID, sequences) in part { all[clientID, default: []] += sequences }
            }
            return all
        }
        for clientID in clients {
            #expect(given[clientID]?.sorted() == Array(1...80))
            #expect(try await first.messages(for: clientID, after: 0, limit: 1000).map(\.sequence) == Array(1...80))
        }
        var limits = roomy
        limits.maximumMailboxes = 4
        _ = try await first.openMailbox(for: "d", limits: limits, now: t0)
        let error = await failure { _ = try await second.openMailbox(for: "e", limits: limits, now: t0) }
        #expect(error?.code == .mailboxesFull)
        await first.close()
        await second.close()
    }

    @Test("each mailbox row gets a random epoch when it is created: it stays across appends, acknowledgements and a new store on the same tables, and is new once the mailbox was removed")
    func epochs() async throws {
        let url = try await PostgresFixture.freshDatabase()
        let store = try await PostgresMailboxStore(url: url)
        let limits = MailboxLimits(maximumMessages: 100, maximumAge: .seconds(60))
        let first = try #require(try await store.openMailbox(for: "a", limits: limits, now: t0).epoch)
        let other = try #require(try await store.openMailbox(for: "b", limits: limits, now: t0).epoch)
        #expect(first.count == 36, "a UUID: \(first)")
        #expect(first != other)
        _ = try await store.append([draft("a", "1"), draft("a", "2")], limits: limits, now: t0)
        try await store.acknowledge("a", through: 1)
        #expect(try await store.openMailbox(for: "a", limits: limits, now: t0).epoch == first)
        await store.close()

        let reopened = try await PostgresMailboxStore(url: url)
        #expect(try await reopened.openMailbox(for: "a", limits: limits, now: t0).epoch == first)
        #expect(try await reopened.removeExpired(limits: limits, now: t0.adding(.seconds(61)), keeping: []).sorted() == ["a", "b"])
        let again = try await reopened.openMailbox(for: "a", limits: limits, now: t0.adding(.seconds(61)))
        #expect(again.lastSequence == 0)
        #expect(again.epoch != nil && again.epoch != first)
        await reopened.close()
    }

    @Test("an append that fails part-way stores none of its messages and uses no sequence; the error names the step and what PostgreSQL said")
    func atomicAppend() async throws {
        let url = try await PostgresFixture.freshDatabase()
        let store = try await PostgresMailboxStore(url: url)
        _ = try await store.append([draft("a", "1"), draft("a", "2")], limits: roomy, now: t0)
        // A trigger fails the insert of a message of type 666, so the batch below fails
        // after the mailbox rows of "a", "b" and "c" were written.
        try await store.database.withSession { session in
            try session.execute("""
                CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN IF NEW.type = 666 THEN RAISE EXCEPTION 'refused by trigger'; END IF; RETURN NEW; END $$;
                CREATE TRIGGER refuse BEFORE INSERT ON tether_messages FOR EACH ROW EXECUTE FUNCTION refuse();
                """)
        }
        var refused = draft("a", "3")
        refused.type = 666
        let error = await failure {
            _ = try await store.append([draft("a", "x"), draft("b", "x"), refused, draft("c", "x")], limits: roomy, now: t0)
        }
        #expect(error?.code == .storeFailed)
        #expect(error?.message == "appending 4 messages failed: PostgreSQL at \(PostgresDatabase.endpoint(of: url)): ERROR: refused by trigger")
        #expect((error?.underlying as? PostgresFailure)?.sqlState == "P0001")
        #expect(try await store.clientIDs().sorted() == ["a"])
        #expect(try await store.messages(for: "a", after: 0, limit: 10).map(\.sequence) == [1, 2])
        try await store.database.withSession { try $0.execute("DROP TRIGGER refuse ON tether_messages") }
        #expect(try await store.append([draft("b", "y"), draft("a", "y")], limits: roomy, now: t0) == [1, 3])
        await store.close()
    }

    @Test("the append hook returns, for each message, the holder and generation of its client's row as the lock found them")
    func appendHook() async throws {
        let store = try await PostgresMailboxStore(url: try await PostgresFixture.freshDatabase())
        _ = try await store.openMailbox(for: "held", limits: roomy, now: t0)
        try await store.database.withSession { session in
            try session.execute("UPDATE tether_mailboxes SET holder = $1, generation = $2 WHERE client_id = $3", [.text("node-a"), .int(3), .text("held")])
        }
        let drafts = [draft("held", "1"), draft("free", "1"), draft("held", "2")]
        let appended = try await store.database.transaction { [store] session in
            try store.append(drafts, limits: roomy, now: t0, in: session).map { "\($0.sequence) \($0.holder ?? "-") \($0.generation)" }
        }
        #expect(appended == ["1 node-a 3", "1 - 0", "2 node-a 3"])
        let summary = try await store.database.transaction { [store] session in
            try store.open("held", limits: roomy, now: t0, in: session)
        }
        #expect(summary.lastSequence == 2)
        #expect(summary.count == 2)
        await store.close()
    }

    @Test("tables of another schema version are refused, naming the versions")
    func otherSchemaVersion() async throws {
        let url = try await PostgresFixture.freshDatabase()
        let store = try await PostgresMailboxStore(url: url)
        try await store.database.withSession { try $0.execute("UPDATE tether_meta SET value = '2' WHERE key = 'schema_version'") }
        await store.close()
        let error = await failure { _ = try await PostgresMailboxStore(url: url) }
        #expect(error?.code == .storeFailed)
        #expect(error?.message == "creating the mailbox tables failed: PostgreSQL at \(PostgresDatabase.endpoint(of: url)): the mailbox tables have schema version 2; this version of Tether reads version 1")
    }
}

/// The port a URL of the fixture names.
private func port(of url: String) async throws -> String {
    String(PostgresDatabase.endpoint(of: url).split(separator: ":").last ?? "")
}

@Suite("PostgreSQL listener", .timeLimit(.guarded))
struct PostgresListenerTests {
    @Test("a listener delivers notifications, tells when PostgreSQL stops, listens again once it is back, and stops at once")
    func reconnects() async throws {
        let instance = try await PostgresInstance.start()
        let (notified, notify) = AsyncStream<String>.makeStream()
        let (connection, report) = AsyncStream<String>.makeStream()
        let listener = PostgresListener(
            configuration: PostgresConfiguration(url: instance.url()),
            channels: ["tether \"test\""],
            onNotification: { channel, payload in notify.yield("\(channel): \(payload)") },
            onConnection: { up, error in report.yield(up ? "up" : "down: \(error ?? "")") }
        )
        listener.start()
        #expect(try await collect(1, from: connection, "the listener to connect") == ["up"])

        let sender = PostgresDatabase(configuration: PostgresConfiguration(url: instance.url()))
        _ = try await sender.withSession { try $0.execute("SELECT pg_notify($1, $2)", [.text("tether \"test\""), .text("one")]) }
        #expect(try await collect(1, from: notified, "the first notification") == ["tether \"test\": one"])

        try await instance.stop()
        let down = try await collect(1, from: connection, "the listener to see the server gone").first
        #expect(down?.hasPrefix("down: PostgreSQL at 127.0.0.1:\(instance.port)") == true, "\(down ?? "")")

        try await instance.restart()
        #expect(try await collect(1, from: connection, "the listener to listen again") == ["up"])
        _ = try await sender.withSession { try $0.execute("SELECT pg_notify($1, $2)", [.text("tether \"test\""), .text("two")]) }
        #expect(try await collect(1, from: notified, "the notification after the restart") == ["tether \"test\": two"])

        let stopping = ContinuousClock.now
        await listener.stop()
        #expect(stopping.duration(to: .now) < .seconds(1))
        await sender.close()
    }
}
