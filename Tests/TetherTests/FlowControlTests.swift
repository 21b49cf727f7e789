import Testing
import TetherTesting
@testable import Tether

/// Waits, within the bound, until the connection has stopped reading for a slow subscriber.
func readingPaused(_ connection: Connection) async throws {
    try await bounded("the client to stop reading for its slow subscriber") {
        await connection.readPausedForTesting()
    }
}

/// The server configuration of these tests: in-memory mailboxes that keep every push, and a
/// small outbound high-water mark so that a client that does not read soon fills it.
func flowServer(maximumMessages: Int, highWaterMark: Int) -> (inout ServerConfiguration) -> Void {
    { configuration in
        var mailboxes = MailboxConfiguration.inMemory
        mailboxes.limits.maximumMessages = maximumMessages
        configuration.mailboxes = mailboxes
        configuration.limits.outboundHighWaterMark = highWaterMark
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

@Suite("Flow control to slow session subscribers", .timeLimit(.minutes(1)))
struct FlowControlTests {
    @Test("heartbeats that time out while the client stops reading for a slow subscriber do not count as missed; acks count again once it reads")
    func heartbeatsWhilePaused() async throws {
        let bound = 64
        try await withServer(configure: flowServer(maximumMessages: 1_000, highWaterMark: 64 << 10), handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("paused") {
                $0.session?.maximumPendingPushes = bound
                // Without the excuse the first heartbeat that times out while paused ends it.
                $0.heartbeat = .every(.milliseconds(200), timeout: .seconds(1), maximumMissed: 1)
            })
            let notifications = connection.notifications
            // A busy machine may miss a heartbeat while connecting (a failed attempt, then
            // another): only what happens from here on counts.
            let before = await connection.metrics
            try await awaitClient("paused", on: server)
            for number in 1...(2 * bound) {
                try await server.push(indexed(number), toClient: "paused")
            }
            try await readingPaused(connection)
            // At most two heartbeat events come from before this subscription (the last send
            // and its ack): of four sends, three went out while reading was stopped, and the
            // first two of them timed out unread.
            let heartbeats = connection.heartbeats
            let paused = try await bounded("four heartbeats sent") {
                var events: [Heartbeat] = []
                for await event in heartbeats {
                    events.append(event)
                    if events.filter({ $0.outcome == .sent }).count == 4 { break }
                }
                return events
            }
            #expect(!paused.contains { $0.outcome == .missed })
            var metrics = await connection.metrics
            #expect(metrics.heartbeatsMissed == before.heartbeatsMissed)
            #expect(metrics.readPauses == 1)
            #expect(metrics.connects == before.connects)
            #expect(await connection.state == .connected)

            let received = try await collect(2 * bound, from: notifications, "the pushes held back")
            #expect(received.map(index(of:)) == Array(1...(2 * bound)))
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
    @Test("a connection made again while a subscriber still lags reads its welcome, then stops again; every push arrives once, in order")
    func reconnectWhileLagging() async throws {
        let bound = 64
        try await withServer(configure: flowServer(maximumMessages: 1_000, highWaterMark: 64 << 10), handlers: echoHandlers) { server, endpoint in
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
