import CSQLite
import Foundation
import Testing
@testable import Tether
import TetherSQLite
import TetherPostgres
import TetherRedis

// MARK: - Fixtures

/// The stores the contract suite runs against.
enum MailboxStoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inMemory
    case sqlite
    case postgres
    case redis

    var testDescription: String { rawValue }
}

/// A fresh directory under the system's temporary directory, removed with everything in it.
struct TemporaryDirectory {
    let path: String

    init() throws {
        let base = FileManager.default.temporaryDirectory.path
        path = "\(base)/tether-mailbox-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
    }

    func file(_ name: String) -> String { "\(path)/\(name)" }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Runs `body` with a new, empty store of `kind`; a SQLite one lives in a temporary
/// directory that is removed afterwards, a PostgreSQL one in a database of its own.
private func withStore(_ kind: MailboxStoreKind, _ body: (any MailboxStore) async throws -> Void) async throws {
    switch kind {
    case .inMemory:
        try await body(InMemoryMailboxStore())
    case .sqlite:
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await body(try SQLiteMailboxStore(path: directory.file("mail.sqlite")))
    case .postgres:
        let store = try await PostgresMailboxStore(url: try await PostgresFixture.freshDatabase())
        do {
            try await body(store)
        } catch {
            await store.close()
            throw error
        }
        await store.close()
    case .redis:
        let store = try await RedisMailboxStore(configuration: try await RedisFixture.freshConfiguration())
        do {
            try await body(store)
        } catch {
            await store.close()
            throw error
        }
        await store.close()
    }
}

/// Fixed times, so no test depends on the wall clock.
private let t0 = MailboxTime(millisecondsSince1970: 1_700_000_000_000)

/// No bounds that a test would reach by accident.
private let roomy = MailboxLimits(maximumMessages: 1_000_000, maximumAge: nil)

private func draft(_ clientID: String, _ type: UInt32 = 1, _ payload: [UInt8] = [1, 2, 3]) -> MailboxMessage.Draft {
    MailboxMessage.Draft(clientID: clientID, type: type, payload: payload)
}

private func drafts(_ clientID: String, count: Int) -> [MailboxMessage.Draft] {
    (0..<count).map { draft(clientID, UInt32($0), [UInt8(truncatingIfNeeded: $0)]) }
}

private extension MailboxStore {
    func sequences(of clientID: String) async throws -> [UInt64] {
        try await messages(for: clientID, after: 0, limit: .max).map(\.sequence)
    }

    /// The summary of a client's mailbox without its epoch, which is random: see the epoch
    /// tests for that.
    func summary(of clientID: String, limits: MailboxLimits = roomy, now: MailboxTime = t0) async throws -> MailboxSummary {
        try await openMailbox(for: clientID, limits: limits, now: now).withoutEpoch
    }
}

extension MailboxSummary {
    /// A copy with no epoch, to compare what stores report apart from their random epochs.
    var withoutEpoch: MailboxSummary {
        var copy = self
        copy.epoch = nil
        return copy
    }
}

// MARK: - The contract, for every store

@Suite("Mailbox store contract")
struct MailboxStoreContractTests {
    @Test("sequences start at 1 and are consecutive per client, across calls and interleaved in one batch", arguments: MailboxStoreKind.allCases)
    func sequences(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            #expect(try await store.append([], limits: roomy, now: t0) == [])
            #expect(try await store.append([draft("a"), draft("a")], limits: roomy, now: t0) == [1, 2])
            let mixed = [draft("b"), draft("a"), draft("b"), draft("c"), draft("a"), draft("b")]
            #expect(try await store.append(mixed, limits: roomy, now: t0) == [1, 3, 2, 1, 4, 3])
            #expect(try await store.append([draft("a")], limits: roomy, now: t0) == [5])
            #expect(try await store.sequences(of: "a") == [1, 2, 3, 4, 5])
            #expect(try await store.sequences(of: "b") == [1, 2, 3])
            #expect(try await store.sequences(of: "c") == [1])
            #expect(try await store.clientIDs().sorted() == ["a", "b", "c"])
            #expect(try await store.summary(of: "b") == MailboxSummary(lastSequence: 3, acknowledged: 0, lostThrough: 0, lossReason: nil, count: 3))
        }
    }

