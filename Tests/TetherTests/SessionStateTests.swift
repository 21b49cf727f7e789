import Testing
@testable import Tether

/// The pure parts of sessions: the client's sequence bookkeeping and the server's resume plan.
@Suite("Session state")
struct SessionStateTests {
    @Test("a 32-bit serial maps to the 64-bit sequence nearest the last one, across the wrap", arguments: [
        (UInt32(1), UInt64(0), UInt64(1)),
        (5, 3, 5),
        (2, 7, 2),
        (0xFFFF_FFFF, 0xFFFF_FFFE, 0xFFFF_FFFF),
        (1, 0xFFFF_FFFF, 0x1_0000_0001),
        (0xFFFF_FFFF, 0x1_0000_0002, 0xFFFF_FFFF),
        (3, 0x5_0000_0001, 0x5_0000_0003),
    ])
    func unwrap(serial: UInt32, near: UInt64, expected: UInt64) {
        #expect(ClientSessionState.sequence(of: serial, near: near) == expected)
    }

    @Test("receipts: the next one is delivered, an old one is a duplicate, a jump is delivered after a gap")
    func receipts() {
        var state = ClientSessionState(resumeAfter: 10)
        #expect(state.receive(serial: 11) == .deliver(11))
        state.record(11, .taken)
        #expect(state.receive(serial: 11) == .duplicate(11))
        #expect(state.receive(serial: 4) == .duplicate(4))
        #expect(state.receive(serial: 15) == .deliverAfterGap(15, missed: 12...14))
        state.record(15, .taken)
        #expect(state.lastSequence == 15)
    }

    @Test("a held push keeps the sequence and the acknowledgements below it; taken later, both move past it")
    func held() {
        var state = ClientSessionState(resumeAfter: 0)
        state.record(1, .held)
        state.record(2, .taken)
        #expect(state.lastReceived == 2)
        #expect(state.lastSequence == 0)
        #expect(state.acknowledge() == nil)
        #expect(state.acknowledge(through: 2) == nil)
        #expect(state.receive(serial: 1) == .duplicate(1))
        state.record(3, .held)
        state.taken(serials: [1])
        #expect(state.lastSequence == 2)
        #expect(state.acknowledge() == 2)
        state.taken(serials: [3])
        #expect(state.lastSequence == 3)
    }

    @Test("a push the full hold refused: every later one is turned away until the next welcome, which resumes at it")
    func refused() {
        var state = ClientSessionState(resumeAfter: 0)
        state.record(1, .held)
        #expect(state.receive(serial: 4) == .deliverAfterGap(4, missed: 2...3))
        state.record(4, .refused)
        #expect(state.lastReceived == 3)
        #expect(state.lastSequence == 0)
        #expect(state.receive(serial: 5) == .turnedAway(5))
        let welcome = SessionWire.Welcome(accepted: true, clientID: "a", lastSequence: 5, resumeAfter: 3)
        #expect(state.welcomed(welcome) == [SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 5)])
        #expect(state.receive(serial: 4) == .deliver(4))
    }

    @Test("acknowledgements move forward only and never past what was delivered")
    func acknowledgements() {
        var state = ClientSessionState(resumeAfter: 0)
        #expect(state.acknowledge() == nil)
        state.record(1, .taken)
        state.record(2, .taken)
        #expect(state.unacknowledged == 2)
        #expect(state.acknowledge(through: 9) == 2)
        #expect(state.acknowledge(through: 1) == nil)
        #expect(state.unacknowledged == 0)
    }

