import Testing
@testable import Tether

/// The server peer's lifecycle without sockets: every (stage, event), (identity, event) and
/// (drain, event) cell of the table with its exact actions and resulting place, the stale
/// events, and what each way out of a phase releases.
@Suite("Peer state machine")
struct PeerStateMachineTests {
    typealias Machine = PeerStateMachine

    static let closed = TetherError(code: .peerClosed, message: "peer 127.0.0.1:5000 closed the connection")
    static let shutDown = TetherError(code: .connectionClosed, message: "server shut down")

    // MARK: Getting to each place

    static func handshake(timeout: Bool = true) -> Machine {
        var machine = Machine()
        _ = machine.handle(.attached(handshakeTimeout: timeout))
        return machine
    }

    static func serving() -> Machine {
        var machine = handshake()
        _ = machine.handle(.frameReceived)
        return machine
    }

    static func greeting(holds: Bool = false, chunks: Bool = false) -> Machine {
        var machine = serving()
        _ = machine.handle(.helloReceived(clientID: "ada", holds: holds, takesChunks: chunks))
        return machine
    }

    static func identified(held: Bool = false) -> Machine {
        var machine = greeting(holds: held)
        _ = machine.handle(.sessionBegan)
        return machine
    }

    static func ended(_ machine: Machine) -> Machine {
        var machine = machine
        _ = machine.handle(.ended(closed, graceful: false))
        return machine
    }

    // MARK: Stages

    @Test("accepted: attached starts the handshake and arms its timers")
    func acceptedAttached() {
        var machine = Machine()
        #expect(machine.stage == .accepted)
        #expect(machine.handle(.attached(handshakeTimeout: true)) == [.armTimers(handshake: true)])
        #expect(machine.stage == .handshake)
        #expect(machine.awaitsFirstFrame)

        var untimed = Machine()
        #expect(untimed.handle(.attached(handshakeTimeout: false)) == [.armTimers(handshake: false)])
        #expect(untimed.stage == .handshake)
    }

    @Test("accepted: an attach that fails ends with nothing to release")
    func acceptedEnded() {
        var machine = Machine()
        #expect(machine.handle(.ended(Self.closed, graceful: false)) == [])
        #expect(machine.stage == .closed(Self.closed))
        #expect(machine.closeReason == Self.closed)
        // Nothing follows an end, not even the attach.
        #expect(machine.handle(.attached(handshakeTimeout: true)) == [])
        #expect(machine.stage == .closed(Self.closed))
    }

    @Test("handshake: the first frame starts serving and releases the handshake timer")
    func handshakeFrame() {
        var machine = Self.handshake()
        #expect(machine.handle(.frameReceived) == [.cancelHandshakeTimer])
        #expect(machine.stage == .serving)
        #expect(!machine.awaitsFirstFrame)
        // Later frames change nothing.
        #expect(machine.handle(.frameReceived) == [])
    }

    @Test("handshake: its timer ends a port still sniffing, extends a first frame under way, closes the rest", arguments: [
        (true, false, PeerStateMachine.Action.endUnsniffed),
        (true, true, .endUnsniffed),
        (false, true, .extendHandshakeTimer),
        (false, false, .closeForHandshakeTimeout),
    ])
    func handshakeExpired(sniffing: Bool, progressing: Bool, action: PeerStateMachine.Action) {
        var machine = Self.handshake()
        #expect(machine.handle(.handshakeExpired(sniffing: sniffing, progressing: progressing)) == [action])
        // The machine leaves the handshake only with the frame or the end the actor carries out.
        #expect(machine.stage == .handshake)
    }

