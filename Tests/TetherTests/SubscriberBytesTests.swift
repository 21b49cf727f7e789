import Testing
import TetherTesting
@testable import Tether

/// A push of `size` bytes whose first four bytes are its index.
private func sized(_ index: Int, size: Int) -> Frame {
    var payload = [UInt8](repeating: 0x2E, count: size)
    withUnsafeBytes(of: UInt32(index).bigEndian) { payload.replaceSubrange(0..<4, with: $0) }
    return Frame(type: 0x20, serial: 0, payload: payload)
}

/// The index a ``sized(_:size:)`` push starts with.
private func sizedIndex(_ frame: Frame) -> Int {
    frame.payload.prefix(4).reduce(0) { $0 << 8 | Int($1) }
}

@Suite("What waits for subscribers is bounded in bytes", .timeLimit(.guarded))
struct SubscriberBytesTests {
    @Test("a server that writes 16 MiB pushes at line rate to a client whose subscriber does not read: the client holds at most the byte bound and one push, stops reading, then delivers every push once, in order")
    func largePushesAtLineRate() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        var configuration = ConnectionConfiguration()
        configuration.heartbeat.isEnabled = false
        configuration.reconnect.isEnabled = false
        let connecting = Task { try await Connection.connect(to: endpoint, configuration: configuration) }
        let socket = try await listener.accept()
        let connection = try await bounded("the connection") { try await connecting.value }
        let notifications = connection.notifications
        let size = 16 << 20
        // 96 MiB: past the bound and one push.
        let count = 6
        // The server writes as fast as the client takes, from a thread of its own; it blocks
        // once the client stops reading.
        let writing = Task {
            try await offThread {
                var bytes = seedBytes(type: 0x20, serial: 0, payload: sized(0, size: size).payload)
                let start = bytes.count - size
                for index in 1...count {
                    withUnsafeBytes(of: UInt32(index).bigEndian) { bytes.replaceSubrange(start..<(start + 4), with: $0) }
                    try socket.write(bytes)
                }
            }
        }
        try await readingPaused(connection)
        let feed = await connection.notificationFeed
        let gauge = try #require(feed.gauge)
        let bound = ConnectionConfiguration().limits.maximumSubscriberBytes
        print("16 MiB pushes at line rate: the subscriber held at most \(gauge.peakBytes >> 20) MiB (bound \(bound >> 20) MiB)")
        #expect(gauge.peakBytes <= bound + size, "the subscriber held \(gauge.peakBytes) bytes")
        #expect(gauge.peakBytes > bound)
        let metrics = await connection.metrics
        #expect(metrics.readPauses >= 1)
        #expect(metrics.droppedElements == 0)

        let received = try await collect(count, from: notifications, "the 16 MiB pushes")
        #expect(received.map(sizedIndex) == Array(1...count))
        #expect(received.allSatisfy { $0.payload.count == size })
        try await bounded("the server's writes") { try await writing.value }
        #expect(notifications.dropped == 0)
        await connection.close()
    }

    @Test("with a session, pushes over the byte bound make the client ask the server to hold them; the subscriber holds at most twice the bound, then gets every push once, in order")
    func sessionHoldsByBytes() async throws {
        let bound = 4 << 20
        let size = 1 << 20
        let count = 24
        try await withServer(configure: { configuration in
            var mailboxes = MailboxConfiguration.inMemory
            mailboxes.limits.maximumStoredBytes = 64 << 20
            configuration.mailboxes = mailboxes
            configuration.limits.outboundHighWaterMark = 1 << 20
        }, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("bytes") {
                $0.limits.maximumSubscriberBytes = bound
            })
            let notifications = connection.notifications
            try await awaitClient("bytes", on: server)
            for index in 1...count {
                try await server.push(sized(index, size: size), toClient: "bytes")
            }
            try await bounded("a request to hold pushes") { await connection.pushesHeldForTesting() }
            let feed = await connection.notificationFeed
            let gauge = try #require(feed.gauge)
            print("1 MiB session pushes, bound 4 MiB: the subscriber held at most \(gauge.peakBytes >> 10) KiB before the hold took")
            #expect(gauge.peakBytes <= 2 * bound + size, "the subscriber held \(gauge.peakBytes) bytes")
            // The subscriber reads from here: what the kernels held in flight past the hold
            // may have taken it past twice the bound, where reading stops, and the answer
            // would wait behind them.
            let draining = Task { try await collect(count, from: notifications, "the held pushes") }
            let response = try await connection.request(Request(type: 0x402, json: ["while": "held"]))
            #expect(response.json == ["echo": ["while": "held"]])

            let received = try await draining.value
            #expect(received.map(sizedIndex) == Array(1...count))
            #expect(received.map(\.serial) == (1...count).map { UInt32($0) })
            await connection.close()
        }
    }

    @Test("pushes held for a subscriber to come are bounded in bytes as well as in number")
    func heldPushesAreBoundedInBytes() {
        let feed = Broadcaster<Frame>(
            bufferSize: 16,
            holdsUntilSubscribed: true,
            lossless: true,
            holdLimit: 100,
            gauge: FlowGauge(limit: 100, byteLimit: 10),
            weigh: { $0.payload.count }
        )
        let four = Frame(type: 0x20, serial: 1, payload: [1, 2, 3, 4])
        #expect(feed.publishUntilTaken(four) == .held)
        #expect(feed.publishUntilTaken(four) == .held)
        #expect(feed.publishUntilTaken(four) == .refused)
        #expect(feed.heldCountForTesting == 2)
    }

    @Test("the byte gauge: a subscriber lags above the byte bound, overflows above twice it, and catches up below half, whatever the count")
    func byteGauge() {
        let gauge = FlowGauge(limit: 1_000, byteLimit: 100)
        let backlog = Backlog(gauge)
        backlog.added(bytes: 60)
        #expect(!gauge.isLagging)
        backlog.added(bytes: 60)
        #expect(gauge.isLagging)
        #expect(!gauge.isOverflowing)
        backlog.added(bytes: 100)
        #expect(gauge.isOverflowing)
        backlog.consumed(bytes: 100)
        backlog.consumed(bytes: 60)
        #expect(gauge.isLagging)
        backlog.consumed(bytes: 60)
        #expect(!gauge.isLagging)
        #expect(!gauge.isOverflowing)
        #expect(gauge.peakBytes == 220)
    }
}
