import XCTest
@testable import Tether
import TetherSQLite

/// The 100,000-push test of flow control, in XCTest so that it runs alone: `swift test` runs
/// the XCTest cases before the Swift Testing suites, not beside them. Its pushes keep both
/// cores busy for seconds, and beside hundreds of other tests on a machine with one core
/// taken it would hold up their handshakes past their bounds. Its bounds are guards of
/// minutes: it asserts that every push arrives once, in order, with memory bounded, and
/// how fast that goes is for the benchmarks.
final class FlowControlLoadTests: XCTestCase {
    /// With a server that ignores requests to hold pushes: a subscriber that does not read
    /// holds at most twice the bound, the server's outbound stays bounded, then 100,000
    /// pushes arrive once each, in order, and requests still work.
    func testSlowSubscriberIsBoundedWhenServerIgnoresHolds() async throws {
        let total = 100_000
        let bound = 256
        let highWaterMark = 64 << 10
        let configure = flowServer(maximumMessages: total, highWaterMark: highWaterMark, holds: false)
        try await withServer(configure: configure, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("slow") {
                $0.session?.maximumPendingPushes = bound
            })
            let notifications = connection.notifications
            let connectsBefore = await connection.metrics.connects
            try await awaitClient("slow", on: server)
            let peer = try XCTUnwrap(server.peers.first)
            var largestOutbound = 0
            for number in 1...total {
                try await server.push(padded(number), toClient: "slow")
                if number % 1_000 == 0 {
                    largestOutbound = max(largestOutbound, await peer.pendingOutboundBytesForTesting)
                }
            }
            try await readingPaused(connection)
            let feed = await connection.notificationFeed
            let gauge = try XCTUnwrap(feed.gauge)
            // The decode loop stops at the frame that takes the backlog over twice the bound.
            XCTAssertEqual(gauge.peakBacklog, 2 * bound + 1)
            XCTAssertTrue(gauge.isLagging)
            // Only what reached the subscriber's buffer counts as delivered (and may be
            // acknowledged); what waits unread does not.
            let delivered = await connection.lastSequence
            XCTAssertEqual(delivered, UInt64(2 * bound + 1))
            // Live pushes stop at the high-water mark; a replay page (256 pushes of 200 bytes
            // and their headers) may go over it once.
            let page = 256 * 256
            XCTAssertLessThanOrEqual(largestOutbound, highWaterMark + page)
            let pending = await peer.pendingOutboundBytesForTesting
            XCTAssertLessThanOrEqual(pending, highWaterMark + page)

            let received: ([Int], [UInt32])
            do {
                received = try await bounded("the 100,000 pushes", .seconds(180)) {
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
            } catch {
                // Where it stopped: the client's reading and buffer, the server's writing.
                XCTFail("client: \(await connection.flowStateForTesting); server: \(await peer.sessionStateForTesting)")
                throw error
            }
            XCTAssertEqual(received.0, Array(1...total))
            XCTAssertEqual(received.1, (1...total).map { UInt32($0) })
            let response = try await connection.request(Request(type: 0x402, json: ["after": "pushes"]))
            XCTAssertEqual(response.json, ["echo": ["after": "pushes"]])
            let metrics = await connection.metrics
            // Nothing came twice, nothing more came: the response is behind every push.
            XCTAssertEqual(metrics.notificationsReceived, total)
            XCTAssertEqual(metrics.duplicateNotifications, 0)
            XCTAssertGreaterThanOrEqual(metrics.readPauses, 1)
            XCTAssertEqual(metrics.connects, connectsBefore)
            let last = await connection.lastSequence
            XCTAssertEqual(last, UInt64(total))
            let replayed = await server.metrics().notificationsReplayed
            XCTAssertGreaterThan(replayed, 0)
            await connection.close()
        }
    }

    /// With the server holding pushes on request, in a SQLite mailbox: a subscriber that does
    /// not read while 100,000 pushes are stored for its client keeps a bounded backlog,
    /// requests get their responses meanwhile, the server writes nothing it was asked to
    /// hold, the process's memory grows by a small fraction of what the pushes weigh, and
    /// every push arrives once, in order, when the subscriber reads.
    func testSlowSubscriberIsBoundedWithHolds() async throws {
        let total = 100_000
        let bound = 256
        let highWaterMark = 64 << 10
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var mailboxes = try MailboxConfiguration.sqlite(path: directory.file("mail.sqlite"))
        mailboxes.limits.maximumMessages = total
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            configuration.mailboxes = mailboxes
            configuration.limits.outboundHighWaterMark = highWaterMark
        }
        try await withServer(configure: configure, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("held") {
                $0.session?.maximumPendingPushes = bound
                $0.requestTimeout = .seconds(10)
            })
            let notifications = connection.notifications
            let before = await connection.metrics
            try await awaitClient("held", on: server)
            let peer = try XCTUnwrap(server.peers.first)
            let residentBefore = residentBytes()
            var largestOutbound = 0
            var answered = 0
            for number in 1...total {
                try await server.push(padded(number), toClient: "held")
                if number % 10_000 == 0 {
                    largestOutbound = max(largestOutbound, await peer.pendingOutboundBytesForTesting)
                    // A request while the pushes pour in and the subscriber sleeps.
                    let response = try await connection.request(Request(type: 0x402, json: ["pushed": .int(number)]))
                    XCTAssertEqual(response.json, ["echo": ["pushed": .int(number)]])
                    answered += 1
                }
            }
            let residentAfter = residentBytes()
            let feed = await connection.notificationFeed
            let gauge = try XCTUnwrap(feed.gauge)
            let lagging = await connection.metrics
            let delivered = await connection.lastSequence
            print("flow with holds: peak backlog \(gauge.peakBacklog), delivered \(delivered), holds \(lagging.pushHolds), read pauses \(lagging.readPauses), largest outbound \(largestOutbound), resident \(residentBefore >> 20) → \(residentAfter >> 20) MiB")
            XCTAssertEqual(answered, 10)
            // Holding all 100,000 (20 MB of payloads) costs the client about 28 MiB; held
            // back in the store, the process grows by a few.
            XCTAssertLessThan(residentAfter - residentBefore, 16 << 20)
            XCTAssertEqual(lagging.readPauses, before.readPauses)
            XCTAssertLessThanOrEqual(gauge.peakBacklog, 2 * bound + 1)
            XCTAssertGreaterThanOrEqual(lagging.pushHolds, 1)

            let received = try await bounded("the 100,000 pushes", .seconds(180)) {
                var indices: [Int] = []
                indices.reserveCapacity(total)
                for await frame in notifications {
                    indices.append(paddedIndex(of: frame) ?? -1)
                    if indices.count == total { break }
                }
                return indices
            }
            XCTAssertEqual(received, Array(1...total))
            let metrics = await connection.metrics
            XCTAssertEqual(metrics.notificationsReceived, total)
            XCTAssertEqual(metrics.duplicateNotifications, 0)
            XCTAssertEqual(metrics.requestsTimedOut, before.requestsTimedOut)
            XCTAssertEqual(metrics.connects, before.connects)
            let last = await connection.lastSequence
            XCTAssertEqual(last, UInt64(total))
            await connection.close()
        }
    }
}

/// The process's resident memory, from `/proc/self/statm`; 0 where it cannot be read.
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * 4096
}
