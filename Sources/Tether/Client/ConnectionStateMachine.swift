/// The life of a client connection, as a value: events in, actions out.
///
/// ``Connection`` owns the handles (the channel, the timers, the connect task, the caller of
/// `connect()` waiting for it) and feeds this machine what happens to them; the machine
/// decides what follows and returns it as ``Action``s, which the actor carries out in order.
/// It holds no socket, no loop and no clock: a backoff delay goes out in
/// ``Action/scheduleBackoff(_:after:)``, and the jitter comes from a seeded generator of its own.
///
/// It owns the attempt counting: an attempt made at once (the first connect, `resume()`,
/// `reconnectNow()`) is attempt 0, each failure schedules attempt `n + 1` after the
/// ``ReconnectPolicy`` delay for it, up to ``ReconnectPolicy/maximumAttempts``; the count goes
/// back to 0 only once a connection proves healthy (a valid frame after the handshakes). A
/// failed dial, a handshake that fails and a connection lost before it proved healthy all move
/// on to the next endpoint. A failure before the first connection ever became ready ends the
/// connection at once unless ``ReconnectPolicy/appliesToFirstConnect``. A close asked for
/// never reconnects.
///
/// | phase → event | idle | dialing | attaching | securing | greeting | connected | backingOff | waitingForNetwork | suspended | ended |
/// |---|---|---|---|---|---|---|---|---|---|---|
/// | connectRequested | opened¹ | refused | refused | refused | refused | refused | refused | refused | refused | opened¹ |
/// | connectAborted | ended | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | · |
/// | connectStarted | dialing | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | opener fails |
/// | connectCancelled | · | ended² | ✗ | ended² | ended² | ·  | ended² | ended² | · | · |
/// | dialSucceeded(t) | · | attaching | ✗ | · | · | · | · | · | · | · |
/// | dialFailed(t) | · | failed attempt | failed attempt³ | · | · | · | · | · | · | · |
/// | attached(t) | ✗ | ✗ | securing / greeting / connected | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ |
/// | tlsEstablished | ✗ | ✗ | ✗ | greeting / connected | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ |
/// | helloAccepted | ✗ | ✗ | ✗ | ✗ | connected | ✗ | ✗ | ✗ | ✗ | ✗ |
/// | helloRefused | ✗ | ✗ | ✗ | ✗ | failed attempt / dialing⁸ / ended(failed) | ✗ | ✗ | ✗ | ✗ | ✗ |
/// | identityFailed(t) | · | · | ✗ | · | failed attempt | · | · | · | · | · |
/// | helloTimedOut(t) | · | · | ✗ | · | failed attempt | · | · | · | · | · |
/// | provedHealthy | ✗ | ✗ | ✗ | · | · | healthy | ✗ | ✗ | ✗ | ✗ |
/// | lost | · | · | ✗ | failed attempt | failed attempt | backingOff / waitingForNetwork⁴ / ended / dialing¹⁰ | · | · | · | · |
/// | takenOver | · | · | ✗ | ended¹² | ended¹² | ended¹² | · | · | · | · |
/// | backoffElapsed(t) | · | · | ✗ | · | · | · | dialing / waitingForNetwork⁴ | · | · | · |
/// | pathUpdated | ·⁵ | dialing⁶ | ✗ | dialing⁶ | dialing⁶ | verify⁶ | dialing⁶ | dialing⁷ | ·⁵ | ·⁵ |
/// | suspend | · | suspended | ✗ | suspended | suspended | suspended | suspended | suspended | · | · |
/// | resume | · | · | ✗ | · | · | · | · | · | dialing | · |
/// | reconnectNow | · | · | ✗ | · | · | · | dialing | dialing | dialing | · |
/// | close | ended | ended | ✗ | ended | ended | ended | ended | ended | ended | · |
/// | switchSession | idle⁹ | dialing | ✗ | dialing | dialing | dialing | dialing | dialing | dialing | switcher fails |
/// | switchCancelled | · | · | ✗ | · | · | · | · | · | · | · |
/// | departureAnnounced | · | · | ✗ | · | dialing¹¹ | departing¹¹ | · | · | · | · |
/// | departureDue | · | · | ✗ | · | · | dialing / backingOff¹¹ | · | · | · | · |
///
/// `·` is an event answered with no action; `✗` is a `preconditionFailure` (attaching lasts
/// one synchronous step of the actor, so nothing else can arrive in it). ¹ Only before the first
/// `connect()`; after it, a second one is refused in every phase. ² Only while the caller of
/// `connect()` still waits; otherwise `·`. ³ For the token being attached; `✗` for another.
/// ⁴ When no usable path exists. ⁵ Only the path's usability is recorded. ⁶ Only for a
/// `changed` path, and for a usable one but while connected: a fresh attempt (attempt 0) at
/// once, abandoning the dial or the handshake under way; while connected, a heartbeat out of
/// schedule (``Action/verifyConnection``) whose miss ends the connection. ⁷ Only for a
/// usable path, changed or not: a fresh attempt at once.
/// ⁸ A rejection for good (`retryable: false`) with an identity provider, when the hello
/// before was not rejected too: the provider is asked again and the same endpoint dialed at
/// once, as the same attempt; a second rejection in a row ends (failed). ⁹ The new identity
/// is taken for the first connect, and the switcher answered at once. ¹⁰ The fallback, at
/// once, for a connection over the main endpoint that never proved healthy.
/// ¹¹ A planned reconnect; see *the server's drain* in `ConnectionStateMachine+Path.swift`. ¹² Closed, with the takeover as
/// the reason, failing what is in flight; with ``Settings/reconnectsWhenTakenOver`` it is
/// `lost` instead (in preparing too, where it ends likewise).
///
/// A *failed attempt* goes to backingOff, or ends (closed) for a first connect the policy
/// does not retry or a disabled policy, or ends (failed) once the policy's attempts are spent,
/// or, when no usable path exists, goes to waitingForNetwork without spending an attempt.
///
/// Each concern is decided in a file of its own: dialing, the handshakes, retries and the
/// fallback in `ConnectionStateMachine+Dialing.swift`; the hello, the identity, the app's
/// preparation, a takeover and a switch of session in `+Session`; the network path and the
/// server's drain in `+Path`, each with the rules behind its footnotes. This file holds the
/// types, the user's calls and the steps they share.
///
/// **Stale events** get no action: a dial result, TLS or hello timeout, or backoff expiry
/// whose token (``Token``, handed out with each dial and backoff) is not the current one (an
/// attempt abandoned by `close()` or `suspend()`, a timer that fired as it was cancelled); a
/// loss reported when no channel is attached (a channel that reports its end after it was
/// dropped); a cancellation of `connect()` after it returned; and the user's calls that do
/// nothing where they are (`suspend()` when idle, suspended or ended; `resume()` when not
/// suspended; `reconnectNow()` while connecting or connected; `close()` when ended); an
/// identity provider's failure for an attempt that is not the current one; a cancellation of
/// `switchSession(to:)` after it returned. A stale dial success leaves the dialed socket with
/// the actor, which closes it.
///
/// **Illegal events** stop the process with a message naming the phase and the event: an
/// event the actor only sends in one phase arriving in another. That is `connectStarted` or
/// `connectAborted` other than after `connectRequested` (idle or ended); `attached` outside
/// attaching with its token; `dialSucceeded` while attaching; `tlsEstablished` outside
/// securing; `helloAccepted` and `helloRefused` outside greeting; `provedHealthy` when no
/// channel is attached; and every event but `attached`, `dialFailed` and `connectRequested`
/// while attaching.
struct ConnectionStateMachine: Sendable {
    /// What the machine needs to know of the configuration.
    struct Settings: Sendable, Hashable {
        /// The endpoint the connection was made for, as error messages name it.
        var endpoint: Endpoint
        /// How many endpoints there are to rotate through: 1 plus the alternates.
        var endpointCount = 1
        /// When and how often to reconnect.
        var policy = ReconnectPolicy()
        /// Whether a TLS handshake follows the TCP connect.
        var secured = false
        /// Whether a session hello follows the handshake.
        var greets = false
        /// Whether the hello's identity is asked of a provider, which may answer a rejection
        /// with a fresh one.
        var asksIdentity = false
        /// Whether a connection whose session a newer connection took over reconnects by the
        /// policy (``SessionConfiguration/reconnectsWhenTakenOver``) rather than ending.
        var reconnectsWhenTakenOver = false
        /// The endpoint dialed at once when the attempt's endpoint cannot connect, and how
        /// long a connection over it lasts before the main endpoint is tried again.
        var fallback: FallbackPolicy?
        /// Whether the app's preparation (``ConnectionConfiguration/prepare``) runs on each
        /// new connection before it is ready.
        var prepares = false
    }

