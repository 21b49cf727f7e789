import Synchronization
import Testing
@testable import Tether
import TetherTesting

/// Plain pushes and a session's sequenced pushes on one connection, through cuts: nothing
/// that arrives before the server accepts the hello counts as sequenced, and a plain push
/// never carries a serial that could be read as a sequence.
@Suite("Session boundaries", .timeLimit(.guarded))
struct SessionBoundaryTests {
    @Test("a push with serial 975 written before the welcome is delivered as a plain push, serial 0, and leaves the sequence alone")
    func pushBeforeWelcome() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        let connection = Connection(to: endpoint, configuration: sessionConfiguration("R"))
        let pushes = connection.notifications
        let connecting = Task { try await connection.connect() }
        let server = try await listener.accept()
        defer { server.close() }
        let hello = try #require(try await server.readFrame())
        #expect(hello.type == 0x401)
        let welcome = SessionWire.Welcome(accepted: true, clientID: "R", lastSequence: 1, resumeAfter: 0)
        try server.write(
            seedBytes(type: 0x2, serial: 975, payload: Array("tick".utf8))
                + seedBytes(type: 0x401, serial: hello.serial, payload: SessionWire.encode(welcome))
                + seedBytes(type: 0x2, serial: 1, payload: Array("stored".utf8))
        )
        try await bounded("the connect to finish") { try await connecting.value }
        #expect(try await collect(2, from: pushes, "both pushes") == [
            Frame(type: 0x2, serial: 0, payload: Array("tick".utf8)),
            Frame(type: 0x2, serial: 1, payload: Array("stored".utf8)),
        ])
        #expect(await connection.lastSequence == 1)
        await connection.close()
    }

    @Test("a broadcast with serial 77 while the server checks a hello goes out with serial 0, before the welcome; after it, pushes carry their sequences")
    func broadcastDuringHello() async throws {
        let (checking, checked) = AsyncStream<Void>.makeStream()
        let (release, released) = AsyncStream<Void>.makeStream()
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            server.authenticate { _ in
                checked.yield()
                for await _ in release { break }
            }
            let raw = try RawSocket.connect(to: endpoint)
            defer { raw.close() }
            let hello = SessionWire.encode(SessionWire.Hello(clientID: "R", token: nil, lastSequence: 0))
            try raw.write(seedBytes(type: 0x401, serial: 9, payload: hello))
            try await bounded("the hello to be checked") { for await _ in checking { break } }
            #expect(await server.broadcast(Frame(type: 0x2, serial: 77, payload: Array("plain".utf8))) == 1)
            released.yield()
            #expect(try await raw.readFrame() == Frame(type: 0x2, serial: 0, payload: Array("plain".utf8)))
            let welcome = SessionWire.Welcome(accepted: true, clientID: "R", lastSequence: 0, resumeAfter: 0)
            #expect(withoutEpoch(try await raw.readFrame()) == Frame(type: 0x401, serial: 9, payload: SessionWire.encode(welcome)))
            try await server.push(Frame(type: 0x2, serial: 0, payload: Array("stored".utf8)), toClient: "R")
            #expect(try await raw.readFrame() == Frame(type: 0x2, serial: 1, payload: Array("stored".utf8)))
        }
    }

    @Test(
        "stored pushes and plain broadcasts with foreign serials, every connection reset after N bytes: the sequenced serials are exactly 1…400, every plain push has serial 0",
        // Each connection after the first spends 86 of them on the epoch in its hello and
        // welcome, and each connection 38 on the chunk size both announce.
        arguments: [337, 389, 457, 526, 643]
    )
    func plainAndSequencedThroughCuts(_ cutAfter: Int) async throws {
        let total = 400
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            try await withFaultProxy(to: endpoint, mode: .cut(after: cutAfter, reset: true)) { proxy in
                // Every new peer gets a plain push at once, as a ticking server would: it often
                // lands before the hello is read.
                let events = server.events
                let greeter = Task {
                    var greeted: UInt32 = 0
                    for await event in events where event.kind == .peerConnected {
                        greeted += 1
                        if let peer = event.peer {
                            try? await server.push(Frame(type: 0x2, serial: 0x7000_0000 | greeted, payload: Array("plain".utf8)), to: peer)
                        }
                    }
                }
                defer { greeter.cancel() }
                let connection = Connection(to: proxy.endpoint, configuration: sessionConfiguration("R", reconnectAfter: .milliseconds(2)))
                let pushes = connection.notifications
                let (progress, advance) = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(1))
                let receiving = Task { () -> (sequenced: [Frame], plain: [Frame]) in
                    var sequenced: [Frame] = []
                    var plain: [Frame] = []
                    for await push in pushes {
                        if push.payload == Array("plain".utf8) {
                            plain.append(push)
                        } else {
                            sequenced.append(push)
                            advance.yield(sequenced.count)
                            if sequenced.count == total { break }
                        }
                    }
                    advance.finish()
                    return (sequenced, plain)
                }
                try await connection.connect()
                // Pushes go out at most 16 ahead of what the client has, so the mailbox never
                // overflows; each also goes to every peer as a plain broadcast.
                var received = 0
                var progressIterator = progress.makeAsyncIterator()
                for number in 1...total {
                    while number - received > 16, let next = await progressIterator.next() { received = next }
                    #expect(try await server.push(Frame(type: 0x2, serial: 0, payload: Array("\(number)".utf8)), toClient: "R") == UInt64(number))
                    await server.broadcast(Frame(type: 0x2, serial: 0x7000_0000 | UInt32(number), payload: Array("plain".utf8)))
                }
                let (sequenced, plain) = try await bounded("all \(total) pushes") { await receiving.value }
                #expect(sequenced.map(\.serial) == Array(1...UInt32(total)))
                #expect(sequenced.map { String(decoding: $0.payload, as: UTF8.self) } == (1...total).map(String.init))
                #expect(plain.allSatisfy { $0.serial == 0 }, "plain pushes with a serial: \(plain.filter { $0.serial != 0 }.map(\.serial))")
                #expect(await connection.lastSequence == UInt64(total))
                #expect(proxy.counters.accepted > 5, "\(proxy.counters)")
                await connection.close()
            }
        }
    }
}
