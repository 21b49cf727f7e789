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
    configuration.limits.maximumSubscriberBytes = 16 << 20  // payload bytes per subscriber
    _ = configuration
}

func watchPrices(_ pushes: Subscription<Frame>) async {
    var lost = 0
    for await push in pushes {
        if pushes.dropped > lost {
            print("missed \(pushes.dropped - lost) pushes")
            lost = pushes.dropped
        }
        print("price:", push.json?["price"]?.doubleValue ?? 0)
    }
}

private func heartbeatConfigurationExample() {
    var configuration = ConnectionConfiguration()
    configuration.heartbeat = .every(.seconds(5), timeout: .seconds(2), maximumMissed: 2)
    _ = configuration
}

private func adaptiveHeartbeatExample() {
    var configuration = ConnectionConfiguration()
    configuration.heartbeat = .adaptive()       // from 30 s, +60 s per step, up to 9 min
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

private func queuedBroadcastExample(server: Server, quotes: [JSONValue]) {
    for quote in quotes {
        server.queueBroadcast(Frame(type: 0x23, payload: quote.encoded))
    }
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

@Suite("Pushes and heartbeats, as the article shows them", .timeLimit(.guarded))
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
        try await withNetworkConnection(handlers: installWatchHandler) { _, _, connection in
            let printed = try await withTimeLimit(testBound) {
                try await withPrintedLines { try await subscribeFirstExample(connection: connection) }
            }
            #expect(printed == ["ACME 101.5"])
        }
    }

    @Test("every loop of follow(_:) ends when the connection closes")
    func followEnds() async throws {
        try await withNetworkConnection(handlers: installWatchHandler) { _, _, connection in
            await connection.close()
            let printed = try await withTimeLimit(testBound) {
                await withPrintedLines { await follow(connection) }
            }
            #expect(printed.last == "state: closed")
        }
    }

    @Test("a subscriber that falls behind loses its oldest pushes, counted in droppedElements")
    func slowSubscriber() async throws {
        subscriberBufferExample()
        try await withNetworkConnection(handlers: { server in
            server.handle(type: 0x412) { _, peer in
                for number in 1...10 {
                    try await peer.push(Frame(type: 0x20, payload: JSONValue.int(number).encoded))
                }
                return Response()
            }
        }, configure: { $0.limits.subscriberBufferSize = 4 }) { _, _, connection in
            let pushes = connection.notifications
            _ = try await connection.request(Request(type: 0x412))   // all ten have arrived
            let kept = try await collect(4, from: pushes).map { $0.json?.intValue ?? 0 }
            #expect(kept == [7, 8, 9, 10])
            let metrics = await connection.metrics
            #expect(metrics.notificationsReceived == 10)
            #expect(metrics.droppedElements == 6)
        }
    }

    @Test("watchPrices(_:) reports the six pushes its subscription dropped before the four it kept")
    func slowSubscriberLearnsOfDrops() async throws {
        try await withNetworkConnection(handlers: { server in
            server.handle(type: 0x412) { _, peer in
                for number in 1...10 {
                    try await peer.push(Frame(type: 0x20, payload: JSONValue.object(["price": .int(number)]).encoded))
                }
                return Response()
            }
        }, configure: { $0.limits.subscriberBufferSize = 4 }) { _, _, connection in
            let pushes = connection.notifications
            _ = try await connection.request(Request(type: 0x412))   // all ten have arrived
            await connection.close()                                  // the loop ends after them
            let printed = try await withTimeLimit(testBound) {
                await withPrintedLines { await watchPrices(pushes) }
            }
            #expect(printed == ["missed 6 pushes", "price: 7.0", "price: 8.0", "price: 9.0", "price: 10.0"])
            #expect(await connection.metrics.droppedElements == 6)
        }
    }

    @available(macOS 26, iOS 26, *)  // Task.immediate
    @Test("heartbeats go out at once, then every interval, and come back with their round-trip time")
    func heartbeats() async throws {
        heartbeatConfigurationExample()
        adaptiveHeartbeatExample()
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: { _ in }) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.heartbeat = .every(.seconds(5), timeout: .seconds(2), maximumMissed: 2)   // the article's
                let connection = Connection(to: endpoint, configuration: configuration)
                let beats = connection.heartbeats
                let printed = PrintedLines()
                // Runs until its loop waits for a heartbeat, at once: it has subscribed before
                // the connection opens.
                let example = Task.immediate {
                    await PrintedLines.$current.withValue(printed) { await heartbeatsExample(connection: connection) }
                }
                try await connection.connect()
                // The first goes out as the connection opens, and comes back with no time passing.
                let first = try await collect(2, from: beats)
                #expect(first == [Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero)])
                let framesOut = await connection.metrics.framesOut
                await network.advance(by: .seconds(5) - .nanoseconds(1))
                #expect(await connection.metrics.framesOut == framesOut)
                await network.advance(by: .nanoseconds(1))
                let second = try await collect(2, from: beats)
                #expect(second == [Heartbeat(serial: 2, outcome: .sent), Heartbeat(serial: 2, outcome: .acked, roundTripTime: .zero)])
                #expect(await connection.metrics.framesOut == framesOut + 1)
                #expect(await connection.metrics.lastHeartbeatRoundTrip == .zero)
                // The example's loop has printed each ack, and ends as the connection closes.
                await connection.close()
                try await withTimeLimit { await example.value }
                #expect(printed.all == ["round trip: 0.0 seconds", "round trip: 0.0 seconds"])
            }
        }
    }

    @Test("a peer that stops answering heartbeats is found dead at its maximumMissed-th miss, to the nanosecond")
    func deadPeer() async throws {
        // A server that takes heartbeats for requests and never answers them: a peer that
        // is connected but silent.
        var silent = Profile.seed
        silent.classify = { type in type == 0x1 ? .message : Profile.seedKind(of: type) }
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.profile = silent }, handlers: { server in
                server.handle(type: 0x1) { _, _ in
                    try await suspendUntilCancelled()              // never answers
                }
            }) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.heartbeat = .every(.milliseconds(40), timeout: .milliseconds(20), maximumMissed: 2)
                configuration.reconnect = .disabled
                let connection = Connection(to: endpoint, configuration: configuration)
                let beats = connection.heartbeats
                try await connection.connect()
                let address = try #require(await connection.remoteAddress)
                #expect(try await firstElement(of: beats) == Heartbeat(serial: 1, outcome: .sent))   // at 0
                // Each step stops a nanosecond short of what is due, then reaches it.
                await network.advance(by: .milliseconds(20) - .nanoseconds(1))
                #expect(await connection.metrics.heartbeatsMissed == 0)
                await network.advance(by: .nanoseconds(1))                                         // 20 ms
                #expect(await connection.metrics.heartbeatsMissed == 1)
                await network.advance(by: .milliseconds(40) - .nanoseconds(1))
                #expect(await connection.currentState.phase == .connected)
                #expect(await connection.metrics.heartbeatsMissed == 1)
                await network.advance(by: .nanoseconds(1))                                         // 60 ms
                let outcomes = try await withTimeLimit(testBound) {
                    var outcomes: [Heartbeat] = []
                    for await beat in beats { outcomes.append(beat) }
                    return outcomes
                }
                #expect(outcomes == [Heartbeat(serial: 1, outcome: .missed),
                                     Heartbeat(serial: 2, outcome: .sent),
                                     Heartbeat(serial: 2, outcome: .missed)])
                let state = await connection.currentState
                #expect(state.phase == .closed)
                #expect(state.reason?.code == .heartbeatTimeout)
                #expect(state.reason?.message == "no heartbeat ack from \(address) for 2 heartbeats in a row (20 ms each)")
                #expect(await connection.metrics.heartbeatsMissed == 2)
                #expect(network.clock.elapsed == .milliseconds(60))
            }
        }
    }

    @Test("a peer is greeted as it connects, and a broadcast reaches every peer")
    func serverPushes() async throws {
        let greeter = try await withLocalServer(handlers: { _ in }) { server, endpoint in
            let events = server.events
            // Not cancelled: its loop ends when the server stops and its events end.
            let greeter = Task { await greetPeers(events, on: server) }
            let printed = try await withTimeLimit(testBound) {
                try await withPrintedLines { try await subscribeBeforeConnectingExample(endpoint: endpoint) }
            }
            #expect(printed == [#"{"motd":"Welcome"}"#])
            // Two more clients, both counted as connected before the broadcast.
            let connected = server.events
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { first in
                try await Connection.withConnection(to: endpoint, configuration: .localTesting) { second in
                    let news = (first.notifications(ofType: 0x22), second.notifications(ofType: 0x22))
                    let quotes = (first.notifications(ofType: 0x23), second.notifications(ofType: 0x23))
                    _ = try await withTimeLimit(testBound) {
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
                    let burst: [JSONValue] = [["q": 1], ["q": 2], ["q": 3]]
                    queuedBroadcastExample(server: server, quotes: burst)
                    for stream in [quotes.0, quotes.1] {
                        let got = try await withTimeLimit(testBound) {
                            var frames: [JSONValue?] = []
                            for await frame in stream.prefix(3) { frames.append(frame.json) }
                            return frames
                        }
                        #expect(got == burst.map { Optional($0) })
                    }
                }
            }
            return greeter
        }
        try await withTimeLimit(testBound) { await greeter.value }
    }
}

/// The article's AsyncStream of a connection's frames, for an API that takes one.
func framesAsAsyncStream(_ connection: Connection) -> AsyncStream<Frame> {
    let frames: AsyncStream<Frame> = connection.frames.asyncStream
    return frames
}