    /// Names one dial or one backoff, so that a result that arrives after it was abandoned
    /// is recognised as stale.
    struct Token: Hashable, Sendable, CustomStringConvertible {
        let value: UInt64
        var description: String { "#\(value)" }
    }

    /// Where the connection is.
    enum Phase: Hashable, Sendable {
        /// Made, not connecting (before `connect()`, or while it prepares TLS).
        case idle
        /// Resolving and opening TCP, by the connect task of the token.
        case dialing(Token)
        /// The dialed socket is being made into a channel (within one step of the actor).
        case attaching(Token)
        /// The TLS handshake runs on the channel.
        case securing(Token)
        /// The session hello was sent; the server's answer is awaited.
        case greeting(Token)
        /// The app's preparation runs on the new connection (``ConnectionConfiguration/prepare``):
        /// its requests go, nobody else's.
        case preparing(Token)
        /// Ready: requests flow. Healthy once a valid frame arrived after the handshakes.
        case connected(healthy: Bool)
        /// Waiting out the backoff of the token before the next attempt.
        case backingOff(Token, ConnectionState)
        /// Waiting for a usable network path before the next attempt.
        case waitingForNetwork(ConnectionState)
        /// Disconnected on purpose by `suspend()`.
        case suspended
        /// Closed or failed, for good.
        case ended(ConnectionState)
    }