    @Test("messages come back whole, in sequence order, and page with after and limit", arguments: MailboxStoreKind.allCases)
    func paging(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let batch = [
                draft("a", 7, Array("first".utf8)),
                draft("b", 8, [9]),
                draft("a", .max, []),
                draft("a", 0, Array(repeating: 0xEE, count: 5000)),
            ]
            _ = try await store.append(batch, limits: roomy, now: t0)
            _ = try await store.append(drafts("a", count: 6), limits: roomy, now: t0.adding(.milliseconds(5)))

            let all = try await store.messages(for: "a", after: 0, limit: 100)
            #expect(all.map(\.sequence) == Array(1...9))
            #expect(all[0] == MailboxMessage(clientID: "a", sequence: 1, type: 7, payload: Array("first".utf8), storedAt: t0))
            #expect(all[1] == MailboxMessage(clientID: "a", sequence: 2, type: .max, payload: [], storedAt: t0))
            #expect(all[2].payload == Array(repeating: 0xEE, count: 5000))
            #expect(all[3] == MailboxMessage(clientID: "a", sequence: 4, type: 0, payload: [0], storedAt: t0.adding(.milliseconds(5))))

            var paged: [MailboxMessage] = []
            var after: UInt64 = 0
            while true {
                let page = try await store.messages(for: "a", after: after, limit: 4)
                if page.isEmpty { break }
                #expect(page.count <= 4)
                paged += page
                after = page.last!.sequence
            }
            #expect(paged == all)

            #expect(try await store.messages(for: "a", after: 7, limit: 100).map(\.sequence) == [8, 9])
            #expect(try await store.messages(for: "a", after: 9, limit: 100).isEmpty)
            #expect(try await store.messages(for: "a", after: .max, limit: 100).isEmpty)
            #expect(try await store.messages(for: "a", after: 0, limit: 0).isEmpty)
            #expect(try await store.messages(for: "a", after: 0, limit: -1).isEmpty)
            #expect(try await store.messages(for: "nobody", after: 0, limit: 100).isEmpty)
            #expect(try await store.messages(for: "b", after: 0, limit: 100).map(\.payload) == [[9]])
        }
    }

    @Test("request records: begun once, running until answered, then the answer; forgotten past the window; bounded per client in count and bytes", arguments: MailboxStoreKind.allCases)
    func requestRecords(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            var limits = roomy
            limits.requestWindow = .seconds(60)
            limits.maximumRequestRecordsPerClient = 3
            limits.maximumRequestRecordBytesPerClient = 10
            #expect(try await store.beginRequest("k1", of: "a", limits: limits, now: t0) == .started)
            #expect(try await store.beginRequest("k1", of: "a", limits: limits, now: t0) == .running)
            try await store.finishRequest("k1", of: "a", answer: [1, 2, 3], limits: limits, now: t0)
            #expect(try await store.beginRequest("k1", of: "a", limits: limits, now: t0) == .answered([1, 2, 3]))
            #expect(try await store.beginRequest("k1", of: "b", limits: limits, now: t0) == .started)
            // Bytes: 3 kept already, 8 more would pass 10.
            #expect(try await store.beginRequest("k2", of: "a", limits: limits, now: t0) == .started)
            try await store.finishRequest("k2", of: "a", answer: Array(repeating: 7, count: 8), limits: limits, now: t0)
            #expect(try await store.beginRequest("k2", of: "a", limits: limits, now: t0) == .answerNotKept)
            #expect(try await store.beginRequest("k3", of: "a", limits: limits, now: t0) == .started)
            guard case .refused(let reason) = try await store.beginRequest("k4", of: "a", limits: limits, now: t0) else {
                Issue.record("a fourth record of client a was not refused")
                return
            }
            #expect(reason.contains("MailboxLimits.maximumRequestRecordsPerClient"))
            // Past the window the records are gone: k1 starts again.
            #expect(try await store.beginRequest("k1", of: "a", limits: limits, now: t0.adding(.seconds(61))) == .started)
        }
    }

    @Test("request records past the window free their places, oldest first, in count across clients", arguments: MailboxStoreKind.allCases)
    func requestRecordsAgeOut(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            var limits = roomy
            limits.requestWindow = .seconds(60)
            limits.maximumRequestRecords = 100
            for index in 0..<100 {
                let client = index % 2 == 0 ? "a" : "b"
                #expect(try await store.beginRequest("k\(index)", of: client, limits: limits, now: t0.adding(.milliseconds(index))) == .started)
            }
            guard case .refused = try await store.beginRequest("full", of: "a", limits: limits, now: t0.adding(.seconds(1))) else {
                Issue.record("a 101st record was not refused")
                return
            }
            // 60.049 s after t0 the first 49 are past the window.
            let later = t0.adding(.milliseconds(60_049))
            #expect(try await store.beginRequest("k0", of: "a", limits: limits, now: later) == .started, "k0 was forgotten")
            #expect(try await store.beginRequest("k50", of: "a", limits: limits, now: later) == .running, "k50 is kept")
            #expect(try await store.beginRequest("k1", of: "b", limits: limits, now: later) == .started, "k1 was forgotten")
            #expect(try await store.beginRequest("k51", of: "b", limits: limits, now: later) == .running, "k51 is kept")
        }
    }

    @Test("a push's time to live comes back with it, and one without has none", arguments: MailboxStoreKind.allCases)
    func timeToLive(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let ends = t0.adding(.seconds(30))
            let batch = [
                MailboxMessage.Draft(clientID: "a", type: 7, payload: [1], expiresAt: ends),
                MailboxMessage.Draft(clientID: "a", type: 7, payload: [2]),
                MailboxMessage.Draft(clientID: "b", type: 7, payload: [3], expiresAt: t0),
            ]
            _ = try await store.append(batch, limits: roomy, now: t0)
            let a = try await store.messages(for: "a", after: 0, limit: 10)
            #expect(a == [
                MailboxMessage(clientID: "a", sequence: 1, type: 7, payload: [1], storedAt: t0, expiresAt: ends),
                MailboxMessage(clientID: "a", sequence: 2, type: 7, payload: [2], storedAt: t0),
            ])
            #expect(a[0].hasExpired(at: t0.adding(.seconds(29))) == false)
            #expect(a[0].hasExpired(at: ends))
            #expect(a[1].hasExpired(at: t0.adding(.seconds(86_400))) == false)
            #expect(try await store.messages(for: "b", after: 0, limit: 10).map(\.expiresAt) == [t0])
        }
    }

    @Test("acknowledging deletes through the sequence and only moves forward", arguments: MailboxStoreKind.allCases)
    func acknowledge(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            _ = try await store.append(drafts("a", count: 5) + drafts("b", count: 2), limits: roomy, now: t0)
            try await store.acknowledge("a", through: 3)
            #expect(try await store.sequences(of: "a") == [4, 5])
            #expect(try await store.sequences(of: "b") == [1, 2])
            #expect(try await store.summary(of: "a") == MailboxSummary(lastSequence: 5, acknowledged: 3, lostThrough: 0, lossReason: nil, count: 2))

            try await store.acknowledge("a", through: 1)
            try await store.acknowledge("a", through: 3)
            #expect(try await store.summary(of: "a").acknowledged == 3)
            #expect(try await store.sequences(of: "a") == [4, 5])

            try await store.acknowledge("nobody", through: 10)
            #expect(try await store.clientIDs().sorted() == ["a", "b"])
        }
    }

    @Test("acknowledging above the last sequence counts as the last sequence", arguments: MailboxStoreKind.allCases)
    func acknowledgeClamps(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            _ = try await store.append(drafts("a", count: 3), limits: roomy, now: t0)
            try await store.acknowledge("a", through: 1_000)
            #expect(try await store.summary(of: "a") == MailboxSummary(lastSequence: 3, acknowledged: 3, lostThrough: 0, lossReason: nil, count: 0))
            try await store.acknowledge("a", through: .max)
            #expect(try await store.summary(of: "a").acknowledged == 3)
            #expect(try await store.append(drafts("a", count: 2), limits: roomy, now: t0) == [4, 5])
            #expect(try await store.sequences(of: "a") == [4, 5], "the clamped acknowledgement must not cover later messages")
        }
    }

    @Test("sequences continue after everything was acknowledged, never reused", arguments: MailboxStoreKind.allCases)
    func neverReused(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            _ = try await store.append(drafts("a", count: 4), limits: roomy, now: t0)
            try await store.acknowledge("a", through: 4)
            #expect(try await store.sequences(of: "a") == [])
            #expect(try await store.append(drafts("a", count: 2), limits: roomy, now: t0) == [5, 6])
            #expect(try await store.summary(of: "a") == MailboxSummary(lastSequence: 6, acknowledged: 4, lostThrough: 0, lossReason: nil, count: 2))
        }
    }

    @Test("overflow drops the oldest and records the loss", arguments: MailboxStoreKind.allCases)
    func overflow(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let limits = MailboxLimits(maximumMessages: 3, maximumAge: nil)
            #expect(try await store.append(drafts("a", count: 2), limits: limits, now: t0) == [1, 2])
            #expect(try await store.summary(of: "a", limits: limits).lossReason == nil)

            #expect(try await store.append(drafts("a", count: 3) + drafts("b", count: 1), limits: limits, now: t0) == [3, 4, 5, 1])
            #expect(try await store.sequences(of: "a") == [3, 4, 5])
            #expect(try await store.summary(of: "a", limits: limits) == MailboxSummary(lastSequence: 5, acknowledged: 0, lostThrough: 2, lossReason: .overflow, count: 3))
            #expect(try await store.summary(of: "b", limits: limits) == MailboxSummary(lastSequence: 1, acknowledged: 0, lostThrough: 0, lossReason: nil, count: 1))

            // Acknowledged messages leave room: nothing more is lost until the bound is passed again.
            try await store.acknowledge("a", through: 4)
            _ = try await store.append(drafts("a", count: 2), limits: limits, now: t0)
            #expect(try await store.summary(of: "a", limits: limits).lostThrough == 2)
            _ = try await store.append(drafts("a", count: 2), limits: limits, now: t0)
            #expect(try await store.sequences(of: "a") == [7, 8, 9])
            #expect(try await store.summary(of: "a", limits: limits) == MailboxSummary(lastSequence: 9, acknowledged: 4, lostThrough: 6, lossReason: .overflow, count: 3))

            // One batch larger than the bound keeps only its newest.
            #expect(try await store.append(drafts("c", count: 10), limits: limits, now: t0) == Array(1...10))
            #expect(try await store.sequences(of: "c") == [8, 9, 10])
            #expect(try await store.summary(of: "c", limits: limits).lostThrough == 7)

            // A zero bound keeps nothing; a tighter bound at open drops down to it.
            _ = try await store.append(drafts("d", count: 2), limits: MailboxLimits(maximumMessages: 0, maximumAge: nil), now: t0)
            #expect(try await store.summary(of: "d") == MailboxSummary(lastSequence: 2, acknowledged: 0, lostThrough: 2, lossReason: .overflow, count: 0))
            #expect(try await store.summary(of: "c", limits: MailboxLimits(maximumMessages: 1, maximumAge: nil)) == MailboxSummary(lastSequence: 10, acknowledged: 0, lostThrough: 9, lossReason: .overflow, count: 1))
        }
    }

    @Test("messages older than the age bound expire when the mailbox is written, and the loss is recorded", arguments: MailboxStoreKind.allCases)
    func expiry(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let limits = MailboxLimits(maximumMessages: 100, maximumAge: .seconds(60))
            _ = try await store.append(drafts("a", count: 2), limits: limits, now: t0)
            _ = try await store.append(drafts("a", count: 2), limits: limits, now: t0.adding(.seconds(30)))
            _ = try await store.append(drafts("b", count: 1), limits: limits, now: t0)

            // Exactly at the bound is still allowed.
            _ = try await store.append([draft("a")], limits: limits, now: t0.adding(.seconds(60)))
            #expect(try await store.sequences(of: "a") == [1, 2, 3, 4, 5])

            _ = try await store.append([draft("a")], limits: limits, now: t0.adding(.milliseconds(60_001)))
            #expect(try await store.sequences(of: "a") == [3, 4, 5, 6])
            // Only the mailboxes an append touches are pruned.
            #expect(try await store.sequences(of: "b") == [1])

            let later = t0.adding(.seconds(90))
            let summary = try await store.openMailbox(for: "a", limits: limits, now: later)
            #expect(summary.withoutEpoch == MailboxSummary(lastSequence: 6, acknowledged: 0, lostThrough: 2, lossReason: .expired, count: 4))

            // Expiry first, then overflow: the later reason is the one kept.
            let tight = MailboxLimits(maximumMessages: 1, maximumAge: .seconds(60))
            _ = try await store.append([draft("a")], limits: tight, now: t0.adding(.seconds(91)))
            #expect(try await store.sequences(of: "a") == [7])
            #expect(try await store.summary(of: "a", limits: tight, now: t0.adding(.seconds(91))) == MailboxSummary(lastSequence: 7, acknowledged: 0, lostThrough: 6, lossReason: .overflow, count: 1))
        }
    }

    @Test("opening a mailbox registers a new client with an empty summary", arguments: MailboxStoreKind.allCases)
    func openRegisters(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            #expect(try await store.clientIDs().isEmpty)
            let summary = try await store.summary(of: "fresh")
            #expect(summary == MailboxSummary(lastSequence: 0, acknowledged: 0, lostThrough: 0, lossReason: nil, count: 0))
            #expect(summary.firstAvailable == 1)
            #expect(try await store.clientIDs() == ["fresh"])
            #expect(try await store.summary(of: "fresh") == summary)
            #expect(try await store.append([draft("fresh")], limits: roomy, now: t0) == [1])
            #expect(try await store.clientIDs() == ["fresh"])
        }
    }

    @Test("opening a mailbox drops what is older than the age bound", arguments: MailboxStoreKind.allCases)
    func openExpires(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            _ = try await store.append(drafts("a", count: 3), limits: roomy, now: t0)
            _ = try await store.append(drafts("a", count: 2), limits: roomy, now: t0.adding(.seconds(10)))
            let limits = MailboxLimits(maximumMessages: 100, maximumAge: .seconds(5))

            let summary = try await store.openMailbox(for: "a", limits: limits, now: t0.adding(.seconds(12)))
            #expect(summary.withoutEpoch == MailboxSummary(lastSequence: 5, acknowledged: 0, lostThrough: 3, lossReason: .expired, count: 2))
            #expect(summary.firstAvailable == 4)
            #expect(try await store.sequences(of: "a") == [4, 5])

            let all = try await store.openMailbox(for: "a", limits: limits, now: t0.adding(.seconds(100)))
            #expect(all.withoutEpoch == MailboxSummary(lastSequence: 5, acknowledged: 0, lostThrough: 5, lossReason: .expired, count: 0))
            #expect(try await store.sequences(of: "a") == [])
        }
    }

    @Test("firstAvailable is just above the higher of the acknowledged and lost sequences", arguments: MailboxStoreKind.allCases)
    func firstAvailable(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let limits = MailboxLimits(maximumMessages: 4, maximumAge: nil)
            _ = try await store.append(drafts("a", count: 6), limits: limits, now: t0)
            var summary = try await store.summary(of: "a", limits: limits)
            #expect(summary.lostThrough == 2)
            #expect(summary.firstAvailable == 3)
            #expect(try await store.messages(for: "a", after: 0, limit: 1).first?.sequence == summary.firstAvailable)

            try await store.acknowledge("a", through: 4)
            summary = try await store.summary(of: "a", limits: limits)
            #expect(summary.firstAvailable == 5)
            #expect(try await store.messages(for: "a", after: 0, limit: 1).first?.sequence == summary.firstAvailable)

            try await store.acknowledge("a", through: 6)
            summary = try await store.summary(of: "a", limits: limits)
            #expect(summary.firstAvailable == 7)
            #expect(summary.count == 0)
        }
    }

    @Test("appends from several tasks at once each get their client's next sequences", arguments: MailboxStoreKind.allCases)
    func concurrentAppends(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let clients = (0..<6).map { "client-\($0)" }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for clientID in clients {
                    group.addTask {
                        for round in 0..<25 {
                            let given = try await store.append(drafts(clientID, count: 2), limits: roomy, now: t0)
                            #expect(given == [UInt64(round * 2 + 1), UInt64(round * 2 + 2)])
                            _ = try await store.messages(for: clientID, after: 0, limit: 10)
                        }
                    }
                }
                try await group.waitForAll()
            }
            for clientID in clients {
                #expect(try await store.sequences(of: clientID) == Array(1...50))
            }
            #expect(Set(try await store.clientIDs()) == Set(clients))
        }
    }
}

