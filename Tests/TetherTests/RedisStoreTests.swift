#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import Tether
@testable import TetherRedis
import TetherTLS

private let t0 = MailboxTime(millisecondsSince1970: 1_700_000_000_000)
private let limits = MailboxLimits(maximumMessages: 1_000, maximumAge: nil)

private func drafts(_ clientID: String, count: Int) -> [MailboxMessage.Draft] {
    (0..<count).map { MailboxMessage.Draft(clientID: clientID, type: 7, payload: [UInt8(truncatingIfNeeded: $0)]) }
}

@Suite("The Redis store and its server", .timeLimit(.guarded))
struct RedisStoreTests {
    @Test("a Redis that restarts without persistence has lost the mailboxes: a call meanwhile fails naming it, the next one after the restart works, and the mailbox comes back with a new epoch")
    func restartWithoutPersistence() async throws {
        let redis = try await RedisInstance.start()
        let store = try await RedisMailboxStore(url: redis.url)
        let before = try await store.openMailbox(for: "a", limits: limits, now: t0)
        #expect(try await store.append(drafts("a", count: 3), limits: limits, now: t0) == [1, 2, 3])

        await redis.kill()
        let error = await #expect(throws: TetherError.self) {
            try await store.append(drafts("a", count: 1), limits: limits, now: t0)
        }
        #expect(error?.code == .storeFailed)
        #expect(error?.message.contains("Redis at 127.0.0.1:\(redis.port)") == true, "\(error?.message ?? "")")