    /// What happened.
    enum Event: Hashable, Sendable {
        /// `connect()` was called.
        case connectRequested
        /// `connect()` cannot start (a profile without serials with a session, TLS files that
        /// do not load): the connection ends with the error.
        case connectAborted(TetherError)
        /// `connect()` waits for the connection: start connecting.
        case connectStarted
        /// The task that called `connect()` was cancelled.
        case connectCancelled
        /// The connect task of the token opened a TCP connection.
        case dialSucceeded(Token)
        /// The connect task of the token failed, or its socket could not be made a channel.
        case dialFailed(Token, TetherError)
        /// The socket of the token is now the channel.
        case attached(Token)
        /// The TLS handshake on the channel finished.
        case tlsEstablished
        /// The server accepted the session hello.
        case helloAccepted
        /// The preparation of the token's connection returned.
        case prepared(Token)
        /// The preparation of the token's connection threw, or ran out of time.
        case preparationFailed(Token, TetherError)
        /// The server refused the hello: for now (`retryable`, a failed attempt) or for good.
        case helloRefused(TetherError, retryable: Bool)
        /// The hello timer of the token fired, with the error that says so.
        case helloTimedOut(Token, TetherError)
        /// A valid frame arrived on the channel.
        case provedHealthy
        /// The channel broke: closed by the peer, a socket error, a protocol error, missed
        /// heartbeats, a refusal frame, a write that failed.
        case lost(TetherError)
        /// The server closed the channel because a newer connection with the same client id
        /// took the session over (its ``CloseNotice`` said so).
        case takenOver(TetherError)
        /// The backoff of the token is over.
        case backoffElapsed(Token)
        /// The path monitor reported a path that differs from the last one: whether it is
        /// usable, and whether it is a change of network (not the first report).
        case pathUpdated(usable: Bool, changed: Bool)
        /// `suspend()`, with the error for requests in flight.
        case suspend(TetherError)
        /// `resume()`.
        case resume
        /// `reconnectNow()`.
        case reconnectNow
        /// `close()`, with its reason.
        case close(TetherError)
        /// The identity provider failed for the attempt of the token (it threw, or answered
        /// with an identity that cannot be sent).
        case identityFailed(Token, TetherError)
        /// `switchSession(to:)`: the error for what was made before it, and whether the new
        /// identity is asked of a provider.
        case switchSession(TetherError, asksIdentity: Bool)
        /// The task that called `switchSession(to:)` was cancelled.
        case switchCancelled
        /// The primary retry timer of the token fired while connected over the fallback, at a
        /// moment with no request in flight or queued: reconnect, main endpoint first.
        case primaryRetryDue(Token)
        /// The server announced it drains, asking for a reconnect after the delay.
        case departureAnnounced(reconnectAfter: Duration, TetherError)
        /// The departing connection has no request in flight any more, or waited too long
        /// for its responses (with the error for those still in flight).
        case departureDue(TetherError)
    }