// MARK: - Store-wide bounds and expiry, for every store

/// Bounds on the whole store, with nothing else a test would reach by accident.
private func storeWide(mailboxes: Int = 1_000, bytes: Int = 1 << 30, age: Duration? = nil) -> MailboxLimits {
    var limits = MailboxLimits(maximumMessages: 3, maximumAge: age)
    limits.maximumMailboxes = mailboxes
    limits.maximumStoredBytes = bytes
    return limits
}

/// What one message with a payload of `count` bytes counts for the byte bound.
private func size(_ count: Int) -> Int { count + MailboxLimits.messageOverhead }

@Suite("Mailbox store contract: store-wide bounds and expiry")
struct MailboxStoreBoundsTests {
    @Test("the defaults: 100,000 mailboxes, 64 MiB, 64 bytes counted per message beyond its payload")
    func defaults() {
        let limits = MailboxLimits()
        #expect(limits.maximumMailboxes == 100_000)
        #expect(limits.maximumStoredBytes == 64 * 1024 * 1024)
        #expect(MailboxLimits.messageOverhead == 64)
        #expect(MailboxConfiguration.inMemory.expiryInterval == .seconds(60))
    }

    @Test("past the mailbox bound a new client gets none, from an open or an append, and nothing changes", arguments: MailboxStoreKind.allCases)
    func mailboxBound(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let limits = storeWide(mailboxes: 2)
            _ = try await store.openMailbox(for: "a", limits: limits, now: t0)
            #expect(try await store.append([draft("b")], limits: limits, now: t0) == [1])

            let opened = await #expect(throws: TetherError.self) {
                _ = try await store.openMailbox(for: "c", limits: limits, now: t0)
            }
            #expect(opened?.code == .mailboxesFull)
            #expect(opened?.message == "the mailbox store holds its maximum of 2 mailboxes: none for new client \"c\" until idle ones expire")

