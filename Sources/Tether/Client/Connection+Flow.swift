// Flow control towards slow subscribers: with a session, a subscription to notifications
// buffers every push it is given, so the connection stops reading its socket while the
// slowest one has too many waiting, and reads again once it has caught up. Every
// subscription to frames and notifications is bounded in bytes the same way.

extension Connection {
    /// After a batch was decoded: asks the server to hold pushes while a subscriber to
    /// notifications has more than ``SessionConfiguration/maximumPendingPushes`` waiting,
    /// and to send them again once none does; stops reading while one has more than twice
    /// that (a server that does not hold, or pushes from outside the mailbox), the rest of
    /// the batch waiting in the buffer.
    func regulateReading(_ channel: Channel) {
        signalFlow(on: channel)
        if holdsBackFrames {
            if !channel.isReadingPaused {
                channel.pauseReading()
                counters.readPauses += 1
                let waiters = testWaiters.readPauses
                testWaiters.readPauses = []
                for waiter in waiters { waiter.resume() }
            }
            return
        }
        if channel.isReadingPaused {
            channel.resumeReading()
            readingResumedAt = loop.now
        }
    }

    /// Tells the server whether to hold this client's pushes, when that changed: they wait
    /// in its mailbox while the slowest subscriber is behind. Not before the session is
    /// established: the hello says it then.
    private func signalFlow(on channel: Channel) {
        guard let gauge = notificationFeed.gauge, let settings = configuration.session, !handshaking else { return }
        let lagging = gauge.isLagging
        guard lagging != pushesHeld else { return }
        let frame = Frame(type: settings.wireTypes.acknowledgement, serial: 0, payload: SessionWire.flowSignal(holding: lagging))
        // One that does not fit is tried again after the next read.
        guard (try? write(frame, on: channel)) != nil else { return }
        pushesHeld = lagging
        if lagging { heldPushes() }
    }

    /// Whether frames wait in the buffer because a subscriber to notifications or frames is
    /// too far behind, in number or in bytes. Not during a handshake: the welcome of a new
    /// connection is read whatever the backlog.
    var holdsBackFrames: Bool {
        guard notificationFeed.gauge?.isOverflowing == true || frameFeed.gauge?.isOverflowing == true else { return false }
        return !lifecycle.isHandshaking
    }

    /// The last lagging subscriber is down to half the bound: the server may send pushes
    /// again, what waits in the buffer is decoded, and the socket is read again unless a
    /// subscriber lags again meanwhile.
    ///
    /// Whether or not reading stopped: the decoding stops at the frame a subscriber cannot
    /// take, and a subscriber may catch up before the reading would stop (the check after
    /// the decoding then finds nothing held back). The frames left in the buffer are decoded
    /// here, or they would wait for bytes that may never come.
    func subscribersCaughtUp() {
        guard let channel else { return }
        if holdsBackFrames {
            signalFlow(on: channel)
        } else {
            channel.decodeBuffered(self)
        }
    }

    /// Returns once reading has stopped for a slow subscriber at least once since the
    /// connection was made: for tests, which would otherwise have to ask again and again.
    func readPausedForTesting() async {
        if counters.readPauses > 0 { return }
        await withCheckedContinuation { testWaiters.readPauses.append($0) }
    }

    /// Counts a request to hold pushes, and wakes the tests waiting for one.
    func heldPushes() {
        counters.pushHolds += 1
        let waiters = testWaiters.holds
        testWaiters.holds = []
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the connection has asked the server to hold its pushes at least once:
    /// for tests.
    func pushesHeldForTesting() async {
        if counters.pushHolds > 0 { return }
        await withCheckedContinuation { testWaiters.holds.append($0) }
    }

    /// Whether a heartbeat sent at `sentAt` that got no ack in time is excused: reading was
    /// stopped for a slow subscriber at some point since, so its ack may be waiting unread;
    /// or a frame was under way, in either direction, when the heartbeat went out or is now,
    /// and bytes moved since, so the heartbeat waits behind ours or its ack behind the
    /// server's. A peer whose bytes stopped moving is not excused: it is found within the
    /// heartbeat's bound.
    func heartbeatMissExcused(sentAt: UInt64) -> Bool {
        guard let channel else { return false }
        if channel.isReadingPaused || readingResumedAt > sentAt { return true }
        let mark = heartbeatProgressMark
        // Ours: a large frame's bytes handed over before the heartbeat, still undelivered
        // when it went out, that moved since. The heartbeat's own bytes do not count, nor
        // small frames (an earlier heartbeat whose acknowledgement the kernel delays).
        let delivered = min(channel.bytesDelivered, mark.ahead)
        if mark.ahead - mark.delivered >= LargePayloads.threshold, delivered > mark.delivered { return true }
        // Theirs: a frame arriving, when the heartbeat went out or now, that moved since.
        guard mark.receiving || channel.holdsPartialInput else { return false }
        return channel.bytesRead != mark.read
    }

    /// Notes, before a heartbeat is written, what has moved so far: the bytes read, the
    /// bytes handed to the transport before it (written, or waiting to be) and how many of
    /// them the peer has acknowledged, and whether part of a frame has been received. See
    /// ``heartbeatMissExcused(sentAt:)``.
    func markHeartbeatProgress(on channel: Channel) {
        heartbeatProgressMark = (
            read: channel.bytesRead,
            ahead: channel.bytesWritten + channel.pendingOutboundBytes,
            delivered: channel.bytesDelivered,
            receiving: channel.holdsPartialInput
        )
    }
}

extension Connection {
    /// Bytes waiting to be written on the current connection: for tests.
    var pendingOutboundBytesForTesting: Int { channel?.pendingOutboundBytes ?? 0 }
    /// Whether the connection sends its large frames in chunks.
    var sendsChunksForTesting: Bool { channel?.sendsChunks ?? false }
    /// Whether a heartbeat was sent and has neither been acked nor counted as missed.
    var heartbeatOutstandingForTesting: Bool { heartbeatMachine?.outstanding != nil }
}

extension Connection {
    /// The state of reading and of the subscribers' backlog, for a test's failure message.
    var flowStateForTesting: String {
        "reading \(channel?.isReadingPaused == true ? "paused" : "on"), \(channel?.bufferedInboundBytes ?? 0) bytes buffered, holding back \(holdsBackFrames), lagging \(notificationFeed.gauge?.isLagging ?? false), last sequence \(lastSequence)"
    }
}
