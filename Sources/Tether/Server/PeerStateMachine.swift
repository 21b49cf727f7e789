/// The life of one server peer, as a value: events in, actions out.
///
/// ``Peer`` owns the handles (the channel, its timers, the run loop's continuation, the replay
/// task) and feeds this machine what happens to them; the machine decides where the peer is
/// and what it must start or release, and returns that as ``Action``s, which the actor carries
/// out in order. It holds no socket, no loop and no clock.
///
/// The peer's place has three parts that change independently:
/// - the **stage**: accepted (the stream is not a channel yet), handshake (the channel runs;
///   no complete frame has arrived, and the handshake timer, when configured, runs; on a
///   port shared with WebSocket the first part of it is *sniffing*, until four bytes tell
///   the protocols apart), serving (a frame arrived), closed (with the reason);
/// - the **identity**, which only a session hello changes: anonymous, greeting (a hello is
///   being checked and claimed), identified (the hello was accepted; its pushes may be
///   *held* at the client's request), replaced (a newer connection of the same client took
///   the session over);
/// - the **drain** (``PeerDrainPhase``): serving, draining (told to leave, or quiet when the
///   profile cannot carry the notice), expired (the deadline passed).
///
/// | stage → event | accepted | handshake | serving | closed |
/// |---|---|---|---|---|
/// | attached(t) | handshake, arm timers | ✗ | ✗ | · |
/// | frameReceived | ✗ | serving, cancel handshake timer | · | · |
/// | handshakeExpired(sniffing, progressing) | · | end unsniffed / extend / close for timeout¹ | · | · |
/// | ended(r, graceful) | closed | closed, release² | closed, release² | · |
///
/// | identity → event | anonymous | greeting | identified | replaced |
/// |---|---|---|---|---|
/// | helloReceived | greeting | refuse (already) | refuse (already) | refuse (already) |
/// | helloAbandoned | · | anonymous | · | · |
/// | sessionBegan | · | identified³ | · | · |
/// | holdRequested(h) | · | · | held = h⁴ | · |
/// | takenOver(id) | · | close for takeover⁵ | replaced, publish, close⁵ | · |
///
/// | drain → event | serving | draining(quiet: false) | draining(quiet: true) | expired |
/// |---|---|---|---|---|
/// | drainBegan(notifies) | draining, write notice / draining(quiet), end if idle | · | · | · |
/// | drainDeadlinePassed | expired, refuse waiting, stop handlers | expired, … | expired, … | · |
/// | handlersIdle | · | · | end drained | · |
///
/// `·` is an event answered with no action: a timer that fired as it was cancelled, a hello's
/// end after the peer closed, a drain order for a peer that has ended. `✗` stops the process:
/// the actor feeds `attached` once, before anything else, and `frameReceived` only after it.
/// Every event but `ended` and `helloAbandoned` is `·` once the stage is closed.
/// ¹ Still sniffing: ended at once, with no notice (the client's protocol is not known);
/// otherwise a first frame still arriving at the minimum rate gets another timeout, and a
/// peer that sent none is closed with a notice. ² The session ends (its event published unless
/// it was taken over, its replay stopped, the client id detached from the hub), the requests
/// not started and the run loop's wait are released, the timers cancelled (the handshake
/// timer with the handshake), and the channel closed, after a flush when graceful. ³ Held
/// from the start when the hello asked; chunks offered when it said it takes them. ⁴ Only a
/// change: a hold is counted, a release replays what was kept. ⁵ Only for the peer's own
/// client id.
struct PeerStateMachine: Sendable {
    /// How far the connection is.
    enum Stage: Hashable, Sendable {
        /// The stream is accepted; the channel over it is not made yet.
        case accepted
        /// The channel runs, and no complete frame has arrived.
        case handshake
        /// A frame arrived: requests are served.
        case serving
        /// Ended, for good, with the reason.
        case closed(TetherError)
    }

    /// Who the peer is, by its session hello.
    enum Identity: Hashable, Sendable {
        /// No hello yet (or none accepted and none under way).
        case anonymous
        /// A hello is being checked and claimed: what to detach if the peer ends meanwhile.
        case greeting(clientID: String, holds: Bool, takesChunks: Bool)
        /// The hello was accepted; `held` while the client asks for its pushes to stay in
        /// its mailbox.
        case identified(clientID: String, held: Bool)
        /// A newer connection of the same client took the session over.
        case replaced(clientID: String)
    }

