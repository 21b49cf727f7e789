import Testing
import TetherTLS
import TetherTesting
@testable import Tether

/// Checks a transfer's reports: one frame, rising by at least a step, complete at the end.
/// A frame that arrives whole between two looks has only its last report.
private func expectSteps(_ reports: [TransferProgress], direction: TransferProgress.Direction, type: UInt32, serial: UInt32, total: Int, step: Int) {
    #expect(!reports.isEmpty)
    #expect(reports.allSatisfy { $0.direction == direction && $0.type == type && $0.serial == serial && $0.total == total })
    #expect(reports.last?.bytes == total)
    #expect(reports.last?.isComplete == true)
    #expect(reports.dropLast().allSatisfy { !$0.isComplete })
    for (earlier, later) in zip(reports, reports.dropFirst()) where !later.isComplete {
        #expect(later.bytes - earlier.bytes >= step)
    }
    #expect((reports.first?.bytes ?? 0) >= step)
}

/// The reports of one frame, up to the one that completes it, within the bound.
private func transfer(_ feed: Subscription<TransferProgress>) async throws -> [TransferProgress] {
    try await bounded("the transfer's reports") {
        var reports: [TransferProgress] = []
        for await report in feed {
            reports.append(report)
            if report.isComplete { break }
        }
        return reports
    }
}

@Suite("Progress of large frames", .timeLimit(.guarded))
struct TransferProgressTests {
    @Test("a large frame sent to a peer that reads slowly reports the bytes handed to the kernel, a step at a time, then complete; small frames report nothing")
    func sending() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        async let accepted = listener.accept()
        let step = 1 << 20
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
            $0.progress = ProgressConfiguration(minimumFrameSize: 1 << 20, step: step)
        })
        let peer = try await accepted
        defer { peer.close() }
        let transfers = connection.transfers
        for serial in 1...20 {
            try await connection.send(Frame(type: 0x460, serial: UInt32(serial), payload: [UInt8](repeating: 1, count: 1_000)))
        }
        let payload = [UInt8](repeating: 7, count: 12 << 20)
        try await connection.send(Frame(type: 0x461, serial: 21, payload: payload))
        // The peer reads everything, a socket buffer at a time.
        let reading = Task {
            var frames: [Frame] = []
            while frames.count < 21, let frame = try await peer.readFrame() { frames.append(frame) }
            return frames
        }
        let reports = try await transfer(transfers)
        expectSteps(reports, direction: .sending, type: 0x461, serial: 21, total: 12 + payload.count, step: step)
        // 12 MiB cannot all go into the kernel while the peer has not read: several steps.
        #expect(reports.count >= 2)
        let frames = try await reading.value
        #expect(frames.map(\.serial) == (1...21).map { UInt32($0) })
        #expect(frames.last?.payload == payload)
        await connection.close()
    }

    @Test("a large response reports the bytes received as it arrives, then complete; a connection without progress reports nothing")
    func receiving() async throws {
        let size = 10 << 20
        try await withServer(handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x462) { _, _ in Response(payload: [UInt8](repeating: 3, count: size)) }
        }) { _, endpoint in
            let step = 1 << 20
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.progress = ProgressConfiguration(minimumFrameSize: 1 << 20, step: step)
            })
            let transfers = connection.transfers
            let small = try await connection.request(Request(type: 0x402, json: ["small": true]))
            #expect(small.json == ["echo": ["small": true]])
            let response = try await connection.request(Request(type: 0x462, json: [:]), timeout: .after(eventBound))
            #expect(response.payload.count == size)
            let reports = try await transfer(transfers)
            expectSteps(reports, direction: .receiving, type: 0x462, serial: 2, total: 12 + size, step: step)
            await connection.close()

            let quiet = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.progress = nil })
            let none = quiet.transfers
            _ = try await quiet.request(Request(type: 0x462, json: [:]), timeout: .after(eventBound))
            await quiet.close()
            var count = 0
            for await _ in none { count += 1 }
            #expect(count == 0)
        }
    }

    @Test("over wss://, a large frame sent reports progress through TLS and WebSocket, and completes once its bytes are in the kernel; a large response reports as it arrives")
    func throughTheLayers() async throws {
        let certificates = try await TestCertificates.shared()
        let (handled, handling) = AsyncStream<Int>.makeStream()
        try await withSecureWebSocketServer(certificates, handlers: { server in
            server.handle(type: 0x463) { request, _ in
                handling.yield(request.payload.count)
                return .noReply
            }
            server.handle(type: 0x464) { _, _ in Response(payload: [UInt8](repeating: 4, count: 4 << 20)) }
        }) { _, endpoint in
            let step = 512 << 10
            let connection = try await Connection.connect(to: endpoint, configuration: webSocketClientTLS(certificates) {
                $0.progress = ProgressConfiguration(minimumFrameSize: 1 << 20, step: step)
            })
            let transfers = connection.transfers
            let payload = [UInt8](repeating: 9, count: 6 << 20)
            try await connection.send(Frame(type: 0x463, serial: 1, payload: payload))
            let reports = try await transfer(transfers)
            #expect(reports.last?.isComplete == true)
            #expect(reports.last?.total == 12 + payload.count)
            #expect(reports.allSatisfy { $0.direction == .sending && $0.type == 0x463 })
            #expect(zip(reports, reports.dropFirst()).allSatisfy { $0.bytes < $1.bytes })
            #expect(try await collect(1, from: handled, "the frame at the server") == [payload.count])
            let response = try await connection.request(Request(type: 0x464, json: [:]), timeout: .after(eventBound))
            #expect(response.payload.count == 4 << 20)
            let received = try await transfer(transfers)
            expectSteps(received, direction: .receiving, type: 0x464, serial: 1, total: 12 + (4 << 20), step: step)
            await connection.close()
        }
    }

    @Test("a large frame that arrives before any step reports once, complete, both ways")
    func lessThanAStep() async throws {
        try await withServer(handlers: { server in
            echoHandlers(server)
            // Small enough to arrive in one read on 127.0.0.1: no look sees it partly there.
            server.handle(type: 0x465) { _, _ in Response(payload: [UInt8](repeating: 5, count: 20 << 10)) }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.progress = ProgressConfiguration(minimumFrameSize: 16 << 10, step: 1 << 30)
            })
            let transfers = connection.transfers
            let response = try await connection.request(Request(type: 0x465, payload: [UInt8](repeating: 6, count: 18 << 10)))
            #expect(response.payload.count == 20 << 10)
            let sent = try await transfer(transfers)
            #expect(sent == [TransferProgress(direction: .sending, type: 0x465, serial: 1, bytes: 12 + (18 << 10), total: 12 + (18 << 10))])
            let received = try await transfer(transfers)
            #expect(received == [TransferProgress(direction: .receiving, type: 0x465, serial: 1, bytes: 12 + (20 << 10), total: 12 + (20 << 10))])
            await connection.close()
        }
    }

    @Test("reports read as a sentence")
    func description() {
        let report = TransferProgress(direction: .sending, type: 0x30, serial: 4, bytes: 12_582_912, total: 52_428_800)
        #expect(report.description == "sending 0x30 serial 4: 12582912 of 52428800 bytes (24 %)")
        #expect(!report.isComplete)
        #expect(TransferProgress(direction: .receiving, type: 0x30, serial: 4, bytes: 5, total: 5).description == "receiving 0x30 serial 4: 5 of 5 bytes (100 %)")
    }
}
