/// A client identified on a peer: where its pushes stand on this connection. Whether they
/// are held (the client's app is behind: they stay in the mailbox, ``replaying`` with no
/// replay running, until it releases them) and whether a newer connection took the session
/// over are the peer's lifecycle's (``PeerStateMachine/Identity``).
struct PeerSession {
    let clientID: String
    /// The highest sequence written to this connection.
    var lastWritten: UInt64
    /// Whether pushes are being replayed from the store rather than written live.
    var replaying: Bool
    /// The replay ends once it has written this far: the store's last sequence when the
    /// session began, raised by each live push that arrives during the replay.
    var replayTarget: UInt64
    /// The epoch of the client's mailbox, as the welcome said it.
    var epoch: String? = nil
}

extension Peer {
    /// The client id of the session on this connection, once the server accepted its hello.
    public var clientID: String? { session?.clientID }

    /// Handles a session hello: checks it, asks the server's authenticator, and has the
    /// hub register the session. The answer is written by ``beginSession(clientID:plan:helloSerial:)``.
    func hello(_ frame: Frame, hub: MailboxHub) async {
        if let current = claimedClientID {
            refuse(frame, "this connection is already identified as \(current)", rejected: true)
            return
        }
        guard let hello = SessionWire.decode(SessionWire.Hello.self, from: frame.payload) else {
            refuse(frame, "malformed session hello: expected {\"clientID\": …, \"lastSequence\": …}", rejected: true)
            return
        }
        guard !hello.clientID.isEmpty, hello.clientID.utf8.count <= SessionWire.maximumClientIDLength else {
            refuse(frame, "client id must be 1 to \(SessionWire.maximumClientIDLength) bytes", rejected: true)
            return
        }
        let holds = hello.hold == true && !configuration.ignoresPushHolds
        for case .refuseHello(let current) in lifecycle.handle(.helloReceived(clientID: hello.clientID, holds: holds, takesChunks: hello.chunkBytes != nil)) {
            // Another hello was claimed while this one decoded.
            refuse(frame, "this connection is already identified as \(current)", rejected: true)
            return
        }
        // Taken before anything awaits: which of two connections of one client is the newer
        // is the order their hellos were read in, not the order their claims finish.
        let ticket = hub.helloTicket()
        if let authenticate = hub.authenticator {
            let check = ClientHello(clientID: hello.clientID, token: hello.token, lastSequence: hello.lastSequence, peer: id, address: remoteAddress)
            do {
                try await authenticate(check)
            } catch {
                perform(lifecycle.handle(.helloAbandoned))
                if drainPhase.hasExpired {
                    // Cancelled at the drain's deadline: no verdict on the client.
                    respond(drainExpiredResponse(to: frame), to: frame)
                    return
                }
                hub.rejected()
                let reason = TetherError.reason(of: error)
                // The reason alone: the client's error names the server and the client id.
                refuse(frame, reason, rejected: true, reason: reason)
                close(for: TetherError(code: .sessionRejected, message: "the server rejected the session of client \(hello.clientID): \(reason)"))
                return
            }
        }
        guard lifecycle.isOpen else { return }
        do {
            try await hub.resume(MailboxHub.Resume(
                clientID: hello.clientID,
                peer: self,
                lastSequence: hello.lastSequence,
                acknowledged: hello.acknowledged ?? hello.lastSequence,
                helloSerial: frame.serial,
                epoch: hello.epoch,
                ticket: ticket
            ))
        } catch {
            perform(lifecycle.handle(.helloAbandoned))
            let reason = (error as? TetherError)?.message ?? String(describing: error)
            refuse(frame, reason, rejected: false)
        }
    }

    private func refuse(_ frame: Frame, _ message: String, rejected: Bool, reason: String? = nil) {
        respond(Response(payload: SessionWire.encode(SessionWire.Refusal(error: message, rejected: rejected, reason: reason))), to: frame)
    }

