extension Connection {
    // MARK: Public

    /// The last sequence such that it and every sequenced push before it were delivered to a
    /// subscriber whose filter takes them (or reported lost in a gap), with
    /// ``ConnectionConfiguration/session``; 0 before the first, or without a session.
    ///
    /// A push that no subscriber takes is held (see
    /// ``SessionConfiguration/maximumHeldPushes``) and keeps this below it until one does.
    ///
    /// Save it when the app stops, with ``sessionEpoch``, and pass them as
    /// ``SessionConfiguration/resumeAfter`` and ``SessionConfiguration/resumeEpoch`` next
    /// time, to resume where it left off.
    public var lastSequence: UInt64 { session?.lastSequence ?? 0 }

    /// The epoch of the server's mailbox history that ``lastSequence`` belongs to, as the
    /// last welcome said; `nil` without a session, before the first welcome, or when the
    /// server's mailbox store does not tell.
    ///
    /// Save it with ``lastSequence`` and pass it as ``SessionConfiguration/resumeEpoch``
    /// next time: if the server's history is then another one (its mailbox was removed, or
    /// its store wiped or replaced), the connection publishes a ``SessionEvent/Kind/reset``
    /// and takes the new history from its start, rather than skipping as many of its pushes
    /// as it had seen of the old one.
    public var sessionEpoch: String? { session?.epoch }

    /// ``lastSequence`` and ``sessionEpoch`` read together, in one step on the connection:
    /// what to save when the app stops, and pass as ``SessionConfiguration/resumeAfter`` and
    /// ``SessionConfiguration/resumeEpoch`` next time.
    ///
    /// Reading the two properties one after the other could pair a sequence with the epoch
    /// of a history that began in between; this cannot.
    public var sessionPosition: (lastSequence: UInt64, epoch: String?) { (lastSequence, sessionEpoch) }

    /// The client id the server accepted on the current connection: set from the moment
    /// the session is (re)established (``SessionEvent/Kind/resumed``), `nil` while
    /// connecting, reconnecting, suspended or closed, and without a
    /// ``ConnectionConfiguration/session``. With an identity provider or after
    /// ``switchSession(to:resumeAfter:resumeEpoch:)-(SessionIdentity,_,_)``, it is the
    /// identity the last accepted hello carried.
    public var sessionClientID: String? {
        guard configuration.session != nil, lifecycle.state.phase == .connected else { return nil }
        return identity.current?.clientID
    }

    /// Session events, with ``ConnectionConfiguration/session``: each resume, each gap (pushes
    /// the server could no longer deliver, with the range), and a reset of the server's
    /// sequence. It ends when the connection closes for good.
    public nonisolated var sessionEvents: Subscription<SessionEvent> { sessionFeed.subscribe() }

    /// Tells the server that the app has every push up to `sequence`, so its mailbox can
    /// delete them: for sessions with ``SessionConfiguration/acknowledgesAutomatically``
    /// off, once the app has stored what it received.
    ///
    /// It goes out at once when connected; otherwise with the next hello. Sequences above
    /// ``lastSequence`` count as ``lastSequence``.
    ///
    /// - Parameter sequence: The highest sequence the app has; lower ones are implied.
    public func acknowledge(through sequence: UInt64) {
        guard var state = session, let through = state.acknowledge(through: sequence) else { return }
        session = state
        sendAcknowledgement(through)
    }

    // MARK: Hello

    /// The chunk size this client announces in its hello (``Limits/chunkSize``), when its
    /// profile has room for chunks.
    var chunkSize: Int? {
        guard let size = configuration.limits.chunkSize, size > 0, FrameChunk.carried(by: configuration.profile) else { return nil }
        return size
    }

    /// Writes the session hello as `sender`, first on the new connection of attempt
    /// `token`, and arms its timeout.
    func sendHello(on channel: Channel, token: ConnectionStateMachine.Token, as sender: SessionIdentity) {
        guard let settings = configuration.session, var state = session else { return }
        if settings.acknowledgesAutomatically { _ = state.acknowledge() }
        session = state
        identity.current = sender
        let hello = SessionWire.Hello(
            clientID: sender.clientID,
            token: sender.token,
            lastSequence: state.lastReceived,
            acknowledged: state.lastAcknowledged,
            epoch: state.epoch,
            hold: notificationFeed.gauge?.isLagging == true ? true : nil,
            chunkBytes: chunkSize
        )
        if hello.chunkBytes != nil { channel.acceptChunks(upTo: configuration.limits.maximumPayloadLength) }
        pushesHeld = hello.hold ?? false
        if pushesHeld { heldPushes() }
        do {
            try write(Frame(type: settings.wireTypes.hello, serial: 0, payload: SessionWire.encode(hello)), on: channel)
        } catch {
            connectionLost(error)
            return
        }
        let timeout = settings.helloTimeout ?? configuration.connectTimeout
        attemptHandles.helloTimer = loop.schedule(after: timeout) { [self] in
            assumeIsolated { connection in
                connection.attemptHandles.helloTimer = nil
                guard let channel = connection.channel else { return }
                // The answer may have arrived after this turn's readiness check.
                channel.readPending()
                guard connection.channel === channel else { return }
                connection.handle(.helloTimedOut(token, TetherError(
                    code: .timedOut,
                    message: "\(channel.remoteAddress) did not answer the session hello within \(describe(timeout))"
                )))
            }
        }
    }