    /// What happened.
    enum Event: Hashable, Sendable {
        /// The channel was made and started; `handshakeTimeout` when one is configured.
        case attached(handshakeTimeout: Bool)
        /// The first complete frame was decoded.
        case frameReceived
        /// The handshake timer fired: whether the port still sniffs the protocol, and
        /// whether a first frame under way arrives at the minimum rate.
        case handshakeExpired(sniffing: Bool, progressing: Bool)
        /// A session hello that decoded arrived.
        case helloReceived(clientID: String, holds: Bool, takesChunks: Bool)
        /// The hello under way was refused, or its claim failed.
        case helloAbandoned
        /// The hub registered the session: the welcome goes out.
        case sessionBegan
        /// The client asked for its pushes to be held (`true`) or released.
        case holdRequested(Bool)
        /// A newer connection of `clientID` took the session over.
        case takenOver(clientID: String)
        /// The server began to drain; `notifies` when the client's profile carries the notice.
        case drainBegan(notifies: Bool)
        /// The drain's deadline passed.
        case drainDeadlinePassed
        /// No handler of the peer runs and none waits.
        case handlersIdle
        /// The connection ends, for `reason`; after a flush when `graceful`.
        case ended(TetherError, graceful: Bool)
    }

    /// What the actor does, in order.
    enum Action: Hashable, Sendable {
        /// Starts the idle check, and the handshake timer when `handshake`.
        case armTimers(handshake: Bool)
        /// The handshake is over: its timer goes.
        case cancelHandshakeTimer
        /// The first frame still arrives at the minimum rate: another handshake timeout.
        case extendHandshakeTimer
        /// No complete frame in time: closes with a notice.
        case closeForHandshakeTimeout
        /// The four bytes that tell the protocols apart did not come: ends with no notice.
        case endUnsniffed
        /// Refuses the hello: the connection is already identified as `clientID`.
        case refuseHello(alreadyAs: String)
        /// Counts a hold of the client's pushes.
        case countHold
        /// The client released its pushes: what was kept is replayed.
        case replayHeld
        /// The client takes chunked frames: the welcome offers them.
        case offerChunks
        /// Publishes that a newer connection took the session of `clientID` over.
        case publishTakeover(clientID: String)
        /// Closes with the takeover's notice.
        case closeForTakeover
        /// Tells the client to leave (``DrainNotice``).
        case writeDrainNotice
        /// Closes once no handler runs and none waits.
        case endIfIdle
        /// Answers every request not started with the deadline's error.
        case refuseWaitingRequests
        /// Cancels the handlers that run, and closes once none does.
        case stopHandlers
        /// Publishes that the session of `clientID` ended.
        case publishSessionEnded(clientID: String)
        /// Stops the replay and wakes what waits for the outbound buffer.
        case stopReplay
        /// Takes `clientID` off the hub.
        case detach(clientID: String)
        /// Drops the requests not started, leaves the queue for a handler's place, and ends
        /// the run loop's wait.
        case releaseRequests
        /// Cancels the timers of the stages the peer leaves: the idle and frame checks, and
        /// the handshake timer when `handshake`.
        case cancelTimers(handshake: Bool)
        /// Closes the channel, after flushing when `graceful`.
        case closeChannel(graceful: Bool)
    }

    private(set) var stage = Stage.accepted
    private(set) var identity = Identity.anonymous
    private(set) var drain = PeerDrainPhase.serving

    // MARK: Queries

    /// Why the peer ended, once it has.
    var closeReason: TetherError? {
        if case .closed(let reason) = stage { return reason }
        return nil
    }

    /// Whether the peer has not ended; unlike ``closeReason``, it copies nothing, for the
    /// checks made per frame.
    var isOpen: Bool {
        if case .closed = stage { return false }
        return true
    }

    /// Whether a hello is under way or was accepted (or taken over); copies nothing.
    var hasClientID: Bool {
        if case .anonymous = identity { return false }
        return true
    }

    /// Whether the peer waits for its first complete frame.
    var awaitsFirstFrame: Bool {
        if case .handshake = stage { return true }
        return false
    }

