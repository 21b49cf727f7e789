// The code of Documentation.docc/PushesAndHeartbeats.md, compiled, and run against a local
// server where the example is self-contained.

import Testing
import Tether
import TetherTesting

private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    recordAndPrint(items, separator: separator, terminator: terminator)
}

// MARK: The article's code

struct PriceUpdate: Codable, Sendable {
    var symbol: String
    var price: Double
}

private func installWatchHandler(on server: Server) {
    server.handle(type: 0x411) { request, peer in
        let symbol = request.json?["watch"]?.stringValue ?? ""
        let update: JSONValue = ["symbol": .string(symbol), "price": 101.5]
        try await peer.push(Frame(type: 0x20, payload: update.encoded))     // before the answer
        return Response(json: ["watching": .string(symbol)])
    }
}

private func subscribeFirstExample(connection: Connection) async throws {
    let updates = connection.notifications(ofType: 0x20)     // receives from here on
    _ = try await connection.request(Request(type: 0x411, json: ["watch": "ACME"]))
    for await push in updates {
        let update = try push.decode(PriceUpdate.self)
        print(update.symbol, update.price)                   // ACME 101.5
        break
    }
}

/// Follows a connection's prices and states until it closes for good.
func follow(_ connection: Connection) async {
    await withTaskGroup(of: Void.self) { group in
        group.addTask {
            for await push in connection.notifications(ofType: 0x20) {
                print("price:", push.json?["price"]?.doubleValue ?? 0)
            }
        }
        group.addTask {
            for await state in connection.states {
                print("state:", state.phase)
            }
        }
    }   // returns once the connection has closed for good: every sequence has ended
}

private func subscriberBufferExample() {
    var configuration = ConnectionConfiguration()
    configuration.limits.subscriberBufferSize = 256     // per subscriber; the oldest go first
    _ = configuration
}

private func heartbeatConfigurationExample() {
    var configuration = ConnectionConfiguration()
    configuration.heartbeat = .every(.seconds(5), timeout: .seconds(2), maximumMissed: 2)
    _ = configuration
}

private func heartbeatsExample(connection: Connection) async {
    for await beat in connection.heartbeats {
        switch beat.outcome {
        case .acked:
            print("round trip:", beat.roundTripTime ?? .zero)
        case .missed:
            print("heartbeat \(beat.serial) missed")
        default:
            break                                    // .sent
        }
    }
}

/// Greets every peer as it connects. Subscribe to `server.events` before the peers arrive.
func greetPeers(_ events: Subscription<ServerEvent>, on server: Server) async {
    let greeting: JSONValue = ["motd": "Welcome"]
    for await event in events where event.kind == .peerConnected {
        guard let peer = event.peer else { continue }
        try? await server.push(Frame(type: 0x21, payload: greeting.encoded), to: peer)
    }
}

private func broadcastExample(server: Server) async {
    let news: JSONValue = ["headline": "Markets open"]
    let reached = await server.broadcast(Frame(type: 0x22, payload: news.encoded))
    print("queued for \(reached) peers")
}

private func subscribeBeforeConnectingExample(endpoint: Endpoint) async throws {
    let connection = Connection(to: endpoint)
    let greetings = connection.notifications(ofType: 0x21)
    try await connection.connect()
    for await greeting in greetings {
        print(greeting.json ?? .null)                // {"motd":"Welcome"}
        break
    }
    await connection.close()
}

// MARK: Running them

@Suite("Pushes and heartbeats, as the article shows them", .timeLimit(.minutes(1)))
struct PushesAndHeartbeatsSnippets {
    @Test("the defaults the article states")
    func defaults() {
        let heartbeat = HeartbeatConfiguration()
        #expect(heartbeat.isEnabled)
        #expect(heartbeat.interval == .seconds(10))
        #expect(heartbeat.timeout == .seconds(5))
        #expect(heartbeat.maximumMissed == 3)
        #expect(HeartbeatConfiguration.every(.seconds(4)).timeout == .seconds(2))
        #expect(Limits().subscriberBufferSize == 4_096)
        #expect(ServerConfiguration().idleTimeout == .seconds(60))
        #expect(ServerConfiguration().limits.maximumOutboundBytes == 64 << 20)
    }

