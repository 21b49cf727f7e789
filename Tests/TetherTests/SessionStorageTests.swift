import Synchronization
import Foundation
import Testing
@testable import Tether
import TetherTesting
import TetherSQLite

/// Sessions over a real SQLite file: mailboxes outlive the server process's `Server`.
@Suite("Sessions on SQLite", .timeLimit(.guarded))
struct SessionStorageTests {
    @Test("the server restarted on the same SQLite file while the client is offline: the mailbox is still there and replays in order")
    func restartWhileOffline() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.file("mailboxes.sqlite")
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = try .sqlite(path: file)
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        let connection = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("olga"))
        let watcher = StateWatcher(connection)
        let notifications = connection.notifications
        try await watcher.next(.connected)
        try await awaitClient("olga", on: server.server)
        for number in 0..<2 { try await server.server.push(indexed(number), toClient: "olga") }
        #expect(try await collect(2, from: notifications, "the live pushes").map(\.serial) == [1, 2])
        await connection.suspend()
        try await watcher.next(.suspended)
        for number in 2..<7 { try await server.server.push(indexed(number), toClient: "olga") }
        await server.stop()
        try await server.start()
        await connection.resume()
        try await watcher.next(.connected)
        let replayed = try await collect(5, from: notifications, "the pushes stored before the restart")
        #expect(replayed.map(index(of:)) == Array(2..<7))
        #expect(replayed.map(\.serial) == Array(3...7))
        try await server.server.push(indexed(7), toClient: "olga")
        #expect(try await collect(1, from: notifications, "a live push after the restart") == [Frame(type: 0x10, serial: 8, payload: Array("7".utf8))])
        #expect(await connection.metrics.duplicateNotifications == 0)
        await connection.close()
        await server.stop()
    }

    @Test("a client at 5 whose SQLite mailbox was removed as idle while it was away, then given 8 pushes: told reset, it gets all 8 in order")
    func mailboxRemovedWhileAway() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteMailboxStore(path: directory.file("mailboxes.sqlite"))
        let now = Mutex(MailboxTime(millisecondsSince1970: 1_700_000_000_000))
        var mailboxes = MailboxConfiguration(store: store)
        mailboxes.limits.maximumAge = .seconds(60)
        mailboxes.expiryInterval = nil
        mailboxes.clock = { now.withLock { $0 } }
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = mailboxes
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        let connection = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("pia"))
        let watcher = StateWatcher(connection)
        let notifications = connection.notifications
        let events = connection.sessionEvents
        try await watcher.next(.connected)
        try await awaitClient("pia", on: server.server)
        for number in 0..<5 { try await server.server.push(indexed(number), toClient: "pia") }
        #expect(try await collect(5, from: notifications, "the pushes of the first history").map(\.serial) == [1, 2, 3, 4, 5])
        let epoch = try #require(await connection.sessionEpoch)
        let serverEvents = server.server.events
        await connection.suspend()
        try await watcher.next(.suspended)
        // The client is gone for the server too before its mailbox ages out, as it would be
        // after a day away: an acknowledgement still on its way from the old connection
        // would otherwise land on the new history (acknowledgements carry no epoch).
        _ = try await firstEvent(serverEvents, "the server to see pia leave") { $0.kind == .peerDisconnected && $0.clientID == "pia" }

        // Idle for longer than the age bound: the mailbox goes, and a new one takes 8 pushes.
        let later = now.withLock { time in
            time = time.adding(.seconds(61))
            return time
        }
        #expect(try await store.removeExpired(limits: mailboxes.limits, now: later, keeping: []) == ["pia"])
        for number in 100..<108 { try await server.server.push(indexed(number), toClient: "pia") }
        await connection.resume()
        try await watcher.next(.connected)

        let first = try await collect(3, from: notifications, "the start of the new history")
        try #require(first.map(\.serial) == [1, 2, 3], "the new history's first pushes must not be taken for ones already seen")
        let rest = try await collect(5, from: notifications, "the rest of the new history")
        #expect((first + rest).map(index(of:)) == Array(100..<108))
        #expect(try await collect(2, from: events, "the events of the welcome") == [
            SessionEvent(kind: .reset, lastSequence: 0, serverSequence: 8),
            SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 8),
        ])
        #expect(await connection.sessionEpoch != epoch)
        #expect(await connection.lastSequence == 8)
        await connection.close()
        await server.stop()
    }

    @Test("pushes with a time to live on SQLite: a connected client gets one at once; one whose time passed while the client was away is skipped on resume, the client told of the gap, and the others arrive in order")
    func timeToLive() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let now = Mutex(MailboxTime(millisecondsSince1970: 1_700_000_000_000))
        var mailboxes = MailboxConfiguration(store: try SQLiteMailboxStore(path: directory.file("mailboxes.sqlite")))
        mailboxes.expiryInterval = nil
        mailboxes.clock = { now.withLock { $0 } }
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = mailboxes
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        let connection = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("tia"))
        let watcher = StateWatcher(connection)
        let notifications = connection.notifications
        let events = connection.sessionEvents
        try await watcher.next(.connected)
        try await awaitClient("tia", on: server.server)
        #expect(try await server.server.push(indexed(0), toClient: "tia", timeToLive: .seconds(10)) == 1)
        #expect(try await collect(1, from: notifications, "the live push").map(index(of:)) == [0])
        let serverEvents = server.server.events
        await connection.suspend()
        try await watcher.next(.suspended)
        _ = try await firstEvent(serverEvents, "the server to see tia leave") { $0.kind == .peerDisconnected && $0.clientID == "tia" }

        try await server.server.push(indexed(1), toClient: "tia")
        try await server.server.push(indexed(2), toClients: ["tia"], timeToLive: .seconds(10))
        try await server.server.push(indexed(3), toClient: "tia", timeToLive: .seconds(60))
        try await server.server.push(indexed(4), toClient: "tia")
        now.withLock { $0 = $0.adding(.seconds(11)) }
        await connection.resume()
        try await watcher.next(.connected)
        let replayed = try await collect(3, from: notifications, "the pushes still alive")
        #expect(replayed.map(index(of:)) == [1, 3, 4])
        #expect(replayed.map(\.serial) == [2, 4, 5])
        let gap = try await collect(1, from: events.filter { $0.kind == .gap }, "the gap of the expired push")
        #expect(gap.first?.missed == 3...3)
        #expect(await connection.lastSequence == 5)
        await connection.close()
        await server.stop()
    }

    @Test("a corrupt or truncated store file is a clear error when the server is configured, and the file is left as it was")
    func corruptFile() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let garbage = directory.file("garbage.sqlite")
        let bytes = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7919) })
        try bytes.write(to: URL(fileURLWithPath: garbage))
        let error = #expect(throws: TetherError.self) { try MailboxConfiguration.sqlite(path: garbage) }
        #expect(error?.code == .storeFailed)
        #expect(error?.message == "mailbox store \(garbage) is not a usable database: file is not a database")
        #expect(try Data(contentsOf: URL(fileURLWithPath: garbage)) == bytes)

        // A real store with many pages, cut in half.
        let truncated = directory.file("truncated.sqlite")
        do {
            let store = try SQLiteMailboxStore(path: truncated)
            let drafts = (0..<2000).map { MailboxMessage.Draft(clientID: "c\($0 % 10)", type: 0x10, payload: Array(repeating: 0x61, count: 200)) }
            _ = try await store.append(drafts, limits: MailboxLimits(), now: MailboxTime(millisecondsSince1970: 0))
        }
        let size = try #require(try FileManager.default.attributesOfItem(atPath: truncated)[.size] as? Int)
        let handle = try #require(FileHandle(forWritingAtPath: truncated))
        try handle.truncate(atOffset: UInt64(size / 2))
        try handle.close()
        let cut = #expect(throws: TetherError.self) { try MailboxConfiguration.sqlite(path: truncated) }
        #expect(cut?.code == .storeFailed)
        #expect(cut?.message.hasPrefix("mailbox store \(truncated) ") == true)
        #expect(cut?.message.contains("malformed") == true)
    }
}
