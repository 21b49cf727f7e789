import Testing
import TetherTesting
import TetherTLS
@testable import Tether

/// Waits, within the bound, until the connection has stopped reading for a slow subscriber.
func readingPaused(_ connection: Connection) async throws {
    try await bounded("the client to stop reading for its slow subscriber") {
        await connection.readPausedForTesting()
    }
}

/// The server configuration of these tests: in-memory mailboxes that keep every push, and a
/// small outbound high-water mark so that a client that does not read soon fills it.
/// `holds` false makes it ignore clients' requests to hold their pushes, as a server that
/// predates them does.
func flowServer(maximumMessages: Int, highWaterMark: Int, holds: Bool = true) -> (inout ServerConfiguration) -> Void {
    { configuration in
        var mailboxes = MailboxConfiguration.inMemory
        mailboxes.limits.maximumMessages = maximumMessages
        configuration.mailboxes = mailboxes
        configuration.limits.outboundHighWaterMark = highWaterMark
        configuration.ignoresPushHolds = !holds
    }
}

/// A push of 200 bytes that starts with its index: enough of them fill the sockets' buffers.
func padded(_ index: Int) -> Frame {
    let digits = Array("\(index) ".utf8)
    return Frame(type: 0x10, serial: 0, payload: digits + Array(repeating: UInt8(ascii: "."), count: 200 - digits.count))
}

/// The index a ``padded(_:)`` push starts with.
func paddedIndex(of frame: Frame) -> Int? {
    Int(String(decoding: frame.payload.prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self))
}

@Suite("Flow control to slow session subscribers", .timeLimit(.guarded))
struct FlowControlTests {
    @Test("heartbeats that time out while the client stops reading for a slow subscriber (the server ignores holds) do not count as missed; acks count again once it reads")
    func heartbeatsWhilePaused() async throws {
        let bound = 64
        // Both ends on one loop of a test clock, over real sockets: a heartbeat times out
        // only when the test moves time, while reading is stopped, never because a busy
        // machine was slow to carry an ack.
        let clock = TestClock()
        let group = clock.makeEventLoopGroup()
        defer { clock.shutdown() }
        let interval = Duration.milliseconds(200)
        let timeout = Duration.seconds(1)
        try await withServer(configure: { configuration in
            flowServer(maximumMessages: 1_000, highWaterMark: 64 << 10, holds: false)(&configuration)
            configuration.eventLoopGroup = group
        }, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("paused") {
                $0.eventLoopGroup = group
                $0.session?.maximumPendingPushes = bound
                // Without the excuse the first heartbeat that times out while paused ends it.
                $0.heartbeat = .every(interval, timeout: timeout, maximumMissed: 1)
            })
            let notifications = connection.notifications
            let before = await connection.metrics
            try await awaitClient("paused", on: server)
            for number in 1...(4 * bound) {
                try await server.push(indexed(number), toClient: "paused")
            }
            try await readingPaused(connection)
            // Four heartbeat timeouts while reading is stopped: each would end the
            // connection (one miss allowed) but for the excuse.
            let heartbeats = connection.heartbeats
            for _ in 0..<4 {
                await clock.advance(by: timeout)
                await clock.runUntilIdle()
            }
            var metrics = await connection.metrics
            #expect(metrics.heartbeatsMissed == before.heartbeatsMissed)
            #expect(metrics.readPauses == 1)
            #expect(metrics.connects == before.connects)
            #expect(await connection.state.phase == .connected)

            let received = try await collect(4 * bound, from: notifications, "the pushes held back")
            #expect(received.map(index(of:)) == Array(1...(4 * bound)))
            // Reading again: heartbeats go out on schedule and are acked.
            await clock.runUntilIdle()
            for _ in 0..<5 {
                await clock.advance(by: interval)
                await clock.runUntilIdle()
            }
            let acked = try await bounded("a heartbeat acked after reading resumed") {
                for await event in heartbeats where event.outcome == .acked { return true }
                return false
            }
            #expect(acked)
            metrics = await connection.metrics
            #expect(metrics.heartbeatsMissed == before.heartbeatsMissed)
            #expect(metrics.connects == before.connects)
            await connection.close()
        }
    }
}