    /// How the caller of `connect()` is answered when it does not get its connection.
    enum OpenerFailure: Hashable, Sendable {
        /// With `CancellationError`.
        case cancelled
        /// With the error of a call on a connection that has ended.
        case notConnected
        /// With this error.
        case error(TetherError)
    }

    /// What the actor does, in order.
    enum Action: Hashable, Sendable {
        /// Throw from a second `connect()`.
        case refuseConnect
        /// Start the connect task of the token to endpoint `endpoint` (0 is the main one, then
        /// the alternates), as attempt `attempt` (a reconnect attempt when above 0).
        case dial(Token, endpoint: Int, attempt: Int)
        /// Start the connect task of the token to the fallback endpoint, within the attempt
        /// under way (no attempt counted).
        case dialFallback(Token)
        /// Arm the primary retry timer of the token, which reports `primaryRetryDue` once it
        /// fired and no request is in flight or queued. The channel's detach disarms it.
        case schedulePrimaryRetry(Token, after: Duration)
        /// The connect task ended: forget it.
        case dialFinished
        /// Cancel the connect task under way and forget it.
        case abandonDial
        /// Make the dialed socket the channel, then report `attached` or `dialFailed`.
        case attach(Token)
        /// Send the session hello and arm its timer for the token.
        case sendHello(Token)
        /// Disarm the hello timer.
        case stopHelloTimer
        /// Run the app's preparation on the channel of the token, with its timeout; it
        /// reports `prepared` or `preparationFailed`. The channel's detach cancels it.
        case prepare(Token)
        /// Start the heartbeats (the first goes out at once).
        case startHeartbeats
        /// Send a heartbeat out of schedule, whose miss ends the connection: the path changed.
        case verifyConnection
        /// Count one more connection established.
        case countConnection
        /// Write what waits for the connection.
        case writeQueued
        /// Resume the caller of `connect()`.
        case resumeOpener
        /// Fail the caller of `connect()`.
        case failOpener(OpenerFailure)
        /// Arm the backoff timer of the token.
        case scheduleBackoff(Token, after: Duration)
        /// Disarm the backoff timer.
        case cancelBackoff
        /// Drop the channel, flushing what is queued first when graceful.
        case detach(graceful: Bool)
        /// Fail the requests in flight, which were lost with the channel, with this reason.
        case failInFlight(TetherError)
        /// Fail every request and frame still waiting, for this reason.
        case failWaiting(TetherError)
        /// Publish the state on ``Connection/states``.
        case publish(ConnectionState)
        /// End every subscription.
        case endStreams
        /// Start the session state of the identity `switchSession(to:)` gave: sequence,
        /// epoch, held pushes; publish the switch.
        case resetSession
        /// Resume the caller of `switchSession(to:)`.
        case resumeSwitcher
        /// Fail the caller of `switchSession(to:)`.
        case failSwitcher(OpenerFailure)
        /// Write nothing new on the channel; report `departureDue` once no request is in
        /// flight, or when the wait for them runs out. The channel's detach disarms it.
        case awaitDeparture
    }

