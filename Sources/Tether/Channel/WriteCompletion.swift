// Knowing when a frame's bytes have left the process: each level of a transport stack
// (the frame channel's buffers, then TLS's or WebSocket's beneath, then the socket's)
// counts what was ever written into it and what was ever taken out, so a frame's end is a
// mark on the count of the level it was written to. Once that level has passed the mark,
// every byte of the frame is in the level below, and the mark moves there; past the last
// level, the bytes are in the kernel.

/// Where the stream of one level's buffers stood after a frame was written into it.
struct WriteMark: Hashable {
    /// Bytes ever written into the level's `outbound` buffer.
    var outbound: Int
    /// Bytes of large payloads ever queued beside it.
    var payloads: Int
}

extension TransportBuffers {
    /// The mark of everything written into these buffers so far.
    var writeMark: WriteMark {
        WriteMark(outbound: outbound.writtenTotal, payloads: large?.queuedTotal ?? 0)
    }

    /// Whether every byte up to `mark` has been taken out of these buffers.
    func hasPassed(_ mark: WriteMark) -> Bool {
        outbound.consumedTotal >= mark.outbound && (large?.sentTotal ?? 0) >= mark.payloads
    }

    /// The buffers of the transport at the bottom of the stack: the socket's.
    var bottom: TransportBuffers {
        var level = self
        while let below = level.below { level = below }
        return level
    }
}

/// One caller waiting for the bytes written to a channel so far to reach the kernel.
struct WriteWaiter {
    let id: UInt64
    /// The level the mark is on now.
    var level: TransportBuffers
    var mark: WriteMark
    /// While frames sent in chunks that were written before the wait began still have chunks
    /// to go: the count of their payload bytes that must be chunked first
    /// (``ChunkSender/chunkedTotal``). The mark is taken once they are.
    var chunkedThrough: Int?
    /// Called once: `true` when written, `false` when the channel closed first.
    let done: (Bool) -> Void

    /// Moves the mark down the levels the bytes have passed; whether they passed the last.
    mutating func advance() -> Bool {
        guard chunkedThrough == nil else { return false }
        while level.hasPassed(mark) {
            guard let below = level.below else { return true }
            level = below
            mark = below.writeMark
        }
        return false
    }
}

/// What a channel keeps while something waits on its writes or follows its large frames:
/// the waits of ``FrameChannel/whenWritten(id:_:)``, the progress of frames sent and of the
/// frame being received, and the notice the socket's transport calls after each write.
final class ChannelTracking {
    var writeWaiters: [WriteWaiter] = []
    var sendProgress: [SendProgress] = []
    var receiveProgress: ReceiveProgress?
    /// The frame whose large body the transport is reading into storage of its own
    /// (``LargePayloads/incoming``), without its payload, and its header's length.
    var largeFrame: (frame: Frame, headerLength: Int)?
    /// Payload bytes told so far of the frame being sent in chunks.
    var chunkReported = 0
    /// Set on the bottom buffers while a wait or a frame sent needs the socket's writes.
    let notice: FlushNotice

    init(notice: FlushNotice) {
        self.notice = notice
    }

    /// Whether anything needs the socket's writes.
    var needsFlushes: Bool { !writeWaiters.isEmpty || !sendProgress.isEmpty || sendsChunks }
    /// Set while frames wait to be sent in chunks: each write below may make room for the next.
    var sendsChunks = false
}

extension FrameChannel {
    /// The tracking of this channel, made at the first need.
    var tracked: ChannelTracking {
        if let tracking { return tracking }
        let made = ChannelTracking(notice: FlushNotice { [weak self] in self?.transportFlushed() })
        tracking = made
        return made
    }

    /// Calls `done` once, on the loop: with `true` once every byte written to this channel
    /// until now has been handed to the kernel (over TLS, encrypted and handed on; over
    /// WebSocket, framed and handed on), with `false` if the channel closes first or is
    /// closed already.
    ///
    /// - Parameters:
    ///   - id: Names the wait for ``cancelWhenWritten(id:)``.
    ///   - done: Told the outcome.
    func whenWritten(id: UInt64, _ done: @escaping (Bool) -> Void) {
        guard isOpen else {
            done(false)
            return
        }
        var waiter = WriteWaiter(id: id, level: buffers, mark: buffers.writeMark, done: done)
        if let sender = chunkSender, sender.hasQueue { waiter.chunkedThrough = sender.queuedTotal }
        if waiter.advance() {
            done(true)
            return
        }
        let tracking = tracked
        tracking.writeWaiters.append(waiter)
        buffers.bottom.flushObserver = tracking.notice
    }

    /// Stops waiting for `id`; whether it was still waiting.
    ///
    /// - Parameter id: The id given to ``whenWritten(id:_:)``.
    /// - Returns: `true` if the wait was removed before it ended.
    @discardableResult
    func cancelWhenWritten(id: UInt64) -> Bool {
        guard let tracking, let index = tracking.writeWaiters.firstIndex(where: { $0.id == id }) else { return false }
        tracking.writeWaiters.remove(at: index)
        updateFlushObserver()
        return true
    }

    /// Bytes went to the kernel: progress moves on, and the waits whose bytes are all there end.
    func transportFlushed() {
        guard let tracking else { return }
        if tracking.sendsChunks { writeChunks() }
        if !tracking.sendProgress.isEmpty { measureSendProgress() }
        var finished: [WriteWaiter] = []
        var index = 0
        while index < tracking.writeWaiters.count {
            if tracking.writeWaiters[index].advance() {
                finished.append(tracking.writeWaiters.remove(at: index))
            } else {
                index += 1
            }
        }
        updateFlushObserver()
        for waiter in finished { waiter.done(true) }
    }

    /// Listens to the socket's flushes only while anything waits on them.
    func updateFlushObserver() {
        if tracking?.needsFlushes != true { buffers.bottom.flushObserver = nil }
    }

    /// The channel closed: every wait ends unwritten, and progress is no longer followed.
    func endWriteWaits() {
        guard let tracking else { return }
        self.tracking = nil
        buffers.bottom.flushObserver = nil
        for waiter in tracking.writeWaiters { waiter.done(false) }
    }
}