    /// The hub registered this peer for `clientID`: answer the hello, then replay what the
    /// client missed. Runs in the hub's order, before any live push that follows it.
    /// `resuming` says whether the client's hello resumes after pushes it already has.
    func beginSession(clientID: String, plan: ResumePlan, helloSerial: UInt32, resuming: Bool) {
        guard let channel, lifecycle.isOpen else { return }
        replayHandles.task?.cancel()
        session = PeerSession(
            clientID: clientID,
            lastWritten: plan.resumeAfter,
            replaying: plan.lastSequence > plan.resumeAfter,
            replayTarget: plan.lastSequence
        )
        let hello = hub?.configuration.wireTypes.hello ?? 0
        var welcome = plan.welcome(for: clientID)
        session?.epoch = welcome.epoch
        for action in lifecycle.handle(.sessionBegan) {
            switch action {
            case .countHold:
                counts.pushHolds += 1
            case .offerChunks:
                if let size = configuration.limits.chunkSize, size > 0, FrameChunk.carried(by: configuration.profile) {
                    welcome.chunkBytes = size
                }
            default:
                perform([action])
            }
        }
        do {
            try write(Frame(type: hello, serial: helloSerial, payload: SessionWire.encode(welcome)), on: channel)
        } catch {
            end(error, graceful: false)
            return
        }
        if let size = welcome.chunkBytes {
            // Both ends understand chunks from here on: the client sends them after the welcome.
            channel.acceptChunks(upTo: configuration.limits.maximumPayloadLength)
            channel.sendInChunks(of: size)
        }
        server?.publish(ServerEvent(
            kind: resuming ? .sessionResumed : .sessionIdentified,
            address: remoteAddress,
            peer: id,
            clientID: clientID,
            pushesToReplay: plan.lastSequence > plan.resumeAfter ? plan.lastSequence - plan.resumeAfter : 0
        ))
        if let session, session.replaying, !lifecycle.isHeld { startReplay() }
    }

    /// A push stored for this peer's client: written at once when it is the next of the
    /// sequence, unless a replay is catching up.
    func deliverSequenced(_ frame: Frame, sequence: UInt64, for clientID: String) {
        guard var current = session, current.clientID == clientID, let channel else { return }
        defer { session = current }
        if current.replaying {
            current.replayTarget = max(current.replayTarget, sequence)
            return
        }
        guard sequence > current.lastWritten else { return }
        if lifecycle.isHeld {
            // Kept in the mailbox until the client releases it.
            current.replaying = true
            current.replayTarget = sequence
            return
        }
        // A push after one not written yet (stored by another node, whose wake-up has not
        // come) reads what comes before it from the store, so none is skipped; so does a
        // client that reads slowly, once its buffer drains, rather than growing the buffer
        // without bound.
        if sequence > current.lastWritten + 1 || channel.pendingOutboundBytes > configuration.limits.outboundHighWaterMark {
            current.replaying = true
            current.replayTarget = sequence
            startReplay()
            return
        }
        do {
            try write(frame, on: channel)
            current.lastWritten = sequence
        } catch {
            end(error, graceful: false)
        }
    }

    /// Pushes were stored for this peer's client through `sequence` elsewhere: write what
    /// this connection has not had, reading it from the store.
    func catchUp(through sequence: UInt64, for clientID: String) {
        guard var current = session, current.clientID == clientID, channel != nil, sequence > current.lastWritten else { return }
        current.replayTarget = max(current.replayTarget, sequence)
        let start = !current.replaying && !lifecycle.isHeld
        current.replaying = true
        session = current
        if start { startReplay() }
    }

    private func startReplay() {
        replayHandles.task = Task(executorPreference: loop.taskExecutor) { [self] in await replay() }
    }

    /// Writes stored pushes after ``PeerSession/lastWritten`` page by page, waiting for the
    /// outbound buffer to drain between pages, until it reaches ``PeerSession/replayTarget``.
    private func replay() async {
        guard let hub else { return }
        let batchSize = max(1, hub.configuration.replayBatchSize)
        while !Task.isCancelled, let current = session, current.replaying, !lifecycle.isHeld, let channel {
            if channel.pendingOutboundBytes > configuration.limits.outboundHighWaterMark {
                await outboundDrained(channel)
                continue
            }
            let page: [MailboxMessage]
            do {
                // On the store's threads: this task prefers the peer's event loop.
                page = try await hub.messages(for: current.clientID, after: current.lastWritten, limit: batchSize)
            } catch {
                end(TetherError(code: .storeFailed, message: "replaying the mailbox of \(current.clientID) failed: \(TetherError.reason(of: error))", underlying: error as? TetherError), graceful: false)
                return
            }
            guard !Task.isCancelled, var latest = session, latest.clientID == current.clientID, let channel = self.channel else { return }
            // Held while the page was read: it waits in the store with the rest.
            if lifecycle.isHeld { break }
            let now = hub.configuration.clock()
            for message in page where message.sequence > latest.lastWritten {
                if message.hasExpired(at: now) {
                    // Its time to live has passed: skipped, and the client sees the jump.
                    latest.lastWritten = message.sequence
                    continue
                }
                let frame = Frame(type: message.type, serial: UInt32(truncatingIfNeeded: message.sequence), payload: message.payload)
                do {
                    try write(frame, on: channel)
                } catch {
                    end(error, graceful: false)
                    return
                }
                latest.lastWritten = message.sequence
                counts.notificationsReplayed += 1
            }
            // Done when the target is reached, or when the store has nothing more (what is
            // missing was dropped meanwhile; the client sees the jump).
            if latest.lastWritten >= latest.replayTarget || page.isEmpty {
                latest.replaying = false
            }
            session = latest
        }
        replayHandles.task = nil
    }

