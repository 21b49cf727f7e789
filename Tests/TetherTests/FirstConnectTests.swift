import Testing
@testable import Tether
import TetherTesting

@Suite("The first connect and the states it publishes", .timeLimit(.minutes(1)))
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
        let host = try TestServer(handlers: echoHandlers)
        var configuration = testConfiguration()
        configuration.reconnect = .backoff(initialDelay: .milliseconds(20), multiplier: 1, jitter: 0)
        let connection = Connection(to: host.endpoint, configuration: configuration)
        let watcher = StateWatcher(connection)
        let connecting = Task { try await connection.connect() }
        let second = try await watcher.next("attempt 2") { $0.attempt == 2 }
        #expect(second.reason?.code == .connectionRefused)
        #expect(second.delay == .milliseconds(20))
        try await host.start()
        try await bounded("connect() to return") { try await connecting.value }
        let reply = try await connection.request(Request(type: 0x402, json: ["n": 1]))
        #expect(reply.json == ["echo": ["n": 1]])
        let seen = await watcher.seen
        #expect(Array(seen.map(\.phase.description).prefix(5)) == ["idle", "connecting", "reconnecting", "connecting", "reconnecting"])
        #expect(seen.compactMap(\.attempt) == Array(1...seen.compactMap(\.attempt).count))
        #expect(await connection.currentState.phase == .connected)
        #expect(await connection.metrics.connects == 1)
        await connection.close()
        await host.stop()
    }

    @Test("the first connect spends the same budget: down for good, connect() throws after the last attempt, failed")
    func firstConnectGivesUp() async throws {
        let (closed, endpoint) = try RawSocket.bindOnly()
        defer { closed.close() }
        let connection = Connection(to: endpoint, configuration: reconnecting(after: .milliseconds(10), attempts: 2))
        let watcher = StateWatcher(connection)
        let error = await #expect(throws: TetherError.self) { try await connection.connect() }
        #expect(error?.code == .connectionRefused)
        #expect(error?.message == "gave up on \(endpoint) after 2 reconnect attempts: connection refused by \(endpoint.host):\(endpoint.port)")
        try await watcher.next(.failed)
        #expect(await watcher.seen.map(\.phase.description) == ["idle", "connecting", "reconnecting", "connecting", "reconnecting", "connecting", "failed"])
        #expect(await watcher.seen.compactMap(\.attempt) == [1, 2])
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
