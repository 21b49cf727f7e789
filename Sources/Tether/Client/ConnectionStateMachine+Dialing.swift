// How the client machine dials, secures and retries: the attempts, the backoff, the
// endpoint rotation and the fallback.
//
// **The fallback** (``Settings/fallback``): a `dialFailed` (while dialing or attaching), a
// `lost` while securing or greeting, or a `helloTimedOut`, on a dial that was not the
// fallback's, dials the fallback at once (``Action/dialFallback(_:)``) as the same attempt,
// publishing nothing; its failure is the attempt's. A `lost` while connected over the main
// endpoint before it proved healthy (nothing ever arrived) dials the fallback at once too,
// publishing connecting and counting no attempt. Ready over the fallback publishes `connected` with the fallback's endpoint and
// arms the primary retry (``Action/schedulePrimaryRetry(_:after:)``); `primaryRetryDue` with
// its token, while still connected, detaches gracefully and dials afresh as attempt 0 (a
// planned reconnect: connecting, not reconnecting). Any other new attempt forgets the
// primary retry, and a `primaryRetryDue` in another phase or with another token is stale.
//

extension ConnectionStateMachine {
    /// The dial and its result, the handshakes, health, losses, the backoff and the primary retry.
    mutating func dialingEvent(_ event: Event) -> [Action] {
        switch event {
        case .dialSucceeded(let token):
            guard case .dialing(token) = phase else { return [] }
            phase = .attaching(token)
            return [.dialFinished, .attach(token)]
        case .dialFailed(let token, let error):
            guard case .dialing(token) = phase else { return [] }
            return [.dialFinished] + attemptFailed(error, fallingBack: true)
        case .attached:
            illegal(event)
        case .tlsEstablished:
            guard case .securing(let token) = phase else { illegal(event) }
            return secured(token)
        case .provedHealthy:
            switch phase {
            case .connected(healthy: false):
                phase = .connected(healthy: true)
                attempt = 0
                return []
            case .connected(healthy: true), .securing, .greeting, .preparing:
                return []
            default:
                illegal(event)
            }
        case .lost(let reason):
            switch phase {
            case .securing:
                // Lost in the TLS handshake: a failed attempt, not a lost connection, and a
                // reason to try the fallback.
                return [.detach(graceful: false)] + attemptFailed(reason, fallingBack: true)
            case .greeting:
                // Lost before the hello was answered: a failed attempt, not a lost connection,
                // and a reason to try the fallback (a middlebox that accepts and resets).
                return [.detach(graceful: false)] + attemptFailed(reason, fallingBack: true)
            case .preparing:
                // Lost before the connection was ready: a failed attempt.
                return [.detach(graceful: false), .failInFlight(reason)] + attemptFailed(reason)
            case .connected where departure != nil:
                // The draining server closed first: what is still in flight is lost.
                return depart(graceful: false, failing: reason)
            case .connected(healthy: false) where settings.fallback != nil && !onFallback:
                // Nothing ever arrived over the main endpoint (a middlebox that accepts and
                // then resets or drops): the fallback at once, as a planned reconnect.
                return [.detach(graceful: false), .failInFlight(reason), .publish(.connecting)] + dialFallback()
            case .connected(let healthy):
                // A connection that never proved healthy (an HTTP server, a proxy whose
                // backend is down, a server at its limit) counts as one more failed attempt.
                // Either way the next attempt moves on to the next endpoint: the one that
                // just broke is the likeliest to be down (a node that died), and any of the
                // others serves as well. With one endpoint, that is the same one again.
                let next = healthy ? 1 : attempt + 1
                endpointIndex += 1
                return [.detach(graceful: false), .failInFlight(reason)] + scheduleReconnect(attempt: next, reason: reason)
            default:
                return []
            }
        case .backoffElapsed(let token):
            guard case .backingOff(token, let state) = phase else { return [] }
            // The timer fired: nothing to cancel.
            if !pathUsable, let reason = state.reason { return waitForNetwork(reason) }
            // After a planned reconnect's delay the state is connecting already.
            return startAttempt(cancellingBackoff: false, publishing: state != .connecting)
        case .primaryRetryDue(let token):
            guard case .connected = phase, onFallback, primaryRetry == token else { return [] }
            // A planned reconnect: nothing failed, so nothing is counted. The actor reports it
            // when nothing is in flight; should something be, it fails rather than waits on a
            // channel that is gone.
            attempt = 0
            let reason = TetherError(code: .connectionLost, message: "the connection over the fallback \(settings.fallback.map { "\($0.endpoint)" } ?? "") was closed to go back to \(settings.endpoint)")
            return release(graceful: true) + [.failInFlight(reason)] + startAttempt()
        default:
            preconditionFailure("\(event) is not handled by \(#function)")
        }
    }