    /// The server answered the hello: accepted (resume, then ready), refused for good
    /// (fail, no reconnect), or refused for now (a failed attempt).
    func helloAnswered(_ frame: Frame) {
        // An answer before the hello went out (the provider is still asked) answers nothing.
        guard configuration.session != nil, var state = session, identity.asking == nil else { return }
        let server = remoteAddress?.description ?? currentEndpoint.description
        let clientID = identity.current?.clientID ?? ""
        if let welcome = SessionWire.decode(SessionWire.Welcome.self, from: frame.payload), welcome.accepted {
            if welcome.chunkBytes != nil, let size = chunkSize { channel?.sendInChunks(of: size) }
            for event in state.welcomed(welcome) { sessionFeed.publish(event) }
            session = state
            identity.accepted = true
            identity.rejectionReason = nil
            handle(.helloAccepted)
            return
        }
        let refusal = SessionWire.decode(SessionWire.Refusal.self, from: frame.payload)
        let message = refusal?.error ?? Response(frame: frame).errorMessage ?? "unexpected answer \(Response(frame: frame).text)"
        if refusal?.rejected == false {
            // A passing failure on the server's side: this attempt failed, the next may not.
            handle(.helloRefused(
                TetherError(code: .sessionRejected, message: "\(server) could not resume client \(clientID) now: \(message)"),
                retryable: true
            ))
            return
        }
        identity.rejectionReason = refusal?.reason ?? message
        handle(.helloRefused(
            TetherError(code: .sessionRejected, message: "\(server) rejected the session of client \(clientID): \(message)"),
            retryable: false
        ))
    }

    // MARK: Pushes

    /// A sequenced push: dropped when it is a duplicate, otherwise published. It counts as
    /// delivered once a subscriber whose filter accepts it has it; until then it is held,
    /// within ``SessionConfiguration/maximumHeldPushes``.
    func deliverSequenced(_ frame: Frame) {
        guard var state = session else { return }
        let receipt = state.receive(serial: frame.serial)
        let sequence: UInt64
        switch receipt {
        case .duplicate:
            counters.duplicateNotifications += 1
            return
        case .turnedAway:
            counters.notificationsTurnedAway += 1
            return
        case .deliver(let next), .deliverAfterGap(let next, _):
            sequence = next
        }
        let outcome: ClientSessionState.Outcome
        switch notificationFeed.publishUntilTaken(frame) {
        case .taken: outcome = .taken
        case .held: outcome = .held
        case .refused:
            outcome = .refused
            counters.notificationsTurnedAway += 1
        }
        state.record(sequence, outcome)
        session = state
        if case .deliverAfterGap(_, let missed) = receipt {
            sessionFeed.publish(SessionEvent(kind: .gap, lastSequence: state.lastSequence, missed: missed))
        }
    }

    /// Held pushes were taken by a subscriber that came later: they count as delivered now.
    func heldPushesTaken(_ frames: [Frame]) {
        guard var state = session else { return }
        state.taken(serials: frames.map(\.serial))
        session = state
        if channel != nil { acknowledgeIfDue() }
    }

    // MARK: Acknowledgements

    /// After a read: acknowledges when enough pushes are waiting, or arms the timer that will.
    func acknowledgeIfDue() {
        guard let settings = configuration.session, settings.acknowledgesAutomatically, !handshaking,
              let state = session, state.unacknowledged > 0 else { return }
        if state.unacknowledged >= UInt64(max(1, settings.acknowledgeEvery)) {
            acknowledgeNow()
        } else if acknowledgeTimer == nil {
            acknowledgeTimer = loop.schedule(after: settings.acknowledgeDelay) { [self] in
                assumeIsolated { connection in
                    connection.acknowledgeTimer = nil
                    connection.acknowledgeNow()
                }
            }
        }
    }

    /// Acknowledges everything delivered, if the connection is up and acknowledges by itself.
    func acknowledgeNow() {
        guard configuration.session?.acknowledgesAutomatically == true, var state = session,
              let through = state.acknowledge() else { return }
        session = state
        sendAcknowledgement(through)
    }

    private func sendAcknowledgement(_ through: UInt64) {
        if let acknowledgeTimer { loop.cancel(acknowledgeTimer) }
        acknowledgeTimer = nil
        guard let settings = configuration.session, let channel, !handshaking else { return }
        let frame = Frame(
            type: settings.wireTypes.acknowledgement,
            serial: UInt32(truncatingIfNeeded: through),
            payload: SessionWire.acknowledgement(through: through)
        )
        // One that does not fit is not lost: the next acknowledgement or hello covers it.
        try? write(frame, on: channel)
    }

    /// The socket is going: the hello and acknowledgement timers go with it.
    func stopSession() {
        if let timer = attemptHandles.helloTimer { loop.cancel(timer) }
        attemptHandles.helloTimer = nil
        stopAskingIdentity()
        if let acknowledgeTimer { loop.cancel(acknowledgeTimer) }
        acknowledgeTimer = nil
    }
}
