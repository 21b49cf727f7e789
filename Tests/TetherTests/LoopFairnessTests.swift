import Testing
@testable import Tether

@Suite("Event loop fairness", .timeLimit(.guarded))
struct LoopFairnessTests {
    @Test("an actor that spins on Task.yield() on its loop does not keep the loop from its sockets, its timers or jobs from other threads")
    func spinningActor() async throws {
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        async let accepted = listener.accept()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.eventLoopGroup = group })
        let peer = try await accepted
        defer { peer.close() }
        let push = seedBytes(type: 0x2, serial: 9, payload: [1])
        let seen = try await bounded("a push, a timer and another thread's job, from a spinning actor") {
            await connection.spin(provoking: push, on: peer)
        }
        let spun = try #require(seen)
        #expect(spun.notifications == 1)
        #expect(spun.timerFired && spun.remoteJobRan)
        #expect(spun.yields > 0)
        #expect(await connection.metrics.notificationsReceived == 1)
        await connection.close()
    }
}

/// What a spinning actor saw on its loop.
private struct Spun: Sendable {
    var notifications: Int
    var timerFired: Bool
    var remoteJobRan: Bool
    /// How often it yielded before it saw all three.
    var yields: Int
}

extension Connection {
    /// On the loop: has `peer` write `bytes`, sets a timer due at once (so no real time
    /// needs to pass, only the loop's timer phase to run) and has another thread
    /// queue a job on the loop, then spins on `Task.yield()`, never suspending otherwise,
    /// until the push has been read, the timer has fired and the job has run.
    ///
    /// - Returns: What it saw; `nil` when cancelled first.
    fileprivate func spin(provoking bytes: [UInt8], on peer: RawSocket) async -> Spun? {
        let timerFired = Lock(false)
        let remoteJobRan = Lock(false)
        let loop = self.loop
        loop.schedule(after: .zero) { timerFired.withLock { $0 = true } }
        BlockingThread.run { loop.execute { remoteJobRan.withLock { $0 = true } } }
        try? peer.write(bytes)
        var yields = 0
        while counters.notificationsReceived == 0 || !timerFired.withLock({ $0 }) || !remoteJobRan.withLock({ $0 }) {
            if Task.isCancelled { return nil }
            yields += 1
            await Task.yield()
        }
        return Spun(
            notifications: counters.notificationsReceived,
            timerFired: timerFired.withLock { $0 },
            remoteJobRan: remoteJobRan.withLock { $0 },
            yields: yields
        )
    }
}