extension FlowControlTests {
    @Test("a connection made again while a subscriber still lags (the server ignores holds) reads its welcome, then stops again; every push arrives once, in order")
    func reconnectWhileLagging() async throws {
        let bound = 64
        try await withServer(configure: flowServer(maximumMessages: 1_000, highWaterMark: 64 << 10, holds: false), handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("again") {
                $0.session?.maximumPendingPushes = bound
                $0.session?.helloTimeout = .seconds(5)
            })
            let watcher = StateWatcher(connection)
            let notifications = connection.notifications
            try await watcher.next(.connected)
            let connectsBefore = await connection.metrics.connects
            try await awaitClient("again", on: server)
            for number in 1...(4 * bound) {
                try await server.push(indexed(number), toClient: "again")
            }
            try await readingPaused(connection)
            await connection.suspend()
            try await watcher.next(.suspended)
            await connection.resume()
            try await watcher.next(.connected)
            let received = try await collect(4 * bound, from: notifications, "every push")
            #expect(received.map(index(of:)) == Array(1...(4 * bound)))
            let response = try await connection.request(Request(type: 0x402, json: ["after": "resume"]))
            #expect(response.json == ["echo": ["after": "resume"]])
            let metrics = await connection.metrics
            #expect(metrics.connects == connectsBefore + 1)
            #expect(await connection.lastSequence == UInt64(4 * bound))
            await connection.close()
        }
    }
}

/// Waits, within the bound, until the connection has asked the server to hold its pushes.
func pushesHeld(_ connection: Connection) async throws {
    try await bounded("the client to ask the server to hold its pushes") {
        await connection.pushesHeldForTesting()
    }
}

extension FlowControlTests {
    @Test("while a subscriber lags, the server keeps the client's pushes in the mailbox: requests get their responses, heartbeats are acked, and every push arrives once, in order, when it reads")
    func requestsAndHeartbeatsGetThrough() async throws {
        let bound = 64
        // Both sides on a manual clock: a heartbeat goes when the test moves the clock, so a
        // busy machine that keeps this process from reading an ack for the timeout's real
        // seconds cannot make it count as missed.
        try await withManualLoop { clock, group in
            try await withServer(configure: {
                flowServer(maximumMessages: 1_000, highWaterMark: 64 << 10)(&$0)
                $0.eventLoopGroup = group
            }, handlers: echoHandlers) { server, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("lagging") {
                    $0.eventLoopGroup = group
                    $0.session?.maximumPendingPushes = bound
                    $0.heartbeat = .every(.milliseconds(100), timeout: .seconds(2), maximumMissed: 1)
                    $0.requestTimeout = .seconds(5)
                })
                let notifications = connection.notifications
                let before = await connection.metrics
                try await awaitClient("lagging", on: server)
                let early = 100
                for number in 1...early {
                    try await server.push(indexed(number), toClient: "lagging")
                }
                try await pushesHeld(connection)
                // Behind the hold on the socket: once answered, the server has it.
                let first = try await connection.request(Request(type: 0x402, json: ["while": "lagging"]))
                #expect(first.json == ["echo": ["while": "lagging"]])
                let total = 500
                for number in (early + 1)...total {
                    try await server.push(indexed(number), toClient: "lagging")
                }
                // What the server wrote before it had the hold came before the first response;
                // nothing after it was written: the second response came with none before it.
                let live = await connection.lastSequence
                #expect(live > UInt64(bound) && live <= UInt64(early))
                let second = try await connection.request(Request(type: 0x402, json: ["still": "lagging"]))
                #expect(second.json == ["echo": ["still": "lagging"]])
                #expect(await connection.lastSequence == live)
                // Three heartbeats, one interval of the clock each, each acked before the next.
                var acked = 0
                for _ in 1...3 {
                    let heartbeats = connection.heartbeats.filter { $0.outcome == .acked }
                    await clock.advance(by: .milliseconds(100))
                    acked += try await collect(1, from: heartbeats, "a heartbeat acked while the subscriber lags").count
                }
                #expect(acked == 3)
                var serverMetrics = await server.metrics()
                #expect(serverMetrics.pushHolds == 1)
                #expect(serverMetrics.notificationsReplayed == 0)
                let lagging = await connection.metrics
                #expect(lagging.pushHolds == 1)
                #expect(lagging.readPauses == 0)
                #expect(lagging.heartbeatsMissed == before.heartbeatsMissed)

                let received = try await collect(total, from: notifications, "every push")
                #expect(received.map(index(of:)) == Array(1...total))
                #expect(received.map(\.serial) == (1...total).map { UInt32($0) })
                let after = try await connection.request(Request(type: 0x402, json: ["after": "lag"]))
                #expect(after.json == ["echo": ["after": "lag"]])
                // Catching up, the subscriber may fall behind the replay again: more holds then.
                let metrics = await connection.metrics
                #expect(metrics.heartbeatsMissed == before.heartbeatsMissed)
                #expect(metrics.requestsTimedOut == before.requestsTimedOut)
                #expect(metrics.connects == before.connects)
                #expect(metrics.notificationsReceived == total)
                #expect(metrics.duplicateNotifications == 0)
                #expect(await connection.lastSequence == UInt64(total))
                serverMetrics = await server.metrics()
                #expect(serverMetrics.notificationsReplayed == total - Int(live))
                await connection.close()
            }
        }
    }

    @Test("a connection made again while a subscriber lags says so in its hello: the server holds the pushes from the start, and sends them once it catches up")
    func helloCarriesTheHold() async throws {
        let bound = 64
        try await withServer(configure: flowServer(maximumMessages: 1_000, highWaterMark: 64 << 10), handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("held") {
                $0.session?.maximumPendingPushes = bound
                $0.session?.helloTimeout = .seconds(5)
            })
            let watcher = StateWatcher(connection)
            let notifications = connection.notifications
            try await watcher.next(.connected)
            let connectsBefore = await connection.metrics.connects
            try await awaitClient("held", on: server)
            let early = 100
            for number in 1...early {
                try await server.push(indexed(number), toClient: "held")
            }
            try await pushesHeld(connection)
            // Behind the hold: once answered, the server has it, and wrote no push after it.
            _ = try await connection.request(Request(type: 0x402, json: ["while": "lagging"]))
            let live = await connection.lastSequence
            await connection.suspend()
            try await watcher.next(.suspended)
            let total = 300
            for number in (early + 1)...total {
                try await server.push(indexed(number), toClient: "held")
            }
            await connection.resume()
            try await watcher.next(.connected)
            let response = try await connection.request(Request(type: 0x402, json: ["after": "resume"]))
            #expect(response.json == ["echo": ["after": "resume"]])
            // The welcome replayed nothing: the hello asked for the pushes to be held.
            #expect(await connection.lastSequence == live)
            #expect(await server.metrics().pushHolds == 2)
            let resumed = await connection.metrics
            #expect(resumed.pushHolds == 2)
            #expect(resumed.readPauses == 0)
            let received = try await collect(total, from: notifications, "every push")
            #expect(received.map(index(of:)) == Array(1...total))
            let metrics = await connection.metrics
            #expect(metrics.connects == connectsBefore + 1)
            #expect(await connection.lastSequence == UInt64(total))
            await connection.close()
        }
    }
}