            // The append touches a known client first: it is put back as it was.
            let appended = await #expect(throws: TetherError.self) {
                _ = try await store.append([draft("a"), draft("b"), draft("c")], limits: limits, now: t0)
            }
            #expect(appended?.code == .mailboxesFull)
            #expect(appended?.message == "the mailbox store holds its maximum of 2 mailboxes: none for new client \"c\" until idle ones expire")
            #expect(try await store.clientIDs().sorted() == ["a", "b"])
            #expect(try await store.sequences(of: "a") == [])
            #expect(try await store.sequences(of: "b") == [1])

            // Known clients go on as before, from their next sequence.
            #expect(try await store.append([draft("a"), draft("b")], limits: limits, now: t0) == [1, 2])
            #expect(try await store.openMailbox(for: "b", limits: limits, now: t0).lastSequence == 2)
        }
    }

    @Test("an append that would pass the byte bound stores nothing; acknowledgements and overflow make room", arguments: MailboxStoreKind.allCases)
    func byteBound(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let payload = [UInt8](repeating: 7, count: 10)
            let limits = storeWide(bytes: 4 * size(10))
            #expect(try await store.append([draft("a", 1, payload), draft("b", 1, payload), draft("a", 1, payload)], limits: limits, now: t0) == [1, 1, 2])

            let error = await #expect(throws: TetherError.self) {
                _ = try await store.append([draft("b", 1, payload), draft("c", 1, payload)], limits: limits, now: t0)
            }
            #expect(error?.code == .mailboxesFull)
            #expect(error?.message == "the mailbox store is full: 2 messages would bring it to \(5 * size(10)) bytes, beyond its maximum of \(4 * size(10)); nothing was stored")
            #expect(try await store.clientIDs().sorted() == ["a", "b"])
            #expect(try await store.sequences(of: "b") == [1])

            // Exactly at the bound is allowed.
            #expect(try await store.append([draft("b", 1, payload)], limits: limits, now: t0) == [2])
            let one = await #expect(throws: TetherError.self) {
                _ = try await store.append([draft("b", 1, [])], limits: limits, now: t0)
            }
            #expect(one?.message == "the mailbox store is full: 1 message would bring it to \(4 * size(10) + size(0)) bytes, beyond its maximum of \(4 * size(10)); nothing was stored")

            try await store.acknowledge("a", through: 1)
            #expect(try await store.append([draft("c", 1, payload)], limits: limits, now: t0) == [1])

            // A mailbox at its count bound rolls over: what it drops makes room for what it takes.
            let rolled = try await store.append([draft("b", 1, payload)], limits: MailboxLimits(maximumMessages: 2, maximumAge: nil).bounded(bytes: 4 * size(10)), now: t0)
            #expect(rolled == [3])
            #expect(try await store.sequences(of: "b") == [2, 3])
        }
    }

    @Test("expiry drops old messages everywhere, removes idle mailboxes, keeps connected ones", arguments: MailboxStoreKind.allCases)
    func expiry(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let limits = storeWide(mailboxes: 4, age: .seconds(60))
            _ = try await store.append(drafts("gone", count: 2) + drafts("kept", count: 1) + drafts("recent", count: 1), limits: limits, now: t0)
            _ = try await store.openMailbox(for: "silent", limits: limits, now: t0)
            _ = try await store.append(drafts("recent", count: 1), limits: limits, now: t0.adding(.seconds(50)))
            #expect(try await store.clientIDs().sorted() == ["gone", "kept", "recent", "silent"])

            // Exactly at the bound nothing goes.
            #expect(try await store.removeExpired(limits: limits, now: t0.adding(.seconds(60)), keeping: []) == [])
            #expect(try await store.sequences(of: "gone") == [1, 2])

            let now = t0.adding(.milliseconds(60_001))
            let removed = try await store.removeExpired(limits: limits, now: now, keeping: ["kept"])
            #expect(removed.sorted() == ["gone", "silent"])
            #expect(try await store.clientIDs().sorted() == ["kept", "recent"])
            #expect(try await store.sequences(of: "gone") == [])
            // Kept mailboxes lose what expired, and are told.
            #expect(try await store.sequences(of: "kept") == [])
            #expect(try await store.openMailbox(for: "kept", limits: limits, now: now).withoutEpoch == MailboxSummary(lastSequence: 1, acknowledged: 0, lostThrough: 1, lossReason: .expired, count: 0))
            #expect(try await store.sequences(of: "recent") == [2])
            #expect(try await store.openMailbox(for: "recent", limits: limits, now: now).withoutEpoch == MailboxSummary(lastSequence: 2, acknowledged: 0, lostThrough: 1, lossReason: .expired, count: 1))

            // The freed places take new clients; a removed client starts again from 1.
            #expect(try await store.append([draft("gone"), draft("new")], limits: limits, now: now) == [1, 1])

            // Being kept, or opened, starts a mailbox's idle time again.
            let later = now.adding(.seconds(60))
            #expect(try await store.removeExpired(limits: limits, now: later, keeping: []) == [])
            #expect(try await store.removeExpired(limits: limits, now: later.adding(.seconds(60)), keeping: ["new"]).sorted() == ["gone", "kept", "recent"])
            #expect(try await store.removeExpired(limits: limits, now: later.adding(.seconds(120)), keeping: []) == [])
            #expect(try await store.clientIDs() == ["new"])

            // Without an age bound nothing expires.
            #expect(try await store.removeExpired(limits: storeWide(), now: later.adding(.seconds(10_000)), keeping: []) == [])
            #expect(try await store.clientIDs() == ["new"])
        }
    }

    @Test("bytes of removed and expired mailboxes are given back to the byte bound", arguments: MailboxStoreKind.allCases)
    func expiryFreesBytes(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let payload = [UInt8](repeating: 1, count: 100)
            let limits = storeWide(bytes: 2 * size(100), age: .seconds(10))
            _ = try await store.append([draft("a", 1, payload), draft("b", 1, payload)], limits: limits, now: t0)
            await #expect(throws: TetherError.self) {
                _ = try await store.append([draft("b", 1, payload)], limits: limits, now: t0.adding(.seconds(5)))
            }
            #expect(try await store.removeExpired(limits: limits, now: t0.adding(.seconds(11)), keeping: ["b"]) == ["a"])
            #expect(try await store.append([draft("b", 1, payload), draft("c", 1, payload)], limits: limits, now: t0.adding(.seconds(11))) == [2, 1])
        }
    }

    @Test("a mailbox's epoch stays through appends, acknowledgements, losses and opens; a mailbox made again after removal, or in another store, has another", arguments: MailboxStoreKind.allCases)
    func epochs(kind: MailboxStoreKind) async throws {
        try await withStore(kind) { store async throws in
            let limits = storeWide(age: .seconds(60))
            _ = try await store.append(drafts("a", count: 5), limits: limits, now: t0)
            let epoch = try #require(try await store.openMailbox(for: "a", limits: limits, now: t0).epoch)
            #expect(!epoch.isEmpty)
            try await store.acknowledge("a", through: 1)
            _ = try await store.append(drafts("a", count: 2), limits: limits, now: t0.adding(.seconds(30)))
            let later = try await store.openMailbox(for: "a", limits: limits, now: t0.adding(.seconds(61)))
            #expect(later.lossReason == .expired, "messages were dropped meanwhile: the history goes on")
            #expect(later.epoch == epoch)
            #expect(try await store.removeExpired(limits: limits, now: t0.adding(.seconds(62)), keeping: []) == [])
            #expect(try await store.openMailbox(for: "a", limits: limits, now: t0.adding(.seconds(62))).epoch == epoch)

            // Opened first or written first, each client's mailbox has an epoch of its own.
            let opened = try #require(try await store.openMailbox(for: "b", limits: limits, now: t0).epoch)
            #expect(try await store.append([draft("b")], limits: limits, now: t0.adding(.seconds(1))) == [1])
            #expect(try await store.openMailbox(for: "b", limits: limits, now: t0.adding(.seconds(1))).epoch == opened)
            #expect(opened != epoch)

            // Removed as idle: the client starts again from 1, in a history of another epoch.
            #expect(try await store.removeExpired(limits: limits, now: t0.adding(.seconds(200)), keeping: []).sorted() == ["a", "b"])
            #expect(try await store.append([draft("a")], limits: limits, now: t0.adding(.seconds(200))) == [1])
            let again = try #require(try await store.openMailbox(for: "a", limits: limits, now: t0.adding(.seconds(200))).epoch)
            #expect(again != epoch)

            // Another store, as after a wipe or a restart in memory: another epoch for the same client.
            try await withStore(kind) { other async throws in
                _ = try await other.append(drafts("a", count: 5), limits: limits, now: t0)
                let elsewhere = try #require(try await other.openMailbox(for: "a", limits: limits, now: t0).epoch)
                #expect(elsewhere != epoch)
                #expect(elsewhere != again)
            }
        }
    }
}

