// The code of Documentation.docc/Resilience.md, compiled, and run against a local server
// where the example is self-contained.

import Observation
import Testing
import Tether
import TetherTesting

private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    recordAndPrint(items, separator: separator, terminator: terminator)
}

// MARK: The article's code

private func overviewExample() async throws {
    let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: 9000))
    await withTaskGroup(of: Void.self) { group in
        group.addTask {
            for await state in connection.states {
                print(state)   // connected, reconnecting (attempt 1 in 1 s): peer … closed the connection, …
            }
        }
        for await push in connection.notifications {   // keeps running across reconnects
            print(push)
        }
    }
}

private func backoffExample() {
    var configuration = ConnectionConfiguration()
    configuration.reconnect = .backoff(initialDelay: .milliseconds(250), maximumDelay: .seconds(30), maximumAttempts: 10)
    configuration.alternateEndpoints = [Endpoint(host: "127.0.0.1", port: 9001)]
    _ = configuration
}

/// Compiled, not run: it waits for a server on port 9000.
private func firstConnectExample() async throws -> Connection {
    var configuration = ConnectionConfiguration()
    configuration.reconnect = .backoff(initialDelay: .milliseconds(500), maximumAttempts: 20)
    let connection = Connection(to: Endpoint(host: "127.0.0.1", port: 9000), configuration: configuration)
    let states = connection.states      // idle, connecting, reconnecting (attempt 1 in 500 ms): connection refused by …, …
    try await connection.connect()      // returns once connected, or throws after 20 failed attempts
    _ = states
    return connection
}

func appDidEnterBackground(_ connection: Connection) async {
    await connection.suspend()          // a deliberate disconnect: no attempts until resume()
}
func appWillEnterForeground(_ connection: Connection) async {
    await connection.resume()           // connects at once, with a fresh attempt budget
}
func networkDidBecomeAvailable(_ connection: Connection) async {
    await connection.reconnectNow()     // skips what is left of the backoff
}

private func noPathMonitorExample() {
    var configuration = ConnectionConfiguration()
    configuration.pathMonitor = nil     // a usable path that never changes
    _ = configuration
}

func connectionSurvivesLosingTheNetwork() async throws {
    try await withTestNetwork { network in
        try await withTestServer(configuration: .testing(on: network)) { server in
            let connection = try await Connection.connect(to: server.endpoint, configuration: .testing(on: network))
            network.pathMonitor.update(.unusable)           // the network is gone
            await network.runUntilIdle()
            print(await connection.currentState)            // connected: only heartbeats decide
            network.pathMonitor.update(.testing(interface: "rmnet0", index: 9, gateway: "198.51.100.1"))
            await connection.close()
        }
    }
}

/// What a status banner says about a connection; `nil` hides the banner.
func bannerText(for state: ConnectionState) -> String? {
    switch state.phase {
    case .connecting:
        return "Connecting…"
    case .reconnecting:
        return "Connection lost. Reconnecting (attempt \(state.attempt ?? 1))…"
    case .waitingForNetwork:
        return "Waiting for the network…"
    case .failed:
        return "Offline: \(state.reason?.message ?? "the server cannot be reached")"
    default:
        return nil                      // connected, suspended, closed, and phases to come
    }
}

/// A connection's status for the UI, kept up to date from its states.
@MainActor @Observable
final class ConnectionStatus {
    private(set) var banner: String?
    private(set) var isOnline = false
    func follow(_ connection: Connection) async {
        for await state in connection.states {
            banner = bannerText(for: state)
            isOnline = state.phase == .connected
        }
    }
}

// MARK: Running them

@Suite("Staying connected, as the article shows it", .timeLimit(.guarded))
struct ResilienceSnippets {
    @Test("the defaults the article states")
    func defaults() {
        let policy = ReconnectPolicy()
        #expect(policy.isEnabled)
        #expect(policy.initialDelay == .seconds(1))
        #expect(policy.multiplier == 1.6)
        #expect(policy.maximumDelay == .seconds(120))
        #expect(policy.jitter == 0.2)
        #expect(policy.maximumAttempts == nil)
        #expect(policy.appliesToFirstConnect)
        #expect(ConnectionConfiguration().drainTimeout == .seconds(5))
        let heartbeat = HeartbeatConfiguration()
        let (i, t, n) = (heartbeat.interval, heartbeat.timeout, heartbeat.maximumMissed)
        #expect(i * n + t == .seconds(35))                // the dead-peer bound
    }

    @Test("suspend() fails what is in flight and disconnects; what is asked meanwhile waits for resume()")
    func suspendAndResume() async throws {
        let gate = RequestGate()
        try await withNetworkConnection(handlers: { server in
            server.handle(type: 0x404) { _, _ in
                await gate.wait()
                return Response()
            }
            server.handle(type: 0x402) { request, _ in
                Response(json: ["echo": request.json ?? .null])
            }
        }) { network, _, connection in
            defer { gate.open() }
            let states = connection.states
            let inFlight = Task { try await connection.request(Request(type: 0x404)) }
            _ = try await firstElement(of: gate.arrivals)
            await appDidEnterBackground(connection)
            let error = await #expect(throws: TetherError.self) { try await inFlight.value }
            #expect(error?.code == .connectionLost)
            #expect(error?.message == "request 0x404 serial 1 failed: connection lost: the connection to \(connection.endpoint) was suspended by suspend()")
            let suspended = await connection.currentState
            #expect(suspended.phase == .suspended)
            #expect(suspended.reason == nil)
            let waiting = Task { try await connection.request(Request(type: 0x402, json: ["n": 1])) }
            await appWillEnterForeground(connection)
            let reply = try await withTimeLimit(testBound) { try await waiting.value }
            #expect(reply.json == ["echo": ["n": 1]])
            let phases = try await phasesUntilConnectedAgain(states)
            #expect(phases == [.connected, .suspended, .connecting, .connected])
            #expect(await connection.metrics.connects == 2)
            #expect(network.clock.elapsed == .zero)             // no backoff: at once
        }
    }

