import Testing
@testable import Tether

/// A server's drain notice in the client lifecycle, without sockets: the connection stops
/// writing, waits for what is in flight, then reconnects as planned (attempt 0, no backoff
/// spent) on its next endpoint, at once or after the delay the server asked for.
@Suite("Connection state machine: the server's drain")
struct ConnectionStateMachineDrainTests {
    typealias Machine = ConnectionStateMachine
    typealias Token = ConnectionStateMachine.Token

    static let endpoint = Endpoint(host: "example.test", port: 9000)
    static let draining = TetherError(code: .connectionLost, message: "example.test:9000 is draining")
    static let reset = TetherError(code: .connectionLost, message: "connection reset by example.test:9000")

    /// A machine connected (healthy) to the first of two endpoints: tokens 1 and 2 are used.
    static func connected(policy: ReconnectPolicy = .backoff(initialDelay: .seconds(1), maximumDelay: .seconds(10), jitter: 0), session: Bool = false) -> Machine {
        var machine = Machine(settings: .init(endpoint: endpoint, endpointCount: 2, policy: policy, greets: session), seed: 7)
        _ = machine.handle(.connectRequested)
        _ = machine.handle(.connectStarted)
        _ = machine.handle(.dialSucceeded(Token(value: 1)))
        _ = machine.handle(.attached(Token(value: 1)))
        if session { _ = machine.handle(.helloAccepted) }
        _ = machine.handle(.provedHealthy)
        return machine
    }

    @Test("the notice holds writes and awaits the responses; once due, a graceful detach and a fresh attempt 0 on the next endpoint, published as connecting")
    func departsAtOnce() {
        var machine = Self.connected()
        #expect(machine.handle(.departureAnnounced(reconnectAfter: .zero, Self.draining)) == [.awaitDeparture])
        #expect(machine.isDeparting)
        #expect(machine.state.phase == .connected)
        // A second notice changes nothing.
        #expect(machine.handle(.departureAnnounced(reconnectAfter: .zero, Self.draining)) == [])
        #expect(machine.handle(.departureDue(Self.draining)) == [
            .detach(graceful: true), .failInFlight(Self.draining), .publish(.connecting), .dial(Token(value: 2), endpoint: 1, attempt: 0),
        ])
        #expect(!machine.isDeparting)
        #expect(machine.attempt == 0)
        #expect(machine.handle(.departureDue(Self.draining)) == [])
    }

    @Test("the server closing first while departing is no failure: in flight fails, and the planned reconnect follows")
    func serverClosesFirst() {
        var machine = Self.connected()
        _ = machine.handle(.departureAnnounced(reconnectAfter: .zero, Self.draining))
        #expect(machine.handle(.lost(Self.reset)) == [
            .detach(graceful: false), .failInFlight(Self.reset), .publish(.connecting), .dial(Token(value: 2), endpoint: 1, attempt: 0),
        ])
    }

    @Test("a delay the server asked for is waited out in a backoff whose state stays connecting; its end dials without publishing again")
    func departsAfterDelay() {
        var machine = Self.connected()
        _ = machine.handle(.departureAnnounced(reconnectAfter: .seconds(3), Self.draining))
        #expect(machine.handle(.departureDue(Self.draining)) == [
            .detach(graceful: true), .failInFlight(Self.draining), .publish(.connecting), .scheduleBackoff(Token(value: 2), after: .seconds(3)),
        ])
        #expect(machine.state == .connecting)
        #expect(machine.handle(.backoffElapsed(Token(value: 2))) == [.dial(Token(value: 3), endpoint: 1, attempt: 0)])
    }

    @Test("reconnectNow() during the delay dials at once, still attempt 0, without publishing connecting twice")
    func reconnectNowDuringDelay() {
        var machine = Self.connected()
        _ = machine.handle(.departureAnnounced(reconnectAfter: .seconds(3), Self.draining))
        _ = machine.handle(.departureDue(Self.draining))
        #expect(machine.handle(.reconnectNow) == [.cancelBackoff, .dial(Token(value: 3), endpoint: 1, attempt: 0)])
    }

    @Test("a notice while greeting leaves at once; with reconnecting off the connection ends closed; in other phases the notice is stale")
    func otherPhases() {
        var greeting = Machine(settings: .init(endpoint: Self.endpoint, endpointCount: 2, greets: true), seed: 7)
        _ = greeting.handle(.connectRequested)
        _ = greeting.handle(.connectStarted)
        _ = greeting.handle(.dialSucceeded(Token(value: 1)))
        _ = greeting.handle(.attached(Token(value: 1)))
        #expect(greeting.handle(.departureAnnounced(reconnectAfter: .zero, Self.draining)) == [
            .detach(graceful: true), .failInFlight(Self.draining), .dial(Token(value: 2), endpoint: 1, attempt: 0),
        ])
        #expect(greeting.handle(.departureAnnounced(reconnectAfter: .zero, Self.draining)) == [])

        var disabled = Self.connected(policy: .disabled)
        _ = disabled.handle(.departureAnnounced(reconnectAfter: .zero, Self.draining))
        #expect(disabled.handle(.departureDue(Self.draining)) == [
            .detach(graceful: true), .failInFlight(Self.draining), .failWaiting(Self.draining), .publish(.closed(Self.draining)), .endStreams,
        ])
    }

    @Test("suspend() while departing forgets the departure: resume() dials as usual")
    func suspendForgets() {
        var machine = Self.connected()
        _ = machine.handle(.departureAnnounced(reconnectAfter: .zero, Self.draining))
        _ = machine.handle(.suspend(Self.reset))
        #expect(!machine.isDeparting)
        #expect(machine.handle(.departureDue(Self.draining)) == [])
    }
}