    /// Bytes waiting to be written to this peer, for tests.
    var pendingOutboundBytesForTesting: Int { channel?.pendingOutboundBytes ?? 0 }

    /// Waits until the outbound buffer is down to half the high-water mark, or the peer ends.
    private func outboundDrained(_ channel: Channel) async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            guard self.channel === channel, lifecycle.isOpen, replayHandles.writableWaiter == nil else {
                continuation.resume()
                return
            }
            replayHandles.writableWaiter = continuation
            channel.writableThreshold = configuration.limits.outboundHighWaterMark / 2
        }
    }

    /// An acknowledgement from the client: the hub may delete what it has.
    /// A flow signal from the client, if it carries one: hold its pushes in the mailbox, or
    /// write them again from where it stands.
    func acknowledged(_ frame: Frame, hub: MailboxHub) {
        guard let current = session else { return }
        let (through, hold) = SessionWire.acknowledgement(frame.payload)
        if let through { hub.acknowledge(current.clientID, through: min(through, current.lastWritten)) }
        guard let hold, !configuration.ignoresPushHolds else { return }
        for action in lifecycle.handle(.holdRequested(hold)) {
            switch action {
            case .countHold:
                counts.pushHolds += 1
            case .replayHeld:
                // What was kept meanwhile is read from the mailbox, page by page.
                if current.replaying && replayHandles.task == nil { startReplay() }
            default:
                perform([action])
            }
        }
    }

    /// The same client id connected again on another peer: this older connection goes.
    func replaced(clientID: String, by address: TetherSocketAddress) {
        guard claimedClientID == clientID else { return }
        takenOver(clientID, TetherError(
            code: .sessionTakenOver,
            message: "client \(clientID) connected again from \(address); closed its older connection from \(remoteAddress)"
        ))
    }

    /// Another node of the cluster claimed this peer's client: this connection goes.
    func replaced(clientID: String, byNode node: String) {
        guard claimedClientID == clientID else { return }
        takenOver(clientID, TetherError(
            code: .sessionTakenOver,
            message: "client \(clientID) connected again on node \(node); closed its older connection from \(remoteAddress)"
        ))
    }

    /// A newer connection took this peer's client over: say so (an event, and the notice
    /// that tells the client not to come back), then close.
    private func takenOver(_ clientID: String, _ reason: TetherError) {
        for action in lifecycle.handle(.takenOver(clientID: clientID)) {
            switch action {
            case .publishTakeover(let clientID):
                server?.publish(ServerEvent(kind: .sessionTakenOver, address: remoteAddress, peer: id, reason: reason, clientID: clientID))
            case .closeForTakeover:
                close(for: reason)
            default:
                perform([action])
            }
        }
    }

    /// The session ends with the peer: the replay stops, and what waits for the outbound
    /// buffer is woken.
    func stopReplay() {
        wakeChannelDrainWaiters()
        replayHandles.task?.cancel()
        replayHandles.task = nil
        if let waiter = replayHandles.writableWaiter {
            replayHandles.writableWaiter = nil
            waiter.resume()
        }
    }

    /// Reads what waits on the socket now, outside the loop's readiness events: a
    /// connection whose client has already closed it ends here. For the hub, before it
    /// decides which of two connections of one client is the newer.
    func readWhatWaits() {
        channel?.readPending()
    }
}

extension Peer {
    /// The state of the session's writing, for a test's failure message.
    var sessionStateForTesting: String {
        guard let session else { return "no session" }
        return "\(channel?.pendingOutboundBytes ?? 0) bytes outbound, written through \(session.lastWritten), replaying \(session.replaying) to \(session.replayTarget), held \(lifecycle.isHeld)"
    }
}
