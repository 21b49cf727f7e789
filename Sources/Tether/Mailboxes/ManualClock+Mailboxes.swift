extension ManualClock {
    /// A clock for mailbox times (``MailboxConfiguration/clock``) that moves with this one.
    ///
    /// - Parameter start: The mailbox time that the clock's current time maps to.
    /// - Returns: A closure that reads `start` plus the time this clock has moved since,
    ///   to the millisecond.
    package func mailboxClock(
        startingAt start: MailboxTime = MailboxTime(millisecondsSince1970: 1_700_000_000_000)
    ) -> @Sendable () -> MailboxTime {
        let origin = now
        return { [self] in
            let elapsed = Int64(clamping: (now &- origin) / 1_000_000)
            return MailboxTime(millisecondsSince1970: start.millisecondsSince1970 &+ elapsed)
        }
    }

    /// The mailbox clock of servers on this clock's loops whose mailboxes set none: one
    /// mapping for all of them, 2023-11-14 22:13:20 UTC at the clock's start.
    package var sharedMailboxClock: @Sendable () -> MailboxTime {
        { [self] in
            MailboxTime(millisecondsSince1970: 1_700_000_000_000 &+ Int64(clamping: (now &- origin) / 1_000_000))
        }
    }
}
