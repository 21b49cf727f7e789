// How the client machine follows the network path and a server's drain.
//
// **The network path** comes from the connection's ``PathMonitor``, as `pathUpdated` when
// it differs from the last one: `usable` says whether a way out exists now, `changed`
// whether it differs from the one before (the first report is not a change). The machine
// starts by assuming a usable path. While none exists, nothing counts down: a failed
// attempt, a lost connection and a backoff that ends all wait in waitingForNetwork (with
// the reason of the last failure) for a usable path or `reconnectNow()`, and then dial a
// fresh attempt. A connected connection stays connected when the path goes away: only its
// heartbeats decide.
//
// **The server's drain**: `departureAnnounced` (the server's ``DrainNotice``) while
// connected marks the connection departing: the actor writes nothing new on it (requests
// and frames queue for the next connection) and arms ``Action/awaitDeparture``, which
// reports `departureDue` once no request is in flight (or its wait runs out). Then, or on a
// `lost` while departing (the server closed first), the channel goes and the connection
// reconnects as planned: attempt 0, on the next endpoint, no failure counted and no backoff
// spent; it publishes connecting, and dials at once or after the notice's delay (a backoff
// whose state stays connecting). While greeting the same happens at once. With a policy
// that is not enabled it ends (closed) instead.
//

extension ConnectionStateMachine {
    /// A new network path, and a server that announced its drain.
    mutating func pathOrDrainEvent(_ event: Event) -> [Action] {
        switch event {
        case .pathUpdated(let usable, let changed):
            return pathUpdated(usable: usable, changed: changed)
        case .departureAnnounced(let delay, let reason):
            switch phase {
            case .connected:
                guard departure == nil else { return [] }
                departure = (delay, reason)
                // "Elsewhere": the next attempt goes to the next endpoint, if there is one.
                endpointIndex += 1
                return [.awaitDeparture]
            case .greeting, .preparing:
                // Nothing was sent but the hello and the preparation's requests: leave at once.
                departure = (delay, reason)
                endpointIndex += 1
                return depart(graceful: true, failing: reason, publishing: false)
            default:
                return []
            }
        case .departureDue(let reason):
            guard case .connected = phase, departure != nil else { return [] }
            return depart(graceful: true, failing: reason)
        default:
            preconditionFailure("\(event) is not handled by \(#function)")
        }
    }

    /// Leaves the server that announced its drain: a planned reconnect, attempt 0, no
    /// failure counted; at once, or after the delay it asked for. Ends (closed) with a
    /// policy that is not enabled.
    mutating func depart(graceful: Bool, failing reason: TetherError, publishing: Bool = true) -> [Action] {
        let delay = departure?.delay ?? .zero
        departure = nil
        var actions: [Action] = [.detach(graceful: graceful), .failInFlight(reason)]
        guard settings.policy.isEnabled else { return actions + end(reason, failed: false) }
        attempt = 0
        guard delay > .zero else { return actions + startAttempt(publishing: publishing) }
        let token = nextToken()
        phase = .backingOff(token, .connecting)
        onFallback = false
        primaryRetry = nil
        if publishing { actions.append(.publish(.connecting)) }
        actions.append(.scheduleBackoff(token, after: delay))
        return actions
    }

    /// Records the path's usability and acts on a change; see the table.
    mutating func pathUpdated(usable: Bool, changed: Bool) -> [Action] {
        pathUsable = usable
        switch phase {
        case .connected:
            return changed ? [.verifyConnection] : []
        case .waitingForNetwork:
            guard usable else { return [] }
            attempt = 0
            return startAttempt()
        case .backingOff, .dialing, .securing, .greeting, .preparing:
            // The attempt under way may be on the old path: start afresh on the new one.
            guard usable, changed else { return [] }
            let abandoned = release(graceful: false).filter { $0 != .cancelBackoff }
            attempt = 0
            return abandoned + startAttempt()
        case .idle, .attaching, .suspended, .ended:
            return []
        }
    }

    /// Waits for a usable path before the next attempt, spending none meanwhile.
    mutating func waitForNetwork(_ reason: TetherError) -> [Action] {
        let state = ConnectionState.waitingForNetwork(reason: reason)
        phase = .waitingForNetwork(state)
        return [.publish(state)]
    }
}
