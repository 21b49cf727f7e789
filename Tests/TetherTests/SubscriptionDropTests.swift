import Testing
import TetherTesting
@testable import Tether

/// What each subscription learns of the elements it lost to a full buffer.
@Suite("Subscription drops", .timeLimit(.guarded))
struct SubscriptionDropTests {
    @Test("a buffer of 4 that reads nothing while 10 are published drops 6, counted on the subscription, its iterator and the total; the 4 newest are read in order")
    func countsItsOwnDrops() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4)
        let numbers = broadcaster.subscribe()
        #expect(numbers.dropped == 0)
        for number in 1...10 { broadcaster.publish(number) }
        #expect(numbers.dropped == 6)
        #expect(numbers.makeAsyncIterator().dropped == 6)
        #expect(broadcaster.droppedCount == 6)
        broadcaster.finish()
        #expect(try await collect(5, from: numbers, "the kept numbers") == [7, 8, 9, 10])
        #expect(numbers.dropped == 6)
    }

    @Test("of two subscribers, the one that reads as they come drops nothing; the one that does not drops 6 of 10")
    func onlyTheSlowOneCounts() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4)
        let fast = broadcaster.subscribe()
        let slow = broadcaster.subscribe()
        var reader = fast.makeAsyncIterator()
        var read: [Int] = []
        for number in 1...10 {
            broadcaster.publish(number)
            // Already buffered: next() returns it without waiting.
            if let element = await reader.next() { read.append(element) }
        }
        #expect(read == Array(1...10))
        #expect(fast.dropped == 0)
        #expect(reader.dropped == 0)
        #expect(slow.dropped == 6)
        #expect(broadcaster.droppedCount == 6)
        broadcaster.finish()
        #expect(try await collect(5, from: slow, "the slow subscriber's numbers") == [7, 8, 9, 10])
    }

    @Test("a filtered subscriber counts only drops of what its filter accepted")
    func filteredCountsWhatItAccepted() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4)
        let even = broadcaster.subscribe { $0 % 2 == 0 }
        for number in 1...20 { broadcaster.publish(number) }
        // 10 accepted, 4 kept.
        #expect(even.dropped == 6)
        broadcaster.finish()
        #expect(try await collect(5, from: even, "the even numbers") == [14, 16, 18, 20])
    }

    @Test("a lossless subscriber never counts a drop, whatever it is sent")
    func losslessNeverDrops() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4, holdsUntilSubscribed: true, lossless: true, holdLimit: 4, gauge: FlowGauge(limit: 2))
        let all = broadcaster.subscribe()
        for number in 1...10 { broadcaster.publish(number) }
        for number in 11...20 { #expect(broadcaster.publishUntilTaken(number) == .taken) }
        broadcaster.finish(last: 21)
        #expect(all.dropped == 0)
        #expect(broadcaster.droppedCount == 0)
        #expect(try await collect(22, from: all, "every number") == Array(1...21))
    }

    @Test("drops are counted on every path: held elements delivered to a new subscriber, publishUntilTaken, and the last element of finish")
    func everyPathCounts() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4, holdsUntilSubscribed: true, holdLimit: 6)
        // Held for the first subscriber: six into a buffer of four.
        for number in 1...6 { broadcaster.publish(number) }
        let first = broadcaster.subscribe()
        #expect(first.dropped == 2)
        #expect(broadcaster.publishUntilTaken(7) == .taken)
        #expect(first.dropped == 3)
        broadcaster.finish(last: 8)
        #expect(first.dropped == 4)
        #expect(broadcaster.droppedCount == 4)
        #expect(broadcaster.discardedCountForTesting == 0)
        #expect(try await collect(5, from: first, "the kept numbers") == [5, 6, 7, 8])
    }

    @Test("held elements let go before anyone subscribed are no subscription's drop")
    func discardedHeldAreNotDrops() async throws {
        let broadcaster = Broadcaster<Int>(bufferSize: 4, holdsUntilSubscribed: true, holdLimit: 2)
        for number in 1...5 { broadcaster.publish(number) }
        #expect(broadcaster.discardedCountForTesting == 3)
        #expect(broadcaster.droppedCount == 0)
        let first = broadcaster.subscribe()
        #expect(first.dropped == 0)
        broadcaster.finish()
        #expect(try await collect(3, from: first, "the held numbers") == [4, 5])
    }

    @Test("over 127.0.0.1, a subscriber that reads nothing while 10 pushes and a response arrive, with a buffer of 4, counts 6 dropped pushes, a raw-frame subscriber 7 dropped frames, and the connection's total is their sum")
    func endToEnd() async throws {
        let pushed = 10
        let buffer = 4
        try await withServer(handlers: { server in
            server.handle(type: 0x460) { _, peer in
                for number in 1...pushed {
                    try await peer.push(Frame(type: 0x20, payload: JSONValue.int(number).encoded))
                }
                return Response(json: ["pushed": .int(pushed)])
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.limits.subscriberBufferSize = buffer
            })
            let pushes = connection.notifications
            let frames = connection.frames
            // The pushes are written before the response, on the same socket: once the
            // response is here, every push has been published.
            let reply = try await connection.request(Request(type: 0x460))
            #expect(reply.json == ["pushed": .int(pushed)])
            #expect(pushes.dropped == pushed - buffer)
            #expect(frames.dropped == pushed + 1 - buffer)
            let metrics = await connection.metrics
            #expect(metrics.notificationsReceived == pushed)
            #expect(metrics.framesIn == pushed + 1)
            #expect(metrics.droppedElements == (pushed - buffer) + (pushed + 1 - buffer))
            await connection.close()
            let kept = try await collect(pushed, from: pushes, "the kept pushes").map { $0.json?.intValue ?? 0 }
            #expect(kept == Array((pushed - buffer + 1)...pushed))
            #expect(pushes.dropped == pushed - buffer)
        }
    }

    @Test("heartbeat events nobody subscribed to, let go past the two kept for a first subscriber, are not counted as dropped elements")
    func unsubscribedHeartbeatsAreNotDrops() async throws {
        try await withServer { _, endpoint in
            let configuration = testConfiguration {
                $0.heartbeat = .every(.milliseconds(20), timeout: .seconds(10), maximumMissed: 3)
            }
            let connection = Connection(to: endpoint, configuration: configuration)
            let frames = connection.frames
            try await connection.connect()
            // Three acks read: at least six heartbeat events (sent, acked) were published
            // with nobody subscribed, and four or more of them let go.
            let acks = try await collect(3, from: frames, "three heartbeat acks")
            #expect(acks.count == 3)
            let metrics = await connection.metrics
            #expect(metrics.droppedElements == 0)
            #expect(frames.dropped == 0)
            await connection.close()
        }
    }
}