    @Test("a push written before the answer is there once the request returns")
    func subscribeFirst() async throws {
        try await withLocalServer(handlers: installWatchHandler) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                let printed = try await withTimeLimit(.seconds(5)) {
                    try await withPrintedLines { try await subscribeFirstExample(connection: connection) }
                }
                #expect(printed == ["ACME 101.5"])
            }
        }
    }

    @Test("every loop of follow(_:) ends when the connection closes")
    func followEnds() async throws {
        try await withLocalServer(handlers: installWatchHandler) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: .localTesting)
            await connection.close()
            let printed = try await withTimeLimit(.seconds(5)) {
                await withPrintedLines { await follow(connection) }
            }
            #expect(printed.last == "state: closed")
        }
    }

    @Test("a subscriber that falls behind loses its oldest pushes, counted in droppedElements")
    func slowSubscriber() async throws {
        subscriberBufferExample()
        try await withLocalServer(handlers: { server in
            server.handle(type: 0x412) { _, peer in
                for number in 1...10 {
                    try await peer.push(Frame(type: 0x20, payload: JSONValue.int(number).encoded))
                }
                return Response()
            }
        }) { _, endpoint in
            var configuration = ConnectionConfiguration.localTesting
            configuration.limits.subscriberBufferSize = 4
            try await Connection.withConnection(to: endpoint, configuration: configuration) { connection in
                let pushes = connection.notifications
                _ = try await connection.request(Request(type: 0x412))   // all ten have arrived
                let kept = try await withTimeLimit(.seconds(5)) {
                    var numbers: [Int] = []
                    for await push in pushes {
                        numbers.append(push.json?.intValue ?? 0)
                        if numbers.count == 4 { break }
                    }
                    return numbers
                }
                #expect(kept == [7, 8, 9, 10])
                let metrics = await connection.metrics
                #expect(metrics.notificationsReceived == 10)
                #expect(metrics.droppedElements == 6)
            }
        }
    }

    @Test("heartbeats go out at once and come back with their round-trip time")
    func heartbeats() async throws {
        heartbeatConfigurationExample()
        try await withLocalServer(handlers: { _ in }) { _, endpoint in
            var configuration = ConnectionConfiguration.localTesting
            // What is shown is that heartbeats are acked with their round-trip time, not when
            // one counts as missed: with an ack timeout no test outlasts, a busy machine that
            // delays an ack (by more than 2 s, seen) cannot turn it into a miss, and the next
            // heartbeat waits for it.
            configuration.heartbeat = .every(.milliseconds(50), timeout: .seconds(3_600))
            let connection = Connection(to: endpoint, configuration: configuration)
            let beats = connection.heartbeats
            try await connection.connect()
            let acked = try await firstElement(of: beats.filter { $0.outcome == .acked })
            #expect(acked?.serial == 1)
            #expect(acked?.roundTripTime != nil)
            #expect(await connection.metrics.lastHeartbeatRoundTrip != nil)
            // The example's loop prints each ack until the connection closes.
            let printed = try await withTimeLimit(.seconds(5)) {
                try await withPrintedLines {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask { await heartbeatsExample(connection: connection) }
                        // Close once the example's own loop has printed an ack (its
                        // subscription starts later than `beats`, so count its lines).
                        let lines = PrintedLines.current
                        for await beat in beats where beat.outcome == .acked {
                            if lines?.all.isEmpty == false { break }
                        }
                        await connection.close()
                        try await group.waitForAll()
                    }
                }
            }
            #expect(!printed.isEmpty)
            #expect(printed.allSatisfy { $0.hasPrefix("round trip: ") })
        }
    }

    @Test("a peer that stops answering heartbeats is found dead after maximumMissed misses")
    func deadPeer() async throws {
        // A server that takes heartbeats for requests and never answers them: a peer that
        // is connected but silent.
        var silent = Profile.seed
        silent.classify = { type in type == 0x1 ? .message : Profile.seedKind(of: type) }
        try await withLocalServer(configure: { $0.profile = silent }, handlers: { server in
            server.handle(type: 0x1) { _, _ in
                try await Task.sleep(for: .seconds(3600))
                return Response()
            }
        }) { _, endpoint in
            var configuration = ConnectionConfiguration.localTesting
            configuration.heartbeat = .every(.milliseconds(40), timeout: .milliseconds(20), maximumMissed: 2)
            configuration.reconnect = .disabled
            let connection = Connection(to: endpoint, configuration: configuration)
            let beats = connection.heartbeats
            try await connection.connect()
            let outcomes = try await withTimeLimit(.seconds(5)) {
                var outcomes: [Heartbeat.Outcome] = []
                for await beat in beats { outcomes.append(beat.outcome) }
                return outcomes
            }
            #expect(outcomes == [.sent, .missed, .sent, .missed])
            let state = await connection.currentState
            #expect(state.phase == .closed)
            #expect(state.reason?.code == .heartbeatTimeout)
            #expect(state.reason?.message == "no heartbeat ack from \(endpoint) for 2 heartbeats in a row (20 ms each)")
            #expect(await connection.metrics.heartbeatsMissed == 2)
        }
    }

    @Test("a peer is greeted as it connects, and a broadcast reaches every peer")
    func serverPushes() async throws {
        let greeter = try await withLocalServer(handlers: { _ in }) { server, endpoint in
            let events = server.events
            // Not cancelled: its loop ends when the server stops and its events end.
            let greeter = Task { await greetPeers(events, on: server) }
            let printed = try await withTimeLimit(.seconds(5)) {
                try await withPrintedLines { try await subscribeBeforeConnectingExample(endpoint: endpoint) }
            }
            #expect(printed == [#"{"motd":"Welcome"}"#])
            // Two more clients, both counted as connected before the broadcast.
            let connected = server.events
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { first in
                try await Connection.withConnection(to: endpoint, configuration: .localTesting) { second in
                    let news = (first.notifications(ofType: 0x22), second.notifications(ofType: 0x22))
                    _ = try await withTimeLimit(.seconds(5)) {
                        var count = 0
                        for await event in connected where event.kind == .peerConnected {
                            count += 1
                            if count == 2 { break }
                        }
                    }
                    let lines = await withPrintedLines { await broadcastExample(server: server) }
                    #expect(lines == ["queued for 2 peers"])
                    #expect(try await firstElement(of: news.0)?.json == ["headline": "Markets open"])
                    #expect(try await firstElement(of: news.1)?.json == ["headline": "Markets open"])
                }
            }
            return greeter
        }
        try await withTimeLimit(.seconds(5)) { await greeter.value }
    }
}
