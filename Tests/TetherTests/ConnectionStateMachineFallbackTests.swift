import Testing
@testable import Tether

/// The fallback endpoint in the client lifecycle, without sockets: dialed at once in the same
/// attempt when the attempt's endpoint cannot connect, and left for the main endpoint after
/// the primary retry interval as a planned reconnect.
@Suite("Connection state machine: fallback")
struct ConnectionStateMachineFallbackTests {
    typealias Machine = ConnectionStateMachine
    typealias Token = ConnectionStateMachine.Token

    static let endpoint = Endpoint(host: "example.test", port: 9000)
    static let webSocket = Endpoint(host: "example.test", port: 80, webSocketPath: "/tether")
    static let refused = TetherError(code: .connectionRefused, message: "connection refused by example.test:9000")
    static let reset = TetherError(code: .connectionLost, message: "connection reset by example.test:9000")
    static let leaving = TetherError(code: .connectionLost, message: "the connection over the fallback ws://example.test:80/tether was closed to go back to example.test:9000")
    static let refusedHello = TetherError(code: .sessionRejected, message: "the server refused the session")

    static func make(tls: Bool = false, session: Bool = false) -> Machine {
        let policy = ReconnectPolicy.backoff(initialDelay: .milliseconds(100), multiplier: 2, maximumDelay: .seconds(10), jitter: 0)
        return Machine(settings: .init(
            endpoint: endpoint, policy: policy, secured: tls, greets: session,
            fallback: FallbackPolicy(endpoint: webSocket, primaryRetryInterval: .seconds(60))
        ), seed: 7)
    }

    static func token(_ value: UInt64) -> Token { Token(value: value) }

