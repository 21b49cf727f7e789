// Large frames in chunks (FrameChunk), so that small frames go between them: once both ends
// said they understand chunks, a frame whose payload is over the chunk size waits here and
// goes out one chunk at a time, each written only when everything before it has reached the
// kernel, and the socket keeps at most one chunk unsent (TCP_NOTSENT_LOWAT). A heartbeat, an
// acknowledgement or a small response written meanwhile goes out next, behind at most the
// chunk in this process and the one in the kernel. Pushes keep their order: a notification
// written while chunks wait is queued behind them.

/// The frames of one channel waiting to be sent in chunks, and those queued behind them.
final class ChunkSender {
    /// The most payload bytes one chunk carries.
    let size: Int

    enum Item {
        /// A large frame, sent in chunks from `offset` on.
        case chunked(Frame, offset: Int)
        /// A frame that must not pass the chunked frames before it (a push), sent whole.
        case whole(Frame)
    }

    private var items: [Item] = []
    private var head = 0
    /// Payload bytes queued and not yet written below.
    private(set) var waitingBytes = 0
    /// Payload bytes ever queued.
    private(set) var queuedTotal = 0
    /// Payload bytes ever written below, in chunks or whole.
    private(set) var chunkedTotal = 0
    /// The owner's ``FrameChannel/writableThreshold``, held while frames wait here: it is
    /// given to the transport once they have all gone below.
    var heldThreshold: Int?

    init(size: Int) {
        self.size = size
    }

    /// Whether frames wait.
    var hasQueue: Bool { head < items.count }

    func append(_ frame: Frame) {
        items.append(frame.payload.count > size ? .chunked(frame, offset: 0) : .whole(frame))
        waitingBytes += frame.payload.count
        queuedTotal += frame.payload.count
    }

    /// What to write below next: a frame whole (`chunked` false), or the piece of the first
    /// waiting frame's payload at `offset`, `count` bytes long, to go in a chunk.
    func next() -> (frame: Frame, chunked: Bool, offset: Int, count: Int) {
        switch items[head] {
        case .whole(let frame):
            advance(by: frame.payload.count)
            items[head] = .whole(Frame(type: 0))
            head += 1
            compact()
            return (frame, false, 0, frame.payload.count)
        case .chunked(let frame, let offset):
            let count = min(size, frame.payload.count - offset)
            advance(by: count)
            if offset + count == frame.payload.count {
                // Released now rather than when the queue empties.
                items[head] = .whole(Frame(type: 0))
                head += 1
                compact()
            } else {
                items[head] = .chunked(frame, offset: offset + count)
            }
            return (frame, true, offset, count)
        }
    }

    /// Drops what waits: the channel closed.
    func drop() {
        items = []
        head = 0
        waitingBytes = 0
    }

    private func advance(by count: Int) {
        waitingBytes -= count
        chunkedTotal += count
    }

    private func compact() {
        guard head == items.count else { return }
        items.removeAll(keepingCapacity: items.count <= 16)
        head = 0
    }
}

extension FrameChannel {
    /// From now on, frames whose payload is over `size` bytes are sent in chunks of that
    /// many: the peer said it understands them. The socket keeps at most `size` bytes unsent.
    ///
    /// - Parameter size: The most payload bytes a chunk carries.
    func sendInChunks(of size: Int) {
        guard isOpen, chunkSender == nil, size > 0 else { return }
        chunkSender = ChunkSender(size: size)
        transport.limitUnsentBytes(size)
    }

    /// From now on, chunks from the peer are put back together into their frames, up to
    /// `maximumPayloadLength` bytes each: this end said it understands them.
    ///
    /// - Parameter maximumPayloadLength: The largest payload of a frame put together.
    func acceptChunks(upTo maximumPayloadLength: Int) {
        guard chunkAssembler == nil else { return }
        chunkAssembler = ChunkAssembler(maximumPayloadLength: maximumPayloadLength)
    }

    /// Whether frames are sent in chunks on this channel.
    var sendsChunks: Bool { chunkSender != nil }

    /// Whether `frame` waits with the chunked frames rather than going out now: it is large,
    /// or it is a push and chunked frames wait before it.
    @inline(__always)
    func waitsForChunks(_ frame: Frame, _ sender: ChunkSender) -> Bool {
        frame.payload.count > sender.size || (sender.hasQueue && settings.profile?.classify(frame.type) == .notification)
    }

