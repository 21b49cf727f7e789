// Flow control towards slow subscribers: with a session, a subscription to notifications
// buffers every push it is given, so the connection stops reading its socket while the
// slowest one has too many waiting, and reads again once it has caught up.

extension Connection {
    /// After a batch was decoded: stops reading while a subscriber to notifications has
    /// more than ``SessionConfiguration/maximumPendingPushes`` waiting (the rest of the
    /// batch waits in the buffer), and reads again once none does.
    func regulateReading(_ channel: Channel) {
        guard notificationFeed.gauge != nil else { return }
        if holdsBackFrames {
            if !channel.isReadingPaused {
                channel.pauseReading()
                counters.readPauses += 1
                let waiters = readPauseWaiters
                readPauseWaiters = []
                for waiter in waiters { waiter.resume() }
            }
            return
        }
        if channel.isReadingPaused {
            channel.resumeReading()
            readingResumedAt = loop.now
        }
    }

    /// Whether frames wait in the buffer because a subscriber to notifications lags. Not
    /// during a handshake: the welcome of a new connection is read whatever the backlog.
    var holdsBackFrames: Bool {
        guard let gauge = notificationFeed.gauge, gauge.isLagging else { return false }
        return !lifecycle.isHandshaking
    }

    /// The last lagging subscriber is down to half the bound: what waits in the buffer is
    /// decoded, and the socket is read again unless a subscriber lags again meanwhile.
    func subscribersCaughtUp() {
        guard let channel, channel.isReadingPaused, !holdsBackFrames else { return }
        channel.decodeBuffered(self)
    }

    /// Returns once reading has stopped for a slow subscriber at least once since the
    /// connection was made: for tests, which would otherwise have to ask again and again.
    func readPausedForTesting() async {
        if counters.readPauses > 0 { return }
        await withCheckedContinuation { readPauseWaiters.append($0) }
    }

    /// Whether a heartbeat sent at `sentAt` that got no ack in time is excused: reading was
    /// stopped for a slow subscriber at some point since, so its ack may be waiting unread.
    func heartbeatMissExcused(sentAt: UInt64) -> Bool {
        guard notificationFeed.gauge != nil, let channel else { return false }
        return channel.isReadingPaused || readingResumedAt > sentAt
    }
}