private extension MailboxLimits {
    func bounded(bytes: Int) -> MailboxLimits {
        var limits = self
        limits.maximumStoredBytes = bytes
        return limits
    }
}

// MARK: - SQLite only

/// Runs SQL on a file through a separate connection, as another program would.
private func runSQL(_ path: String, _ sql: String) throws {
    var database: OpaquePointer?
    defer { _ = sqlite3_close_v2(database) }
    guard sqlite3_open_v2(path, &database, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK,
          sqlite3_exec(database, sql, nil, nil, nil) == SQLITE_OK
    else {
        throw SQLError(message: String(cString: sqlite3_errmsg(database)))
    }
}

private struct SQLError: Error { var message: String }

/// Deterministic "random" bytes (SplitMix64).
private func noise(count: Int, seed: UInt64) -> [UInt8] {
    var state = seed
    return (0..<count).map { _ in
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return UInt8(truncatingIfNeeded: z ^ (z >> 31))
    }
}

private func bytes(of path: String) throws -> [UInt8] {
    [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
}

private func write(_ bytes: [UInt8], to path: String) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

private func fileExists(_ path: String) -> Bool {
    FileManager.default.fileExists(atPath: path)
}

/// Opening `path` must fail with `storeFailed`; returns the message.
private func openingFails(_ path: String, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
    let error = #expect(throws: TetherError.self, sourceLocation: sourceLocation) {
        _ = try SQLiteMailboxStore(path: path)
    }
    #expect(error?.code == .storeFailed, sourceLocation: sourceLocation)
    #expect(error?.message.contains(path) == true, "\(error?.message ?? "")", sourceLocation: sourceLocation)
    return error?.message
}

@Suite("SQLite mailbox store")
struct SQLiteMailboxStoreTests {
    @Test("everything survives closing the store and opening the file again")
    func reopen() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        let limits = MailboxLimits(maximumMessages: 3, maximumAge: nil)

        var store: SQLiteMailboxStore? = try SQLiteMailboxStore(path: path)
        _ = try await store!.append(drafts("a", count: 4) + [draft("b", 42, Array("hello".utf8))], limits: limits, now: t0)
        try await store!.acknowledge("a", through: 3)
        _ = try await store!.openMailbox(for: "c", limits: limits, now: t0)
        let before = try await store!.messages(for: "a", after: 0, limit: 100) + store!.messages(for: "b", after: 0, limit: 100)
        store = nil
        #expect(!fileExists(path + "-wal"), "closing the last connection merges and removes the log")

        let reopened = try SQLiteMailboxStore(path: path, synchronous: .full)
        #expect(try await reopened.clientIDs().sorted() == ["a", "b", "c"])
        #expect(try await reopened.summary(of: "a", limits: limits) == MailboxSummary(lastSequence: 4, acknowledged: 3, lostThrough: 1, lossReason: .overflow, count: 1))
        #expect(try await reopened.summary(of: "c", limits: limits) == MailboxSummary(lastSequence: 0, acknowledged: 0, lostThrough: 0, lossReason: nil, count: 0))
        let after = try await reopened.messages(for: "a", after: 0, limit: 100) + reopened.messages(for: "b", after: 0, limit: 100)
        #expect(after == before)
        #expect(try await reopened.append([draft("a"), draft("b")], limits: limits, now: t0) == [5, 2])
    }

    @Test("an empty file is initialised as a new store")
    func emptyFile() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        try write([], to: path)
        let store = try SQLiteMailboxStore(path: path)
        #expect(try await store.append([draft("a")], limits: roomy, now: t0) == [1])
    }

    @Test("a file of random bytes is refused, naming the file")
    func garbage() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        let content = noise(count: 64 * 1024, seed: 7)
        try write(content, to: path)
        let message = openingFails(path)
        #expect(message == "mailbox store \(path) is not a usable database: file is not a database")
        #expect(try bytes(of: path) == content, "the file is left as it was")
    }

    @Test("a store file cut to half its size is refused")
    func truncated() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        do {
            let store = try SQLiteMailboxStore(path: path)
            for client in 0..<4 {
                _ = try await store.append(
                    (0..<500).map { draft("client-\(client)", UInt32($0), noise(count: 64, seed: UInt64($0))) },
                    limits: roomy,
                    now: t0
                )
            }
        }
        // Closing the last connection checkpointed the log into the file and removed it.
        for companion in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + companion) }
        let whole = try bytes(of: path)
        #expect(whole.count >= 32 * 4096, "the store spans many pages")
        try write(Array(whole.prefix(whole.count / 2)), to: path)

        // The header records the database's size in pages, and SQLite refuses a file shorter
        // than that at the first read (here, of the application id), before quick_check runs.
        // Any cut at a page boundary or not is found this way, as long as the header survives.
        let message = openingFails(path)
        #expect(message == "mailbox store \(path) is not a usable database: database disk image is malformed")
    }

    @Test("a damaged page in the middle of the file is found by the check at opening")
    func damagedPage() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        do {
            let store = try SQLiteMailboxStore(path: path)
            _ = try await store.append((0..<2_000).map { draft("client", UInt32($0), noise(count: 64, seed: UInt64($0))) }, limits: roomy, now: t0)
        }
        var content = try bytes(of: path)
        let pageSize = 4096
        #expect(content.count >= 32 * pageSize)
        // Overwrite a page in the middle with noise, leaving the header and the schema sound.
        let page = content.count / pageSize / 2
        content.replaceSubrange(page * pageSize..<(page + 1) * pageSize, with: noise(count: pageSize, seed: 99))
        try write(content, to: path)

        let message = try #require(openingFails(path))
        #expect(message.hasPrefix("mailbox store \(path) is not a usable database: quick_check found "))
    }

    @Test("a SQLite database of another application is refused and left as it was")
    func foreign() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }

        let notes = directory.file("notes.sqlite")
        try runSQL(notes, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('keep me');")
        let content = try bytes(of: notes)
        #expect(openingFails(notes) == "mailbox store \(notes) is not a Tether mailbox store: it holds another application's tables")
        #expect(try bytes(of: notes) == content)
        #expect(!fileExists(notes + "-wal"))

        let tagged = directory.file("tagged.sqlite")
        try runSQL(tagged, "PRAGMA application_id = 305419896;")
        #expect(openingFails(tagged) == "mailbox store \(tagged) is not a Tether mailbox store: it belongs to another application (application_id 0x12345678)")
    }

    @Test("a store of another schema version is refused")
    func newerSchema() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        _ = try SQLiteMailboxStore(path: path)
        try runSQL(path, "PRAGMA user_version = 5;")
        #expect(openingFails(path) == "mailbox store \(path) has schema version 5; this version of Tether reads version 4")
    }

    @Test("a file that cannot be created is refused")
    func missingDirectory() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("absent/mail.sqlite")
        #expect(openingFails(path) == "mailbox store \(path) could not be opened: unable to open database file")
    }

    @Test("the store-wide counts are taken again when the file is opened again")
    func boundsAfterReopen() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        let payload = [UInt8](repeating: 1, count: 10)
        var limits = MailboxLimits(maximumMessages: 100, maximumAge: nil)
        limits.maximumMailboxes = 2
        limits.maximumStoredBytes = 3 * (10 + MailboxLimits.messageOverhead)
        do {
            let store = try SQLiteMailboxStore(path: path)
            _ = try await store.append([draft("a", 1, payload), draft("b", 1, payload), draft("a", 1, payload)], limits: limits, now: t0)
        }
        let reopened = try SQLiteMailboxStore(path: path)
        let opened = await #expect(throws: TetherError.self) {
            _ = try await reopened.openMailbox(for: "c", limits: limits, now: t0)
        }
        #expect(opened?.code == .mailboxesFull)
        let appended = await #expect(throws: TetherError.self) {
            _ = try await reopened.append([draft("b", 1, payload)], limits: limits, now: t0)
        }
        #expect(appended?.code == .mailboxesFull)
        try await reopened.acknowledge("a", through: 1)
        #expect(try await reopened.append([draft("b", 1, payload)], limits: limits, now: t0) == [2])
    }

    @Test("a store of schema version 1 is upgraded in place: its mailboxes stay, idle from the upgrade")
    func upgradeFromVersion1() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        try runSQL(path, """
            CREATE TABLE clients (
                id TEXT PRIMARY KEY NOT NULL,
                last_sequence INTEGER NOT NULL DEFAULT 0,
                acknowledged INTEGER NOT NULL DEFAULT 0,
                lost_through INTEGER NOT NULL DEFAULT 0,
                loss_reason TEXT
            ) WITHOUT ROWID;
            CREATE TABLE messages (
                client TEXT NOT NULL,
                sequence INTEGER NOT NULL,
                type INTEGER NOT NULL,
                payload BLOB NOT NULL,
                stored_at INTEGER NOT NULL,
                PRIMARY KEY (client, sequence)
            ) WITHOUT ROWID;
            INSERT INTO clients (id, last_sequence, acknowledged) VALUES ('old', 2, 1);
            INSERT INTO messages VALUES ('old', 2, 5, x'0102', \(t0.millisecondsSince1970));
            PRAGMA application_id = 1414349400;
            PRAGMA user_version = 1;
            """)
        let store = try SQLiteMailboxStore(path: path)
        #expect(try await store.messages(for: "old", after: 0, limit: 10) == [
            MailboxMessage(clientID: "old", sequence: 2, type: 5, payload: [1, 2], storedAt: t0),
        ])
        // The message is older than the bound; the mailbox counts as active since the upgrade.
        let limits = MailboxLimits(maximumMessages: 100, maximumAge: .seconds(60))
        #expect(try await store.removeExpired(limits: limits, now: t0.adding(.seconds(61)), keeping: []) == [])
        #expect(try await store.summary(of: "old", limits: limits, now: t0.adding(.seconds(61))) == MailboxSummary(lastSequence: 2, acknowledged: 1, lostThrough: 2, lossReason: .expired, count: 0))
        #expect(try await store.append([draft("old")], limits: limits, now: t0.adding(.seconds(61))) == [3])
    }

    @Test("each mailbox's epoch survives closing the store and opening the file again")
    func epochAfterReopen() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        var store: SQLiteMailboxStore? = try SQLiteMailboxStore(path: path)
        _ = try await store!.append(drafts("a", count: 3), limits: roomy, now: t0)
        let a = try #require(try await store!.openMailbox(for: "a", limits: roomy, now: t0).epoch)
        let b = try #require(try await store!.openMailbox(for: "b", limits: roomy, now: t0).epoch)
        #expect(a != b)
        store = nil

        let reopened = try SQLiteMailboxStore(path: path)
        #expect(try await reopened.openMailbox(for: "a", limits: roomy, now: t0).epoch == a)
        #expect(try await reopened.openMailbox(for: "b", limits: roomy, now: t0).epoch == b)
        #expect(try await reopened.append([draft("a")], limits: roomy, now: t0) == [4])
        #expect(try await reopened.openMailbox(for: "a", limits: roomy, now: t0).epoch == a)
    }

    @Test("a store of schema version 2 is upgraded in place: its mailboxes stay, each with an epoch of its own that then stays")
    func upgradeFromVersion2() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        try runSQL(path, """
            CREATE TABLE clients (
                id TEXT PRIMARY KEY NOT NULL,
                last_sequence INTEGER NOT NULL DEFAULT 0,
                acknowledged INTEGER NOT NULL DEFAULT 0,
                lost_through INTEGER NOT NULL DEFAULT 0,
                loss_reason TEXT,
                active_at INTEGER NOT NULL DEFAULT 0
            ) WITHOUT ROWID;
            CREATE TABLE messages (
                client TEXT NOT NULL,
                sequence INTEGER NOT NULL,
                type INTEGER NOT NULL,
                payload BLOB NOT NULL,
                stored_at INTEGER NOT NULL,
                PRIMARY KEY (client, sequence)
            ) WITHOUT ROWID;
            INSERT INTO clients (id, last_sequence, acknowledged, active_at) VALUES ('old', 2, 1, \(t0.millisecondsSince1970));
            INSERT INTO clients (id, last_sequence, active_at) VALUES ('other', 0, \(t0.millisecondsSince1970));
            INSERT INTO messages VALUES ('old', 2, 5, x'0102', \(t0.millisecondsSince1970));
            PRAGMA application_id = 1414349400;
            PRAGMA user_version = 2;
            """)
        var store: SQLiteMailboxStore? = try SQLiteMailboxStore(path: path)
        #expect(try await store!.messages(for: "old", after: 0, limit: 10) == [
            MailboxMessage(clientID: "old", sequence: 2, type: 5, payload: [1, 2], storedAt: t0),
        ])
        let old = try await store!.openMailbox(for: "old", limits: roomy, now: t0)
        #expect(old.withoutEpoch == MailboxSummary(lastSequence: 2, acknowledged: 1, lostThrough: 0, lossReason: nil, count: 1))
        let epoch = try #require(old.epoch)
        #expect(epoch.count == 32)
        let other = try #require(try await store!.openMailbox(for: "other", limits: roomy, now: t0).epoch)
        #expect(other.count == 32)
        #expect(other != epoch)
        store = nil

        let reopened = try SQLiteMailboxStore(path: path)
        #expect(try await reopened.openMailbox(for: "old", limits: roomy, now: t0).epoch == epoch)
        #expect(try await reopened.append([draft("old")], limits: roomy, now: t0) == [3])
    }

    @Test("an append that fails part-way stores none of its messages and uses no sequence")
    func atomicAppend() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("mail.sqlite")
        let store = try SQLiteMailboxStore(path: path)
        _ = try await store.append(drafts("a", count: 2), limits: roomy, now: t0)

        // Another connection adds a trigger that fails the insert of a message of type 666,
        // so the batch below fails at its third message, after rows for "a" and "b" were written.
        try runSQL(path, """
            CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.type = 666
            BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END;
            """)
        let error = await #expect(throws: TetherError.self) {
            _ = try await store.append([draft("a"), draft("b"), draft("a", 666), draft("c")], limits: roomy, now: t0)
        }
        #expect(error?.code == .storeFailed)
        #expect(error?.message == "mailbox store \(path) could not append 4 messages: refused by trigger")

        #expect(try await store.clientIDs().sorted() == ["a"])
        #expect(try await store.sequences(of: "a") == [1, 2])
        #expect(try await store.sequences(of: "b") == [])
        try runSQL(path, "DROP TRIGGER refuse;")
        #expect(try await store.append([draft("b"), draft("a")], limits: roomy, now: t0) == [1, 3])
    }
}
