import Testing
@testable import Tether

/// Where the first attempt after a break goes: to the next endpoint when there are several
/// (the one that just broke is the likeliest to be down), to the same one when it is the
/// only one.
@Suite("Connection state machine: failover after a break")
struct ConnectionStateMachineFailoverTests {
    typealias Machine = ConnectionStateMachine
    typealias Token = ConnectionStateMachine.Token

    static let endpoint = Endpoint(host: "example.test", port: 9000)
    static let reset = TetherError(code: .connectionLost, message: "connection reset by example.test:9000")

    /// Connected and healthy on endpoint `index` of `count`, after `index` failed attempts.
    static func connected(endpointCount count: Int, on index: Int) -> Machine {
        var machine = Machine(settings: .init(endpoint: endpoint, endpointCount: count, policy: .backoff(initialDelay: .seconds(1), maximumDelay: .seconds(10), jitter: 0)), seed: 7)
        _ = machine.handle(.connectRequested)
        var actions = machine.handle(.connectStarted)
        for _ in 0..<index {
            guard case .dial(let token, _, _)? = actions.last else { Issue.record("no dial in \(actions)"); return machine }
            let backoff = machine.handle(.dialFailed(token, TetherError(code: .connectionRefused, message: "refused")))
            guard case .scheduleBackoff(let wait, _)? = backoff.last else { Issue.record("no backoff in \(backoff)"); return machine }
            actions = machine.handle(.backoffElapsed(wait))
        }
        guard case .dial(let token, let dialed, _)? = actions.last else { Issue.record("no dial in \(actions)"); return machine }
        #expect(dialed == index)
        _ = machine.handle(.dialSucceeded(token))
        _ = machine.handle(.attached(token))
        _ = machine.handle(.provedHealthy)
        return machine
    }

    /// The endpoint the first attempt after a break dials.
    static func firstAttempt(after machine: inout Machine) -> (endpoint: Int, attempt: Int)? {
        let lost = machine.handle(.lost(reset))
        guard case .scheduleBackoff(let wait, let delay)? = lost.last else { return nil }
        #expect(delay == .seconds(1))
        guard case .dial(_, let endpoint, let attempt)? = machine.handle(.backoffElapsed(wait)).last else { return nil }
        return (endpoint, attempt)
    }

    @Test("with several endpoints, the first attempt after a healthy connection broke goes to the next one, at the first backoff", arguments: [(2, 0, 1), (2, 1, 0), (3, 2, 0), (3, 0, 1)])
    func nextEndpointFirst(count: Int, on index: Int, next: Int) throws {
        var machine = Self.connected(endpointCount: count, on: index)
        let first = try #require(Self.firstAttempt(after: &machine))
        #expect(first.endpoint == next)
        #expect(first.attempt == 1)
    }

    @Test("with one endpoint, the first attempt after a break goes back to it")
    func onlyEndpoint() throws {
        var machine = Self.connected(endpointCount: 1, on: 0)
        let first = try #require(Self.firstAttempt(after: &machine))
        #expect(first.endpoint == 0)
    }
}
