import Testing
@testable import Tether

/// The client lifecycle without sockets: every legal (phase, event) pair with its exact
/// actions and resulting phase, the stale events, the attempt budget, the first-connect rules
/// and the endpoint rotation.
@Suite("Connection state machine")
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    typealias Token = ConnectionStateMachine.Token

    static let endpoint = Endpoint(host: "example.test", port: 9000)
    static let refused = TetherError(code: .connectionRefused, message: "connection refused by example.test:9000")
    static let peerClosed = TetherError(code: .peerClosed, message: "peer 127.0.0.1:9000 closed the connection")
    static let closedByUser = TetherError(code: .connectionClosed, message: "connection to 127.0.0.1:9000 closed by close()")
    static let suspended = TetherError(code: .connectionLost, message: "the connection to example.test:9000 was suspended by suspend()")
    static let openerSuspended = TetherError(code: .notConnected, message: "connecting to example.test:9000 was suspended by suspend()")
    static let cancelled = TetherError(code: .connectFailed, message: "connecting to example.test:9000 was cancelled")

    /// 100 ms, then ×2, without jitter.
    static func policy(attempts: Int? = nil, firstConnect: Bool = true) -> ReconnectPolicy {
        var policy = ReconnectPolicy.backoff(initialDelay: .milliseconds(100), multiplier: 2, maximumDelay: .seconds(10), jitter: 0, maximumAttempts: attempts)
        policy.appliesToFirstConnect = firstConnect
        return policy
    }

    static func delay(_ attempt: Int) -> Duration { policy().delay(forAttempt: attempt, random: 0) }

    static func token(_ value: UInt64) -> Token { Token(value: value) }

    static func make(
        tls: Bool = false,
        session: Bool = false,
        policy: ReconnectPolicy = policy(),
        endpoints: Int = 1
    ) -> Machine {
        Machine(settings: .init(endpoint: endpoint, endpointCount: endpoints, policy: policy, secured: tls, greets: session), seed: 7)
    }

    // MARK: Getting to each phase

    /// A phase to start from, how to get there, and the token of its attempt or backoff.
    struct Start: CustomTestStringConvertible, Sendable {
        var name: String
        var tls = false
        var session = false
        var build: @Sendable (inout Machine) -> Void
        var testDescription: String { name }

        func machine(policy: ReconnectPolicy = ConnectionStateMachineTests.policy()) -> Machine {
            var machine = ConnectionStateMachineTests.make(tls: tls, session: session, policy: policy)
            build(&machine)
            return machine
        }
    }

    static func opened(_ m: inout Machine) { _ = m.handle(.connectRequested) }
    static func dialing(_ m: inout Machine) { opened(&m); _ = m.handle(.connectStarted) }
    static func attached(_ m: inout Machine) {
        dialing(&m)
        _ = m.handle(.dialSucceeded(token(1)))
        _ = m.handle(.attached(token(1)))
    }
    static func connected(_ m: inout Machine) {
        attached(&m)
        if case .securing = m.phase { _ = m.handle(.tlsEstablished) }
        if case .greeting = m.phase { _ = m.handle(.helloAccepted) }
    }
    static func healthy(_ m: inout Machine) { connected(&m); _ = m.handle(.provedHealthy) }
    /// Lost after proving healthy: backoff token 2 before attempt 1.
    static func backingOff(_ m: inout Machine) { healthy(&m); _ = m.handle(.lost(peerClosed)) }
    static func suspendedPhase(_ m: inout Machine) { healthy(&m); _ = m.handle(.suspend(suspended)) }
    static func closed(_ m: inout Machine) { healthy(&m); _ = m.handle(.close(closedByUser)) }

    static let idle = Start(name: "idle") { _ in }
    static let idleOpened = Start(name: "idle, connect() called") { opened(&$0) }
    static let dialingStart = Start(name: "dialing") { dialing(&$0) }
    static let securing = Start(name: "securing", tls: true) { attached(&$0) }
    static let greeting = Start(name: "greeting", session: true) { attached(&$0) }
    static let securedGreeting = Start(name: "greeting after TLS", tls: true, session: true) { attached(&$0); _ = $0.handle(.tlsEstablished) }
    static let unhealthy = Start(name: "connected, not yet healthy") { connected(&$0) }
    static let healthyStart = Start(name: "connected, healthy") { healthy(&$0) }
    static let backoff = Start(name: "backing off") { backingOff(&$0) }
    static let suspendedStart = Start(name: "suspended") { suspendedPhase(&$0) }
    static let closedStart = Start(name: "closed") { closed(&$0) }
    static let closedBeforeConnect = Start(name: "closed before connect()") { _ = $0.handle(.close(closedByUser)) }

    static let allPhases = [
        idle, idleOpened, dialingStart, securing, greeting, securedGreeting, unhealthy, healthyStart,
        backoff, suspendedStart, closedStart,
    ]

    // MARK: Opening

    @Test("connect() opens the idle machine once; a second connect() is refused in every phase", arguments: allPhases)
    func secondConnectRefused(start: Start) {
        var machine = start.machine()
        if start.name == "idle" {
            #expect(machine.handle(.connectRequested) == [])
            #expect(machine.opened && machine.phase == .idle)
        }
        let before = machine.phase
        #expect(machine.handle(.connectRequested) == [.refuseConnect])
        #expect(machine.phase == before)
    }

    @Test("connectStarted dials the first endpoint as attempt 0 and publishes connecting")
    func connectStarted() {
        var machine = Self.make()
        Self.opened(&machine)
        #expect(machine.handle(.connectStarted) == [.publish(.connecting), .dial(Self.token(1), endpoint: 0, attempt: 0)])
        #expect(machine.phase == .dialing(Self.token(1)))
        #expect(machine.openerWaiting)
        #expect(machine.state == .connecting)
    }

    @Test("connect() after close(): the opener fails at once instead of waiting for a dial that never comes")
    func connectAfterClose() {
        var machine = Self.make()
        _ = machine.handle(.close(Self.closedByUser))
        #expect(machine.handle(.connectRequested) == [])
        #expect(machine.handle(.connectStarted) == [.failOpener(.notConnected)])
        #expect(machine.phase == .ended(.closed(Self.closedByUser)))
    }

    @Test("connectAborted ends an opened idle machine without dialing; after an end it does nothing")
    func connectAborted() {
        let error = TetherError(code: .invalidArgument, message: "no serial")
        var machine = Self.make()
        Self.opened(&machine)
        #expect(machine.handle(.connectAborted(error)) == [.failWaiting(error), .publish(.closed(error)), .endStreams])
        #expect(machine.phase == .ended(.closed(error)))
        #expect(machine.handle(.connectAborted(error)) == [])
        var closedFirst = Self.make()
        _ = closedFirst.handle(.close(Self.closedByUser))
        _ = closedFirst.handle(.connectRequested)
        #expect(closedFirst.handle(.connectAborted(error)) == [])
    }

    @Test("cancelling connect() while the opener waits fails it with CancellationError and ends the connection")
    func connectCancelled() {
        let end: [Machine.Action] = [.failWaiting(Self.cancelled), .publish(.closed(Self.cancelled)), .endStreams]
        var dialing = Self.dialingStart.machine()
        #expect(dialing.handle(.connectCancelled) == [.failOpener(.cancelled), .abandonDial] + end)
        var securing = Self.securing.machine()
        #expect(securing.handle(.connectCancelled) == [.failOpener(.cancelled), .detach(graceful: false)] + end)
        var greeting = Self.greeting.machine()
        #expect(greeting.handle(.connectCancelled) == [.failOpener(.cancelled), .detach(graceful: false)] + end)
        var retrying = Self.dialingStart.machine()
        _ = retrying.handle(.dialFailed(Self.token(1), Self.refused))
        #expect(retrying.handle(.connectCancelled) == [.failOpener(.cancelled), .cancelBackoff] + end)
        #expect(retrying.phase == .ended(.closed(Self.cancelled)))
    }

    @Test("a cancellation of connect() after it returned or failed is stale", arguments: [idle, unhealthy, healthyStart, backoff, suspendedStart, closedStart])
    func lateCancellation(start: Start) {
        var machine = start.machine()
        let before = machine.phase
        #expect(machine.handle(.connectCancelled) == [])
        #expect(machine.phase == before)
    }

    // MARK: Dialing and handshakes

    @Test("a dial that succeeds attaches; one that fails schedules attempt 1 on the next endpoint")
    func dialResults() {
        var success = Self.dialingStart.machine()
        #expect(success.handle(.dialSucceeded(Self.token(1))) == [.dialFinished, .attach(Self.token(1))])
        #expect(success.phase == .attaching(Self.token(1)))
        #expect(success.isHandshaking)

        var failure = Self.dialingStart.machine()
        let reconnecting = ConnectionState.reconnecting(attempt: 1, after: Self.delay(1), reason: Self.refused)
        #expect(failure.handle(.dialFailed(Self.token(1), Self.refused)) == [.dialFinished, .publish(reconnecting), .scheduleBackoff(Self.token(2), after: .milliseconds(100))])
        #expect(failure.phase == .backingOff(Self.token(2), reconnecting))
        #expect(failure.attempt == 1 && failure.endpointIndex == 1)
    }

    @Test("attaching: plain goes straight to ready, TLS arms its timer, a session sends the hello; a failed attach is a failed attempt")
    func attaching() {
        let ready: [Machine.Action] = [.countConnection, .publish(ConnectionState(phase: .connected)), .resumeOpener, .writeQueued]
        var plain = Self.dialingStart.machine()
        _ = plain.handle(.dialSucceeded(Self.token(1)))
        #expect(plain.handle(.attached(Self.token(1))) == [.startHeartbeats] + ready)
        #expect(plain.phase == .connected(healthy: false) && !plain.openerWaiting && plain.hasConnected)

        var tls = Self.make(tls: true)
        Self.dialing(&tls)
        _ = tls.handle(.dialSucceeded(Self.token(1)))
        #expect(tls.handle(.attached(Self.token(1))) == [])
        #expect(tls.phase == .securing(Self.token(1)) && tls.isHandshaking && tls.state == .connecting)

        var session = Self.make(session: true)
        Self.dialing(&session)
        _ = session.handle(.dialSucceeded(Self.token(1)))
        #expect(session.handle(.attached(Self.token(1))) == [.sendHello(Self.token(1)), .startHeartbeats])
        #expect(session.phase == .greeting(Self.token(1)) && session.isGreeting && session.isHandshaking)

        var broken = Self.dialingStart.machine()
        _ = broken.handle(.dialSucceeded(Self.token(1)))
        let reconnecting = ConnectionState.reconnecting(attempt: 1, after: Self.delay(1), reason: Self.refused)
        #expect(broken.handle(.dialFailed(Self.token(1), Self.refused)) == [.publish(reconnecting), .scheduleBackoff(Self.token(2), after: Self.delay(1))])
        #expect(broken.endpointIndex == 1)
    }

    @Test("TLS established: the timer stops, then the hello or ready")
    func tlsEstablished() {
        var plain = Self.securing.machine()
        #expect(plain.handle(.tlsEstablished) == [.startHeartbeats, .countConnection, .publish(ConnectionState(phase: .connected)), .resumeOpener, .writeQueued])
        #expect(plain.phase == .connected(healthy: false))
        var session = Self.make(tls: true, session: true)
        Self.attached(&session)
        #expect(session.handle(.tlsEstablished) == [.sendHello(Self.token(1)), .startHeartbeats])
        #expect(session.phase == .greeting(Self.token(1)))
    }

    @Test("the handshake timers fail the attempt when theirs is current, and are stale otherwise")
    func handshakeTimeouts() {
        let timeout = TetherError(code: .timedOut, message: "handshake timed out")
        let failedAttempt: [Machine.Action] = [
            .detach(graceful: false),
            .publish(.reconnecting(attempt: 1, after: Self.delay(1), reason: timeout)),
            .scheduleBackoff(Self.token(2), after: Self.delay(1)),
        ]
        // The channel bounds the TLS handshake and reports its timeout as a loss.
        var tls = Self.securing.machine()
        #expect(tls.handle(.helloTimedOut(Self.token(1), timeout)) == [])
        #expect(tls.handle(.lost(timeout)) == failedAttempt)
        var hello = Self.greeting.machine()
        #expect(hello.handle(.helloTimedOut(Self.token(9), timeout)) == [])
        #expect(hello.handle(.helloTimedOut(Self.token(1), timeout)) == failedAttempt)
        // The hello timer read the welcome.
        var welcomed = Self.greeting.machine()
        _ = welcomed.handle(.helloAccepted)
        #expect(welcomed.handle(.helloTimedOut(Self.token(1), timeout)) == [])
        #expect(welcomed.phase == .connected(healthy: false))
    }

    @Test("the hello: accepted is ready, refused for now is a failed attempt, rejected for good fails the connection")
    func helloAnswers() {
        var accepted = Self.greeting.machine()
        #expect(accepted.handle(.helloAccepted) == [.stopHelloTimer, .countConnection, .publish(ConnectionState(phase: .connected)), .resumeOpener, .writeQueued])
        #expect(accepted.phase == .connected(healthy: false))

        let busy = TetherError(code: .sessionRejected, message: "could not resume now")
        var retry = Self.greeting.machine()
        #expect(retry.handle(.helloRefused(busy, retryable: true)) == [
            .detach(graceful: false),
            .publish(.reconnecting(attempt: 1, after: Self.delay(1), reason: busy)),
            .scheduleBackoff(Self.token(2), after: Self.delay(1)),
        ])
        #expect(retry.endpointIndex == 1 && retry.openerWaiting)

        let rejected = TetherError(code: .sessionRejected, message: "rejected the session")
        var final = Self.greeting.machine()
        #expect(final.handle(.helloRefused(rejected, retryable: false)) == [
            .detach(graceful: false), .failWaiting(rejected), .failOpener(.error(rejected)), .publish(.failed(rejected)), .endStreams,
        ])
        #expect(final.phase == .ended(.failed(rejected)))
    }

    @Test("a valid frame proves health once, after the handshakes only, and resets the attempt count")
    func provedHealthy() {
        var machine = Self.dialingStart.machine()
        _ = machine.handle(.dialFailed(Self.token(1), Self.refused))
        _ = machine.handle(.backoffElapsed(Self.token(2)))
        _ = machine.handle(.dialSucceeded(Self.token(3)))
        _ = machine.handle(.attached(Self.token(3)))
        #expect(machine.attempt == 1 && !machine.isHealthy)
        let transitions = machine.transitions
        #expect(machine.handle(.provedHealthy) == [])
        #expect(machine.isHealthy && machine.attempt == 0 && machine.transitions == transitions + 1)
        #expect(machine.handle(.provedHealthy) == [])
        #expect(machine.transitions == transitions + 1)
        for start in [Self.securing, Self.greeting] {
            var handshaking = start.machine()
            #expect(handshaking.handle(.provedHealthy) == [])
            #expect(handshaking.phase == .securing(Self.token(1)) || handshaking.phase == .greeting(Self.token(1)))
        }
    }

    // MARK: Losses

    @Test("a healthy connection lost: in-flight requests fail, attempt 1 after the initial delay, on the next endpoint")
    func lostHealthy() {
        var machine = Self.healthyStart.machine()
        let reconnecting = ConnectionState.reconnecting(attempt: 1, after: Self.delay(1), reason: Self.peerClosed)
        #expect(machine.handle(.lost(Self.peerClosed)) == [
            .detach(graceful: false), .failInFlight(Self.peerClosed), .publish(reconnecting), .scheduleBackoff(Self.token(2), after: Self.delay(1)),
        ])
        #expect(machine.phase == .backingOff(Self.token(2), reconnecting))
        #expect(machine.endpointIndex == 1 && machine.attempt == 1)
    }

    @Test("a connection lost before it proved healthy spends one more attempt and moves on to the next endpoint")
    func lostUnhealthy() {
        var machine = Self.make(endpoints: 2)
        Self.dialing(&machine)
        _ = machine.handle(.dialFailed(Self.token(1), Self.refused))
        _ = machine.handle(.backoffElapsed(Self.token(2)))
        _ = machine.handle(.dialSucceeded(Self.token(3)))
        _ = machine.handle(.attached(Self.token(3)))
        #expect(machine.attempt == 1 && machine.endpointIndex == 1)
        let reconnecting = ConnectionState.reconnecting(attempt: 2, after: Self.delay(2), reason: Self.peerClosed)
        #expect(machine.handle(.lost(Self.peerClosed)) == [
            .detach(graceful: false), .failInFlight(Self.peerClosed), .publish(reconnecting), .scheduleBackoff(Self.token(4), after: Self.delay(2)),
        ])
        #expect(machine.endpointIndex == 2)
        #expect(machine.handle(.backoffElapsed(Self.token(4))) == [.publish(.connecting), .dial(Self.token(5), endpoint: 0, attempt: 2)])
    }

    @Test("lost during a handshake: a failed attempt, nothing in flight to fail", arguments: [securing, greeting, securedGreeting])
    func lostDuringHandshake(start: Start) {
        var machine = start.machine()
        #expect(machine.handle(.lost(Self.peerClosed)) == [
            .detach(graceful: false),
            .publish(.reconnecting(attempt: 1, after: Self.delay(1), reason: Self.peerClosed)),
            .scheduleBackoff(Self.token(2), after: Self.delay(1)),
        ])
        #expect(machine.endpointIndex == 1)
    }

    @Test("a loss reported when no channel is attached is stale", arguments: [idle, idleOpened, dialingStart, backoff, suspendedStart, closedStart])
    func staleLoss(start: Start) {
        var machine = start.machine()
        let before = machine.phase
        let transitions = machine.transitions
        #expect(machine.handle(.lost(Self.peerClosed)) == [])
        #expect(machine.phase == before && machine.transitions == transitions)
    }

    @Test("with reconnecting disabled a loss closes the connection")
    func lostWithoutReconnect() {
        var machine = Self.make(policy: .disabled)
        Self.healthy(&machine)
        #expect(machine.handle(.lost(Self.peerClosed)) == [
            .detach(graceful: false), .failInFlight(Self.peerClosed), .failWaiting(Self.peerClosed), .publish(.closed(Self.peerClosed)), .endStreams,
        ])
        #expect(machine.phase == .ended(.closed(Self.peerClosed)))
    }

    // MARK: Backoff and stale results

    @Test("the backoff elapses into the next attempt; a dial of an abandoned attempt is stale")
    func backoffAndStaleDial() {
        var machine = Self.backoff.machine()
        #expect(machine.handle(.backoffElapsed(Self.token(1))) == [])
        #expect(machine.handle(.backoffElapsed(Self.token(2))) == [.publish(.connecting), .dial(Self.token(3), endpoint: 0, attempt: 1)])
        #expect(machine.handle(.backoffElapsed(Self.token(2))) == [])
        // suspend() abandons attempt 3; resume() starts attempt 4; attempt 3's results come late.
        _ = machine.handle(.suspend(Self.suspended))
        _ = machine.handle(.resume)
        #expect(machine.phase == .dialing(Self.token(4)))
        let transitions = machine.transitions
        #expect(machine.handle(.dialSucceeded(Self.token(3))) == [])
        #expect(machine.handle(.dialFailed(Self.token(3), Self.refused)) == [])
        #expect(machine.phase == .dialing(Self.token(4)) && machine.transitions == transitions)
    }

    @Test("a dial result, handshake timeout or backoff expiry with a token that is not current gets no action, in every phase", arguments: allPhases)
    func staleTokens(start: Start) {
        var machine = start.machine()
        let before = machine.phase
        let transitions = machine.transitions
        let old = Self.token(99)
        let events: [Machine.Event] = [
            .dialSucceeded(old), .dialFailed(old, Self.refused),
            .helloTimedOut(old, Self.refused), .backoffElapsed(old),
        ]
        for event in events {
            #expect(machine.handle(event) == [], "\(start.name): \(event)")
        }
        #expect(machine.phase == before && machine.transitions == transitions)
    }

    @Test("while attaching, a second connect() is still refused")
    func attachingRefusesConnect() {
        var machine = Self.dialingStart.machine()
        _ = machine.handle(.dialSucceeded(Self.token(1)))
        #expect(machine.handle(.connectRequested) == [.refuseConnect])
        #expect(machine.phase == .attaching(Self.token(1)))
    }

    @Test("a close() during a backoff never reconnects: the timer's late expiry and the dial are stale")
    func closeDuringBackoff() {
        var machine = Self.backoff.machine()
        #expect(machine.handle(.close(Self.closedByUser)) == [.cancelBackoff, .failWaiting(Self.closedByUser), .publish(.closed(Self.closedByUser)), .endStreams])
        #expect(machine.handle(.backoffElapsed(Self.token(2))) == [])
        #expect(machine.handle(.reconnectNow) == [])
        #expect(machine.handle(.resume) == [])
        #expect(machine.phase == .ended(.closed(Self.closedByUser)))
    }

    // MARK: Budget and first connect

    @Test("the budget: maximumAttempts failures in a row, then failed with the count and the last reason")
    func budgetExhausted() {
        var machine = Self.make(policy: Self.policy(attempts: 2))
        Self.dialing(&machine)
        _ = machine.handle(.dialFailed(Self.token(1), Self.refused))
        #expect(machine.handle(.backoffElapsed(Self.token(2))) == [.publish(.connecting), .dial(Self.token(3), endpoint: 0, attempt: 1)])
        #expect(machine.handle(.dialFailed(Self.token(3), Self.refused)) == [
            .dialFinished, .publish(.reconnecting(attempt: 2, after: Self.delay(2), reason: Self.refused)), .scheduleBackoff(Self.token(4), after: Self.delay(2)),
        ])
        _ = machine.handle(.backoffElapsed(Self.token(4)))
        let gaveUp = TetherError(code: .connectionRefused, message: "gave up on example.test:9000 after 2 reconnect attempts: connection refused by example.test:9000")
        #expect(machine.handle(.dialFailed(Self.token(5), Self.refused)) == [
            .dialFinished, .failWaiting(gaveUp), .failOpener(.error(gaveUp)), .publish(.failed(gaveUp)), .endStreams,
        ])
        #expect(machine.phase == .ended(.failed(gaveUp)))
        #expect(machine.state.isFinal)
    }

    @Test("a budget of one attempt says 'attempt', singular; a healthy exchange starts the count again")
    func budgetResetsWhenHealthy() {
        var machine = Self.make(policy: Self.policy(attempts: 1))
        Self.healthy(&machine)
        for _ in 1...3 {
            _ = machine.handle(.lost(Self.peerClosed))
            guard case .backingOff(let token, let state) = machine.phase else {
                Issue.record("not backing off: \(machine.phase)")
                return
            }
            #expect(state.attempt == 1)
            _ = machine.handle(.backoffElapsed(token))
            guard case .dialing(let dial) = machine.phase else { return }
            _ = machine.handle(.dialSucceeded(dial))
            _ = machine.handle(.attached(dial))
            _ = machine.handle(.provedHealthy)
        }
        _ = machine.handle(.lost(Self.peerClosed))
        guard case .backingOff(let token, _) = machine.phase else { return }
        _ = machine.handle(.backoffElapsed(token))
        guard case .dialing(let dial) = machine.phase else { return }
        let gaveUp = TetherError(code: .connectionRefused, message: "gave up on example.test:9000 after 1 reconnect attempt: connection refused by example.test:9000")
        #expect(machine.handle(.dialFailed(dial, Self.refused)) == [.dialFinished, .failWaiting(gaveUp), .publish(.failed(gaveUp)), .endStreams])
    }

    @Test("never healthy: an accepting peer that fails spends the budget like a refusing one")
    func unhealthyPeerSpendsBudget() {
        var machine = Self.make(policy: Self.policy(attempts: 3))
        Self.connected(&machine)
        var attempts: [Int] = []
        while case .connected = machine.phase {
            _ = machine.handle(.lost(Self.peerClosed))
            guard case .backingOff(let token, let state) = machine.phase else { break }
            attempts.append(state.attempt ?? 0)
            _ = machine.handle(.backoffElapsed(token))
            guard case .dialing(let dial) = machine.phase else { break }
            _ = machine.handle(.dialSucceeded(dial))
            _ = machine.handle(.attached(dial))
        }
        #expect(attempts == [1, 2, 3])
        #expect(machine.state.phase == .failed)
        #expect(machine.state.reason?.message == "gave up on example.test:9000 after 3 reconnect attempts: peer 127.0.0.1:9000 closed the connection")
    }

    @Test("appliesToFirstConnect off: the first failure closes at once; once connected, failures retry")
    func firstConnectRules() {
        var first = Self.make(policy: Self.policy(firstConnect: false))
        Self.dialing(&first)
        #expect(first.handle(.dialFailed(Self.token(1), Self.refused)) == [
            .dialFinished, .failWaiting(Self.refused), .failOpener(.error(Self.refused)), .publish(.closed(Self.refused)), .endStreams,
        ])
        #expect(first.phase == .ended(.closed(Self.refused)))

        var handshake = Self.make(tls: true, policy: Self.policy(firstConnect: false))
        Self.attached(&handshake)
        #expect(handshake.handle(.lost(Self.peerClosed)) == [
            .detach(graceful: false), .failWaiting(Self.peerClosed), .failOpener(.error(Self.peerClosed)), .publish(.closed(Self.peerClosed)), .endStreams,
        ])

        var later = Self.make(policy: Self.policy(firstConnect: false))
        Self.healthy(&later)
        _ = later.handle(.lost(Self.peerClosed))
        _ = later.handle(.backoffElapsed(Self.token(2)))
        #expect(later.handle(.dialFailed(Self.token(3), Self.refused)) == [
            .dialFinished, .publish(.reconnecting(attempt: 2, after: Self.delay(2), reason: Self.refused)), .scheduleBackoff(Self.token(4), after: Self.delay(2)),
        ])

        var disabled = Self.make(policy: .disabled)
        Self.dialing(&disabled)
        #expect(disabled.handle(.dialFailed(Self.token(1), Self.refused)) == [
            .dialFinished, .failWaiting(Self.refused), .failOpener(.error(Self.refused)), .publish(.closed(Self.refused)), .endStreams,
        ])
    }

    @Test("endpoints rotate on every failed dial and on every loss, healthy or not")
    func endpointRotation() {
        var machine = Self.make(endpoints: 3)
        Self.dialing(&machine)
        var dialed: [Int] = []
        for _ in 0..<4 {
            guard case .dialing(let token) = machine.phase else { break }
            _ = machine.handle(.dialFailed(token, Self.refused))
            guard case .backingOff(let backoff, _) = machine.phase else { break }
            let actions = machine.handle(.backoffElapsed(backoff))
            for case .dial(_, let endpoint, _) in actions { dialed.append(endpoint) }
        }
        #expect(dialed == [1, 2, 0, 1])
        guard case .dialing(let token) = machine.phase else { return }
        _ = machine.handle(.dialSucceeded(token))
        _ = machine.handle(.attached(token))
        _ = machine.handle(.provedHealthy)
        _ = machine.handle(.lost(Self.peerClosed))
        guard case .backingOff(let backoff, _) = machine.phase else { return }
        #expect(machine.handle(.backoffElapsed(backoff)).contains(.dial(Self.token(backoff.value + 1), endpoint: 2, attempt: 1)))
    }

    // MARK: suspend(), resume(), reconnectNow(), close() from every phase

    @Test("suspend() from each phase: stops what is under way, fails what is in flight and a waiting opener; nothing where it has nothing to do")
    func suspendEverywhere() {
        let publish: Machine.Action = .publish(.suspended)
        let opener: Machine.Action = .failOpener(.error(Self.openerSuspended))
        let expected: [(Start, [Machine.Action])] = [
            (Self.idle, []),
            (Self.idleOpened, []),
            (Self.dialingStart, [.abandonDial, opener, publish]),
            (Self.securing, [.detach(graceful: true), .failInFlight(Self.suspended), opener, publish]),
            (Self.greeting, [.detach(graceful: true), .failInFlight(Self.suspended), opener, publish]),
            (Self.unhealthy, [.detach(graceful: true), .failInFlight(Self.suspended), publish]),
            (Self.healthyStart, [.detach(graceful: true), .failInFlight(Self.suspended), publish]),
            (Self.backoff, [.cancelBackoff, publish]),
            (Self.suspendedStart, []),
            (Self.closedStart, []),
        ]
        for (start, actions) in expected {
            var machine = start.machine()
            let before = machine.phase
            let attempt = machine.attempt
            #expect(machine.handle(.suspend(Self.suspended)) == actions, "\(start.name)")
            #expect(machine.phase == (actions.isEmpty ? before : .suspended), "\(start.name)")
            #expect(machine.attempt == attempt, "\(start.name)")
            #expect(!machine.openerWaiting, "\(start.name)")
        }
    }

    @Test("resume() and reconnectNow() from each phase: a fresh budget and an attempt at once where there is none under way")
    func resumeAndReconnectNowEverywhere() {
        for start in Self.allPhases {
            for event in [Machine.Event.resume, .reconnectNow] {
                var machine = start.machine()
                let before = machine.phase
                let actions = machine.handle(event)
                switch (before, event) {
                case (.suspended, _):
                    #expect(actions == [.publish(.connecting), .dial(Self.token(2), endpoint: 0, attempt: 0)], "\(start.name) \(event)")
                    #expect(machine.phase == .dialing(Self.token(2)) && machine.attempt == 0)
                case (.backingOff(let token, _), .reconnectNow):
                    #expect(actions == [.cancelBackoff, .publish(.connecting), .dial(Self.token(token.value + 1), endpoint: 0, attempt: 0)], "\(start.name)")
                    #expect(machine.attempt == 0)
                default:
                    #expect(actions == [], "\(start.name) \(event)")
                    #expect(machine.phase == before, "\(start.name) \(event)")
                }
            }
        }
    }

    @Test("racing reconnectNow() and resume() start exactly one attempt")
    func oneAttemptOnly() {
        var machine = Self.backoff.machine()
        var dials = 0
        for index in 0..<50 {
            let actions = machine.handle(index % 2 == 0 ? .reconnectNow : .resume)
            dials += actions.filter { if case .dial = $0 { true } else { false } }.count
        }
        #expect(dials == 1)
    }

    @Test("close() from each phase: stops what is under way, gracefully; fails what waits; ends for good; idempotent")
    func closeEverywhere() {
        let end: [Machine.Action] = [.failWaiting(Self.closedByUser)]
        let tail: [Machine.Action] = [.publish(.closed(Self.closedByUser)), .endStreams]
        let opener: Machine.Action = .failOpener(.error(Self.closedByUser))
        let expected: [(Start, [Machine.Action])] = [
            (Self.idle, end + tail),
            (Self.idleOpened, end + tail),
            (Self.dialingStart, [.abandonDial] + end + [opener] + tail),
            (Self.securing, [.detach(graceful: true)] + end + [opener] + tail),
            (Self.greeting, [.detach(graceful: true)] + end + [opener] + tail),
            (Self.securedGreeting, [.detach(graceful: true)] + end + [opener] + tail),
            (Self.unhealthy, [.detach(graceful: true)] + end + tail),
            (Self.healthyStart, [.detach(graceful: true)] + end + tail),
            (Self.backoff, [.cancelBackoff] + end + tail),
            (Self.suspendedStart, end + tail),
            (Self.closedStart, []),
        ]
        for (start, actions) in expected {
            var machine = start.machine()
            let before = machine.phase
            #expect(machine.handle(.close(Self.closedByUser)) == actions, "\(start.name)")
            if start.name == "closed" {
                #expect(machine.phase == before)
            } else {
                #expect(machine.phase == .ended(.closed(Self.closedByUser)), "\(start.name)")
            }
            #expect(machine.handle(.close(Self.closedByUser)) == [], "\(start.name)")
        }
    }

    @Test("after the end every event that can still arrive is stale", arguments: [closedStart, closedBeforeConnect])
    func endedIsQuiet(start: Start) {
        var machine = start.machine()
        let before = machine.phase
        let events: [Machine.Event] = [
            .connectCancelled, .dialSucceeded(Self.token(1)), .dialFailed(Self.token(1), Self.refused),
            .helloTimedOut(Self.token(1), Self.refused),
            .lost(Self.peerClosed), .backoffElapsed(Self.token(2)), .suspend(Self.suspended), .resume, .reconnectNow,
            .close(Self.closedByUser),
        ]
        for event in events {
            #expect(machine.handle(event) == [], "\(event)")
        }
        #expect(machine.phase == before)
    }

    // MARK: Published state and jitter

    @Test("the state published for each phase")
    func publishedStates() {
        let expected: [(Start, ConnectionState)] = [
            (Self.idle, .idle), (Self.idleOpened, .idle), (Self.dialingStart, .connecting), (Self.securing, .connecting),
            (Self.greeting, .connecting), (Self.unhealthy, .connectedUnnamed), (Self.healthyStart, .connectedUnnamed),
            (Self.backoff, .reconnecting(attempt: 1, after: Self.delay(1), reason: Self.peerClosed)),
            (Self.suspendedStart, .suspended), (Self.closedStart, .closed(Self.closedByUser)),
        ]
        for (start, state) in expected {
            #expect(start.machine().state == state, "\(start.name)")
        }
    }

    @Test("the jitter comes from the machine's seed: the same seed gives the same delays, each within the policy's band")
    func jitterIsData() {
        var policy = ReconnectPolicy.backoff(initialDelay: .seconds(1), multiplier: 1, jitter: 0.2)
        policy.maximumAttempts = nil
        func delays(seed: UInt64) -> [Duration] {
            var machine = Machine(settings: .init(endpoint: Self.endpoint, policy: policy), seed: seed)
            Self.dialing(&machine)
            var seen: [Duration] = []
            for _ in 0..<20 {
                guard case .dialing(let token) = machine.phase else { break }
                for case .scheduleBackoff(let backoff, let delay) in machine.handle(.dialFailed(token, Self.refused)) {
                    seen.append(delay)
                    _ = machine.handle(.backoffElapsed(backoff))
                }
            }
            return seen
        }
        let first = delays(seed: 1)
        #expect(first.count == 20)
        #expect(first == delays(seed: 1))
        #expect(first != delays(seed: 2))
        #expect(first.allSatisfy { $0 >= .milliseconds(800) && $0 <= .milliseconds(1200) })
    }
}
