import Synchronization
import Testing
@testable import Tether

/// Two clients with one client id on a real server, over loopback sockets: the older one is
/// displaced once, is told so, and stops; it does not take the session back.
@Suite("Session takeover", .timeLimit(.guarded))
struct TakeoverTests {
    @Test("the displaced client stops with sessionTakenOver and the server's words; exactly one takeover, and the pushes that follow reach only the newer client")
    func displacedClientStops() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            // Both reconnect by policy, 20 ms after a loss: without the notice they would
            // take the session from each other.
            let first = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("dup"))
            let firstPushes = first.notifications
            try await awaitClient("dup", on: server)
            // Everything from the newer client's arrival on, whichever order the server
            // publishes its session and the takeover in.
            let later = server.events
            let second = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("dup"))
            let final = try await finalState(of: first)
            #expect(final.phase == .closed)
            #expect(final.reason?.code == .sessionTakenOver)
            let taken = try await firstEvent(events, "the takeover") { $0.kind == .sessionTakenOver }
            #expect(final.reason?.message == "\(endpoint.host):\(endpoint.port) closed the connection: \(taken.reason?.message ?? "")")
            #expect(taken.reason?.message.hasPrefix("client dup connected again from ") == true)
            // A request on the displaced connection fails at once, naming the takeover.
            let refused = await #expect(throws: TetherError.self) { try await first.request(Request(type: 0x402, json: [:])) }
            #expect(refused?.message.contains("connected again") == true, "\(String(describing: refused))")
            let secondPushes = second.notifications
            for n in 1...5 { try await server.push(indexed(n), toClient: "dup") }
            #expect(try await collect(5, from: secondPushes, "the pushes").map(index(of:)) == [1, 2, 3, 4, 5])
            // The displaced client's pushes ended with its connection, and had none of them.
            var printedByFirst = 0
            for await _ in firstPushes { printedByFirst += 1 }
            #expect(printedByFirst == 0)
            #expect(await first.metrics.connects == 1)
            await second.close()
            // Every event from the newer client's arrival to its departure: one takeover,
            // one session (the newer client's), none taken back.
            var takeovers = 0
            var identified = 0
            for await event in later {
                if event.kind == .sessionTakenOver { takeovers += 1 }
                if event.kind == .sessionIdentified || event.kind == .sessionResumed { identified += 1 }
                if event.kind == .peerDisconnected, event.clientID == "dup", event.peer != taken.peer { break }
            }
            #expect(takeovers == 1)
            #expect(identified == 1, "the newer client's session only")
        }
    }

    @Test("with reconnectsWhenTakenOver the displaced client takes the session back, as the app asked")
    func takesSessionBack() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            let first = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("back") { $0.session?.reconnectsWhenTakenOver = true })
            let watcher = StateWatcher(first)
            try await awaitClient("back", on: server)
            let second = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("back") { $0.reconnect = .disabled })
            let lost = try await watcher.next(.reconnecting)
            #expect(lost.reason?.code == .sessionTakenOver)
            try await watcher.next(.connected)
            let final = try await finalState(of: second)
            #expect(final.reason?.code == .sessionTakenOver)
            await first.close()
        }
    }
}