    @Test("a refused dial dials the fallback at once as the same attempt; connected over it names it and arms the primary retry")
    func fallsBackAtOnce() {
        var machine = Self.make()
        #expect(machine.handle(.connectRequested) == [])
        #expect(machine.handle(.connectStarted) == [.publish(.connecting), .dial(Self.token(1), endpoint: 0, attempt: 0)])
        #expect(machine.handle(.dialFailed(Self.token(1), Self.refused)) == [.dialFinished, .dialFallback(Self.token(2))])
        #expect(machine.phase == .dialing(Self.token(2)))
        #expect(machine.attempt == 0)
        #expect(machine.state == .connecting)
        #expect(machine.handle(.dialSucceeded(Self.token(2))) == [.dialFinished, .attach(Self.token(2))])
        #expect(machine.handle(.attached(Self.token(2))) == [
            .startHeartbeats, .countConnection,
            .publish(ConnectionState(phase: .connected, endpoint: Self.webSocket)),
            .schedulePrimaryRetry(Self.token(3), after: .seconds(60)),
            .resumeOpener, .writeQueued,
        ])
        #expect(machine.state.description == "connected to \(Self.webSocket)")
    }

    @Test("the primary retry detaches gracefully and dials the main endpoint as a fresh attempt; a stale one does nothing")
    func primaryRetry() {
        var machine = Self.make()
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialFailed(Self.token(1), Self.refused))
        _ = machine.handle(.dialSucceeded(Self.token(2)))
        _ = machine.handle(.attached(Self.token(2)))
        #expect(machine.handle(.primaryRetryDue(Self.token(2))) == [])
        #expect(machine.handle(.primaryRetryDue(Self.token(3))) == [
            .detach(graceful: true), .failInFlight(Self.leaving), .publish(.connecting), .dial(Self.token(4), endpoint: 0, attempt: 0),
        ])
        #expect(machine.handle(.primaryRetryDue(Self.token(3))) == [])
        // Connected over the main endpoint: plain connected, no primary retry.
        _ = machine.handle(.dialSucceeded(Self.token(4)))
        #expect(machine.handle(.attached(Self.token(4))) == [.startHeartbeats, .countConnection, .publish(ConnectionState(phase: .connected)), .writeQueued])
        #expect(machine.attempt == 0)
    }

    @Test("when the fallback fails too the attempt fails once: one backoff, attempt 1, and the next attempt starts with the main endpoint")
    func bothFail() {
        var machine = Self.make()
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialFailed(Self.token(1), Self.refused))
        let delay = ReconnectPolicy.backoff(initialDelay: .milliseconds(100), multiplier: 2, maximumDelay: .seconds(10), jitter: 0).delay(forAttempt: 1, random: 0)
        #expect(machine.handle(.dialFailed(Self.token(2), Self.refused)) == [
            .dialFinished, .publish(.reconnecting(attempt: 1, after: delay, reason: Self.refused)), .scheduleBackoff(Self.token(3), after: delay),
        ])
        #expect(machine.handle(.backoffElapsed(Self.token(3))) == [.publish(.connecting), .dial(Self.token(4), endpoint: 0, attempt: 1)])
    }

    @Test("a TLS handshake that breaks falls back; a connection lost after it was ready does not, and reconnects main endpoint first")
    func handshakeResetAndLoss() {
        var machine = Self.make(tls: true)
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialSucceeded(Self.token(1)))
        #expect(machine.handle(.attached(Self.token(1))) == [])
        #expect(machine.handle(.lost(Self.reset)) == [.detach(graceful: false), .dialFallback(Self.token(2))])
        _ = machine.handle(.dialSucceeded(Self.token(2)))
        _ = machine.handle(.attached(Self.token(2)))
        _ = machine.handle(.tlsEstablished)
        _ = machine.handle(.provedHealthy)
        let actions = machine.handle(.lost(Self.reset))
        #expect(actions.first == .detach(graceful: false))
        guard case .backingOff(let backoff, _) = machine.phase else {
            Issue.record("not backing off: \(machine.phase)")
            return
        }
        #expect(machine.handle(.primaryRetryDue(Self.token(3))) == [])
        #expect(machine.handle(.backoffElapsed(backoff)).last == .dial(Token(value: backoff.value + 1), endpoint: 0, attempt: 1))
    }

    @Test("a connection reset or silent before the session hello is answered falls back at once, as the same attempt")
    func lostOrSilentBeforeHelloFallsBack() {
        var machine = Self.make(session: true)
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialSucceeded(Self.token(1)))
        _ = machine.handle(.attached(Self.token(1)))
        #expect(machine.phase == .greeting(Self.token(1)))
        #expect(machine.handle(.lost(Self.reset)) == [.detach(graceful: false), .dialFallback(Self.token(2))])
        #expect(machine.attempt == 0)
        #expect(machine.state == .connecting)
        // The fallback's own greeting times out: the attempt fails once.
        _ = machine.handle(.dialSucceeded(Self.token(2)))
        _ = machine.handle(.attached(Self.token(2)))
        let silent = TetherError(code: .handshakeTimeout, message: "no answer to the session hello")
        let actions = machine.handle(.helloTimedOut(Self.token(2), silent))
        #expect(actions.first == .detach(graceful: false))
        #expect(!actions.contains { if case .dialFallback = $0 { true } else { false } })
        #expect(machine.attempt == 1)

        var silentFirst = Self.make(session: true)
        _ = silentFirst.handle(.connectRequested)
        _ = silentFirst.handle(.connectStarted)
        _ = silentFirst.handle(.dialSucceeded(Self.token(1)))
        _ = silentFirst.handle(.attached(Self.token(1)))
        #expect(silentFirst.handle(.helloTimedOut(Self.token(1), silent)) == [.detach(graceful: false), .dialFallback(Self.token(2))])
    }

    @Test("a connection lost before anything arrived from the main endpoint falls back at once as a fresh connecting, counting nothing")
    func lostBeforeHealthyFallsBack() {
        var machine = Self.make()
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialSucceeded(Self.token(1)))
        _ = machine.handle(.attached(Self.token(1)))
        #expect(machine.state.phase == .connected)
        #expect(machine.handle(.lost(Self.reset)) == [
            .detach(graceful: false), .failInFlight(Self.reset), .publish(.connecting), .dialFallback(Self.token(2)),
        ])
        #expect(machine.attempt == 0)
        _ = machine.handle(.dialSucceeded(Self.token(2)))
        #expect(machine.handle(.attached(Self.token(2))) == [
            .startHeartbeats, .countConnection,
            .publish(ConnectionState(phase: .connected, endpoint: Self.webSocket)),
            .schedulePrimaryRetry(Self.token(3), after: .seconds(60)),
            .writeQueued,
        ])
        // Lost over the fallback before it proved healthy: an ordinary failed attempt.
        let actions = machine.handle(.lost(Self.reset))
        #expect(!actions.contains { if case .dialFallback = $0 { true } else { false } })
        #expect(machine.attempt == 1)
    }

    @Test("a session hello refused over the main endpoint is the attempt's failure, not a reason to fall back")
    func helloRefusedDoesNotFallBack() {
        var machine = Self.make(session: true)
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialSucceeded(Self.token(1)))
        _ = machine.handle(.attached(Self.token(1)))
        let actions = machine.handle(.helloRefused(Self.refusedHello, retryable: true))
        #expect(!actions.contains { if case .dialFallback = $0 { true } else { false } })
        #expect(machine.attempt == 1)
    }
}
