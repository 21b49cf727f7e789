/// A client's view of its session: the last sequence delivered, duplicates, gaps and
/// acknowledgements. Pure logic, no I/O: the connection feeds it frames and carries out
/// what it returns.
struct ClientSessionState {
    /// What to do with a sequenced push.
    enum Receipt: Equatable {
        /// Deliver it: it is the next one.
        case deliver(UInt64)
        /// Drop it: it was delivered before.
        case duplicate(UInt64)
        /// Deliver it, after telling subscribers that the sequences in the range are lost.
        case deliverAfterGap(UInt64, missed: ClosedRange<UInt64>)
    }

    /// The last sequence delivered to subscribers.
    private(set) var lastSequence: UInt64
    /// The last sequence acknowledged to the server, or that it had when it last answered a hello.
    private(set) var lastAcknowledged: UInt64

    init(resumeAfter: UInt64) {
        lastSequence = resumeAfter
        lastAcknowledged = resumeAfter
    }

    /// Pushes delivered and not acknowledged yet.
    var unacknowledged: UInt64 { lastSequence - min(lastSequence, lastAcknowledged) }

    /// Judges a push whose serial is `serial` (not 0, which marks pushes without a sequence).
    mutating func receive(serial: UInt32) -> Receipt {
        let sequence = Self.sequence(of: serial, near: lastSequence)
        if sequence <= lastSequence { return .duplicate(sequence) }
        defer { lastSequence = sequence }
        if sequence == lastSequence + 1 { return .deliver(sequence) }
        return .deliverAfterGap(sequence, missed: (lastSequence + 1)...(sequence - 1))
    }

    /// The server accepted the hello: the events to publish, and where the sequence now stands.
    mutating func welcomed(_ welcome: SessionWire.Welcome) -> [SessionEvent] {
        var events: [SessionEvent] = []
        if lastSequence > welcome.lastSequence {
            lastSequence = welcome.resumeAfter
            lastAcknowledged = welcome.resumeAfter
            events.append(SessionEvent(kind: .reset, lastSequence: lastSequence, serverSequence: welcome.lastSequence))
        } else if let gap = welcome.gap, gap.last > lastSequence {
            let first = max(gap.first, lastSequence + 1)
            lastSequence = gap.last
            events.append(SessionEvent(
                kind: .gap,
                lastSequence: lastSequence,
                missed: first...gap.last,
                reason: MailboxLossReason(rawValue: gap.reason)
            ))
        }
        events.append(SessionEvent(kind: .resumed, lastSequence: lastSequence, serverSequence: welcome.lastSequence))
        return events
    }

    /// The sequence to acknowledge now, if any, marking it acknowledged.
    mutating func acknowledge(through sequence: UInt64? = nil) -> UInt64? {
        let through = min(sequence ?? lastSequence, lastSequence)
        guard through > lastAcknowledged else { return nil }
        lastAcknowledged = through
        return through
    }

    /// The 64-bit sequence a 32-bit serial stands for: the one nearest to `near` with those
    /// low 32 bits (sequences wrap the serial every 2³² pushes).
    static func sequence(of serial: UInt32, near: UInt64) -> UInt64 {
        let delta = Int64(Int32(bitPattern: serial &- UInt32(truncatingIfNeeded: near)))
        if delta < 0, UInt64(-delta) > near { return UInt64(serial) }
        return delta < 0 ? near - UInt64(-delta) : near + UInt64(delta)
    }
}
