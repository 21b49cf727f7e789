// What one peer may make the server hold: requests being handled (with backpressure on its
// socket), places among the server's handlers, and time to finish a frame it started.

extension Peer {
    // MARK: Requests being handled

    /// Whether the peer has ``ServerConfiguration/maximumRequestsPerPeer`` requests being
    /// handled or waiting for a handler: then no more frames are decoded and its socket is
    /// not read.
    var isAtRequestLimit: Bool {
        running + inbox.count >= max(configuration.maximumRequestsPerPeer, 1)
    }

    /// A handler task of this peer ended: its place goes back (or to the next peer waiting),
    /// and a peer whose reading was paused is decoded and read again. The last one wakes
    /// the run loop, which then leaves its task group (unless requests wait for a place,
    /// which the group starts when one comes).
    func handlerFinished() {
        running -= 1
        Self.releaseSlot(slots)
        readMoreIfBelowLimit()
        if drainPhase.closesWhenIdle { closeIfDrained() }
        if running == 0, !waitingForSlot, let waiter = inboxWaiter {
            inboxWaiter = nil
            waiter.resume(returning: true)
        }
    }

    /// Decodes and reads again a peer whose reading was paused, once it is below its limit:
    /// after a handler finished, or after a batch whose immediate requests were answered.
    @inline(never)
    func readMoreIfBelowLimit() {
        guard let channel, channel.isReadingPaused, !isAtRequestLimit else { return }
        channel.decodeBuffered(self)
    }

    /// Takes a place for a handler task: one handed to this peer, or a free one.
    ///
    /// - Returns: `false` when none is free: the peer is then queued for the next one.
    func takeSlot() -> Bool {
        if grantedSlots > 0 {
            grantedSlots -= 1
            return true
        }
        if slots.acquire(orQueue: self) { return true }
        waitingForSlot = true
        return false
    }

    /// Puts the requests of the batch from `index` on back at the front of the inbox, to be
    /// started once a place is free.
    func requeue(from index: Int) {
        inbox.insert(contentsOf: batch[index...], at: 0)
    }

    /// Another peer's handler released its place to this peer: the requests waiting for it
    /// start. A peer that ended meanwhile passes the place on.
    func slotGranted() {
        guard lifecycle.isOpen else {
            Self.releaseSlot(slots)
            return
        }
        waitingForSlot = false
        grantedSlots += 1
        if !inbox.isEmpty, let waiter = inboxWaiter {
            inboxWaiter = nil
            waiter.resume(returning: true)
        }
    }

    /// As the peer ends: out of the queue for a place, and the places handed to it go back.
    func leaveSlotQueue() {
        if waitingForSlot {
            waitingForSlot = false
            // Not in the queue any more: a place is on its way, and slotGranted() passes it on.
            _ = slots.withdraw(self)
        }
        while grantedSlots > 0 {
            grantedSlots -= 1
            Self.releaseSlot(slots)
        }
    }

    /// Releases one place; when a peer was waiting for it, tells that peer on its loop.
    static func releaseSlot(_ slots: HandlerSlots) {
        guard let next = slots.release() else { return }
        next.loop.execute { next.assumeIsolated { $0.slotGranted() } }
    }

    // MARK: Frame completion

    /// After a decode: notes when the bytes of an unfinished frame started to arrive, and
    /// arms the check that closes a peer which does not finish it in time.
    ///
    /// The time is kept from the first read that left part of a frame and is not moved by
    /// later bytes of the same frame, so a trickle cannot push the deadline back; a frame
    /// that completes clears it, and the check then finds nothing to do. `readAt` is when
    /// the bytes came in: the loop's wake, or now for bytes held while reading was paused.
    func trackPartialFrame(in channel: Channel, afterDecoding decoded: Bool, readAt: UInt64) {
        guard let timeout = configuration.frameCompletionTimeout else { return }
        guard channel.holdsPartialInput else {
            frameWatch.since = nil
            return
        }
        if decoded || frameWatch.since == nil {
            frameWatch.since = readAt
            frameWatch.bytes = channel.bytesRead
        }
        if frameWatch.timer == nil, let since = frameWatch.since {
            frameWatch.timer = loop.schedule(at: since &+ MonotonicTime.nanoseconds(of: timeout), target: self, tag: Self.frameTag, detail: 0)
        }
    }

    /// The frame completion check fired: closes the peer when the frame it started is still
    /// unfinished at its deadline and arrived slower than ``ServerConfiguration/minimumFrameRate``;
    /// gives one still arriving at that pace another timeout; otherwise checks again at the
    /// deadline of the frame now under way, if any.
    ///
    /// - Parameter extended: Whether the frame was given another timeout before.
    func frameExpired(extended: Bool) {
        frameWatch.timer = nil
        guard let channel, let timeout = configuration.frameCompletionTimeout else { return }
        // Bytes that arrived after this turn's readiness check may finish the frame.
        channel.readPending()
        guard self.channel === channel, let since = frameWatch.since else { return }
        let deadline = since &+ MonotonicTime.nanoseconds(of: timeout)
        if deadline > loop.now {
            frameWatch.timer = loop.schedule(at: deadline, target: self, tag: Self.frameTag, detail: 0)
            return
        }
        if progressing(channel, since: since, from: frameWatch.bytes) {
            // A large frame on a slow link: it gets another timeout from now, measured again then.
            frameWatch.since = loop.now
            frameWatch.bytes = channel.bytesRead
            frameWatch.timer = loop.schedule(at: loop.now &+ MonotonicTime.nanoseconds(of: timeout), target: self, tag: Self.frameTag, detail: 1)
            return
        }
        if extended, let rate = configuration.minimumFrameRate {
            close(for: TetherError(
                code: .frameTimeout,
                message: "peer \(channel.remoteAddress) sent less than \(rate) bytes a second of an unfinished frame for \(describe(timeout)) (\(channel.bufferedInboundBytes) bytes of it received)"
            ))
            return
        }
        close(for: TetherError(
            code: .frameTimeout,
            message: "peer \(channel.remoteAddress) did not finish a frame within \(describe(timeout)) of its first byte (\(channel.bufferedInboundBytes) bytes of it received)"
        ))
    }

    /// Whether the bytes that arrived since `since`, when the socket had read `bytes`, came
    /// at ``ServerConfiguration/minimumFrameRate`` or faster: a frame that is still arriving.
    func progressing(_ channel: Channel, since: UInt64, from bytes: Int) -> Bool {
        guard let rate = configuration.minimumFrameRate, rate > 0 else { return false }
        let elapsed = loop.now &- since
        let arrived = UInt64(max(channel.bytesRead - bytes, 0))
        // arrived / seconds >= rate, in integers: arrived × 10⁹ >= rate × nanoseconds.
        let needed = UInt64(rate).multipliedFullWidth(by: elapsed)
        let got = arrived.multipliedFullWidth(by: 1_000_000_000)
        return got.high > needed.high || (got.high == needed.high && got.low >= needed.low)
    }
}
