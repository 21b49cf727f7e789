import Testing
import TetherTesting
@testable import Tether

@Suite("The first connect and the states it publishes", .timeLimit(.guarded))
struct FirstConnectTests {
    @Test("each transition is published once: idle before connect(), then connecting, then connected")
    func statesOnce() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = Connection(to: endpoint, configuration: testConfiguration())
            let watcher = StateWatcher(connection)
            #expect(await connection.currentState.phase.description == "idle")
            try await connection.connect()
            try await watcher.next(.connected)
            #expect(await watcher.seen.map(\.phase.description) == ["idle", "connecting", "connected"])
            await connection.close()
            try await watcher.next(.closed)
            #expect(await watcher.seen.map(\.phase.description) == ["idle", "connecting", "connected", "closed"])
        }
    }

    @Test("by default the first connect retries by the policy: a server down at start-up is reached once it is up")
    func firstConnectRetriesByDefault() async throws {
        #expect(ReconnectPolicy().appliesToFirstConnect)
        try await withTestNetwork { network in
            let endpoint = Endpoint(host: "server", port: 9000)
            var configuration = ConnectionConfiguration.testing(on: network)
            configuration.reconnect = .backoff(initialDelay: .milliseconds(20), multiplier: 1, jitter: 0)
            let connection = Connection(to: endpoint, configuration: configuration)
            let watcher = StateWatcher(connection)
            let connecting = Task { try await connection.connect() }
            let first = try await watcher.next("attempt 1") { $0.attempt == 1 }
            #expect(first.reason?.code == .connectionRefused)
            await network.advance(by: .milliseconds(20))
            let second = try await watcher.next("attempt 2") { $0.attempt == 2 }
            #expect(second.reason?.code == .connectionRefused)
            #expect(second.delay == .milliseconds(20))
            let server = Server(configuration: .testing(on: network))
            echoHandlers(server)
            try await whileRunning(server) {
                await network.advance(by: .milliseconds(20) - .nanoseconds(1))
                #expect(await connection.currentState.phase == .reconnecting)
                await network.advance(by: .nanoseconds(1))
                try await withTimeLimit { try await connecting.value }
                try await watcher.next(.connected)
                #expect(network.clock.elapsed == .milliseconds(40))
                let reply = try await connection.request(Request(type: 0x402, json: ["n": 1]))
                #expect(reply.json == ["echo": ["n": 1]])
                #expect(await watcher.seen.map(\.phase.description) == ["idle", "connecting", "reconnecting", "connecting", "reconnecting", "connecting", "connected"])
                #expect(await connection.metrics.connects == 1)
                await connection.close()
            }
        }
    }

    @Test("the first connect spends the same budget: down for good, connect() throws after the last attempt, failed")
    func firstConnectGivesUp() async throws {
        try await withTestNetwork { network in
            let endpoint = Endpoint(host: "server", port: 9000)
            let connection = Connection(to: endpoint, configuration: reconnecting(on: network, after: .milliseconds(10), attempts: 2))
            let watcher = StateWatcher(connection)
            let connecting = Task { try await connection.connect() }
            try await watcher.next("attempt 1") { $0.attempt == 1 }
            await network.advance(by: .milliseconds(10))
            try await watcher.next("attempt 2") { $0.attempt == 2 }
            await network.advance(by: .milliseconds(20) - .nanoseconds(1))
            #expect(await connection.currentState.phase == .reconnecting)
            await network.advance(by: .nanoseconds(1))
            let outcome = try await withTimeLimit { await connecting.result }
            let error = #expect(throws: TetherError.self) { try outcome.get() }
            #expect(error?.code == .connectionRefused)
            #expect(error?.message == "gave up on \(endpoint) after 2 reconnect attempts: connection to \(endpoint) refused: nothing listens there on the in-memory network")
            try await watcher.next(.failed)
            #expect(await watcher.seen.map(\.phase.description) == ["idle", "connecting", "reconnecting", "connecting", "reconnecting", "connecting", "failed"])
            #expect(await watcher.seen.compactMap(\.attempt) == [1, 2])
            #expect(network.clock.elapsed == .milliseconds(30))
        }
    }

    @Test("with appliesToFirstConnect off the first connect fails at once, and says so in the states")
    func failFast() async throws {
        let (closed, endpoint) = try RawSocket.bindOnly()
        defer { closed.close() }
        let connection = Connection(to: endpoint, configuration: reconnecting {
            $0.reconnect.appliesToFirstConnect = false
        })
        let watcher = StateWatcher(connection)
        let error = await #expect(throws: TetherError.self) { try await connection.connect() }
        #expect(error?.code == .connectionRefused)
        #expect(error?.message == "connection refused by \(endpoint.host):\(endpoint.port)")
        try await watcher.next(.closed)
        #expect(await watcher.seen.map(\.phase.description) == ["idle", "connecting", "closed"])
    }

    @Test("connect() on a connection closed before it ever connected throws at once, instead of waiting for a dial that never comes")
    func connectAfterClose() async throws {
        let endpoint = Endpoint(host: "127.0.0.1", port: 9)
        let connection = Connection(to: endpoint, configuration: testConfiguration())
        await connection.close()
        let error = await #expect(throws: TetherError.self) {
            try await bounded("connect() after close()") { try await connection.connect() }
        }
        #expect(error?.code == .connectionClosed)
        #expect(error?.message == "the connection to \(endpoint) was closed by close()")
        #expect(await connection.currentState.phase == .closed)
    }
}