    /// Dials the next endpoint as attempt ``attempt``, cancelling a backoff under way.
    mutating func startAttempt(cancellingBackoff: Bool = true, publishing: Bool = true) -> [Action] {
        var actions: [Action] = []
        if cancellingBackoff, case .backingOff = phase { actions.append(.cancelBackoff) }
        let token = nextToken()
        phase = .dialing(token)
        onFallback = false
        primaryRetry = nil
        if publishing { actions.append(.publish(.connecting)) }
        actions.append(.dial(token, endpoint: endpointIndex % max(1, settings.endpointCount), attempt: attempt))
        return actions
    }

    /// Dials the same endpoint again at once, as the same attempt: the retry a rejection
    /// prompts. The state stays connecting.
    mutating func redial() -> [Action] {
        let token = nextToken()
        phase = .dialing(token)
        if onFallback { return [.dialFallback(token)] }
        return [.dial(token, endpoint: endpointIndex % max(1, settings.endpointCount), attempt: attempt)]
    }

    /// Dials the fallback at once, as the same attempt: the attempt's endpoint could not
    /// connect. The state stays connecting.
    mutating func dialFallback() -> [Action] {
        let token = nextToken()
        phase = .dialing(token)
        onFallback = true
        return [.dialFallback(token)]
    }

    /// The channel is up and, with TLS, secured: greet, or be ready.
    mutating func secured(_ token: Token) -> [Action] {
        if settings.greets {
            phase = .greeting(token)
            return [.sendHello(token), .startHeartbeats]
        }
        if settings.prepares {
            phase = .preparing(token)
            return [.startHeartbeats, .prepare(token)]
        }
        return [.startHeartbeats] + ready()
    }

    /// The connection is up (and its session accepted): requests may go. The attempt count
    /// stays: being connected proves only that something accepted.
    mutating func ready() -> [Action] {
        hasConnected = true
        phase = .connected(healthy: false)
        var actions: [Action] = [.countConnection]
        if onFallback, let fallback = settings.fallback {
            let token = nextToken()
            primaryRetry = token
            actions.append(.publish(state))
            actions.append(.schedulePrimaryRetry(token, after: fallback.primaryRetryInterval))
        } else {
            actions.append(.publish(ConnectionState(phase: .connected)))
        }
        if openerWaiting {
            openerWaiting = false
            actions.append(.resumeOpener)
        }
        if switchWaiting {
            switchWaiting = false
            actions.append(.resumeSwitcher)
        }
        actions.append(.writeQueued)
        return actions
    }

    /// An attempt failed before it became ready: try the fallback at once when the attempt's
    /// endpoint could not connect (`fallingBack`) and there is one not tried yet; otherwise
    /// the next endpoint by the policy, or give up.
    mutating func attemptFailed(_ reason: TetherError, fallingBack: Bool = false) -> [Action] {
        if fallingBack, settings.fallback != nil, !onFallback { return dialFallback() }
        endpointIndex += 1
        if !hasConnected && !settings.policy.appliesToFirstConnect {
            return end(reason, failed: false)
        }
        return scheduleReconnect(attempt: attempt + 1, reason: reason)
    }

    /// Waits out the backoff before attempt `next`, or ends when the policy allows no more.
    mutating func scheduleReconnect(attempt next: Int, reason: TetherError) -> [Action] {
        let policy = settings.policy
        if !policy.isEnabled { return end(reason, failed: false) }
        if !pathUsable { return waitForNetwork(reason) }
        if let limit = policy.maximumAttempts, next > limit {
            let tried = next - 1
            return end(TetherError(
                code: reason.code,
                message: "gave up on \(settings.endpoint) after \(tried) reconnect attempt\(tried == 1 ? "" : "s"): \(reason.message)",
                underlying: reason
            ), failed: true)
        }
        attempt = next
        let delay = policy.delay(forAttempt: next, using: &random)
        let token = nextToken()
        let state = ConnectionState.reconnecting(attempt: next, after: delay, reason: reason)
        phase = .backingOff(token, state)
        return [.publish(state), .scheduleBackoff(token, after: delay)]
    }

    /// Stops what the phase has under way: the dial, the backoff or the channel.
    func release(graceful: Bool) -> [Action] {
        switch phase {
        case .dialing: return [.abandonDial]
        case .backingOff: return [.cancelBackoff]
        case .securing, .greeting, .preparing, .connected: return [.detach(graceful: graceful)]
        case .idle, .attaching, .waitingForNetwork, .suspended, .ended: return []
        }
    }
}
