import Testing
@testable import Tether

/// The heartbeat sent out of schedule when the network path changes, as pure rules over
/// nanoseconds: its miss ends the connection at once, its ack returns to the schedule.
@Suite("Heartbeat verification")
struct HeartbeatVerificationTests {
    static let second: UInt64 = 1_000_000_000

    static func machine() -> HeartbeatStateMachine {
        HeartbeatStateMachine(interval: .seconds(10), timeout: .seconds(5), maximumMissed: 3)
    }

    @Test("verify sends at once; its miss ends the connection at the timeout, not after three misses")
    func verificationMissed() {
        var machine = Self.machine()
        #expect(machine.tick(now: 0) == [.send(serial: 1)])
        #expect(machine.ack(serial: 1, now: 1) == 1)
        #expect(machine.verify(now: 3 * Self.second) == [.send(serial: 2)])
        #expect(machine.nextTick(after: 3 * Self.second) == 8 * Self.second)
        #expect(machine.tick(now: 8 * Self.second - 1) == [])
        #expect(machine.tick(now: 8 * Self.second) == [.verificationMissed(serial: 2)])
    }

    @Test("an ack of the verification returns to the schedule, a full interval after it")
    func verificationAcked() {
        var machine = Self.machine()
        _ = machine.tick(now: 0)
        _ = machine.ack(serial: 1, now: 1)
        _ = machine.verify(now: 3 * Self.second)
        #expect(machine.ack(serial: 2, now: 3 * Self.second + 7) == 7)
        #expect(!machine.verifying)
        #expect(machine.nextTick(after: 3 * Self.second + 7) == 13 * Self.second)
        // A later ordinary miss counts as one of three again.
        #expect(machine.tick(now: 13 * Self.second) == [.send(serial: 3)])
        #expect(machine.tick(now: 18 * Self.second) == [.missed(serial: 3)])
    }

    @Test("with a heartbeat outstanding, verify sends none: that heartbeat's miss ends the connection")
    func verificationWhileOutstanding() {
        var machine = Self.machine()
        #expect(machine.tick(now: 0) == [.send(serial: 1)])
        #expect(machine.verify(now: 2 * Self.second) == [])
        #expect(machine.tick(now: 5 * Self.second) == [.verificationMissed(serial: 1)])
    }
}
