import Synchronization
import Testing
import TetherTesting
@testable import Tether

@Suite("Receipts for pushes", .timeLimit(.guarded))
struct PushReceiptTests {
    @Test("a receipt is delivered once the client acknowledges, never before its subscriber has the push; an offline client's settles when it comes back")
    func delivered() async throws {
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = MailboxConfiguration(store: InMemoryMailboxStore())
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        // Offline: stored, not settled.
        let early = try await server.server.pushWithReceipt(indexed(0), toClient: "uma")
        #expect(early.sequence == 1)
        #expect(early.settled == nil)
        let connection = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("uma") {
            $0.session?.acknowledgesAutomatically = false
        })
        let notifications = connection.notifications
        #expect(try await collect(1, from: notifications, "the stored push").map(index(of:)) == [0])
        let live = try await server.server.pushWithReceipt(indexed(1), toClient: "uma")
        #expect(try await collect(1, from: notifications, "the live push").map(index(of:)) == [1])
        // The subscriber has both; the client has not acknowledged: nothing is settled.
        #expect(early.settled == nil)
        #expect(live.settled == nil)
        await connection.acknowledge(through: 1)
        #expect(await early.outcome() == .delivered)
        #expect(live.settled == nil)
        await connection.acknowledge(through: 2)
        #expect(await live.outcome() == .delivered)
        await connection.close()

        // Automatic acknowledgements settle a connected client's receipt by themselves.
        let auto = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("vic"))
        let pushes = auto.notifications
        try await awaitClient("vic", on: server.server)
        let receipt = try await server.server.pushWithReceipt(indexed(2), toClient: "vic")
        _ = try await collect(1, from: pushes, "vic's push")
        #expect(await receipt.outcome() == .delivered)
        await auto.close()
        await server.stop()
    }

    @Test("a receipt whose time to live ends first is expired; past the bound a push with a receipt is refused before it is stored; a server that stops drops what waits")
    func expiredBoundedDropped() async throws {
        var configuration = TestServer.defaultConfiguration
        var mailboxes = MailboxConfiguration(store: InMemoryMailboxStore())
        mailboxes.maximumReceipts = 2
        configuration.mailboxes = mailboxes
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        let short = try await server.server.pushWithReceipt(indexed(0), toClient: "wes", timeToLive: .milliseconds(20))
        #expect(await short.outcome() == .expired)
        let waiting = try await server.server.pushWithReceipt(indexed(1), toClient: "wes")
        _ = try await server.server.pushWithReceipt(indexed(2), toClient: "wes")
        let refused = await #expect(throws: TetherError.self) {
            try await server.server.pushWithReceipt(indexed(3), toClient: "wes")
        }
        #expect(refused?.message.contains("MailboxConfiguration.maximumReceipts") == true)
        #expect(try await server.server.push(indexed(4), toClient: "wes") == 4, "the refused push was stored")
        await server.stop()
        guard case .dropped(let reason) = await waiting.outcome() else {
            Issue.record("expected the waiting receipt dropped")
            return
        }
        #expect(reason.contains("stopped"))
    }
}