    @Test("a welcome with a gap moves the sequence past it; one below the client's sequence is a reset")
    func welcomes() {
        var state = ClientSessionState(resumeAfter: 2)
        let gap = SessionWire.Welcome(accepted: true, clientID: "a", lastSequence: 30, resumeAfter: 20, gap: .init(first: 3, last: 20, reason: "overflow"))
        #expect(state.welcomed(gap) == [
            SessionEvent(kind: .gap, lastSequence: 20, missed: 3...20, reason: .overflow),
            SessionEvent(kind: .resumed, lastSequence: 20, serverSequence: 30),
        ])
        #expect(state.receive(serial: 21) == .deliver(21))
        state.record(21, .taken)
        let reset = SessionWire.Welcome(accepted: true, clientID: "a", lastSequence: 4, resumeAfter: 0, gap: nil)
        #expect(state.welcomed(reset) == [
            SessionEvent(kind: .reset, lastSequence: 0, serverSequence: 4),
            SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 4),
        ])
        #expect(state.receive(serial: 1) == .deliver(1))
    }

    static func summary(last: UInt64, acknowledged: UInt64 = 0, lost: UInt64 = 0, reason: MailboxLossReason? = nil, epoch: String? = nil) -> MailboxSummary {
        MailboxSummary(lastSequence: last, acknowledged: acknowledged, lostThrough: lost, lossReason: reason, count: 0, epoch: epoch)
    }

    @Test("resume plans: from the client's sequence when the mailbox reaches back that far, otherwise from the first available with a gap")
    func plans() {
        let plain = ResumePlan(clientSequence: 5, summary: Self.summary(last: 9, acknowledged: 3))
        #expect(plain == ResumePlan.make(last: 9, after: 5, gap: nil))
        let lost = ResumePlan(clientSequence: 5, summary: Self.summary(last: 40, acknowledged: 3, lost: 30, reason: .overflow))
        #expect(lost == ResumePlan.make(last: 40, after: 30, gap: .init(first: 6, last: 30, reason: "overflow")))
        let expired = ResumePlan(clientSequence: 0, summary: Self.summary(last: 3, lost: 3, reason: .expired))
        #expect(expired == ResumePlan.make(last: 3, after: 3, gap: .init(first: 1, last: 3, reason: "expired")))
        let forgotten = ResumePlan(clientSequence: 1, summary: Self.summary(last: 12, acknowledged: 10))
        #expect(forgotten == ResumePlan.make(last: 12, after: 10, gap: .init(first: 2, last: 10, reason: "acknowledged")))
        let replaced = ResumePlan(clientSequence: 50, summary: Self.summary(last: 4))
        #expect(replaced == ResumePlan.make(last: 4, after: 0, gap: nil))
        let upToDate = ResumePlan(clientSequence: 9, summary: Self.summary(last: 9, acknowledged: 9))
        #expect(upToDate == ResumePlan.make(last: 9, after: 9, gap: nil))
    }

    @Test("resume plans with epochs: another epoch resumes from the new history's floor with no gap and applies no acknowledgement; the same one, or one unknown on either side, plans as without")
    func plansWithEpochs() {
        var replaced = ResumePlan.make(last: 8, after: 0, gap: nil)
        replaced.epoch = "new"
        replaced.historyReplaced = true
        let fresh = ResumePlan(clientSequence: 5, clientEpoch: "old", summary: Self.summary(last: 8, epoch: "new"))
        #expect(fresh == replaced)
        #expect(fresh.acknowledgement(5, clientSequence: 5) == 0)
        #expect(fresh.welcome(for: "a") == SessionWire.Welcome(accepted: true, clientID: "a", lastSequence: 8, resumeAfter: 0, gap: nil, epoch: "new"))

        // The new history lost its start too: the client resumes after what is left of it, told no gap.
        let trimmed = ResumePlan(clientSequence: 5, clientEpoch: "old", summary: Self.summary(last: 40, acknowledged: 3, lost: 30, reason: .overflow, epoch: "new"))
        #expect(trimmed.resumeAfter == 30)
        #expect(trimmed.gap == nil)
        #expect(trimmed.historyReplaced)
        // Fewer pushes than the client saw, in another history: the same.
        let shorter = ResumePlan(clientSequence: 50, clientEpoch: "old", summary: Self.summary(last: 4, epoch: "new"))
        #expect(shorter.resumeAfter == 0)
        #expect(shorter.historyReplaced)

        var same = ResumePlan.make(last: 9, after: 5, gap: nil)
        same.epoch = "e"
        let kept = ResumePlan(clientSequence: 5, clientEpoch: "e", summary: Self.summary(last: 9, acknowledged: 3, epoch: "e"))
        #expect(kept == same)
        #expect(kept.acknowledgement(4, clientSequence: 5) == 4)
        #expect(kept.acknowledgement(7, clientSequence: 5) == 5)
        let unknownToClient = ResumePlan(clientSequence: 5, clientEpoch: nil, summary: Self.summary(last: 9, acknowledged: 3, epoch: "e"))
        #expect(unknownToClient == same)
        let unknownToStore = ResumePlan(clientSequence: 5, clientEpoch: "e", summary: Self.summary(last: 9, acknowledged: 3))
        #expect(unknownToStore == ResumePlan.make(last: 9, after: 5, gap: nil))
        #expect(unknownToStore.acknowledgement(5, clientSequence: 5) == 5)
    }

    @Test("a welcome of another epoch than the client's is a reset to its resume point, even when the server has more pushes; the epoch is kept from each welcome")
    func welcomesWithEpochs() {
        var state = ClientSessionState(resumeAfter: 5, epoch: "old")
        state.record(6, .held)
        #expect(state.lastReceived == 6)
        let fresh = SessionWire.Welcome(accepted: true, clientID: "a", lastSequence: 8, resumeAfter: 0, epoch: "new")
        #expect(state.welcomed(fresh) == [
            SessionEvent(kind: .reset, lastSequence: 0, serverSequence: 8),
            SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 8),
        ])
        #expect(state.epoch == "new")
        #expect(state.held == [])
        #expect(state.lastAcknowledged == 0)
        #expect(state.receive(serial: 1) == .deliver(1))
        state.record(1, .taken)

        // The same epoch again: a plain resume.
        let again = SessionWire.Welcome(accepted: true, clientID: "a", lastSequence: 8, resumeAfter: 1, epoch: "new")
        #expect(state.welcomed(again) == [SessionEvent(kind: .resumed, lastSequence: 1, serverSequence: 8)])
        #expect(state.epoch == "new")

        // A server that tells no epoch: resumed as without epochs, and the client knows none.
        let silent = SessionWire.Welcome(accepted: true, clientID: "a", lastSequence: 8, resumeAfter: 1)
        #expect(state.welcomed(silent) == [SessionEvent(kind: .resumed, lastSequence: 1, serverSequence: 8)])
        #expect(state.epoch == nil)
        // A client that knows none takes the server's without a reset.
        let told = SessionWire.Welcome(accepted: true, clientID: "a", lastSequence: 8, resumeAfter: 1, epoch: "other")
        #expect(state.welcomed(told) == [SessionEvent(kind: .resumed, lastSequence: 1, serverSequence: 8)])
        #expect(state.epoch == "other")
    }

    @Test("the hello carries the epoch the client knows, and none when it knows none")
    func helloEpoch() throws {
        let with = SessionWire.encode(SessionWire.Hello(clientID: "a", lastSequence: 5, acknowledged: 5, epoch: "e"))
        #expect(String(decoding: with, as: UTF8.self) == #"{"acknowledged":5,"clientID":"a","epoch":"e","lastSequence":5}"#)
        let without = SessionWire.encode(SessionWire.Hello(clientID: "a", lastSequence: 5, acknowledged: 5))
        #expect(String(decoding: without, as: UTF8.self) == #"{"acknowledged":5,"clientID":"a","lastSequence":5}"#)
        // An older peer's answer, without the field, still decodes.
        let old = try #require(SessionWire.decode(SessionWire.Welcome.self, from: Array(#"{"accepted":true,"clientID":"a","lastSequence":3,"resumeAfter":1}"#.utf8)))
        #expect(old.epoch == nil)
    }
}

extension ResumePlan {
    static func make(last: UInt64, after: UInt64, gap: SessionWire.Gap?) -> ResumePlan {
        var plan = ResumePlan(clientSequence: 0, summary: MailboxSummary(lastSequence: 0, acknowledged: 0, lostThrough: 0, lossReason: nil, count: 0))
        plan.lastSequence = last
        plan.resumeAfter = after
        plan.gap = gap
        return plan
    }
}
