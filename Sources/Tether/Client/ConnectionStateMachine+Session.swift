// How the client machine greets: the session hello, the identity provider, the app's
// preparation, a takeover and a switch of session.
//
// **The app's preparation** (``Settings/prepares``): where the table says connected after
// `attached`, `tlsEstablished` or `helloAccepted`, the machine goes to preparing instead and
// asks for ``Action/prepare(_:)``; `prepared(t)` then makes it connected, and
// `preparationFailed(t)` is a failed attempt (no fallback: the server answered). Otherwise
// preparing answers events as greeting does, except that `lost` also fails the requests in
// flight (the preparation's), and `helloAccepted`, `helloRefused` are illegal in it.
//
// **Switching session** (`switchSession`) drops what is under way (a graceful detach, so
// the earlier user's deliveries are acknowledged first), fails every request and frame
// made before it, has the actor start the new user's session state (``Action/resetSession``)
// and dials at once as attempt 0; its caller (the *switcher*) is answered when a hello is
// next accepted, and fails when the connection ends or is suspended first.
//

extension ConnectionStateMachine {
    /// The hello's answer, the preparation, the identity provider, a takeover and a switch of session.
    mutating func sessionEvent(_ event: Event) -> [Action] {
        switch event {
        case .helloAccepted:
            guard case .greeting(let token) = phase else { illegal(event) }
            rejection = nil
            if settings.prepares {
                phase = .preparing(token)
                return [.stopHelloTimer, .prepare(token)]
            }
            return [.stopHelloTimer] + ready()
        case .prepared(let token):
            guard case .preparing(token) = phase else { return [] }
            return ready()
        case .preparationFailed(let token, let reason):
            guard case .preparing(token) = phase else { return [] }
            // The server is there and answered: no reason to try the fallback.
            return [.detach(graceful: false)] + attemptFailed(reason)
        case .helloRefused(let reason, let retryable):
            guard case .greeting = phase else { illegal(event) }
            if retryable { return [.detach(graceful: false)] + attemptFailed(reason) }
            if asksIdentity, rejection == nil {
                // The provider may have a fresher credential: ask it once more, at once.
                rejection = reason
                return [.detach(graceful: false)] + redial()
            }
            return release(graceful: false) + end(reason, failed: true)
        case .helloTimedOut(let token, let reason):
            guard case .greeting(token) = phase else { return [] }
            return [.detach(graceful: false)] + attemptFailed(reason, fallingBack: true)
        case .takenOver(let reason):
            guard isAttached else { return [] }
            // Reconnecting would take the session back from the newer connection, which
            // would do the same: the two would displace each other for as long as both run.
            if settings.reconnectsWhenTakenOver { return transition(.lost(reason)) }
            return [.detach(graceful: false), .failInFlight(reason)] + end(reason, failed: false)
        case .identityFailed(let token, let reason):
            guard case .greeting(token) = phase else { return [] }
            return [.detach(graceful: false)] + attemptFailed(reason, fallingBack: true)
        case .switchSession(let reason, let asks):
            switch phase {
            case .idle:
                asksIdentity = asks
                rejection = nil
                return [.resetSession, .resumeSwitcher]
            case .ended:
                return [.failSwitcher(.notConnected)]
            default:
                asksIdentity = asks
                rejection = nil
                switchWaiting = true
                attempt = 0
                let wasConnecting = state == .connecting
                var actions = release(graceful: true) + [.failWaiting(reason), .resetSession]
                let dial = startAttempt(cancellingBackoff: false)
                // Already connecting: the new attempt is no new state.
                actions += wasConnecting ? dial.filter { $0 != .publish(.connecting) } : dial
                return actions
            }
        case .switchCancelled:
            guard switchWaiting else { return [] }
            switchWaiting = false
            return [.failSwitcher(.cancelled)]
        default:
            preconditionFailure("\(event) is not handled by \(#function)")
        }
    }
}
