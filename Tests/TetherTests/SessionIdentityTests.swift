import Synchronization
import Testing
import TetherTesting
@testable import Tether

/// What a provider was asked, in order, with a signal per call for the test to await.
final class ProviderLog: Sendable {
    private let contexts = Lock<[SessionIdentityContext]>([])
    private let feed: AsyncStream<Int>.Continuation
    /// The number of each call, as it is made.
    let calls: AsyncStream<Int>

    init() {
        (calls, feed) = AsyncStream.makeStream(of: Int.self)
    }

    /// Records `context`; returns the call's number, from 1.
    func record(_ context: SessionIdentityContext) -> Int {
        let number = contexts.withLock { contexts in
            contexts.append(context)
            return contexts.count
        }
        feed.yield(number)
        return number
    }

    var asked: [SessionIdentityContext] { contexts.withLock { $0 } }
}

/// The hellos a server's check saw: client id and token.
final class HelloLog: Sendable {
    private let hellos = Lock<[String]>([])

    func record(_ hello: ClientHello) {
        hellos.withLock { $0.append("\(hello.clientID) \(hello.token ?? "-")") }
    }

    var seen: [String] { hellos.withLock { $0 } }
}

/// A session configuration whose identity comes from `provider`.
func providedSession(
    _ provider: SessionIdentityProvider,
    _ change: (inout ConnectionConfiguration) -> Void = { _ in }
) -> ConnectionConfiguration {
    testConfiguration {
        $0.session = SessionConfiguration(identity: provider)
        change(&$0)
    }
}