    @Test("handshake: ending releases the handshake timer with the rest")
    func handshakeEnded() {
        var machine = Self.handshake()
        #expect(machine.handle(.ended(Self.closed, graceful: false)) == [
            .releaseRequests, .cancelTimers(handshake: true), .closeChannel(graceful: false),
        ])
        #expect(machine.stage == .closed(Self.closed))
    }

    @Test("serving: a handshake timer that fired as it was cancelled is stale")
    func servingHandshakeExpired() {
        var machine = Self.serving()
        #expect(machine.handle(.handshakeExpired(sniffing: false, progressing: false)) == [])
        #expect(machine.handle(.handshakeExpired(sniffing: true, progressing: false)) == [])
        #expect(machine.stage == .serving)
    }

    @Test("serving: ending closes the channel, after a flush when graceful")
    func servingEnded() {
        var machine = Self.serving()
        #expect(machine.handle(.ended(Self.shutDown, graceful: true)) == [
            .releaseRequests, .cancelTimers(handshake: false), .closeChannel(graceful: true),
        ])
        #expect(machine.closeReason == Self.shutDown)
    }

    @Test("closed: every event but a hello's end is stale, and the first reason stays")
    func closedIsFinal() {
        var machine = Self.ended(Self.identified())
        let events: [Machine.Event] = [
            .frameReceived, .handshakeExpired(sniffing: false, progressing: false),
            .helloReceived(clientID: "bob", holds: false, takesChunks: false), .sessionBegan, .holdRequested(true),
            .takenOver(clientID: "ada"), .drainBegan(notifies: true), .drainDeadlinePassed, .handlersIdle,
            .ended(Self.shutDown, graceful: true),
        ]
        for event in events {
            #expect(machine.handle(event) == [], "\(event)")
        }
        #expect(machine.closeReason == Self.closed)
        #expect(!machine.isOpen)
        #expect(machine.identity == .identified(clientID: "ada", held: false))
        #expect(machine.drain == .serving)
    }

    // MARK: Identity

    @Test("anonymous: a hello makes the peer greeting, with what it asked")
    func anonymousHello() {
        var machine = Self.serving()
        #expect(machine.clientID == nil)
        #expect(!machine.hasClientID)
        #expect(machine.isOpen)
        #expect(machine.handle(.helloReceived(clientID: "ada", holds: true, takesChunks: true)) == [])
        #expect(machine.hasClientID)
        #expect(machine.identity == .greeting(clientID: "ada", holds: true, takesChunks: true))
        #expect(machine.clientID == "ada")
        #expect(!machine.isHeld)
    }

    @Test("anonymous: a session, a hold or a takeover without a hello is stale")
    func anonymousStale() {
        var machine = Self.serving()
        #expect(machine.handle(.helloAbandoned) == [])
        #expect(machine.handle(.sessionBegan) == [])
        #expect(machine.handle(.holdRequested(true)) == [])
        #expect(machine.handle(.takenOver(clientID: "ada")) == [])
        #expect(machine.identity == .anonymous)
    }

    @Test("a second hello is refused in every identity that has one", arguments: ["greeting", "identified", "replaced"])
    func secondHello(identity: String) {
        var machine: Machine
        switch identity {
        case "greeting": machine = Self.greeting()
        case "identified": machine = Self.identified()
        default:
            machine = Self.identified()
            _ = machine.handle(.takenOver(clientID: "ada"))
        }
        let before = machine.identity
        #expect(machine.handle(.helloReceived(clientID: "bob", holds: false, takesChunks: false)) == [.refuseHello(alreadyAs: "ada")])
        #expect(machine.identity == before)
    }

    @Test("greeting: a hello refused or whose claim failed lets go of the client id")
    func greetingAbandoned() {
        var machine = Self.greeting()
        #expect(machine.handle(.helloAbandoned) == [])
        #expect(machine.identity == .anonymous)
        #expect(machine.clientID == nil)
        // The client may say hello again.
        #expect(machine.handle(.helloReceived(clientID: "ada", holds: false, takesChunks: false)) == [])
    }

    @Test("greeting: a claim that fails after the peer ended still lets go, and nothing is detached twice")
    func greetingAbandonedAfterEnd() {
        var machine = Self.greeting()
        #expect(machine.handle(.ended(Self.closed, graceful: false)) == [
            .detach(clientID: "ada"), .releaseRequests, .cancelTimers(handshake: false), .closeChannel(graceful: false),
        ])
        #expect(machine.handle(.helloAbandoned) == [])
        #expect(machine.identity == .anonymous)
    }

    @Test("greeting: the session begins, held when the hello asked, offering chunks when it takes them", arguments: [
        (false, false, [PeerStateMachine.Action]()),
        (true, false, [.countHold]),
        (false, true, [.offerChunks]),
        (true, true, [.countHold, .offerChunks]),
    ])
    func greetingSessionBegan(holds: Bool, chunks: Bool, actions: [PeerStateMachine.Action]) {
        var machine = Self.greeting(holds: holds, chunks: chunks)
        #expect(machine.handle(.sessionBegan) == actions)
        #expect(machine.identity == .identified(clientID: "ada", held: holds))
        #expect(machine.isHeld == holds)
        // Once begun, a repeat is stale.
        #expect(machine.handle(.sessionBegan) == [])
    }

    @Test("greeting: a takeover closes, and the end detaches the claim")
    func greetingTakenOver() {
        var machine = Self.greeting()
        #expect(machine.handle(.takenOver(clientID: "bob")) == [])
        #expect(machine.handle(.takenOver(clientID: "ada")) == [.closeForTakeover])
        #expect(machine.identity == .greeting(clientID: "ada", holds: false, takesChunks: false))
    }

    @Test("identified: a hold and a release change the session, a repeat does not")
    func identifiedHolds() {
        var machine = Self.identified()
        #expect(machine.handle(.holdRequested(false)) == [])
        #expect(machine.handle(.holdRequested(true)) == [.countHold])
        #expect(machine.isHeld)
        #expect(machine.handle(.holdRequested(true)) == [])
        #expect(machine.handle(.holdRequested(false)) == [.replayHeld])
        #expect(!machine.isHeld)
    }

    @Test("identified: a takeover of its own client is published and closes; another client's is stale")
    func identifiedTakenOver() {
        var machine = Self.identified(held: true)
        #expect(machine.handle(.takenOver(clientID: "bob")) == [])
        #expect(machine.handle(.takenOver(clientID: "ada")) == [.publishTakeover(clientID: "ada"), .closeForTakeover])
        #expect(machine.identity == .replaced(clientID: "ada"))
        #expect(machine.wasTakenOver)
        #expect(!machine.isHeld)
        #expect(machine.clientID == "ada")
        // Once replaced: no second takeover, no hold.
        #expect(machine.handle(.takenOver(clientID: "ada")) == [])
        #expect(machine.handle(.holdRequested(false)) == [])
    }

    @Test("identified: ending publishes the session's end, stops its replay and detaches it")
    func identifiedEnded() {
        var machine = Self.identified()
        #expect(machine.handle(.ended(Self.closed, graceful: false)) == [
            .publishSessionEnded(clientID: "ada"), .stopReplay, .detach(clientID: "ada"),
            .releaseRequests, .cancelTimers(handshake: false), .closeChannel(graceful: false),
        ])
    }

    @Test("replaced: ending stops the replay and detaches, but publishes no end of the session")
    func replacedEnded() {
        var machine = Self.identified()
        _ = machine.handle(.takenOver(clientID: "ada"))
        #expect(machine.handle(.ended(Self.closed, graceful: true)) == [
            .stopReplay, .detach(clientID: "ada"),
            .releaseRequests, .cancelTimers(handshake: false), .closeChannel(graceful: true),
        ])
    }

    // MARK: Drain

    @Test("serving: a drain tells the client to leave, or closes once idle when it cannot be told")
    func drainBegan() {
        var told = Self.serving()
        #expect(told.handle(.drainBegan(notifies: true)) == [.writeDrainNotice])
        #expect(told.drain == .draining(quiet: false))
        #expect(told.drain.refusesRequests)
        #expect(!told.drain.closesWhenIdle)

        var quiet = Self.serving()
        #expect(quiet.handle(.drainBegan(notifies: false)) == [.endIfIdle])
        #expect(quiet.drain == .draining(quiet: true))
        #expect(!quiet.drain.refusesRequests)
        #expect(quiet.drain.closesWhenIdle)
    }

    @Test("a drain may begin in the handshake too")
    func drainInHandshake() {
        var machine = Self.handshake()
        #expect(machine.handle(.drainBegan(notifies: true)) == [.writeDrainNotice])
        #expect(machine.stage == .handshake)
    }

    @Test("draining: a second order is stale", arguments: [true, false])
    func drainingAgain(quiet: Bool) {
        var machine = Self.serving()
        _ = machine.handle(.drainBegan(notifies: !quiet))
        #expect(machine.handle(.drainBegan(notifies: true)) == [])
        #expect(machine.handle(.drainBegan(notifies: false)) == [])
        #expect(machine.drain == .draining(quiet: quiet))
    }

    @Test("the deadline refuses what waits and stops the handlers, from serving and from draining", arguments: [nil, true, false] as [Bool?])
    func deadline(quiet: Bool?) {
        var machine = Self.serving()
        if let quiet { _ = machine.handle(.drainBegan(notifies: !quiet)) }
        #expect(machine.handle(.drainDeadlinePassed) == [.refuseWaitingRequests, .stopHandlers])
        #expect(machine.drain == .expired)
        #expect(machine.drain.hasExpired)
        #expect(machine.drain.refusesRequests)
        // Past the deadline: nothing more to decide.
        #expect(machine.handle(.drainDeadlinePassed) == [])
        #expect(machine.handle(.drainBegan(notifies: true)) == [])
        #expect(machine.handle(.handlersIdle) == [])
    }

    @Test("handlers idle: only a quiet drain closes", arguments: [nil, true, false] as [Bool?])
    func handlersIdle(quiet: Bool?) {
        var machine = Self.serving()
        if let quiet { _ = machine.handle(.drainBegan(notifies: !quiet)) }
        #expect(machine.handle(.handlersIdle) == (quiet == true ? [.endIfIdle] : []))
    }

    // MARK: Ownership

    @Test("every way out of the handshake releases its timer, and no way out of serving names it")
    func handshakeTimerOwnership() {
        var framed = Self.handshake()
        #expect(framed.handle(.frameReceived).contains(.cancelHandshakeTimer))
        #expect(Self.handshake().endActions.contains(.cancelTimers(handshake: true)))
        #expect(Self.serving().endActions.contains(.cancelTimers(handshake: false)))
        #expect(Self.identified().endActions.contains(.cancelTimers(handshake: false)))
    }

    @Test("the run loop's wait and the session's replay are released by every end that has them")
    func continuationOwnership() {
        for machine in [Self.handshake(), Self.serving(), Self.greeting(), Self.identified(), Self.identified(held: true)] {
            let actions = machine.endActions
            #expect(actions.contains(.releaseRequests))
            #expect(actions.last.map { if case .closeChannel = $0 { true } else { false } } == true)
            let stopsReplay = actions.contains(.stopReplay)
            if case .identified = machine.identity { #expect(stopsReplay) } else { #expect(!stopsReplay) }
        }
    }
}

extension PeerStateMachine {
    /// What ending now would do, without ending.
    fileprivate var endActions: [Action] {
        var copy = self
        return copy.handle(.ended(PeerStateMachineTests.closed, graceful: false))
    }
}