    /// What it knows of the configuration; ``Settings/secured`` is set for each attempt,
    /// as the endpoint it dialed needs a handshake or not.
    var settings: Settings
    var phase: Phase = .idle
    /// The number of the attempt in progress or scheduled (0: made at once).
    var attempt = 0
    /// Counts failures to rotate through the endpoints; the next dial goes to this one
    /// modulo their number.
    var endpointIndex = 0
    /// Whether `connect()` was called.
    var opened = false
    /// Whether the caller of `connect()` waits.
    var openerWaiting = false
    /// Whether a connection ever became ready.
    var hasConnected = false
    /// Whether the path monitor last said a usable network path exists; `true` until it
    /// says otherwise.
    var pathUsable = true
    /// Whether the hello's identity is asked of a provider.
    var asksIdentity: Bool
    /// The server's last rejection for good, while the retry with a fresh identity it
    /// prompted has not been accepted: a second one ends the connection.
    var rejection: TetherError?
    /// Whether the caller of `switchSession(to:)` waits.
    var switchWaiting = false
    /// Whether the dial, the handshake or the connection under way is the fallback's.
    var onFallback = false
    /// The primary retry armed for the connection over the fallback.
    var primaryRetry: Token?
    /// Set while connected to a server that announced its drain: the delay it asked for
    /// before the reconnect, and why the connection goes.
    var departure: (delay: Duration, reason: TetherError)?
    /// Counts the events that changed something: the actor stops carrying out the actions of
    /// one event as soon as a later event (reported by one of those actions) has changed it.
    var transitions: UInt64 = 0
    var lastToken: UInt64 = 0
    var random: BackoffRandom

    /// A machine in ``Phase/idle``.
    ///
    /// - Parameters:
    ///   - settings: What it needs of the configuration.
    ///   - seed: Seeds the backoff jitter.
    init(settings: Settings, seed: UInt64) {
        self.settings = settings
        self.asksIdentity = settings.asksIdentity
        self.random = BackoffRandom(seed: seed)
    }

    // MARK: Queries

    /// The state published for the phase.
    var state: ConnectionState {
        switch phase {
        case .idle: .idle
        case .dialing, .attaching, .securing, .greeting, .preparing: .connecting
        // Which endpoint is in use only the connection knows, but for the fallback.
        case .connected: ConnectionState(phase: .connected, endpoint: onFallback ? settings.fallback?.endpoint : nil)
        case .backingOff(_, let state), .waitingForNetwork(let state), .ended(let state): state
        case .suspended: .suspended
        }
    }

    /// Whether the connection has failed or been closed for good: `state.isFinal`, without
    /// building the state.
    var hasEnded: Bool {
        if case .ended = phase { return true }
        return false
    }

    /// Whether a channel is attached but not ready: requests and frames wait meanwhile.
    var isHandshaking: Bool {
        switch phase {
        case .attaching, .securing, .greeting, .preparing: true
        default: false
        }
    }

    /// Whether the session hello awaits its answer.
    var isGreeting: Bool {
        if case .greeting = phase { return true }
        return false
    }

    /// Whether the server announced its drain: nothing new is written on the channel.
    var isDeparting: Bool { departure != nil }

    /// Whether the connection has proved a Tether peer answers on its channel.
    var isHealthy: Bool {
        if case .connected(healthy: true) = phase { return true }
        return false
    }

    // MARK: Events

    /// Applies `event` and returns what to do, in order.
    ///
    /// - Parameter event: What happened.
    /// - Returns: The actions to carry out; none for a stale event.
    mutating func handle(_ event: Event) -> [Action] {
        let before = phase
        let actions = transition(event)
        if case .connected = phase {} else { departure = nil }
        if !actions.isEmpty || phase != before { transitions &+= 1 }
        return actions
    }

