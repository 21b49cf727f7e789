import Testing
@testable import Tether

/// A session taken over by a newer connection with the same client id, in the client
/// lifecycle, without sockets: the connection closes for good unless it is set to take the
/// session back.
@Suite("Connection state machine: a session taken over")
struct ConnectionStateMachineTakeoverTests {
    typealias Machine = ConnectionStateMachine
    typealias Token = ConnectionStateMachine.Token

    static let endpoint = Endpoint(host: "example.test", port: 9000)
    static let takenOver = TetherError(code: .sessionTakenOver, message: "example.test:9000 closed the connection: client dup connected again from 10.0.0.2:5000")

    /// A machine greeting (token 1), or connected and healthy once the hello is accepted.
    static func machine(accepted: Bool = true, reconnects: Bool = false) -> Machine {
        var machine = Machine(settings: .init(endpoint: endpoint, policy: .backoff(initialDelay: .seconds(1), jitter: 0), greets: true, reconnectsWhenTakenOver: reconnects), seed: 7)
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialSucceeded(Token(value: 1)))
        _ = machine.handle(.attached(Token(value: 1)))
        if accepted {
            _ = machine.handle(.helloAccepted)
            _ = machine.handle(.provedHealthy)
        }
        return machine
    }

    @Test("connected: the channel goes, what is in flight fails, and the connection closes for good with the takeover as its reason")
    func connectedCloses() {
        var machine = Self.machine()
        #expect(machine.handle(.takenOver(Self.takenOver)) == [
            .detach(graceful: false), .failInFlight(Self.takenOver), .failWaiting(Self.takenOver), .publish(.closed(Self.takenOver)), .endStreams,
        ])
        #expect(machine.state == .closed(Self.takenOver))
        // Nothing more: the connection has ended.
        #expect(machine.handle(.takenOver(Self.takenOver)) == [])
        #expect(machine.handle(.lost(Self.takenOver)) == [])
    }

    @Test("greeting: taken over before its own hello was answered, it closes too, and the caller of connect() hears why")
    func greetingCloses() {
        var machine = Self.machine(accepted: false)
        #expect(machine.handle(.takenOver(Self.takenOver)) == [
            .detach(graceful: false), .failInFlight(Self.takenOver), .failWaiting(Self.takenOver), .failOpener(.error(Self.takenOver)),
            .publish(.closed(Self.takenOver)), .endStreams,
        ])
    }

    @Test("with reconnectsWhenTakenOver the takeover is a lost connection: the policy's backoff, then attempt 1")
    func reconnectsWhenAsked() {
        var machine = Self.machine(reconnects: true)
        var lost = Self.machine(reconnects: true)
        let actions = machine.handle(.takenOver(Self.takenOver))
        #expect(actions == lost.handle(.lost(Self.takenOver)))
        #expect(actions == [
            .detach(graceful: false), .failInFlight(Self.takenOver),
            .publish(.reconnecting(attempt: 1, after: .seconds(1), reason: Self.takenOver)), .scheduleBackoff(Token(value: 2), after: .seconds(1)),
        ])
    }

    @Test("with no channel attached (backing off, idle) a takeover is stale")
    func staleWithoutChannel() {
        var idle = Machine(settings: .init(endpoint: Self.endpoint, greets: true), seed: 7)
        #expect(idle.handle(.takenOver(Self.takenOver)) == [])
        var machine = Self.machine(reconnects: true)
        _ = machine.handle(.lost(TetherError(code: .peerClosed, message: "closed")))
        #expect(machine.handle(.takenOver(Self.takenOver)) == [])
        #expect(machine.state.phase == .reconnecting)
    }
}
