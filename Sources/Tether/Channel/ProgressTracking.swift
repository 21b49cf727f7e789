// Progress of large frames through a channel: outbound, how much of the frame the levels
// of the transport stack have taken (the marks of WriteCompletion.swift); inbound, how much
// of the frame under way has arrived. Frames below the configured size cost one comparison.

/// A large frame being written: where it lies in one level's stream, and what was told.
struct SendProgress {
    let type: UInt32
    let serial: UInt32
    let total: Int
    /// The level the range is on: the channel's buffers, then, once all of the frame has
    /// gone beneath them, the socket's.
    var level: TransportBuffers
    var start: WriteMark
    var end: WriteMark
    /// Bytes told so far.
    var reported = 0
    /// For one chunk of a frame sent in chunks: where its bytes lie in the frame's payload,
    /// which progress counts in, and the payload's length.
    var piece: (offset: Int, count: Int, whole: Int)?

    /// Bytes of the frame taken from `level` so far.
    private func taken() -> Int {
        let outbound = min(max(level.outbound.consumedTotal, start.outbound), end.outbound) - start.outbound
        let sent = level.large?.sentTotal ?? 0
        let payloads = min(max(sent, start.payloads), end.payloads) - start.payloads
        return outbound + payloads
    }

    /// Bytes of the frame in the kernel, as far as can be told: once the layers above the
    /// socket have taken all of it, its range in the socket's stream is taken to end where
    /// that stream ended then.
    mutating func measure() -> Int {
        let done = taken()
        guard done >= total, level.below != nil else { return done }
        let bottom = level.bottom
        let endBelow = bottom.writeMark
        level = bottom
        end = endBelow
        start = WriteMark(outbound: max(0, endBelow.outbound - total), payloads: endBelow.payloads)
        return taken()
    }
}

/// The large frame being received, and what was told of it.
struct ReceiveProgress {
    let type: UInt32
    let serial: UInt32
    let total: Int
    var reported = 0
}

extension FrameChannel {
    /// Whether `frame` may be large enough to report its progress: then its marks are taken.
    @inline(__always)
    func mayReportProgress(of frame: Frame) -> Bool {
        guard let progress = settings.progress else { return false }
        return frame.payload.count >= progress.minimumFrameSize / 2
    }

    /// `frame` was just encoded after `start`: follows it if it is large enough.
    func followProgress(of frame: Frame, from start: WriteMark) {
        guard let progress = settings.progress else { return }
        let end = buffers.writeMark
        let total = (end.outbound - start.outbound) + (end.payloads - start.payloads)
        guard total >= progress.minimumFrameSize else { return }
        let tracking = tracked
        tracking.sendProgress.append(SendProgress(type: frame.type, serial: frame.serial, total: total, level: buffers, start: start, end: end))
        buffers.bottom.flushObserver = tracking.notice
    }

    /// After bytes went to the kernel: tells what moved, a step at a time.
    func measureSendProgress() {
        guard let step = settings.progress?.step, let tracking else { return }
        var index = 0
        while index < tracking.sendProgress.count {
            let done = tracking.sendProgress[index].measure()
            let entry = tracking.sendProgress[index]
            if let piece = entry.piece {
                // A chunk: counts in the payload of its frame, told as a share of the whole.
                let bytes = piece.offset + (entry.total > 0 ? min(done, entry.total) * piece.count / entry.total : piece.count)
                let finished = done >= entry.total
                if finished { tracking.sendProgress.remove(at: index) } else { index += 1 }
                if finished, piece.offset + piece.count == piece.whole {
                    tracking.chunkReported = 0
                    report(TransferProgress(direction: .sending, type: entry.type, serial: entry.serial, bytes: piece.whole, total: piece.whole))
                } else if bytes >= tracking.chunkReported + max(1, step) {
                    tracking.chunkReported = bytes
                    report(TransferProgress(direction: .sending, type: entry.type, serial: entry.serial, bytes: bytes, total: piece.whole))
                }
                continue
            }
            if done >= entry.total {
                tracking.sendProgress.remove(at: index)
                report(TransferProgress(direction: .sending, type: entry.type, serial: entry.serial, bytes: entry.total, total: entry.total))
                continue
            }
            if done >= entry.reported + max(1, step) {
                tracking.sendProgress[index].reported = done
                report(TransferProgress(direction: .sending, type: entry.type, serial: entry.serial, bytes: done, total: entry.total))
            }
            index += 1
        }
    }

    /// After a read was decoded: tells how much of the large frame under way has arrived.
    func measureReceiveProgress(_ progress: ProgressConfiguration) {
        let type: UInt32
        let serial: UInt32
        let received: Int
        let total: Int
        if let assembly = chunkAssembler?.current {
            // A frame arriving in chunks, counted in its payload.
            type = assembly.frame.type
            serial = assembly.frame.serial
            received = assembly.frame.payload.count
            total = assembly.declared
        } else if let body = buffers.large?.incoming, let header = tracking?.largeFrame {
            type = header.frame.type
            serial = header.frame.serial
            received = header.headerLength + body.received
            total = header.headerLength + body.bytes.count
        } else if buffers.inbound.readableBytes >= progress.step, let split = codec as? any SplitFrameCodec,
                  let (frame, headerLength, bodyLength) = split.header(in: buffers.inbound) {
            type = frame.type
            serial = frame.serial
            total = headerLength + bodyLength
            received = min(buffers.inbound.readableBytes, total)
        } else {
            return
        }
        guard total >= progress.minimumFrameSize, received < total else { return }
        let tracking = tracked
        if let current = tracking.receiveProgress, current.type == type, current.serial == serial, current.total == total {
            guard received >= current.reported + max(1, progress.step) else { return }
        } else {
            tracking.receiveProgress = ReceiveProgress(type: type, serial: serial, total: total)
            guard received >= max(1, progress.step) else { return }
        }
        tracking.receiveProgress?.reported = received
        report(TransferProgress(direction: .receiving, type: type, serial: serial, bytes: received, total: total))
    }

    /// `frame`, `size` bytes on the wire, was decoded: the last report of a large frame,
    /// whether it reported on the way or arrived between two looks.
    func finishReceiveProgress(_ frame: Frame, size: Int) {
        if let current = tracking?.receiveProgress, current.type == frame.type, current.serial == frame.serial {
            tracking?.receiveProgress = nil
            report(TransferProgress(direction: .receiving, type: current.type, serial: current.serial, bytes: current.total, total: current.total))
            return
        }
        guard size >= settings.largeFrameSize else { return }
        report(TransferProgress(direction: .receiving, type: frame.type, serial: frame.serial, bytes: size, total: size))
    }

    private func report(_ progress: TransferProgress) {
        guard isOpen, let owner else { return }
        onLoop(loop, owner, (self, progress), Self.reported)
    }

    private static func reported(_ owner: isolated Owner, _ event: (channel: FrameChannel, progress: TransferProgress)) {
        owner.channel(event.channel, progress: event.progress)
    }
}
