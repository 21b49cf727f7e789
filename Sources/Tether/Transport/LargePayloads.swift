/// Large payloads that cross a socket in their own storage rather than through a
/// connection's buffers.
///
/// Going out, a payload of ``threshold`` bytes or more is not copied into `outbound`: its
/// frame's header is, and the payload's array waits here, marked with its place in the
/// stream, to be sent after the bytes before it in the same `sendmsg` call
/// (``TransportBuffers/sendGathering(to:)``).
///
/// Coming in, once a frame's header declares a body of ``threshold`` bytes or more and an
/// eighth of that body has arrived, the channel gives the body its final storage, the array
/// the frame hands over, and the transport reads the rest of it from the socket straight
/// into that array (``IncomingBody``): the channel keeps the frame's header, the transport
/// knows a count of bytes. The eighth bounds what a peer that announces a large body and sends
/// little of it can make the connection hold: at most eight times the bytes it sent, and
/// never more than the codec's maximum payload length, which is checked before.
///
/// Made for a connection the first time it moves a large payload; loop thread only.
package final class LargePayloads {
    /// Payloads and bodies from this many bytes on take the direct path.
    static let threshold = 16 << 10
    /// A body gets its own storage once this fraction (1 in `n`) of it has arrived.
    static let arrivedFraction = 8

    /// A payload waiting to be sent from its own array.
    struct Outgoing {
        /// Where it goes in the stream: the count of `outbound` bytes, ever taken and still
        /// held, that go before it.
        let position: Int
        let bytes: [UInt8]
        /// The part of `bytes` to send: all of them, or one chunk's (``FrameChunk``).
        let range: Range<Int>
        /// How many of the range's bytes went out already.
        var sent: Int
    }

    /// Payloads waiting, in stream order, from ``head`` on.
    private(set) var outgoing: [Outgoing] = []
    /// The first of ``outgoing`` not sent completely.
    private var head = 0
    /// Bytes of ``outgoing`` not sent yet.
    private(set) var outgoingBytes = 0
    /// Bytes of payloads sent since this object was made.
    private(set) var sentTotal = 0
    /// Bytes of payloads queued since this object was made, sent or not.
    var queuedTotal: Int { sentTotal + outgoingBytes }
    /// Bytes taken from `outbound` since this object was made: the origin of positions.
    private var outboundTaken = 0
    /// The body being read into its own storage, if any.
    var incoming: IncomingBody?

    /// Takes the body under way once all of it has arrived.
    ///
    /// - Returns: Its bytes, or `nil` while the body is incomplete (or there is none).
    func takeCompleteBody() -> [UInt8]? {
        guard let body = incoming, body.isComplete else { return nil }
        incoming = nil
        return body.bytes
    }

    /// Whether a body is under way and not complete. Holds no copy of it: the reads that
    /// follow write into its array in place.
    var isReceivingBody: Bool { incoming.map { !$0.isComplete } ?? false }

    /// Whether a payload waits to be sent.
    var hasOutgoing: Bool { head < outgoing.count }

    /// Queues `payload` to go after the `pending` bytes now in `outbound`.
    func append(_ payload: [UInt8], range: Range<Int>, after pending: Int) {
        outgoing.append(Outgoing(position: outboundTaken + pending, bytes: payload, range: range, sent: 0))
        outgoingBytes += range.count
    }

    /// Accounts for `count` bytes sent from the front of the stream: from `outbound` up to
    /// the next payload, then from that payload, and so on.
    func consume(_ count: Int, from outbound: inout FrameBuffer) {
        var count = count
        while count > 0 {
            guard head < outgoing.count else {
                outbound.moveReaderIndex(forwardBy: count)
                outboundTaken += count
                return
            }
            let before = outgoing[head].position - outboundTaken
            if before > 0 {
                let taken = min(count, before)
                outbound.moveReaderIndex(forwardBy: taken)
                outboundTaken += taken
                count -= taken
                continue
            }
            let remaining = outgoing[head].range.count - outgoing[head].sent
            let taken = min(count, remaining)
            outgoing[head].sent += taken
            outgoingBytes -= taken
            sentTotal += taken
            count -= taken
            if taken == remaining {
                // Released now rather than when the queue empties.
                outgoing[head] = Outgoing(position: 0, bytes: [], range: 0..<0, sent: 0)
                head += 1
            }
        }
        if head == outgoing.count {
            outgoing.removeAll(keepingCapacity: outgoing.count <= 16)
            head = 0
        }
    }

    /// Drops every payload waiting: the connection closed.
    func dropOutgoing() {
        outgoing = []
        head = 0
        outgoingBytes = 0
    }

    /// Fills `pieces` with the stream from its front, over `front` (the readable bytes of
    /// `outbound`) and the payloads waiting, and calls `send` with them: as many pieces as
    /// fit, each payload's array pinned while `send` runs.
    func gather<R>(
        front: UnsafeRawBufferPointer,
        into pieces: UnsafeMutableBufferPointer<UnsafeRawBufferPointer>,
        _ send: (UnsafeBufferPointer<UnsafeRawBufferPointer>) -> R
    ) -> R {
        gather(front: front, from: 0, index: head, into: pieces, count: 0, send)
    }

    private func gather<R>(
        front: UnsafeRawBufferPointer,
        from offset: Int,
        index: Int,
        into pieces: UnsafeMutableBufferPointer<UnsafeRawBufferPointer>,
        count: Int,
        _ send: (UnsafeBufferPointer<UnsafeRawBufferPointer>) -> R
    ) -> R {
        var count = count
        guard index < outgoing.count, count + 2 <= pieces.count else {
            // Bytes after the last payload go too; with payloads left over, the next call
            // takes them and what follows.
            if index == outgoing.count, offset < front.count {
                pieces[count] = UnsafeRawBufferPointer(rebasing: front[offset...])
                count += 1
            }
            return send(UnsafeBufferPointer(rebasing: pieces[..<count]))
        }
        let item = outgoing[index]
        let at = item.position - outboundTaken
        if at > offset {
            pieces[count] = UnsafeRawBufferPointer(rebasing: front[offset..<at])
            count += 1
        }
        return item.bytes.withUnsafeBytes { bytes in
            pieces[count] = UnsafeRawBufferPointer(rebasing: bytes[(item.range.lowerBound + item.sent)..<item.range.upperBound])
            return gather(front: front, from: max(at, offset), index: index + 1, into: pieces, count: count + 1, send)
        }
    }
}

