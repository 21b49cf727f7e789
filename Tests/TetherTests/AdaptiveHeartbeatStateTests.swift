import Foundation
import Testing
@testable import Tether

/// The adaptive heartbeat's rules as a pure value: exact interval sequences over explicit
/// lengths and instants, in seconds.
@Suite("Adaptive heartbeat rules")
struct AdaptiveHeartbeatStateTests {
    static let second: UInt64 = 1_000_000_000
    static let day = 86_400 * second

    /// The interval in whole seconds.
    static func seconds(_ state: AdaptiveHeartbeatState) -> UInt64 { state.interval / second }

    /// Proves the interval in use `times` times at `now`, returning the interval after each.
    static func prove(_ state: inout AdaptiveHeartbeatState, times: Int, now: UInt64 = 0) -> [UInt64] {
        (0..<times).map { _ in
            _ = state.healthy(state.interval, now: now)
            return seconds(state)
        }
    }

    @Test("from 30 s the interval grows by 60 s after every two healthy intervals, up to 9 min and not beyond")
    func growsToMaximum() {
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat())
        #expect(Self.seconds(state) == 30)
        #expect(Self.prove(&state, times: 22) == [
            30, 90, 90, 150, 150, 210, 210, 270, 270, 330, 330,
            390, 390, 450, 450, 510, 510, 540, 540, 540, 540, 540,
        ])
        #expect(state.record.lastGood == 540 * Self.second)
    }

    @Test("each step reports lengthened; proofs that do not step report unchanged")
    func changes() {
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat(successesBeforeStep: 3))
        let changes = (0..<7).map { _ in state.healthy(state.interval, now: 0) }
        #expect(changes == [.unchanged, .unchanged, .lengthened, .unchanged, .unchanged, .lengthened, .unchanged])
        #expect(Self.seconds(state) == 150)
    }

    @Test("a silent death at a longer interval goes back to the last good one and never tries the failed one while it is held")
    func backsOffAfterFailure() {
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat())
        _ = Self.prove(&state, times: 6)
        #expect(Self.seconds(state) == 210)
        #expect(state.record.lastGood == 150 * Self.second)
        #expect(state.failed(210 * Self.second, now: 1_000 * Self.second) == .shortened)
        #expect(Self.seconds(state) == 150)
        #expect(state.record.failure == .init(interval: 210 * Self.second, at: 1_000 * Self.second))
        // 150 + 60 reaches the failed 210: the interval stays, one day long.
        #expect(Self.prove(&state, times: 4, now: 1_000 * Self.second + Self.day - 1) == [150, 150, 150, 150])
        // A day after the failure it is tried again.
        #expect(Self.prove(&state, times: 1, now: 1_000 * Self.second + Self.day) == [210])
        #expect(state.record.failure == nil)
    }

    @Test("a failed interval below the next step's length still lets smaller steps through")
    func ceilingAllowsShorterSteps() {
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat(step: .seconds(20)))
        #expect(Self.prove(&state, times: 4) == [30, 50, 50, 70])
        _ = state.failed(70 * Self.second, now: 0)
        #expect(Self.seconds(state) == 50)
        // 50 + 20 reaches 70: no step. With no expiry the hold lasts for ever.
        var forever = AdaptiveHeartbeatState(AdaptiveHeartbeat(step: .seconds(20), retryFailedAfter: nil), record: state.record)
        #expect(Self.prove(&forever, times: 3, now: 365 * Self.day) == [50, 50, 50])
    }

    @Test("when the interval that worked fails, the interval steps one below it, and that becomes the one to start from")
    func goodIntervalFails() {
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat(), record: .init(lastGood: 270 * Self.second))
        #expect(Self.seconds(state) == 270)
        #expect(state.failed(270 * Self.second, now: 5) == .shortened)
        #expect(Self.seconds(state) == 210)
        #expect(state.record == .init(lastGood: 210 * Self.second, failure: .init(interval: 270 * Self.second, at: 5)))
    }

    @Test("the minimum is a floor: a failure at it keeps it, and its next proof lifts the failure")
    func minimumFloor() {
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat())
        #expect(Self.prove(&state, times: 1) == [30])
        #expect(state.failed(30 * Self.second, now: 0) == .unchanged)
        #expect(Self.seconds(state) == 30)
        #expect(state.record.failure == .init(interval: 30 * Self.second, at: 0))
        // The count starts again from the failure.
        #expect(Self.prove(&state, times: 3, now: 1) == [30, 90, 90])
        #expect(state.record.failure == nil)
        var near = AdaptiveHeartbeatState(AdaptiveHeartbeat(), record: .init(lastGood: 60 * Self.second))
        #expect(near.failed(60 * Self.second, now: 0) == .shortened)
        #expect(Self.seconds(near) == 30)
    }

    @Test("a missed heartbeat that the connection survived restarts the count of healthy intervals")
    func inconclusiveRestartsCount() {
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat())
        #expect(Self.prove(&state, times: 1) == [30])
        state.inconclusive()
        #expect(Self.prove(&state, times: 1) == [30])
        #expect(Self.prove(&state, times: 1) == [90])
    }

    @Test("a remembered network starts from its last good interval, within the limits and below a held failure")
    func resumesFromRecord() {
        let policy = AdaptiveHeartbeat(minimum: .seconds(30), maximum: .seconds(300))
        #expect(Self.seconds(AdaptiveHeartbeatState(policy)) == 30)
        #expect(Self.seconds(AdaptiveHeartbeatState(policy, record: .init(lastGood: 210 * Self.second))) == 210)
        #expect(Self.seconds(AdaptiveHeartbeatState(policy, record: .init(lastGood: 900 * Self.second))) == 300)
        #expect(Self.seconds(AdaptiveHeartbeatState(policy, record: .init(lastGood: 10 * Self.second))) == 30)
        let held = AdaptiveHeartbeatState.Record(lastGood: 270 * Self.second, failure: .init(interval: 270 * Self.second, at: 0))
        #expect(Self.seconds(AdaptiveHeartbeatState(policy, record: held, now: 1)) == 210)
        // Once the hold is over, the record's interval is used as it is.
        #expect(Self.seconds(AdaptiveHeartbeatState(policy, record: held, now: Self.day)) == 270)
    }

    @Test("a proof at or above a held failure lifts it")
    func proofLiftsFailure() {
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat(), record: .init(lastGood: 90 * Self.second, failure: .init(interval: 150 * Self.second, at: 0)))
        _ = state.healthy(150 * Self.second, now: 1)
        #expect(state.record.failure == nil)
        #expect(state.record.lastGood == 150 * Self.second)
    }

    @Test("with an adaptive heartbeat the one after a miss goes out in the same tick; a fixed one waits its interval")
    func sendsAfterMiss() {
        let second = Self.second
        var machine = HeartbeatStateMachine(interval: .seconds(300), timeout: .seconds(10), maximumMissed: 3)
        machine.sendsAfterMiss = true
        #expect(machine.tick(now: 0) == [.send(serial: 1)])
        #expect(machine.tick(now: 10 * second) == [.missed(serial: 1), .send(serial: 2)])
        #expect(machine.nextTick(after: 10 * second) == 20 * second)
        #expect(machine.tick(now: 20 * second) == [.missed(serial: 2), .send(serial: 3)])
        #expect(machine.tick(now: 30 * second) == [.missedAndGiveUp(serial: 3, misses: 3)])

        var fixed = HeartbeatStateMachine(interval: .seconds(300), timeout: .seconds(10), maximumMissed: 3)
        _ = fixed.tick(now: 0)
        #expect(fixed.tick(now: 10 * second) == [.missed(serial: 1)])
        #expect(fixed.nextTick(after: 10 * second) == 300 * second)
    }

    @Test("the memory keeps at most its capacity, forgetting the network used least recently")
    func memoryEvictsLeastRecentlyUsed() {
        let memory = HeartbeatMemory(capacity: 2)
        let endpoint = Endpoint(host: "server", port: 9000)
        let paths = ["wlan0", "rmnet0", "eth0"].enumerated().map { index, name in
            NetworkPath(isUsable: true, routes: [.init(family: .ipv4, interfaceName: name, interfaceIndex: index + 1, gateway: "192.0.2.1")])
        }
        let keys = paths.map { HeartbeatMemory.key(path: $0, endpoint: endpoint) }
        memory.store(.init(lastGood: 30 * Self.second), for: keys[0])
        memory.store(.init(lastGood: 90 * Self.second), for: keys[1])
        // Reading the first makes the second the least recently used.
        #expect(memory.record(for: keys[0])?.lastGood == 30 * Self.second)
        memory.store(.init(lastGood: 150 * Self.second), for: keys[2])
        #expect(memory.count == 2)
        #expect(memory.lastGoodInterval(on: paths[0], to: endpoint) == .seconds(30))
        #expect(memory.lastGoodInterval(on: paths[1], to: endpoint) == nil)
        #expect(memory.lastGoodInterval(on: paths[2], to: endpoint) == .seconds(150))
        // Another server on the same network is another entry.
        #expect(memory.lastGoodInterval(on: paths[0], to: Endpoint(host: "other", port: 9000)) == nil)
        memory.removeAll()
        #expect(memory.count == 0)
    }

    @Test("a snapshot survives JSON and restores the entries in use order; a restored failure is held afresh from its first reading")
    func snapshotRoundTrip() throws {
        let memory = HeartbeatMemory()
        let endpoint = Endpoint(host: "server", port: 9000)
        let wifi = NetworkPath(isUsable: true, routes: [.init(family: .ipv4, interfaceName: "wlan0", interfaceIndex: 3, gateway: "192.0.2.1")])
        memory.store(.init(lastGood: 150 * Self.second, failure: .init(interval: 210 * Self.second, at: 7)), for: HeartbeatMemory.key(path: wifi, endpoint: endpoint))
        memory.store(.init(lastGood: 30 * Self.second), for: HeartbeatMemory.key(path: .assumedUsable, endpoint: endpoint))
        let snapshot = memory.snapshot()
        #expect(snapshot == HeartbeatMemory.Snapshot(entries: [
            .init(network: "IPv4 wlan0#3 via 192.0.2.1", endpoint: "server:9000", lastGoodInterval: .seconds(150), failedInterval: .seconds(210)),
            .init(network: "", endpoint: "server:9000", lastGoodInterval: .seconds(30)),
        ]))
        let decoded = try JSONDecoder().decode(HeartbeatMemory.Snapshot.self, from: JSONEncoder().encode(snapshot))
        #expect(decoded == snapshot)

        // One place only: the entry used most recently stays.
        let small = HeartbeatMemory(capacity: 1)
        small.restore(decoded)
        #expect(small.count == 1)
        #expect(small.lastGoodInterval(on: .assumedUsable, to: endpoint) == .seconds(30))

        let restored = HeartbeatMemory()
        restored.restore(decoded)
        #expect(restored.snapshot() == snapshot)
        let record = try #require(restored.record(for: HeartbeatMemory.key(path: wifi, endpoint: endpoint)))
        #expect(record.failure == .init(interval: 210 * Self.second, at: nil))
        // Read first at 5 days on this launch's clock: held from then, for a day.
        var state = AdaptiveHeartbeatState(AdaptiveHeartbeat(), record: record, now: 5 * Self.day)
        #expect(Self.seconds(state) == 150)
        #expect(state.record.failure == .init(interval: 210 * Self.second, at: 5 * Self.day))
        #expect(Self.prove(&state, times: 2, now: 6 * Self.day - 1) == [150, 150])
        #expect(Self.prove(&state, times: 1, now: 6 * Self.day) == [210])
    }
}