    /// The client id of a hello under way or accepted (or taken over): what the hub knows
    /// this peer by.
    var clientID: String? {
        switch identity {
        case .anonymous: nil
        case .greeting(let clientID, _, _), .identified(let clientID, _), .replaced(let clientID): clientID
        }
    }

    /// Whether the client asked for its pushes to stay in its mailbox.
    var isHeld: Bool {
        if case .identified(_, held: true) = identity { return true }
        return false
    }

    /// Whether a newer connection of the client took the session over.
    var wasTakenOver: Bool {
        if case .replaced = identity { return true }
        return false
    }

    // MARK: Events

    /// Feeds one event; returns what the actor must do, in order.
    mutating func handle(_ event: Event) -> [Action] {
        if case .closed = stage {
            // A hello whose claim ends after the peer did still lets go of the client id;
            // everything else that arrives then (a timer that fired as it was cancelled, a
            // drain order) is stale.
            if case .helloAbandoned = event { return abandonHello() }
            return []
        }
        switch event {
        case .attached(let handshakeTimeout):
            guard stage == .accepted else { illegal(event) }
            stage = .handshake
            return [.armTimers(handshake: handshakeTimeout)]
        case .frameReceived:
            switch stage {
            case .accepted: illegal(event)
            case .handshake:
                stage = .serving
                return [.cancelHandshakeTimer]
            case .serving, .closed: return []
            }
        case .handshakeExpired(let sniffing, let progressing):
            guard stage == .handshake else { return [] }
            if sniffing { return [.endUnsniffed] }
            return progressing ? [.extendHandshakeTimer] : [.closeForHandshakeTimeout]
        case .helloReceived(let clientID, let holds, let takesChunks):
            if let current = self.clientID { return [.refuseHello(alreadyAs: current)] }
            identity = .greeting(clientID: clientID, holds: holds, takesChunks: takesChunks)
            return []
        case .helloAbandoned:
            return abandonHello()
        case .sessionBegan:
            guard case .greeting(let clientID, let holds, let takesChunks) = identity else { return [] }
            identity = .identified(clientID: clientID, held: holds)
            var actions: [Action] = []
            if holds { actions.append(.countHold) }
            if takesChunks { actions.append(.offerChunks) }
            return actions
        case .holdRequested(let hold):
            guard case .identified(let clientID, let held) = identity, held != hold else { return [] }
            identity = .identified(clientID: clientID, held: hold)
            return [hold ? .countHold : .replayHeld]
        case .takenOver(let clientID):
            guard self.clientID == clientID else { return [] }
            switch identity {
            case .identified:
                identity = .replaced(clientID: clientID)
                return [.publishTakeover(clientID: clientID), .closeForTakeover]
            case .greeting: return [.closeForTakeover]
            case .anonymous, .replaced: return []
            }
        case .drainBegan(let notifies):
            guard case .serving = drain else { return [] }
            drain = .draining(quiet: !notifies)
            return notifies ? [.writeDrainNotice] : [.endIfIdle]
        case .drainDeadlinePassed:
            guard !drain.hasExpired else { return [] }
            drain = .expired
            return [.refuseWaitingRequests, .stopHandlers]
        case .handlersIdle:
            return drain.closesWhenIdle ? [.endIfIdle] : []
        case .ended(let reason, let graceful):
            return end(reason, graceful: graceful)
        }
    }

    private mutating func abandonHello() -> [Action] {
        if case .greeting = identity { identity = .anonymous }
        return []
    }

    /// Ends the peer: what each stage and the identity held is released.
    private mutating func end(_ reason: TetherError, graceful: Bool) -> [Action] {
        let left = stage
        stage = .closed(reason)
        var actions: [Action] = []
        switch identity {
        case .anonymous: break
        case .greeting(let clientID, _, _):
            actions.append(.detach(clientID: clientID))
        case .identified(let clientID, _):
            actions += [.publishSessionEnded(clientID: clientID), .stopReplay, .detach(clientID: clientID)]
        case .replaced(let clientID):
            actions += [.stopReplay, .detach(clientID: clientID)]
        }
        guard left != .accepted else { return actions }
        actions += [.releaseRequests, .cancelTimers(handshake: left == .handshake), .closeChannel(graceful: graceful)]
        return actions
    }

    private func illegal(_ event: Event) -> Never {
        preconditionFailure("peer state machine: \(event) is not valid in stage \(stage)")
    }
}
