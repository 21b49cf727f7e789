extension Connection {
    func startHeartbeats() {
        let settings = configuration.heartbeat
        guard settings.isEnabled, configuration.profile.heartbeatType != nil else { return }
        var machine = HeartbeatStateMachine(
            interval: startingHeartbeatInterval(),
            timeout: settings.timeout,
            maximumMissed: settings.maximumMissed,
            maximumSerial: configuration.profile.maximumSerial
        )
        machine.sendsAfterMiss = settings.adaptive != nil
        heartbeatMachine = machine
        // The first goes out at once: it proves the new connection works, measures the round
        // trip, and counts as the first frame for a server's handshake timeout.
        heartbeatTick()
    }

    private func scheduleHeartbeat(at deadline: UInt64) {
        heartbeatTimer = loop.schedule(at: deadline) { [self] in
            assumeIsolated { $0.heartbeatTick() }
        }
    }

    private func heartbeatTick() {
        heartbeatTimer = nil
        guard let channel else { return }
        if heartbeatMachine?.outstanding != nil {
            // Before counting a miss: an ack may have arrived after this turn's readiness
            // check. Reading it re-arms the timer, and then there is nothing left to do here.
            channel.readPending()
            guard self.channel === channel, heartbeatTimer == nil else { return }
        }
        guard var machine = heartbeatMachine else { return }
        let now = loop.now
        if let outstanding = machine.outstanding, now >= outstanding.sentAt &+ machine.timeout,
           heartbeatMissExcused(sentAt: outstanding.sentAt) {
            // Not the server's silence: we stopped reading for a slow subscriber, or the
            // heartbeat or its ack waits behind a large frame that is still moving.
            machine.excuseOutstanding()
            adaptiveHeartbeatMissed(nil)
        }
        let actions = machine.tick(now: now)
        heartbeatMachine = machine
        for action in actions {
            switch action {
            case .send(let serial):
                adaptiveHeartbeatSending(serial, interval: machine.interval)
                do {
                    markHeartbeatProgress(on: channel)
                    try write(Frame(type: configuration.profile.heartbeatType ?? 0, serial: serial), on: channel)
                    heartbeatFeed.publish(Heartbeat(serial: serial, outcome: .sent))
                } catch {
                    connectionLost(error)
                    return
                }
            case .missed(let serial):
                recordMiss(serial)
            case .missedAndGiveUp(let serial, let misses):
                recordMiss(serial)
                connectionLost(TetherError(
                    code: .heartbeatTimeout,
                    message: "no heartbeat ack from \(channel.remoteAddress) for \(counted(misses, "heartbeat")) in a row (\(describe(configuration.heartbeat.timeout)) each)"
                ))
                return
            case .verificationMissed(let serial):
                recordMiss(serial)
                connectionLost(TetherError(
                    code: .heartbeatTimeout,
                    message: "no heartbeat ack from \(channel.remoteAddress) within \(describe(configuration.heartbeat.timeout)) after the network path changed"
                ))
                return
            }
        }
        scheduleHeartbeat(at: machine.nextTick(after: now))
    }

    /// Heartbeat `serial` got no ack in time: counted and published.
    private func recordMiss(_ serial: UInt32) {
        counters.heartbeatsMissed += 1
        adaptiveHeartbeatMissed(serial)
        heartbeatFeed.publish(Heartbeat(serial: serial, outcome: .missed))
    }

    /// The network path changed: sends a heartbeat now, out of schedule (unless one is
    /// outstanding), whose miss within the heartbeat timeout ends the connection. Does
    /// nothing without heartbeats.
    func verifyConnection() {
        guard let channel, var machine = heartbeatMachine else { return }
        let now = loop.now
        let actions = machine.verify(now: now)
        heartbeatMachine = machine
        // Whatever happens next says nothing of how long the old path kept an idle mapping.
        adaptiveHeartbeatVerifying()
        for case .send(let serial) in actions {
            do {
                markHeartbeatProgress(on: channel)
                try write(Frame(type: configuration.profile.heartbeatType ?? 0, serial: serial), on: channel)
                heartbeatFeed.publish(Heartbeat(serial: serial, outcome: .sent))
            } catch {
                connectionLost(error)
                return
            }
        }
        // The timer waited for the next send; now it waits for this heartbeat's miss.
        if let heartbeatTimer { loop.cancel(heartbeatTimer) }
        scheduleHeartbeat(at: machine.nextTick(after: now))
    }

    func heartbeatAcked(_ frame: Frame) {
        guard var machine = heartbeatMachine else { return }
        let now = loop.now
        // Without serials on the wire an ack answers the one heartbeat outstanding.
        let serial = configuration.profile.correlation == .bySerial ? frame.serial : machine.outstanding?.serial ?? 0
        let rtt = machine.ack(serial: serial, now: now)
        if rtt != nil, let interval = adaptiveHeartbeatAcked(serial) { machine.interval = interval }
        heartbeatMachine = machine
        if let rtt {
            counters.lastHeartbeatRoundTrip = MonotonicTime.duration(nanoseconds: rtt)
            // The timer was set for this heartbeat's miss; re-arm it for the next send.
            if let heartbeatTimer { loop.cancel(heartbeatTimer) }
            scheduleHeartbeat(at: machine.nextTick(after: now))
            heartbeatFeed.publish(Heartbeat(serial: serial, outcome: .acked, roundTripTime: MonotonicTime.duration(nanoseconds: rtt)))
        }
    }
}