    @Test("reconnectNow() skips a long backoff: the connection is back with no time passing")
    func reconnectNow() async throws {
        backoffExample()
        try await withNetworkConnection(handlers: { _ in }, configure: {
            $0.reconnect = .backoff(initialDelay: .seconds(60))
        }) { network, server, connection in
            let states = connection.states
            for peer in server.peers { await peer.close() }
            let waiting = try await firstElement(of: states.filter { $0.phase == .reconnecting })
            #expect(waiting?.attempt == 1)
            #expect(waiting?.reason?.code == .peerClosed)
            #expect((waiting?.delay ?? .zero) >= .seconds(48))
            #expect(bannerText(for: waiting!) == "Connection lost. Reconnecting (attempt 1)…")
            await networkDidBecomeAvailable(connection)
            let back = try await firstElement(of: states.filter { $0.phase == .connected })
            #expect(back != nil)
            #expect(network.clock.elapsed == .zero)
            #expect(await connection.metrics.connects == 2)
        }
    }

    @Test("a connection follows the system's path by default, or none; losing the network leaves a live connection connected")
    func networkPath() async throws {
        noPathMonitorExample()
        #expect(ConnectionConfiguration().pathMonitor === SystemPathMonitor.shared)
        let printed = try await withPrintedLines { try await connectionSurvivesLosingTheNetwork() }
        #expect(printed == ["connected to server:9000"])
        #expect(bannerText(for: .waitingForNetwork(reason: TetherError(code: .peerClosed, message: "peer closed"))) == "Waiting for the network…")
    }

    @Test("a policy that runs out of attempts ends the connection in failed, with the last error, as its last attempt fails")
    func givesUp() async throws {
        try await withTestNetwork { network in
            var configuration = ConnectionConfiguration.testing(on: network)
            configuration.reconnect = .backoff(initialDelay: .milliseconds(10), jitter: 0, maximumAttempts: 2)
            let (connection, endpoint) = try await withNetworkServer(on: network, handlers: { _ in }) { _, endpoint in
                (try await Connection.connect(to: endpoint, configuration: configuration), endpoint)
            }
            // The server has stopped: every attempt is refused, the first 10 ms after the
            // loss, the second 16 ms after the first.
            let states = connection.states
            let waiting = try await firstElement(of: states.filter { $0.phase == .reconnecting })
            #expect(waiting?.attempt == 1)
            #expect(waiting?.delay == .milliseconds(10))
            await network.advance(by: .milliseconds(26) - .nanoseconds(1))
            let second = await connection.currentState
            #expect(second.phase == .reconnecting)
            #expect(second.attempt == 2)
            #expect(second.delay == .milliseconds(16))
            await network.advance(by: .nanoseconds(1))
            let last = try await withTimeLimit(testBound) {
                var last: ConnectionState?
                for await state in states { last = state }
                return last
            }
            #expect(last?.phase == .failed)
            #expect(last?.reason?.code == .connectionRefused)
            #expect(last?.reason?.message.hasPrefix("gave up on \(endpoint) after 2 reconnect attempts: ") == true)
            #expect(bannerText(for: last!)?.hasPrefix("Offline: gave up on") == true)
            #expect(await connection.metrics.reconnectAttempts == 2)
        }
    }

    @Test("the banner follows the states, and the status ends offline when the connection closes")
    func status() async throws {
        let lost = TetherError(code: .peerClosed, message: "peer 127.0.0.1:9000 closed the connection")
        #expect(bannerText(for: .connected(to: Endpoint(host: "127.0.0.1", port: 9000))) == nil)
        #expect(bannerText(for: .connecting) == "Connecting…")
        #expect(bannerText(for: .reconnecting(attempt: 2, after: .seconds(2), reason: lost)) == "Connection lost. Reconnecting (attempt 2)…")
        #expect(bannerText(for: .failed(lost)) == "Offline: peer 127.0.0.1:9000 closed the connection")
        try await withNetworkConnection(handlers: { _ in }) { _, _, connection in
            let status = await ConnectionStatus()
            await connection.close()
            try await withTimeLimit(testBound) { await status.follow(connection) }
            #expect(await status.isOnline == false)
            #expect(await status.banner == nil)
        }
    }
}

/// The phases a connection goes through, from its current one until it is connected again.
private func phasesUntilConnectedAgain(_ states: Subscription<ConnectionState>) async throws -> [ConnectionState.Phase] {
    try await withTimeLimit(testBound) {
        var phases: [ConnectionState.Phase] = []
        for await state in states {
            phases.append(state.phase)
            if phases.count > 1, state.phase == .connected { break }
        }
        return phases
    }
}
