/// An adaptive heartbeat on one connection: the state of its network, and the heartbeat
/// that tests the interval now.
struct AdaptiveHeartbeatRun {
    /// The heartbeat sent a whole interval after one that was acked: its ack proves the
    /// interval, and its silence before a lost connection disproves it.
    struct Probe {
        var serial: UInt32
        var interval: UInt64
        /// Whether no frame went either way between the ack before and this heartbeat.
        var silent: Bool
        var missed = false
    }

    var state: AdaptiveHeartbeatState
    let key: HeartbeatMemory.Key
    let memory: HeartbeatMemory
    var probe: Probe?
    /// Frames in and out when the last heartbeat was acked; `nil` until one is, and after
    /// a miss.
    var framesAtAck: Int?
    /// When the last heartbeat was acked.
    var ackedAt: UInt64 = 0
}

extension Connection {
    /// The interval between heartbeats now: the fixed ``HeartbeatConfiguration/interval``, or
    /// the one an adaptive heartbeat has reached on this network. `nil` while no connection
    /// sends heartbeats (heartbeats off, a profile without them, not connected).
    public var heartbeatInterval: Duration? {
        heartbeatMachine.map { MonotonicTime.duration(nanoseconds: $0.interval) }
    }

    /// Frames decoded and written so far on this connection's sockets.
    private var framesMoved: Int { counters.framesIn + counters.framesOut }

    /// The interval the heartbeats of a new socket start from: the fixed one, or what the
    /// memory holds for this network and server. Sets up the adaptive run.
    func startingHeartbeatInterval() -> Duration {
        let settings = configuration.heartbeat
        guard let policy = settings.adaptive else {
            adaptiveHeartbeat = nil
            return settings.interval
        }
        let key = HeartbeatMemory.key(path: networkPath, endpoint: currentEndpoint)
        let state = AdaptiveHeartbeatState(policy, record: policy.memory.record(for: key), now: loop.now)
        adaptiveHeartbeat = AdaptiveHeartbeatRun(state: state, key: key, memory: policy.memory)
        return MonotonicTime.duration(nanoseconds: state.interval)
    }

    /// A heartbeat is about to be written by the schedule: it is a probe when the one
    /// before was acked, silent when no frame moved since that ack. One sent after a missed
    /// probe is none: the missed probe stays, to be judged by what comes next.
    func adaptiveHeartbeatSending(_ serial: UInt32, interval: UInt64) {
        guard var run = adaptiveHeartbeat else { return }
        if let frames = run.framesAtAck {
            run.probe = AdaptiveHeartbeatRun.Probe(serial: serial, interval: interval, silent: frames == framesMoved)
        } else if run.probe?.missed != true {
            run.probe = nil
        }
        run.framesAtAck = nil
        adaptiveHeartbeat = run
    }

    /// The network path changed and the connection verifies itself: the probe under way,
    /// if any, and the silence since the last ack no longer measure an interval. On another
    /// network (another key), the run starts over from what the memory holds for it, so
    /// what the connection proves from now on is kept for the network it is on; the ack of
    /// the verifying heartbeat sets its interval.
    func adaptiveHeartbeatVerifying() {
        guard var run = adaptiveHeartbeat else { return }
        run.probe = nil
        run.framesAtAck = nil
        let key = HeartbeatMemory.key(path: networkPath, endpoint: currentEndpoint)
        if key != run.key, let policy = configuration.heartbeat.adaptive {
            let state = AdaptiveHeartbeatState(policy, record: policy.memory.record(for: key), now: loop.now)
            run = AdaptiveHeartbeatRun(state: state, key: key, memory: policy.memory)
        }
        adaptiveHeartbeat = run
    }

    /// Heartbeat `serial` was missed (or excused, with `serial` `nil`): what follows is no
    /// measure of an interval until the next ack.
    func adaptiveHeartbeatMissed(_ serial: UInt32?) {
        guard var run = adaptiveHeartbeat else { return }
        run.framesAtAck = nil
        if let serial, run.probe?.serial == serial {
            run.probe?.missed = true
        } else if serial == nil {
            run.probe = nil
        }
        adaptiveHeartbeat = run
    }

    /// Heartbeat `serial` was acked: a silent probe proves its interval; a probe missed
    /// before proves nothing. Returns the interval to go on with.
    func adaptiveHeartbeatAcked(_ serial: UInt32) -> UInt64? {
        guard var run = adaptiveHeartbeat else { return nil }
        if let probe = run.probe {
            if probe.missed {
                run.state.inconclusive()
                run.probe = nil
            } else if probe.serial == serial {
                if probe.silent { count(run.state.healthy(probe.interval, now: loop.now)) }
                run.probe = nil
            }
            run.memory.store(run.state.record, for: run.key)
        }
        run.framesAtAck = framesMoved
        run.ackedAt = loop.now
        adaptiveHeartbeat = run
        return run.state.interval
    }

    /// The socket is gone. When it was lost while a silent probe waited for its ack (or was
    /// missed), its interval failed on this network; so did the interval in use when it was
    /// lost in a silence since the last ack longer than any proved (a peer or a middlebox
    /// that closes idle connections sooner). Not when the network path is no longer the one
    /// the connection came up on: the change, not the interval, may have ended it.
    func heartbeatsEnded(lost: Bool) {
        guard var run = adaptiveHeartbeat else { return }
        adaptiveHeartbeat = nil
        guard lost, networkPath.isUsable, HeartbeatMemory.key(path: networkPath, endpoint: currentEndpoint) == run.key else { return }
        let now = loop.now
        if let probe = run.probe {
            guard probe.silent else { return }
            count(run.state.failed(probe.interval, now: now))
        } else if run.framesAtAck == framesMoved, let good = run.state.record.lastGood, now - run.ackedAt > good {
            count(run.state.failed(run.state.interval, now: now))
        } else {
            return
        }
        run.memory.store(run.state.record, for: run.key)
    }

    private func count(_ change: AdaptiveHeartbeatState.Change) {
        switch change {
        case .lengthened: counters.heartbeatIntervalIncreases += 1
        case .shortened: counters.heartbeatIntervalDecreases += 1
        case .unchanged: break
        }
    }
}
