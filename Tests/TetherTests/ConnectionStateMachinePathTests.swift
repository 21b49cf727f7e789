import Testing
@testable import Tether

/// What the network path does to the client lifecycle, as pure transitions: a change
/// verifies a live connection and restarts an attempt at once, and while no path exists
/// nothing counts down.
extension ConnectionStateMachineTests {
    static let changed = Machine.Event.pathUpdated(usable: true, changed: true)
    static let gone = Machine.Event.pathUpdated(usable: false, changed: true)
    static let back = Machine.Event.pathUpdated(usable: true, changed: true)

    /// Lost after proving healthy while no path exists: waiting for the network.
    static func waiting(_ m: inout Machine) {
        healthy(&m)
        _ = m.handle(gone)
        _ = m.handle(.lost(peerClosed))
    }

    static let waitingStart = Start(name: "waiting for the network") { waiting(&$0) }

    @Test("a change of path while connected verifies the connection with a heartbeat, healthy or not, and it stays connected", arguments: [unhealthy, healthyStart])
    func changeWhileConnected(start: Start) {
        var machine = start.machine()
        let before = machine.phase
        #expect(machine.handle(Self.changed) == [.verifyConnection])
        #expect(machine.phase == before)
        // No path at all: still only verified; the heartbeat decides, not the monitor.
        #expect(machine.handle(Self.gone) == [.verifyConnection])
        #expect(machine.phase == before && machine.state.phase == .connected && !machine.pathUsable)
        // The same path reported again as unchanged: nothing to verify.
        #expect(machine.handle(.pathUpdated(usable: false, changed: false)) == [])
    }

    @Test("a change of path while backing off dials at once with a fresh attempt budget")
    func changeWhileBackingOff() {
        var machine = Self.dialingStart.machine(policy: Self.policy(attempts: 3))
        // Attempts 1 and 2 fail: backing off before attempt 3, with token 4.
        _ = machine.handle(.dialFailed(Self.token(1), Self.refused))
        _ = machine.handle(.backoffElapsed(Self.token(2)))
        _ = machine.handle(.dialFailed(Self.token(3), Self.refused))
        #expect(machine.attempt == 2)
        #expect(machine.phase == .backingOff(Self.token(4), .reconnecting(attempt: 2, after: Self.delay(2), reason: Self.refused)))

        #expect(machine.handle(Self.changed) == [.cancelBackoff, .publish(.connecting), .dial(Self.token(5), endpoint: 0, attempt: 0)])
        #expect(machine.attempt == 0 && machine.phase == .dialing(Self.token(5)))
        // The expired backoff of before is stale; the next failure is attempt 1 again.
        #expect(machine.handle(.backoffElapsed(Self.token(4))) == [])
        let again = ConnectionState.reconnecting(attempt: 1, after: Self.delay(1), reason: Self.refused)
        #expect(machine.handle(.dialFailed(Self.token(5), Self.refused)) == [.dialFinished, .publish(again), .scheduleBackoff(Self.token(6), after: Self.delay(1))])
    }

    @Test("while backing off, the path going away or the same path again changes nothing until the backoff ends")
    func backoffWithoutChange() {
        var machine = Self.backoff.machine()
        let before = machine.phase
        #expect(machine.handle(.pathUpdated(usable: true, changed: false)) == [])
        #expect(machine.handle(Self.gone) == [])
        #expect(machine.phase == before)
        // The backoff ends with no path: it waits for one, spending no attempt.
        let waiting = ConnectionState.waitingForNetwork(reason: Self.peerClosed)
        #expect(machine.handle(.backoffElapsed(Self.token(2))) == [.publish(waiting)])
        #expect(machine.phase == .waitingForNetwork(waiting) && machine.state.phase == .waitingForNetwork)
        #expect(machine.attempt == 1)
        // A path appears: a fresh attempt at once.
        #expect(machine.handle(Self.back) == [.publish(.connecting), .dial(Self.token(3), endpoint: 0, attempt: 0)])
        #expect(machine.attempt == 0)
    }

