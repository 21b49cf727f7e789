import Testing
@testable import Tether
import TetherTesting
import TetherSQLite
import Synchronization

/// The mailbox stores the delivery tests run against.
enum DeliveryStore: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inMemory, sqlite

    var testDescription: String { rawValue }

    /// A fresh store of this kind; an SQLite file goes in `directory`.
    func make(in directory: TemporaryDirectory) throws -> any MailboxStore {
        switch self {
        case .inMemory: InMemoryMailboxStore()
        case .sqlite: try SQLiteMailboxStore(path: directory.file("mailboxes.sqlite"))
        }
    }
}

/// A sequenced push counts as delivered, and is acknowledged, only once a subscriber whose
/// filter takes it has it.
@Suite("Pushes held for a matching subscriber", .timeLimit(.guarded))
struct HeldPushTests {
    @Test("a stored 0x20 push replayed while only a 0x21 subscriber exists is held, not counted or acknowledged, and reaches a 0x20 subscriber made later", arguments: DeliveryStore.allCases)
    func heldUntilMatched(_ kind: DeliveryStore) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = WatchedMailboxStore(try kind.make(in: directory))
        try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: echoHandlers) { server, endpoint in
            let stored = Frame(type: 0x20, serial: 0, payload: Array("stored".utf8))
            #expect(try await server.push(stored, toClient: "bob") == 1)
            let connection = Connection(to: endpoint, configuration: sessionConfiguration("bob") {
                $0.session?.acknowledgeEvery = 1
            })
            let others = connection.notifications(ofType: 0x21)
            try await connection.connect()
            #expect(try await server.push(Frame(type: 0x21, serial: 0, payload: Array("live".utf8)), toClient: "bob") == 2)
            // The replay of 1 comes before the live 2 on the wire: when 2 is here, 1 was handled.
            #expect(try await collect(1, from: others, "the live 0x21 push") == [Frame(type: 0x21, serial: 2, payload: Array("live".utf8))])
            #expect(await connection.lastSequence == 0)
            #expect(await connection.metrics.duplicateNotifications == 0)

            let late = connection.notifications(ofType: 0x20)
            #expect(try await collect(1, from: late, "the held 0x20 push") == [Frame(type: 0x20, serial: 1, payload: Array("stored".utf8))])
            // Acknowledged only once counted as delivered.
            try await awaitAcknowledged(2, by: "bob", in: store)
            #expect(await connection.lastSequence == 2)
            #expect(try await store.messages(for: "bob", after: 0, limit: 10).isEmpty)
            await connection.close()
        }
    }

    @Test("a push no subscriber took is never acknowledged: after the app closes, the next connection gets it again", arguments: DeliveryStore.allCases)
    func unmatchedIsRedelivered(_ kind: DeliveryStore) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = WatchedMailboxStore(try kind.make(in: directory))
        try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: echoHandlers) { server, endpoint in
            #expect(try await server.push(Frame(type: 0x20, serial: 0, payload: Array("stored".utf8)), toClient: "bob") == 1)
            let first = Connection(to: endpoint, configuration: sessionConfiguration("bob") {
                $0.session?.acknowledgeEvery = 1
            })
            let others = first.notifications(ofType: 0x21)
            try await first.connect()
            #expect(try await server.push(Frame(type: 0x21, serial: 0, payload: Array("live".utf8)), toClient: "bob") == 2)
            #expect(try await collect(1, from: others, "the live 0x21 push").map(\.serial) == [2])
            let saved = await first.lastSequence
            #expect(saved == 0)
            await first.close()

            let second = Connection(to: endpoint, configuration: sessionConfiguration("bob") {
                $0.session?.resumeAfter = saved
            })
            let everything = second.notifications
            try await second.connect()
            #expect(try await collect(2, from: everything, "the pushes after \(saved)") == [
                Frame(type: 0x20, serial: 1, payload: Array("stored".utf8)),
                Frame(type: 0x21, serial: 2, payload: Array("live".utf8)),
            ])
            try await awaitAcknowledged(2, by: "bob", in: store)
            await second.close()
        }
    }

    @Test("with the hold full, later sequenced pushes are turned away unacknowledged; once taken, the next connection sends the rest again")
    func holdLimit() async throws {
        let store = WatchedMailboxStore(InMemoryMailboxStore())
        try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: echoHandlers) { server, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = Connection(to: proxy.endpoint, configuration: sessionConfiguration("ann") {
                    $0.session?.maximumHeldPushes = 3
                    $0.session?.acknowledgeEvery = 1
                })
                let others = connection.notifications(ofType: 0x21)
                let pushes = connection.frames.filter { $0.type == 0x20 || $0.type == 0x21 }
                try await connection.connect()
                for number in 1...5 { try await server.push(Frame(type: 0x20, serial: 0, payload: Array("\(number)".utf8)), toClient: "ann") }
                try await server.push(Frame(type: 0x21, serial: 0, payload: Array("6".utf8)), toClient: "ann")
                #expect(try await collect(6, from: pushes, "the six pushes").map(\.serial) == [1, 2, 3, 4, 5, 6])
                #expect(await connection.metrics.notificationsReceived == 6)
                #expect(await connection.notificationFeed.heldCountForTesting == 3)
                #expect(await connection.metrics.heldNotifications == 3)
                #expect(await connection.metrics.notificationsTurnedAway == 3)
                #expect(await connection.lastSequence == 0)

                let late = connection.notifications(ofType: 0x20)
                #expect(try await collect(3, from: late, "the held pushes").map(\.serial) == [1, 2, 3])
                try await awaitAcknowledged(3, by: "ann", in: store)
                #expect(await connection.lastSequence == 3)
                // 4, 5 and 6 were turned away: the next connection replays them.
                proxy.cutAll()
                #expect(try await collect(2, from: late, "the rest of the 0x20 pushes").map(\.serial) == [4, 5])
                #expect(try await collect(1, from: others, "the 0x21 push").map(\.serial) == [6])
                try await awaitAcknowledged(6, by: "ann", in: store)
                #expect(await connection.lastSequence == 6)
                #expect(await connection.metrics.duplicateNotifications == 0)
                #expect(await connection.metrics.heldNotifications == 0)
                await connection.close()
            }
        }
    }

    @Test("a held push stays held across a reconnect: the replay after it sends neither it nor what a subscriber took again")
    func heldAcrossReconnect() async throws {
        let store = WatchedMailboxStore(InMemoryMailboxStore())
        try await withServer(configure: { $0.mailboxes = MailboxConfiguration(store: store) }, handlers: echoHandlers) { server, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = Connection(to: proxy.endpoint, configuration: sessionConfiguration("cid") {
                    $0.session?.acknowledgeEvery = 1
                })
                let others = connection.notifications(ofType: 0x21)
                let watcher = StateWatcher(connection)
                try await connection.connect()
                try await watcher.next(.connected)
                try await server.push(Frame(type: 0x20, serial: 0, payload: Array("1".utf8)), toClient: "cid")
                try await server.push(Frame(type: 0x21, serial: 0, payload: Array("2".utf8)), toClient: "cid")
                #expect(try await collect(1, from: others, "the first 0x21 push").map(\.serial) == [2])
                proxy.cutAll()
                try await watcher.next(.connected)
                #expect(await connection.metrics.connects == 2)
                try await server.push(Frame(type: 0x21, serial: 0, payload: Array("3".utf8)), toClient: "cid")
                #expect(try await collect(1, from: others, "the push after the reconnect").map(\.serial) == [3])
                #expect(await connection.lastSequence == 0)

                let late = connection.notifications(ofType: 0x20)
                #expect(try await collect(1, from: late, "the held push").map(\.serial) == [1])
                try await awaitAcknowledged(3, by: "cid", in: store)
                #expect(await connection.lastSequence == 3)
                #expect(await connection.metrics.duplicateNotifications == 0)
                #expect(await connection.notificationFeed.heldCountForTesting == 0)
                await connection.close()
            }
        }
    }
}
