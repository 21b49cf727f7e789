import Synchronization
import Testing
import TetherTesting
@testable import Tether

/// A server that keeps a login per connection: 0x410 logs the peer in; 0x411 is refused
/// unless its peer is logged in. Every request is logged, in the order the server handles
/// them.
private final class LoginServer: Sendable {
    private let state = Mutex<(loggedIn: Set<PeerID>, log: [String])>(([], []))

    var log: [String] { state.withLock { $0.log } }

    func install(on server: Server) {
        server.handle(type: 0x410) { [self] request, peer in
            state.withLock { state in
                state.loggedIn.insert(peer.id)
                state.log.append("login \(request.text)")
            }
            return Response(text: "welcome")
        }
        server.handle(type: 0x411) { [self] request, peer in
            let allowed = state.withLock { state in
                state.log.append("post \(request.text)")
                return state.loggedIn.contains(peer.id)
            }
            return allowed ? Response(text: "posted \(request.text)") : .error("not logged in")
        }
    }
}

@Suite("The app's preparation of each connection", .timeLimit(.guarded))
struct PrepareTests {
    @Test("a login in prepare goes first on every connection: requests made while reconnecting wait behind it, and connected is published only after it")
    func loginBeforeQueuedRequests() async throws {
        let logins = LoginServer()
        let phases = Mutex<[ConnectionState.Phase]>([])
        try await withServer(handlers: logins.install) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: reconnecting(after: .milliseconds(100)) {
                    $0.prepare = { connection in
                        let phase = await connection.currentState.phase
                        phases.withLock { $0.append(phase) }
                        let answer = try await connection.request(Request(type: 0x410, text: "ada"))
                        #expect(answer.text == "welcome")
                    }
                })
                let watcher = StateWatcher(connection)
                try await watcher.next(.connected)
                #expect(try await connection.request(Request(type: 0x411, text: "1")).text == "posted 1")
                // The connection breaks; requests made meanwhile wait for the next one.
                proxy.cutAll()
                try await watcher.next(.reconnecting)
                let posts = (2...4).map { number in
                    Task { try await connection.request(Request(type: 0x411, text: "\(number)")).text }
                }
                try await watcher.next(.connecting)
                try await watcher.next(.connected)
                var answers: [String] = []
                for post in posts { answers.append(try await post.value) }
                #expect(Set(answers) == ["posted 2", "posted 3", "posted 4"])
                let log = logins.log
                #expect(log.prefix(3) == ["login ada", "post 1", "login ada"], "\(log)")
                #expect(Set(log.dropFirst(3)) == ["post 2", "post 3", "post 4"], "\(log)")
                #expect(await connection.metrics.connects == 2)
                // Each time it ran, the connection was still connecting.
                #expect(phases.withLock { $0 } == [.connecting, .connecting])
                await connection.close()
            }
        }
    }

    @Test("a preparation that throws fails the attempt with its error: connect() fails when the first connect is not retried, and retried attempts prepare again")
    func throwingPreparation() async throws {
        struct Refused: Error, CustomStringConvertible {
            var description: String { "the account is locked" }
        }
        let attempts = Mutex(0)
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let error = await #expect(throws: TetherError.self) {
                _ = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.reconnect.appliesToFirstConnect = false
                    $0.prepare = { _ in throw Refused() }
                })
            }
            #expect(error?.code == .connectFailed)
            #expect(error?.message == "the preparation of the connection to \(endpoint.host):\(endpoint.port) failed: the account is locked")

            let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .milliseconds(10)) {
                $0.prepare = { connection in
                    // Fails twice, then lets the connection be ready, after a request and a
                    // pipeline of its own.
                    let attempt = attempts.withLock { $0 += 1; return $0 }
                    if attempt < 3 { throw Refused() }
                    _ = try await connection.request(Request(type: 0x402, json: ["attempt": .int(attempt)]))
                    let answers = await connection.pipeline([Request(type: 0x402, json: ["n": 1]), Request(type: 0x402, json: ["n": 2])])
                    #expect(answers.map { (try? $0.get())?.json } == [["echo": ["n": 1]], ["echo": ["n": 2]]], "\(answers)")
                }
            })
            #expect(attempts.withLock { $0 } == 3)
            #expect(try await connection.request(Request(type: 0x402, json: ["after": true])).json == ["echo": ["after": true]])
            let metrics = await connection.metrics
            #expect(metrics.connects == 1)
            #expect(metrics.reconnectAttempts == 2)
            await connection.close()
        }
    }

    @Test("a preparation that hangs fails the attempt after prepareTimeout, and is cancelled")
    func hangingPreparation() async throws {
        let (cancelled, cancelling) = AsyncStream<Bool>.makeStream()
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let error = await #expect(throws: TetherError.self) {
                _ = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.reconnect.appliesToFirstConnect = false
                    $0.prepareTimeout = .milliseconds(200)
                    $0.prepare = { _ in
                        await untilCancelled()
                        cancelling.yield(Task.isCancelled)
                    }
                })
            }
            #expect(error?.code == .timedOut)
            #expect(error?.message == "the preparation of the connection to \(endpoint.host):\(endpoint.port) did not finish within 200 ms")
            let seen = try await collect(1, from: cancelled, "the preparation's cancellation")
            #expect(seen == [true])
        }
    }
}