        try await redis.restart()
        let after = try await store.openMailbox(for: "a", limits: limits, now: t0)
        #expect(after.lastSequence == 0, "the history is gone")
        #expect(after.epoch != nil && after.epoch != before.epoch, "and the epoch says so")
        #expect(try await store.append(drafts("a", count: 1), limits: limits, now: t0) == [1])
        await store.close()
    }

    @Test("a Redis with an append-only file synced on every write keeps every append that returned through a SIGKILL, and the epoch with it")
    func restartWithPersistence() async throws {
        let redis = try await RedisInstance.start(persistent: true)
        let store = try await RedisMailboxStore(url: redis.url)
        let before = try await store.openMailbox(for: "a", limits: limits, now: t0)
        #expect(try await store.append(drafts("a", count: 3), limits: limits, now: t0) == [1, 2, 3])
        try await store.acknowledge("a", through: 1)
        await redis.kill()
        try await redis.restart()
        let after = try await store.openMailbox(for: "a", limits: limits, now: t0)
        #expect(after.epoch == before.epoch)
        #expect(after.withoutEpoch == MailboxSummary(lastSequence: 3, acknowledged: 1, lostThrough: 0, lossReason: nil, count: 2))
        #expect(try await store.messages(for: "a", after: 0, limit: 10).map(\.sequence) == [2, 3])
        await store.close()
    }

    @Test("a Redis that stops answering costs each call its command timeout, with a message that says so; once it answers again, so does the store")
    func frozenServer() async throws {
        let redis = try await RedisInstance.start()
        var configuration = try RedisConfiguration(url: redis.url)
        configuration.commandTimeout = .seconds(2)
        configuration.connections = 1
        let store = try await RedisMailboxStore(configuration: configuration)
        _ = try await store.append(drafts("a", count: 1), limits: limits, now: t0)
        let pid = try #require(redis.serverPID)
        #expect(kill(pid, SIGSTOP) == 0)
        let error = await #expect(throws: TetherError.self) {
            try await store.append(drafts("a", count: 1), limits: limits, now: t0)
        }
        #expect(error?.message.contains("did not answer appending 1 message within") == true, "\(error?.message ?? "")")
        #expect(kill(pid, SIGCONT) == 0)
        #expect(try await store.append(drafts("a", count: 1), limits: limits, now: t0).count == 1)
        await store.close()
    }

    @Test("a server that lies about a reply's length, or sends what is not RESP, ends the connection with an error that says what and where, holding nothing it announced", arguments: [
        ("$99999999999\r\n", "beyond the limit of 67108864"),
        ("*99999999999\r\n", "beyond the limit of"),
        ("!oops\r\n", "starts no RESP reply"),
    ])
    func hostileServer(reply: String, expected: String) async throws {
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        async let accepted = Task {
            let peer = try await listener.accept()
            _ = try await offThread { try peer.read(14) }  // PING
            try peer.write(Array(reply.utf8))
            return peer
        }.value
        var configuration = RedisConfiguration(host: "127.0.0.1", port: endpoint.port)
        configuration.connections = 1
        let error = await #expect(throws: TetherError.self) {
            _ = try await RedisMailboxStore(configuration: configuration)
        }
        #expect(error?.message.contains(expected) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("Redis at 127.0.0.1:\(endpoint.port)") == true)
        let peer = try await accepted
        #expect(try await peer.waitForClose(), "the connection is ended")
        peer.close()
    }

    @Test("a server that requires a password: the wrong one is refused with Redis's reason and the server named, the right one in the URL logs in; a database other than 0 is selected")
    func authentication() async throws {
        let redis = try await RedisInstance.start(options: ["--requirepass", "s3cret"])
        let wrong = await #expect(throws: TetherError.self) {
            _ = try await RedisMailboxStore(url: "redis://:nope@127.0.0.1:\(redis.port)")
        }
        #expect(wrong?.message.contains("Redis at 127.0.0.1:\(redis.port) refused the login") == true, "\(wrong?.message ?? "")")
        let none = await #expect(throws: TetherError.self) {
            _ = try await RedisMailboxStore(url: "redis://127.0.0.1:\(redis.port)")
        }
        #expect(none?.message.contains("NOAUTH") == true, "\(none?.message ?? "")")
        let store = try await RedisMailboxStore(url: "redis://:s3cret@127.0.0.1:\(redis.port)/3")
        #expect(try await store.append(drafts("a", count: 2), limits: limits, now: t0) == [1, 2])
        let other = try await RedisMailboxStore(url: "redis://:s3cret@127.0.0.1:\(redis.port)/4")
        #expect(try await other.clientIDs().isEmpty, "database 4 is another")
        #expect(try await store.clientIDs() == ["a"])
        await store.close()
        await other.close()
    }

    @Test("TLS to redis-server's tls-port, with the test CA: the store works; a server whose certificate the client does not trust is refused, saying so")
    func tls() async throws {
        let certificates = try await TestCertificates.shared()
        let redis = try await RedisInstance.start(options: [
            "--tls-cert-file", certificates.server.certificateChain, "--tls-key-file", certificates.server.privateKey,
            "--tls-auth-clients", "no",
        ], tls: true)
        var configuration = RedisConfiguration(host: "127.0.0.1", port: Int(redis.port))
        configuration.tls = .client(trustRoots: .file(certificates.caCertificate), serverName: "localhost")
        let store = try await RedisMailboxStore(configuration: configuration)
        #expect(try await store.append(drafts("a", count: 3), limits: limits, now: t0) == [1, 2, 3])
        #expect(try await store.messages(for: "a", after: 1, limit: 10).map(\.sequence) == [2, 3])
        await store.close()

        configuration.tls = .client(trustRoots: .file(certificates.otherCACertificate), serverName: "localhost")
        let error = await #expect(throws: TetherError.self) {
            _ = try await RedisMailboxStore(configuration: configuration)
        }
        #expect(error?.message.contains("Redis at 127.0.0.1:\(redis.port)") == true, "\(error?.message ?? "")")
        var plain = configuration
        plain.tls = nil
        plain.connectTimeout = .seconds(2)
        plain.commandTimeout = .seconds(2)
        await #expect(throws: TetherError.self) {
            _ = try await RedisMailboxStore(configuration: plain)
        }
    }

    @Test("redis:// URLs: host, port, credentials and database; others are refused saying why")
    func urls() throws {
        let full = try RedisConfiguration(url: "redis://user:secret@cache.internal:6380/3")
        #expect(full.host == "cache.internal")
        #expect(full.port == 6380)
        #expect(full.user == "user")
        #expect(full.password == "secret")
        #expect(full.database == 3)
        let bare = try RedisConfiguration(url: "redis://[::1]")
        #expect(bare.host == "::1")
        #expect(bare.port == 6379)
        #expect(try RedisConfiguration(url: "redis://:pw@h").password == "pw")
        #expect(throws: TetherError.self) { try RedisConfiguration(url: "http://h") }
        #expect(throws: TetherError.self) { try RedisConfiguration(url: "redis://h:0") }
        #expect(throws: TetherError.self) { try RedisConfiguration(url: "redis://h/x") }
    }
}