    mutating func transition(_ event: Event) -> [Action] {
        if case .attaching(let token) = phase {
            switch event {
            case .attached(token):
                if settings.secured {
                    // The channel bounds the handshake by its timeout, and reports a handshake
                    // that runs out as the channel's loss.
                    phase = .securing(token)
                    return []
                }
                return secured(token)
            case .dialFailed(token, let error):
                return attemptFailed(error, fallingBack: true)
            case .connectRequested:
                return [.refuseConnect]
            default:
                illegal(event)
            }
        }
        switch event {
        case .connectRequested, .connectAborted, .connectStarted, .connectCancelled, .suspend, .resume, .reconnectNow, .close:
            return userCall(event)
        case .dialSucceeded, .dialFailed, .attached, .tlsEstablished, .provedHealthy, .lost, .backoffElapsed, .primaryRetryDue:
            return dialingEvent(event)
        case .helloAccepted, .prepared, .preparationFailed, .helloRefused, .helloTimedOut, .identityFailed, .takenOver, .switchSession, .switchCancelled:
            return sessionEvent(event)
        case .pathUpdated, .departureAnnounced, .departureDue:
            return pathOrDrainEvent(event)
        }
    }

    /// The user's calls: `connect()` and its cancellation, `suspend()`, `resume()`,
    /// `reconnectNow()`, `close()`.
    mutating func userCall(_ event: Event) -> [Action] {
        switch event {
        case .connectRequested:
            if opened { return [.refuseConnect] }
            opened = true
            return []
        case .connectAborted(let reason):
            switch phase {
            case .idle where opened: return end(reason, failed: false)
            case .ended where opened: return []
            default: illegal(event)
            }
        case .connectStarted:
            switch phase {
            case .idle where opened:
                openerWaiting = true
                return startAttempt()
            case .ended where opened:
                return [.failOpener(.notConnected)]
            default:
                illegal(event)
            }
        case .connectCancelled:
            guard openerWaiting else { return [] }
            openerWaiting = false
            let reason = TetherError(code: .connectFailed, message: "connecting to \(settings.endpoint) was cancelled")
            return [.failOpener(.cancelled)] + release(graceful: false) + end(reason, failed: false)
        case .suspend(let reason):
            switch phase {
            case .idle, .suspended, .ended:
                return []
            default:
                let attached = isAttached
                var actions = release(graceful: true)
                if attached { actions.append(.failInFlight(reason)) }
                let suspended = TetherError(code: .notConnected, message: "connecting to \(settings.endpoint) was suspended by suspend()")
                if openerWaiting {
                    openerWaiting = false
                    actions.append(.failOpener(.error(suspended)))
                }
                if switchWaiting {
                    switchWaiting = false
                    actions.append(.failSwitcher(.error(suspended)))
                }
                phase = .suspended
                return actions + [.publish(.suspended)]
            }
        case .resume:
            guard case .suspended = phase else { return [] }
            attempt = 0
            return startAttempt()
        case .reconnectNow:
            switch phase {
            case .backingOff(_, .connecting):
                attempt = 0
                return startAttempt(publishing: false)
            case .backingOff, .waitingForNetwork, .suspended:
                attempt = 0
                return startAttempt()
            default:
                return []
            }
        case .close(let reason):
            if case .ended = phase { return [] }
            return release(graceful: true) + end(reason, failed: false)
        default:
            preconditionFailure("\(event) is not a user's call")
        }
    }

    // MARK: Steps

    var isAttached: Bool {
        switch phase {
        case .securing, .greeting, .preparing, .connected: true
        default: false
        }
    }

    /// Ends the connection for `reason` (nothing under way any more) and fails all that waits.
    mutating func end(_ reason: TetherError, failed: Bool) -> [Action] {
        var actions: [Action] = [.failWaiting(reason)]
        if openerWaiting {
            openerWaiting = false
            actions.append(.failOpener(.error(reason)))
        }
        if switchWaiting {
            switchWaiting = false
            actions.append(.failSwitcher(.error(reason)))
        }
        let state: ConnectionState = failed ? .failed(reason) : .closed(reason)
        phase = .ended(state)
        actions.append(.publish(state))
        actions.append(.endStreams)
        return actions
    }

    mutating func nextToken() -> Token {
        lastToken &+= 1
        return Token(value: lastToken)
    }

    func illegal(_ event: Event) -> Never {
        preconditionFailure("ConnectionStateMachine: \(event) is not valid in phase \(phase)")
    }
}

/// SplitMix64: the jitter of the backoff delays, seeded once per connection.
struct BackoffRandom: RandomNumberGenerator, Sendable, Hashable {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
