import XCTest
@testable import Tether

/// The 100,000-push test of flow control, in XCTest so that it runs alone: `swift test` runs
/// the XCTest cases before the Swift Testing suites, not beside them. Its pushes keep both
/// cores busy for seconds, and beside hundreds of other tests on a machine with one core
/// taken it would hold up their handshakes past their bounds.
final class FlowControlLoadTests: XCTestCase {
    /// A subscriber that does not read holds at most the bound, the server's outbound stays
    /// bounded, then 100,000 pushes arrive once each, in order, and requests still work.
    func testSlowSubscriberIsBounded() async throws {
        let total = 100_000
        let bound = 256
        let highWaterMark = 64 << 10
        let configure = flowServer(maximumMessages: total, highWaterMark: highWaterMark)
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
            // The decode loop stops at the frame that takes the backlog over the bound.
            XCTAssertEqual(gauge.peakBacklog, bound + 1)
            XCTAssertTrue(gauge.isLagging)
            // Only what reached the subscriber's buffer counts as delivered (and may be
            // acknowledged); what waits unread does not.
            let delivered = await connection.lastSequence
            XCTAssertEqual(delivered, UInt64(bound + 1))
            // Live pushes stop at the high-water mark; a replay page (256 pushes of 200 bytes
            // and their headers) may go over it once.
            let page = 256 * 256
            XCTAssertLessThanOrEqual(largestOutbound, highWaterMark + page)
            let pending = await peer.pendingOutboundBytesForTesting
            XCTAssertLessThanOrEqual(pending, highWaterMark + page)

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
}
