import Testing
@testable import Tether

/// The app's preparation of each new connection in the client lifecycle, without sockets:
/// the connection is ready only once it returns, and its failure is a failed attempt.
@Suite("Connection state machine: the app's preparation")
struct ConnectionStateMachinePrepareTests {
    typealias Machine = ConnectionStateMachine
    typealias Token = ConnectionStateMachine.Token

    static let endpoint = Endpoint(host: "example.test", port: 9000)
    static let policy = ReconnectPolicy.backoff(initialDelay: .seconds(1), maximumDelay: .seconds(10), jitter: 0)
    static let refused = TetherError(code: .connectFailed, message: "login refused")
    static let reset = TetherError(code: .connectionLost, message: "connection reset by example.test:9000")

    /// A machine that prepares, dialed and attached with token 1.
    static func attached(session: Bool) -> (Machine, [Machine.Action]) {
        var machine = Machine(settings: .init(endpoint: endpoint, policy: policy, greets: session, prepares: true), seed: 7)
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialSucceeded(Token(value: 1)))
        let actions = machine.handle(.attached(Token(value: 1)))
        return (machine, actions)
    }

    @Test("without a session: after the attach, heartbeats and the preparation, still connecting and holding writes; prepared makes it connected, resumes connect() and writes what waits")
    func preparesThenReady() {
        var (machine, actions) = Self.attached(session: false)
        #expect(actions == [.startHeartbeats, .prepare(Token(value: 1))])
        #expect(machine.state == .connecting)
        #expect(machine.isHandshaking)
        // A stale preparation, of another token, is nothing.
        #expect(machine.handle(.prepared(Token(value: 9))) == [])
        #expect(machine.handle(.provedHealthy) == [])
        #expect(machine.handle(.prepared(Token(value: 1))) == [.countConnection, .publish(ConnectionState(phase: .connected)), .resumeOpener, .writeQueued])
        #expect(machine.state.phase == .connected)
        #expect(!machine.isHandshaking)
    }

    @Test("with a session: the preparation starts once the hello is accepted")
    func afterTheHello() {
        var (machine, actions) = Self.attached(session: true)
        #expect(actions == [.sendHello(Token(value: 1)), .startHeartbeats])
        #expect(machine.handle(.helloAccepted) == [.stopHelloTimer, .prepare(Token(value: 1))])
        #expect(machine.state == .connecting)
        #expect(machine.handle(.prepared(Token(value: 1))) == [.countConnection, .publish(ConnectionState(phase: .connected)), .resumeOpener, .writeQueued])
    }

    @Test("a preparation that fails is a failed attempt: detach, back off, and the next attempt prepares again; the first connect fails at once when the policy does not retry it")
    func failure() {
        var (machine, _) = Self.attached(session: false)
        let delay = Self.policy.delay(forAttempt: 1, random: 0)
        #expect(machine.handle(.preparationFailed(Token(value: 1), Self.refused)) == [
            .detach(graceful: false), .publish(.reconnecting(attempt: 1, after: delay, reason: Self.refused)), .scheduleBackoff(Token(value: 2), after: delay),
        ])
        #expect(machine.handle(.backoffElapsed(Token(value: 2))) == [.publish(.connecting), .dial(Token(value: 3), endpoint: 0, attempt: 1)])
        _ = machine.handle(.dialSucceeded(Token(value: 3)))
        #expect(machine.handle(.attached(Token(value: 3))) == [.startHeartbeats, .prepare(Token(value: 3))])

        var once = Machine(settings: .init(endpoint: Self.endpoint, policy: { var policy = Self.policy; policy.appliesToFirstConnect = false; return policy }(), prepares: true), seed: 7)
        _ = once.handle(.connectRequested)
        _ = once.handle(.connectStarted)
        _ = once.handle(.dialSucceeded(Token(value: 1)))
        _ = once.handle(.attached(Token(value: 1)))
        #expect(once.handle(.preparationFailed(Token(value: 1), Self.refused)) == [
            .detach(graceful: false), .failWaiting(Self.refused), .failOpener(.error(Self.refused)), .publish(.closed(Self.refused)), .endStreams,
        ])
    }

    @Test("lost while preparing: the preparation's requests fail, and it is a failed attempt; close and suspend detach it like a handshake")
    func lostWhilePreparing() {
        var (machine, _) = Self.attached(session: false)
        let delay = Self.policy.delay(forAttempt: 1, random: 0)
        #expect(machine.handle(.lost(Self.reset)) == [
            .detach(graceful: false), .failInFlight(Self.reset), .publish(.reconnecting(attempt: 1, after: delay, reason: Self.reset)), .scheduleBackoff(Token(value: 2), after: delay),
        ])
        // The preparation of the detached connection ends later: stale.
        #expect(machine.handle(.preparationFailed(Token(value: 1), Self.reset)) == [])

        var (closing, _) = Self.attached(session: false)
        let closed = TetherError(code: .connectionClosed, message: "closed by close()")
        #expect(closing.handle(.close(closed)).first == .detach(graceful: true))
        #expect(closing.handle(.prepared(Token(value: 1))) == [])
        #expect(closing.hasEnded)
    }
}