/// The next bytes of the stream, read straight into the array they will be handed over
/// in: the layer above said how many (a frame's body) and what had arrived of them. The
/// transport knows only the count; what the bytes are is the layer above's business.
struct IncomingBody {
    /// The body's final storage: its first ``received`` bytes have arrived, the rest is
    /// written by the reads that follow before the layer above takes it.
    var bytes: [UInt8]
    /// How many bytes of the body have arrived.
    var received: Int

    /// Whether the whole body has arrived.
    var isComplete: Bool { received == bytes.count }

    /// A body of `length` bytes whose first bytes are `start`.
    ///
    /// The array is made at its final length and the bytes past `start` are left as they
    /// are, not zeroed: reads fill them before the frame is handed over, and writing zeros
    /// first would touch every byte once more.
    init(length: Int, start: UnsafeRawBufferPointer) {
        precondition(start.count < length, "a body whose bytes have all arrived needs no storage of its own")
        self.received = start.count
        self.bytes = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            if let base = start.baseAddress, start.count > 0 {
                UnsafeMutableRawPointer(buffer.baseAddress!).copyMemory(from: base, byteCount: start.count)
            }
            // UInt8 is trivial: the bytes past `start` hold whatever the allocator left,
            // and are all overwritten by reads before anyone reads them.
            initialized = length
        }
    }

    /// Reads into the part of the body still missing with `read`, which gets the space and
    /// returns how many bytes it wrote there, or would-block.
    mutating func receive(_ read: (UnsafeMutableRawBufferPointer) throws(Errno) -> IOResult<Int>) throws(Errno) -> IOResult<Int> {
        let offset = received
        let result: Result<IOResult<Int>, Errno> = bytes.withUnsafeMutableBytes { raw in
            do throws(Errno) {
                return .success(try read(UnsafeMutableRawBufferPointer(rebasing: raw[offset...])))
            } catch {
                return .failure(error)
            }
        }
        let outcome = try result.get()
        if case .processed(let count) = outcome { received += count }
        return outcome
    }
}

extension TransportBuffers {
    /// Whether a payload waits to be sent from its own array.
    package final var hasLargeOutgoing: Bool { large?.hasOutgoing ?? false }

    /// The direct path's state, made when first needed.
    final var largePayloads: LargePayloads {
        if let large { return large }
        let made = LargePayloads()
        large = made
        return made
    }

    /// Queues `payload` to be sent from its own array after what `outbound` holds now.
    ///
    /// - Parameter payload: A frame's payload whose header was just encoded into `outbound`.
    final func attach(_ payload: [UInt8]) {
        largePayloads.append(payload, range: payload.indices, after: outbound.readableBytes)
    }

    /// Queues the bytes of `payload` in `range` to be sent from its array after what
    /// `outbound` holds now: a chunk's piece of a large frame, not copied.
    final func attach(_ payload: [UInt8], range: Range<Int>) {
        largePayloads.append(payload, range: range, after: outbound.readableBytes)
    }

    /// Writes the stream (the bytes of `outbound` with the payloads waiting between them) to
    /// `fd` with `sendmsg`, until all is sent or the socket would block.
    ///
    /// - Parameter fd: The socket.
    /// - Returns: The bytes written, the error that ended the writing, and whether the
    ///   socket would block.
    final func sendGathering(to fd: Int32) -> (written: Int, error: Errno?, blocked: Bool) {
        guard let large else { return (0, nil, false) }
        var written = 0
        while large.hasOutgoing || outbound.readableBytes > 0 {
            let result: Result<IOResult<Int>, Errno> = outbound.withReadableBytes { front in
                withUnsafeTemporaryAllocation(of: UnsafeRawBufferPointer.self, capacity: Syscall.maximumPieces) { pieces in
                    large.gather(front: front, into: pieces) { gathered in
                        Result { () throws(Errno) in try Syscall.sendPieces(fd, gathered) }
                    }
                }
            }
            switch result {
            case .failure(let error):
                return (written, error, false)
            case .success(.wouldBlock):
                return (written, nil, true)
            case .success(.processed(let count)):
                large.consume(count, from: &outbound)
                written += count
            }
        }
        return (written, nil, false)
    }
}