@Suite("Session identities", .timeLimit(.guarded))
struct SessionIdentityTests {
    @Test("the provider is asked before each hello: connect, then reconnect after a cut, and the server sees each token it gave")
    func askedBeforeEachHello() async throws {
        let hellos = HelloLog()
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: { server in
            echoHandlers(server)
            server.authenticate { hellos.record($0) }
        }) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let log = ProviderLog()
                let provider = SessionIdentityProvider { context in
                    SessionIdentity(clientID: "alice", token: "token-\(log.record(context))")
                }
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: providedSession(provider) {
                    $0.reconnect = .backoff(initialDelay: .milliseconds(20), jitter: 0)
                })
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                proxy.cutAll()
                try await watcher.next(.reconnecting)
                try await watcher.next(.connected)
                #expect(log.asked == [
                    SessionIdentityContext(reason: .connect, attempt: 0, endpoint: proxy.endpoint),
                    SessionIdentityContext(reason: .reconnect, previous: SessionIdentity(clientID: "alice", token: "token-1"), attempt: 1, endpoint: proxy.endpoint),
                ])
                #expect(hellos.seen == ["alice token-1", "alice token-2"])
                #expect(proxy.counters.accepted == 2)
                await connection.close()
            }
        }
    }

    @Test("an expired token rejected: the provider is asked once more with the server's reason, and the connection comes up with the fresh token at once")
    func rejectedThenFresh() async throws {
        let hellos = HelloLog()
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: { server in
            echoHandlers(server)
            server.authenticate { hello in
                hellos.record(hello)
                guard hello.token == "fresh" else { throw TetherError(code: .sessionRejected, message: "token expired") }
            }
        }) { server, endpoint in
            let log = ProviderLog()
            let provider = SessionIdentityProvider { context in
                _ = log.record(context)
                return SessionIdentity(clientID: "alice", token: context.reason == .rejected ? "fresh" : "expired")
            }
            // Reconnecting is off: the retry a rejection prompts is not a reconnect.
            let connection = Connection(to: endpoint, configuration: providedSession(provider))
            let watcher = StateWatcher(connection)
            try await connection.connect()
            try await watcher.next(.connected)
            #expect(await watcher.phases == [.idle, .connecting, .connected])
            #expect(log.asked == [
                SessionIdentityContext(reason: .connect, attempt: 0, endpoint: endpoint),
                SessionIdentityContext(
                    reason: .rejected,
                    rejection: TetherError(
                        code: .sessionRejected,
                        message: "\(endpoint.host):\(endpoint.port) rejected the session of client alice: token expired"
                    ),
                    rejectionReason: "token expired",
                    previous: SessionIdentity(clientID: "alice", token: "expired"),
                    attempt: 0,
                    endpoint: endpoint
                ),
            ])
            #expect(hellos.seen == ["alice expired", "alice fresh"])
            let metrics = await server.metrics()
            #expect(metrics.sessionsRejected == 1)
            #expect(await connection.metrics.connects == 1)
            let reply = try await connection.request(Request(type: 0x402, json: ["n": 1]))
            #expect(reply.json == ["echo": ["n": 1]])
            await connection.close()
        }
    }

    @Test("rejected twice in a row: connect throws sessionRejected after exactly two asks and two hellos, and the connection has failed")
    func rejectedTwice() async throws {
        let hellos = HelloLog()
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: { server in
            echoHandlers(server)
            server.authenticate { hello in
                hellos.record(hello)
                throw TetherError(code: .sessionRejected, message: "account closed")
            }
        }) { server, endpoint in
            let log = ProviderLog()
            let provider = SessionIdentityProvider { context in
                SessionIdentity(clientID: "alice", token: "t\(log.record(context))")
            }
            let connection = Connection(to: endpoint, configuration: providedSession(provider) {
                $0.reconnect = .backoff(initialDelay: .milliseconds(20), jitter: 0)
            })
            let watcher = StateWatcher(connection)
            let error = await #expect(throws: TetherError.self) { try await connection.connect() }
            #expect(error?.code == .sessionRejected)
            #expect(error?.message == "\(endpoint.host):\(endpoint.port) rejected the session of client alice: account closed")
            let failed = try await watcher.next(.failed)
            #expect(failed.reason == error)
            #expect(await watcher.phases == [.idle, .connecting, .failed])
            #expect(log.asked.map(\.reason) == [.connect, .rejected])
            #expect(hellos.seen == ["alice t1", "alice t2"])
            #expect(await server.metrics().sessionsRejected == 2)
        }
    }

    @Test("a provider that throws fails that attempt with identityUnavailable, naming the provider; the next attempt asks again and connects; with retries off connect throws it")
    func providerThrows() async throws {
        let offline = TetherError(code: .connectFailed, message: "the token service is offline")
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { _, endpoint in
            let log = ProviderLog()
            let provider = SessionIdentityProvider { context in
                if log.record(context) == 1 { throw offline }
                return SessionIdentity(clientID: "alice")
            }
            let connection = Connection(to: endpoint, configuration: providedSession(provider) {
                $0.reconnect = .backoff(initialDelay: .milliseconds(20), jitter: 0)
            })
            let watcher = StateWatcher(connection)
            try await connection.connect()
            try await watcher.next(.connected)
            let retry = try #require(await watcher.seen.first { $0.phase == .reconnecting })
            let reason = try #require(retry.reason)
            #expect(reason.code == .identityUnavailable)
            #expect(reason.message == "the session identity provider failed (connect, greeting \(endpoint)): the token service is offline")
            #expect((reason.underlying as? TetherError) == offline)
            #expect(await watcher.phases == [.idle, .connecting, .reconnecting, .connecting, .connected])
            #expect(log.asked.map(\.reason) == [.connect, .connect])
            #expect(log.asked.map(\.attempt) == [0, 1])
            await connection.close()

            let never = SessionIdentityProvider { _ in throw offline }
            let once = Connection(to: endpoint, configuration: providedSession(never))
            let error = await #expect(throws: TetherError.self) { try await once.connect() }
            #expect(error?.code == .identityUnavailable)
            #expect(try await finalState(of: once).phase == .closed)
        }
    }

    @Test("a provider slower than the hello timeout fails that attempt with timedOut; its late answer is dropped, and the next attempt's is sent")
    func providerTimesOut() async throws {
        let hellos = HelloLog()
        let gate = Lock<CheckedContinuation<Void, Never>?>(nil)
        let (atGate, arrived) = AsyncStream.makeStream(of: Void.self)
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.mailboxes = .inMemory }, handlers: { server in
                echoHandlers(server)
                server.authenticate { hellos.record($0) }
            }) { _, endpoint in
                let log = ProviderLog()
                let provider = SessionIdentityProvider { context in
                    let number = log.record(context)
                    if number == 1 {
                        // Answers only once the test opens the gate, long after its attempt failed.
                        await withCheckedContinuation { continuation in
                            gate.withLock { $0 = continuation }
                            arrived.yield()
                        }
                        return SessionIdentity(clientID: "alice", token: "late")
                    }
                    return SessionIdentity(clientID: "alice", token: "second")
                }
                let connection = Connection(to: endpoint, configuration: providedSession(provider) {
                    $0.use(network)
                    $0.session?.helloTimeout = .seconds(2)
                    $0.reconnect = .backoff(initialDelay: .seconds(1), jitter: 0)
                })
                let watcher = StateWatcher(connection)
                let connecting = Task { try await connection.connect() }
                _ = try await collect(1, from: atGate, "the first ask to wait at its gate")
                await network.advance(by: .seconds(2))
                let failed = try await watcher.next(.reconnecting)
                #expect(failed.reason == TetherError(code: .timedOut, message: "the session identity provider did not answer within 2 s (greeting \(endpoint))"))
                // The late answer comes while the connection waits out its backoff.
                gate.withLock { $0 }?.resume()
                await network.advance(by: try #require(failed.delay))
                try await bounded("connect() to return") { try await connecting.value }
                #expect(hellos.seen == ["alice second"])
                #expect(log.asked.map(\.reason) == [.connect, .connect])
                await connection.close()
            }
        }
    }
}