    @Test("with no path, failed attempts and losses wait for the network: a budget of 2 is never spent")
    func noPathSpendsNothing() {
        var machine = Self.healthyStart.machine(policy: Self.policy(attempts: 2))
        #expect(machine.handle(Self.gone) == [.verifyConnection])
        let lostWaiting = ConnectionState.waitingForNetwork(reason: Self.peerClosed)
        #expect(machine.handle(.lost(Self.peerClosed)) == [.detach(graceful: false), .failInFlight(Self.peerClosed), .publish(lostWaiting)])
        #expect(machine.phase == .waitingForNetwork(lostWaiting))
        // The app insists, ten times: each attempt fails and waits again, none is counted.
        // Waiting took no token: the next dial is token 2.
        var token: UInt64 = 2
        let waiting = ConnectionState.waitingForNetwork(reason: Self.refused)
        for _ in 1...10 {
            #expect(machine.handle(.reconnectNow) == [.publish(.connecting), .dial(Self.token(token), endpoint: 0, attempt: 0)])
            #expect(machine.handle(.dialFailed(Self.token(token), Self.refused)) == [.dialFinished, .publish(waiting)])
            #expect(machine.attempt == 0 && machine.state == waiting)
            token += 1
        }
        // Stale or meaningless here: a loss, an old backoff, the path still gone.
        #expect(machine.handle(.lost(Self.peerClosed)) == [])
        #expect(machine.handle(.backoffElapsed(Self.token(2))) == [])
        #expect(machine.handle(.pathUpdated(usable: false, changed: false)) == [])
        #expect(machine.handle(Self.back) == [.publish(.connecting), .dial(Self.token(token), endpoint: 0, attempt: 0)])
        _ = machine.handle(.dialSucceeded(Self.token(token)))
        _ = machine.handle(.attached(Self.token(token)))
        #expect(machine.state.phase == .connected)
    }

    @Test("a change of path abandons a dial or a handshake under way and starts afresh")
    func changeWhileConnecting() {
        var dialing = Self.dialingStart.machine()
        #expect(dialing.handle(Self.changed) == [.abandonDial, .publish(.connecting), .dial(Self.token(2), endpoint: 0, attempt: 0)])
        #expect(dialing.handle(.dialFailed(Self.token(1), Self.refused)) == [])
        #expect(dialing.openerWaiting)
        // Going away during a dial: the dial goes on, and its failure waits for the network.
        #expect(dialing.handle(Self.gone) == [])
        #expect(dialing.handle(.dialFailed(Self.token(2), Self.refused)) == [.dialFinished, .publish(.waitingForNetwork(reason: Self.refused))])

        for start in [Self.securing, Self.greeting, Self.securedGreeting] {
            var machine = start.machine()
            #expect(machine.handle(Self.changed) == [.detach(graceful: false), .publish(.connecting), .dial(Self.token(2), endpoint: 0, attempt: 0)], "\(start.name)")
            #expect(machine.phase == .dialing(Self.token(2)))
        }
    }

    @Test("while waiting for the network: suspend, reconnectNow, close and a cancelled connect() act as in a backoff")
    func userCallsWhileWaiting() {
        var suspended = Self.waitingStart.machine()
        #expect(suspended.handle(.suspend(Self.suspended)) == [.publish(.suspended)])
        #expect(suspended.phase == .suspended)

        var closed = Self.waitingStart.machine()
        #expect(closed.handle(.close(Self.closedByUser)) == [.failWaiting(Self.closedByUser), .publish(.closed(Self.closedByUser)), .endStreams])

        var insisted = Self.waitingStart.machine()
        #expect(insisted.handle(.reconnectNow) == [.publish(.connecting), .dial(Self.token(2), endpoint: 0, attempt: 0)])

        // The first connect, with no path: it dials anyway, then waits; connect() cancelled ends it.
        var first = Self.make()
        Self.opened(&first)
        #expect(first.handle(.pathUpdated(usable: false, changed: false)) == [])
        #expect(first.handle(.connectStarted) == [.publish(.connecting), .dial(Self.token(1), endpoint: 0, attempt: 0)])
        #expect(first.handle(.dialFailed(Self.token(1), Self.refused)) == [.dialFinished, .publish(.waitingForNetwork(reason: Self.refused))])
        #expect(first.handle(.connectCancelled) == [.failOpener(.cancelled), .failWaiting(Self.cancelled), .publish(.closed(Self.cancelled)), .endStreams])
    }

    @Test("no path does not keep a connection that is not to retry: a first connect without retries, a disabled policy")
    func noPathWithoutRetries() {
        var first = Self.make(policy: Self.policy(firstConnect: false))
        Self.opened(&first)
        _ = first.handle(.pathUpdated(usable: false, changed: false))
        _ = first.handle(.connectStarted)
        #expect(first.handle(.dialFailed(Self.token(1), Self.refused)) == [.dialFinished, .failWaiting(Self.refused), .failOpener(.error(Self.refused)), .publish(.closed(Self.refused)), .endStreams])

        var disabled = Self.healthyStart.machine(policy: .disabled)
        _ = disabled.handle(Self.gone)
        #expect(disabled.handle(.lost(Self.peerClosed)).last == .endStreams)
        #expect(disabled.state == .closed(Self.peerClosed))
    }

    @Test("the path is only recorded when idle, suspended or ended", arguments: [idle, idleOpened, suspendedStart, closedStart])
    func pathRecordedOnly(start: Start) {
        var machine = start.machine()
        let before = machine.phase
        #expect(machine.handle(Self.gone) == [])
        #expect(machine.handle(Self.back) == [])
        #expect(machine.phase == before)
    }
}
