import Testing
import TetherTesting
@testable import Tether

/// Waits, within the bound, until the connection has stopped reading for a slow subscriber.
/// No event says so, so it asks again after each turn of the scheduler; it stops at once.
private func readingPaused(_ connection: Connection) async throws {
    try await bounded("the client to stop reading for its slow subscriber") {
        while await connection.metrics.readPauses == 0 { await Task.yield() }
    }
}

/// The server configuration of these tests: in-memory mailboxes that keep every push, and a
/// small outbound high-water mark so that a client that does not read soon fills it.
private func flowServer(maximumMessages: Int, highWaterMark: Int) -> (inout ServerConfiguration) -> Void {
    { configuration in
        var mailboxes = MailboxConfiguration.inMemory
        mailboxes.limits.maximumMessages = maximumMessages
        configuration.mailboxes = mailboxes
        configuration.limits.outboundHighWaterMark = highWaterMark
    }
}

/// A push of 200 bytes that starts with its index: enough of them fill the sockets' buffers.
private func padded(_ index: Int) -> Frame {
    let digits = Array("\(index) ".utf8)
    return Frame(type: 0x10, serial: 0, payload: digits + Array(repeating: UInt8(ascii: "."), count: 200 - digits.count))
}

/// The index a ``padded(_:)`` push starts with.
private func paddedIndex(of frame: Frame) -> Int? {
    Int(String(decoding: frame.payload.prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self))
}

@Suite("Flow control to slow session subscribers", .timeLimit(.minutes(1)))
struct FlowControlTests {
    @Test("a subscriber that does not read holds at most the bound, the server's outbound stays bounded, then 100,000 pushes arrive once each, in order, and requests still work")
    func slowSubscriberIsBounded() async throws {
        let total = 100_000
        let bound = 256
        let highWaterMark = 64 << 10
        try await withServer(configure: flowServer(maximumMessages: total, highWaterMark: highWaterMark), handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("slow") {
                $0.session?.maximumPendingPushes = bound
            })
            let notifications = connection.notifications
            let connectsBefore = await connection.metrics.connects
            try await awaitClient("slow", on: server)
            let peer = try #require(server.peers.first)
            var largestOutbound = 0
            for number in 1...total {
                try await server.push(padded(number), toClient: "slow")
                if number % 1_000 == 0 {
                    largestOutbound = max(largestOutbound, await peer.pendingOutboundBytesForTesting)
                }
            }
            try await readingPaused(connection)
            let feed = await connection.notificationFeed
            let gauge = try #require(feed.gauge)
            // The decode loop stops at the frame that takes the backlog over the bound.
            #expect(gauge.peakBacklog == bound + 1)
            #expect(gauge.isLagging)
            // Only what reached the subscriber's buffer counts as delivered (and may be
            // acknowledged); what waits unread does not.
            #expect(await connection.lastSequence == UInt64(bound + 1))
            // Live pushes stop at the high-water mark; a replay page (256 pushes of 200 bytes
            // and their headers) may go over it once.
            let page = 256 * 256
            #expect(largestOutbound <= highWaterMark + page)
            #expect(await peer.pendingOutboundBytesForTesting <= highWaterMark + page)

            let received = try await bounded("the 100,000 pushes", .seconds(50)) {
                var indices: [Int] = []
                var serials: [UInt32] = []
                indices.reserveCapacity(total)
                serials.reserveCapacity(total)
                for await frame in notifications {
                    indices.append(paddedIndex(of: frame) ?? -1)
                    serials.append(frame.serial)
                    if indices.count == total { break }
                }
                return (indices, serials)
            }
            #expect(received.0 == Array(1...total))
            #expect(received.1 == (1...total).map { UInt32($0) })
            let response = try await connection.request(Request(type: 0x402, json: ["after": "pushes"]))
            #expect(response.json == ["echo": ["after": "pushes"]])
            let metrics = await connection.metrics
            // Nothing came twice, nothing more came: the response is behind every push.
            #expect(metrics.notificationsReceived == total)
            #expect(metrics.duplicateNotifications == 0)
            #expect(metrics.readPauses >= 1)
            #expect(metrics.connects == connectsBefore)
            #expect(await connection.lastSequence == UInt64(total))
            #expect(await server.metrics().notificationsReplayed > 0)
            await connection.close()
        }
    }

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
