/// A client's view of its session: which sequences it received, which of them a subscriber
/// took and which are held for one, duplicates, gaps and acknowledgements. Pure logic, no
/// I/O: the connection feeds it frames and carries out what it returns.
struct ClientSessionState {
    /// What to do with a sequenced push.
    enum Receipt: Equatable {
        /// Publish it: it is the next one.
        case deliver(UInt64)
        /// Drop it: it was received before (taken by a subscriber, held, or reported lost).
        case duplicate(UInt64)
        /// Publish it, after telling subscribers that the sequences in the range are lost.
        case deliverAfterGap(UInt64, missed: ClosedRange<UInt64>)
        /// Drop it without counting it: the hold was full, so sequenced pushes are turned
        /// away until the next connection, which replays them.
        case turnedAway(UInt64)
    }

    /// What became of a published push.
    enum Outcome: Equatable {
        /// A subscriber whose filter takes it has it in its buffer.
        case taken
        /// No subscriber takes it: it waits for one.
        case held
        /// No subscriber takes it and the hold is full.
        case refused
    }

    /// The highest sequence received on this connection or an earlier one: taken by a
    /// subscriber, held for one, or reported lost. The hello resumes after it.
    private(set) var lastReceived: UInt64
    /// Sequences received and held for a subscriber, ascending.
    private(set) var held: [UInt64] = []
    /// Set when the hold was full: later sequenced pushes are turned away until the next
    /// welcome, so none is taken past one that was not kept.
    private(set) var turningAway = false
    /// The last sequence acknowledged to the server, or that it had when it last answered a hello.
    private(set) var lastAcknowledged: UInt64
    /// The epoch of the mailbox history the sequences belong to, as the last welcome said;
    /// `nil` before one that told, or when the server's store does not tell.
    private(set) var epoch: String?

    init(resumeAfter: UInt64, epoch: String? = nil) {
        lastReceived = resumeAfter
        lastAcknowledged = resumeAfter
        self.epoch = epoch
    }

    /// The last sequence such that it and every one before it was taken by a subscriber (or
    /// reported lost): the most that may be acknowledged.
    var lastSequence: UInt64 { held.first.map { $0 - 1 } ?? lastReceived }

    /// Pushes taken and not acknowledged yet.
    var unacknowledged: UInt64 { lastSequence - min(lastSequence, lastAcknowledged) }

    /// Judges a push whose serial is `serial` (not 0, which marks pushes without a
    /// sequence); ``record(_:_:)`` then says what became of one to deliver.
    func receive(serial: UInt32) -> Receipt {
        let sequence = Self.sequence(of: serial, near: lastReceived)
        if sequence <= lastReceived { return .duplicate(sequence) }
        if turningAway { return .turnedAway(sequence) }
        if sequence == lastReceived + 1 { return .deliver(sequence) }
        return .deliverAfterGap(sequence, missed: (lastReceived + 1)...(sequence - 1))
    }

    /// Notes what became of the push `sequence`, which ``receive(serial:)`` said to deliver.
    mutating func record(_ sequence: UInt64, _ outcome: Outcome) {
        switch outcome {
        case .taken:
            lastReceived = sequence
        case .held:
            lastReceived = sequence
            held.append(sequence)
        case .refused:
            // What came before it is settled (a gap is lost for good); it is not.
            lastReceived = max(lastReceived, sequence - 1)
            turningAway = true
        }
    }

    /// Held pushes whose serials are `serials` were taken by a subscriber that came later.
    mutating func taken(serials: [UInt32]) {
        let taken = Set(serials)
        held.removeAll { taken.contains(UInt32(truncatingIfNeeded: $0)) }
    }

    /// The server accepted the hello: the events to publish, and where the sequence now stands.
    mutating func welcomed(_ welcome: SessionWire.Welcome) -> [SessionEvent] {
        var events: [SessionEvent] = []
        turningAway = false
        let historyReplaced = epoch != nil && welcome.epoch != nil && epoch != welcome.epoch
        epoch = welcome.epoch
        if historyReplaced || lastReceived > welcome.lastSequence {
            // The held pushes stay with the subscriber-to-be; their sequences no longer count.
            held.removeAll()
            lastReceived = welcome.resumeAfter
            lastAcknowledged = welcome.resumeAfter
            events.append(SessionEvent(kind: .reset, lastSequence: lastSequence, serverSequence: welcome.lastSequence))
        } else if let gap = welcome.gap, gap.last > lastReceived {
            let first = max(gap.first, lastReceived + 1)
            lastReceived = gap.last
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
