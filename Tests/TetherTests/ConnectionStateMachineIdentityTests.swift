import Testing
@testable import Tether

/// The transitions of identity providers and of switching user, without sockets.
extension ConnectionStateMachineTests {
    static let rejected = TetherError(code: .sessionRejected, message: "127.0.0.1:9000 rejected the session of client alice: token expired")
    static let switched = TetherError(code: .connectionLost, message: "the session switched from client alice to client bob")

    /// A session machine whose identity is asked of a provider (or not), greeting with
    /// token 1.
    static func greetingMachine(asksIdentity: Bool) -> Machine {
        var machine = Machine(
            settings: .init(endpoint: endpoint, endpointCount: 2, policy: policy(), secured: false, greets: true, asksIdentity: asksIdentity),
            seed: 7
        )
        attached(&machine)
        return machine
    }

    @Test("with a provider, a rejection for good redials the same endpoint at once as the same attempt; a second rejection in a row fails")
    func rejectionRetriedOnceWithProvider() {
        var machine = Self.greetingMachine(asksIdentity: true)
        #expect(machine.handle(.helloRefused(Self.rejected, retryable: false)) == [.detach(graceful: false), .dial(Self.token(2), endpoint: 0, attempt: 0)])
        #expect(machine.phase == .dialing(Self.token(2)))
        #expect(machine.rejection == Self.rejected && machine.openerWaiting && machine.attempt == 0 && machine.endpointIndex == 0)
        #expect(machine.state == .connecting)
        _ = machine.handle(.dialSucceeded(Self.token(2)))
        #expect(machine.handle(.attached(Self.token(2))) == [.sendHello(Self.token(2)), .startHeartbeats])
        let again = TetherError(code: .sessionRejected, message: "rejected again")
        #expect(machine.handle(.helloRefused(again, retryable: false)) == [
            .detach(graceful: false), .failWaiting(again), .failOpener(.error(again)), .publish(.failed(again)), .endStreams,
        ])
        #expect(machine.phase == .ended(.failed(again)))
    }

    @Test("without a provider a rejection for good still ends the connection at once")
    func rejectionWithoutProvider() {
        var machine = Self.greetingMachine(asksIdentity: false)
        #expect(machine.handle(.helloRefused(Self.rejected, retryable: false)) == [
            .detach(graceful: false), .failWaiting(Self.rejected), .failOpener(.error(Self.rejected)), .publish(.failed(Self.rejected)), .endStreams,
        ])
        #expect(machine.rejection == nil)
    }

    @Test("an accepted hello forgets the rejection: a later one is retried once again")
    func acceptedHelloClearsRejection() {
        var machine = Self.greetingMachine(asksIdentity: true)
        _ = machine.handle(.helloRefused(Self.rejected, retryable: false))
        _ = machine.handle(.dialSucceeded(Self.token(2)))
        _ = machine.handle(.attached(Self.token(2)))
        _ = machine.handle(.helloAccepted)
        #expect(machine.rejection == nil)
        _ = machine.handle(.provedHealthy)
        _ = machine.handle(.lost(Self.peerClosed))
        _ = machine.handle(.backoffElapsed(Self.token(3)))
        _ = machine.handle(.dialSucceeded(Self.token(4)))
        _ = machine.handle(.attached(Self.token(4)))
        // The loss moved on to the second endpoint; the retry is on the same one.
        #expect(machine.handle(.helloRefused(Self.rejected, retryable: false)) == [.detach(graceful: false), .dial(Self.token(5), endpoint: 1, attempt: 1)])
    }

    @Test("a rejection, then a retry that fails to connect: the next hello that is rejected ends it; the provider's failure is a failed attempt")
    func rejectionSurvivesFailedAttempts() {
        var machine = Self.greetingMachine(asksIdentity: true)
        _ = machine.handle(.helloRefused(Self.rejected, retryable: false))
        #expect(machine.handle(.dialFailed(Self.token(2), Self.refused)) == [
            .dialFinished,
            .publish(.reconnecting(attempt: 1, after: Self.delay(1), reason: Self.refused)),
            .scheduleBackoff(Self.token(3), after: Self.delay(1)),
        ])
        #expect(machine.rejection == Self.rejected)
        _ = machine.handle(.backoffElapsed(Self.token(3)))
        _ = machine.handle(.dialSucceeded(Self.token(4)))
        _ = machine.handle(.attached(Self.token(4)))
        let unavailable = TetherError(code: .identityUnavailable, message: "the session identity provider failed (rejected, greeting example.test:9000): offline")
        // Stale first: another attempt's provider answered late.
        #expect(machine.handle(.identityFailed(Self.token(2), unavailable)) == [])
        #expect(machine.handle(.identityFailed(Self.token(4), unavailable)) == [
            .detach(graceful: false),
            .publish(.reconnecting(attempt: 2, after: Self.delay(2), reason: unavailable)),
            .scheduleBackoff(Self.token(5), after: Self.delay(2)),
        ])
        #expect(machine.handle(.identityFailed(Self.token(4), unavailable)) == [])
        _ = machine.handle(.backoffElapsed(Self.token(5)))
        _ = machine.handle(.dialSucceeded(Self.token(6)))
        _ = machine.handle(.attached(Self.token(6)))
        #expect(machine.handle(.helloRefused(Self.rejected, retryable: false)).contains(.publish(.failed(Self.rejected))))
    }

    @Test("switching user while connected: a graceful detach, everything made before fails, the session starts anew, and attempt 0 dials at once; the next welcome answers the switcher")
    func switchWhileConnected() {
        var machine = Self.greetingMachine(asksIdentity: false)
        _ = machine.handle(.helloAccepted)
        _ = machine.handle(.provedHealthy)
        #expect(machine.handle(.switchSession(Self.switched, asksIdentity: true)) == [
            .detach(graceful: true), .failWaiting(Self.switched), .resetSession, .publish(.connecting), .dial(Self.token(2), endpoint: 0, attempt: 0),
        ])
        #expect(machine.switchWaiting && machine.asksIdentity && machine.phase == .dialing(Self.token(2)))
        _ = machine.handle(.dialSucceeded(Self.token(2)))
        #expect(machine.handle(.attached(Self.token(2))) == [.sendHello(Self.token(2)), .startHeartbeats])
        #expect(machine.handle(.helloAccepted) == [.stopHelloTimer, .countConnection, .publish(ConnectionState(phase: .connected)), .resumeSwitcher, .writeQueued])
        #expect(!machine.switchWaiting)
    }

    @Test("switching user from each other phase", arguments: [
        (greeting, [Machine.Action.detach(graceful: true), .failWaiting(switched), .resetSession, .dial(token(2), endpoint: 0, attempt: 0)]),
        (dialingStart, [.abandonDial, .failWaiting(switched), .resetSession, .dial(token(2), endpoint: 0, attempt: 0)]),
        (backoff, [.cancelBackoff, .failWaiting(switched), .resetSession, .publish(.connecting), .dial(token(3), endpoint: 0, attempt: 0)]),
        (suspendedStart, [.failWaiting(switched), .resetSession, .publish(.connecting), .dial(token(2), endpoint: 0, attempt: 0)]),
        (idle, [.resetSession, .resumeSwitcher]),
        (closedStart, [.failSwitcher(.notConnected)]),
    ])
    func switchFromEachPhase(start: Start, expected: [Machine.Action]) {
        var machine = start.machine()
        #expect(machine.handle(.switchSession(Self.switched, asksIdentity: false)) == expected)
        #expect(machine.switchWaiting == (expected.last.map { if case .dial = $0 { true } else { false } } ?? false))
    }

    @Test("the switcher fails when the connection closes or is suspended first; its cancellation answers it once and changes nothing else")
    func switcherFailures() {
        var closing = Self.healthyStart.machine()
        _ = closing.handle(.switchSession(Self.switched, asksIdentity: false))
        #expect(closing.handle(.close(Self.closedByUser)) == [
            .abandonDial, .failWaiting(Self.closedByUser), .failSwitcher(.error(Self.closedByUser)), .publish(.closed(Self.closedByUser)), .endStreams,
        ])

        var suspending = Self.healthyStart.machine()
        _ = suspending.handle(.switchSession(Self.switched, asksIdentity: false))
        #expect(suspending.handle(.suspend(Self.suspended)) == [.abandonDial, .failSwitcher(.error(Self.openerSuspended)), .publish(.suspended)])

        var cancelled = Self.healthyStart.machine()
        _ = cancelled.handle(.switchSession(Self.switched, asksIdentity: false))
        #expect(cancelled.handle(.switchCancelled) == [.failSwitcher(.cancelled)])
        #expect(cancelled.handle(.switchCancelled) == [])
        #expect(cancelled.phase == .dialing(Self.token(2)))
    }

    @Test("a switch forgets a pending rejection and takes whether the new identity is asked of a provider")
    func switchClearsRejection() {
        var machine = Self.greetingMachine(asksIdentity: true)
        _ = machine.handle(.helloRefused(Self.rejected, retryable: false))
        #expect(machine.rejection != nil)
        _ = machine.handle(.switchSession(Self.switched, asksIdentity: false))
        #expect(machine.rejection == nil && !machine.asksIdentity)
        _ = machine.handle(.dialSucceeded(Self.token(3)))
        _ = machine.handle(.attached(Self.token(3)))
        // Without a provider now: the rejection ends it.
        #expect(machine.handle(.helloRefused(Self.rejected, retryable: false)).contains(.publish(.failed(Self.rejected))))
    }
}