extension FlowControlTests {
    @Test("over wss://, TLS and WebSocket beneath the frames: a lagging subscriber's pushes are held by the server, or with a server that ignores holds reading stops and starts again with records already decrypted; every push arrives once, in order", arguments: [true, false])
    func overSecureWebSocket(holds: Bool) async throws {
        let bound = 64
        let certificates = try await TestCertificates.shared()
        let configure = flowServer(maximumMessages: 2_000, highWaterMark: 64 << 10, holds: holds)
        try await withSecureWebSocketServer(certificates, configure: configure) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: webSocketClientTLS(certificates) {
                $0.session = SessionConfiguration(clientID: "secure")
                $0.session?.maximumPendingPushes = bound
                $0.requestTimeout = .seconds(10)
            })
            let notifications = connection.notifications
            let before = await connection.metrics
            try await awaitClient("secure", on: server)
            let total = 8 * bound
            if holds {
                for number in 1...(2 * bound) {
                    try await server.push(padded(number), toClient: "secure")
                }
                try await pushesHeld(connection)
                _ = try await connection.request(Request(type: 0x402, json: ["while": "lagging"]))
                for number in (2 * bound + 1)...total {
                    try await server.push(padded(number), toClient: "secure")
                }
                let response = try await connection.request(Request(type: 0x402, json: ["still": "lagging"]))
                #expect(response.json == ["echo": ["still": "lagging"]])
                #expect(await connection.metrics.readPauses == before.readPauses)
            } else {
                for number in 1...total {
                    try await server.push(padded(number), toClient: "secure")
                }
                try await readingPaused(connection)
            }
            // Every hold and release is a round trip through a loaded suite's two cores: a wider
            // bound than one event's, still far below the test's limit.
            let received = try await TetherTesting.collect(total, from: notifications, within: eventBound * 3)
            #expect(received.map { paddedIndex(of: $0) } == Array(1...total))
            let after = try await connection.request(Request(type: 0x402, json: ["after": "lag"]))
            #expect(after.json == ["echo": ["after": "lag"]])
            let metrics = await connection.metrics
            #expect(metrics.notificationsReceived == total)
            #expect(metrics.duplicateNotifications == 0)
            #expect(metrics.connects == before.connects)
            #expect(await connection.lastSequence == UInt64(total))
            await connection.close()
        }
    }
}