    /// The bytes that would go out before `frame` if it were written now: all that is
    /// pending, or, for a frame that goes between chunks, what is pending below the chunks
    /// still waiting. What backpressure weighs a small request against while a large frame
    /// is under way.
    func bytesAhead(of frame: Frame) -> Int {
        guard let sender = chunkSender, sender.hasQueue, !waitsForChunks(frame, sender) else { return pendingOutboundBytes }
        return buffers.pendingOutboundBytes
    }

    /// Queues `frame` to be sent in chunks (or whole, behind the chunks before it).
    func queueForChunks(_ frame: Frame, _ sender: ChunkSender) {
        sender.append(frame)
        let tracking = tracked
        tracking.sendsChunks = true
        buffers.bottom.flushObserver = tracking.notice
        writeChunks()
    }

    /// Writes the next chunks while nothing waits to be written below: called as frames are
    /// queued and after each write to the socket.
    func writeChunks() {
        guard isOpen, let sender = chunkSender else { return }
        var wrote = false
        while sender.hasQueue, buffers.pendingOutboundBytes == 0 {
            writeNext(of: sender)
            wrote = true
        }
        guard isOpen else { return }
        if let tracking {
            for index in tracking.writeWaiters.indices {
                guard let through = tracking.writeWaiters[index].chunkedThrough, through <= sender.chunkedTotal else { continue }
                // Every chunk the wait needs is in the buffers now: its mark is this.
                tracking.writeWaiters[index].chunkedThrough = nil
                tracking.writeWaiters[index].level = buffers
                tracking.writeWaiters[index].mark = buffers.writeMark
            }
        }
        if !sender.hasQueue {
            tracking?.sendsChunks = false
            updateFlushObserver()
            if let threshold = sender.heldThreshold {
                sender.heldThreshold = nil
                if buffers.pendingOutboundBytes <= threshold {
                    transportWritable()
                } else {
                    transport.writableThreshold = threshold
                }
            }
        }
        if wrote, !buffers.flushScheduled { transport.scheduleFlush() }
    }

    /// Writes every chunk that waits at once: for a graceful close, which writes what is
    /// pending and nothing after it.
    func writeAllChunks() {
        guard isOpen, let sender = chunkSender else { return }
        while sender.hasQueue, isOpen { writeNext(of: sender) }
    }

    private func writeNext(of sender: ChunkSender) {
        let (original, chunked, offset, count) = sender.next()
        let start = settings.progress != nil ? buffers.writeMark : nil
        do {
            if !chunked {
                try encode(original)
            } else if count >= LargePayloads.threshold, buffers.carriesLargePayloads, let split = codec as? any SplitFrameCodec {
                // The header and the prefix here, the piece from the frame's own array.
                let prefix = FrameChunk.prefix(of: original, at: offset, count: count)
                let chunk = Frame(type: FrameChunk.frameType, serial: original.serial, fields: original.fields)
                if try split.encodeHeader(of: chunk, bodyLength: prefix.count + count, into: &buffers.outbound) {
                    buffers.outbound.writeBytes(prefix)
                    buffers.attach(original.payload, range: offset..<(offset + count))
                } else {
                    try encode(FrameChunk.chunk(of: original, at: offset, size: count).frame)
                }
            } else {
                try encode(FrameChunk.chunk(of: original, at: offset, size: count).frame)
            }
        } catch {
            // A chunk always fits; a push queued behind them may not encode, as it would not
            // have when written directly: it is dropped, as a write that throws would be.
            return
        }
        guard let start, let progress = settings.progress, original.payload.count >= progress.minimumFrameSize else { return }
        if !chunked || original.payload.count == count {
            followProgress(of: original, from: start)
            return
        }
        let end = buffers.writeMark
        let total = (end.outbound - start.outbound) + (end.payloads - start.payloads)
        let tracking = tracked
        var entry = SendProgress(type: original.type, serial: original.serial, total: total, level: buffers, start: start, end: end)
        entry.piece = (offset, count, original.payload.count)
        tracking.sendProgress.append(entry)
        buffers.bottom.flushObserver = tracking.notice
    }

    /// A chunk arrived: the frame it completes, or `nil` while more are to come.
    func assemble(_ chunk: Frame) throws(TetherError) -> Frame? {
        try chunkAssembler!.take(chunk)
    }
}
