/// One heartbeat event: sent, acknowledged with its round-trip time, or missed.
public struct Heartbeat: Sendable, Hashable, CustomStringConvertible {
    /// What happened to a heartbeat.
    public struct Outcome: Hashable, Sendable, CustomStringConvertible {
        enum Value: Hashable, Sendable { case sent, acked, missed }
        let value: Value

        /// The heartbeat was written.
        public static let sent = Outcome(value: .sent)
        /// The peer acknowledged it; ``Heartbeat/roundTripTime`` is set.
        public static let acked = Outcome(value: .acked)
        /// No ack arrived within the heartbeat timeout.
        public static let missed = Outcome(value: .missed)

        /// A short textual form, for logs and messages.
        public var description: String { String(describing: value) }
    }

    /// The heartbeat's serial.
    public var serial: UInt32
    /// What happened.
    public var outcome: Outcome
    /// Time from sending to the ack, for ``Outcome/acked``.
    public var roundTripTime: Duration?

    /// Creates an event.
    ///
    /// - Parameters:
    ///   - serial: The heartbeat's serial.
    ///   - outcome: What happened.
    ///   - roundTripTime: Time from sending to the ack.
    public init(serial: UInt32, outcome: Outcome, roundTripTime: Duration? = nil) {
        self.serial = serial
        self.outcome = outcome
        self.roundTripTime = roundTripTime
    }

    /// `heartbeat 3 acked in 120 µs`: the round-trip time in whole microseconds.
    public var description: String {
        if let roundTripTime {
            let micros = Double(roundTripTime.components.attoseconds) / 1e12 + Double(roundTripTime.components.seconds) * 1e6
            return "heartbeat \(serial) \(outcome) in \(String(Int(micros.rounded()))) µs"
        }
        return "heartbeat \(serial) \(outcome)"
    }
}

/// The heartbeat rules as a pure state machine over monotonic nanoseconds.
///
/// The connection calls ``tick(now:)`` on its timer and ``ack(serial:now:)`` when a
/// heartbeat comes back; each returns what to do. No I/O, no clock: tests drive it with
/// explicit instants.
struct HeartbeatStateMachine {
    enum Action: Equatable {
        /// Write a heartbeat with this serial; report it as sent.
        case send(serial: UInt32)
        /// Report the outstanding heartbeat as missed.
        case missed(serial: UInt32)
        /// Report a miss, then close the connection: too many in a row.
        case missedAndGiveUp(serial: UInt32, misses: Int)
        /// Report a miss, then close the connection: the heartbeat verified the connection
        /// after a change of network path, and no ack came within the timeout.
        case verificationMissed(serial: UInt32)
    }

    /// Time from one heartbeat to the next; an adaptive heartbeat changes it as it goes.
    var interval: UInt64
    let timeout: UInt64
    /// Whether the heartbeat after a miss goes out at once, rather than an interval after
    /// the one missed: with an adaptive heartbeat, whose interval may be minutes long.
    var sendsAfterMiss = false
    let maximumMissed: Int
    let maximumSerial: UInt32
    private(set) var nextSerial: UInt32 = 1
    private(set) var outstanding: (serial: UInt32, sentAt: UInt64)?
    private(set) var lastSentAt: UInt64?
    private(set) var consecutiveMisses = 0
    /// Whether the outstanding heartbeat verifies the connection: its miss ends it.
    private(set) var verifying = false

    init(interval: Duration, timeout: Duration, maximumMissed: Int, maximumSerial: UInt32 = .max) {
        self.maximumSerial = max(1, maximumSerial)
        self.interval = max(1, MonotonicTime.nanoseconds(of: interval))
        self.timeout = max(1, MonotonicTime.nanoseconds(of: timeout))
        self.maximumMissed = max(1, maximumMissed)
    }

    /// When the next ``tick(now:)`` is due: the miss of the outstanding heartbeat, or else
    /// the next send. Never before `now`. After an ``ack(serial:now:)`` ask again, since
    /// the next send may then come before the miss would have.
    func nextTick(after now: UInt64) -> UInt64 {
        guard let lastSentAt else { return now }
        if let outstanding {
            return max(now, outstanding.sentAt &+ timeout)
        }
        return max(now, lastSentAt &+ interval)
    }

    /// Time passes: report a heartbeat whose timeout has passed, and send a new one when due.
    mutating func tick(now: UInt64) -> [Action] {
        var actions: [Action] = []
        if let outstanding, now >= outstanding.sentAt &+ timeout {
            self.outstanding = nil
            consecutiveMisses += 1
            if verifying {
                verifying = false
                return [.verificationMissed(serial: outstanding.serial)]
            }
            if consecutiveMisses >= maximumMissed {
                return [.missedAndGiveUp(serial: outstanding.serial, misses: consecutiveMisses)]
            }
            actions.append(.missed(serial: outstanding.serial))
        }
        let due = lastSentAt.map { now >= $0 &+ interval } ?? true
        if outstanding == nil && (due || (sendsAfterMiss && !actions.isEmpty)) {
            let serial = nextSerial
            nextSerial = nextSerial >= maximumSerial ? 1 : nextSerial + 1
            outstanding = (serial, now)
            lastSentAt = now
            actions.append(.send(serial: serial))
        }
        return actions
    }

    /// Verifies the connection now: sends a heartbeat out of schedule, unless one is
    /// outstanding already, and makes the outstanding one's miss end the connection instead
    /// of counting as one of ``maximumMissed``. The next ``tick(now:)`` is then due at its
    /// timeout; the schedule goes on from it.
    mutating func verify(now: UInt64) -> [Action] {
        verifying = true
        guard outstanding == nil else { return [] }
        let serial = nextSerial
        nextSerial = nextSerial >= maximumSerial ? 1 : nextSerial + 1
        outstanding = (serial, now)
        lastSentAt = now
        return [.send(serial: serial)]
    }

    /// Forgets the outstanding heartbeat without counting it as missed: its ack may be
    /// waiting unread while the connection does not read. The next goes out when due.
    mutating func excuseOutstanding() {
        outstanding = nil
        verifying = false
    }

    /// A heartbeat came back. Returns its round-trip time in nanoseconds when it answers the
    /// outstanding one; `nil` for an unknown or late serial.
    mutating func ack(serial: UInt32, now: UInt64) -> UInt64? {
        guard let outstanding, outstanding.serial == serial else { return nil }
        self.outstanding = nil
        consecutiveMisses = 0
        verifying = false
        return now &- outstanding.sentAt
    }
}
