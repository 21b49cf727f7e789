import Synchronization
import Testing
@testable import Tether

/// A server's graceful drain over real loopback sockets: handlers in flight finish and are
/// answered, clients leave as planned for another server, new connections are refused, and
/// what outlives the deadline is cancelled and answered with an error that says so.
@Suite("Server drain", .timeLimit(.guarded))
struct DrainTests {
    /// Handlers for a drain: 0x402 echoes with the server's name, 0x405 waits at `gate`
    /// (saying on `started` that it runs), then echoes; 0x404 runs until cancelled.
    static func handlers(_ server: Server, name: String, gate: HandlerGate, started: AsyncStream<Void>.Continuation? = nil) {
        server.handle(type: 0x402) { request, _ in
            Response(json: ["server": .string(name), "echo": request.json ?? nil])
        }
        server.handle(type: 0x405) { request, _ in
            started?.yield()
            await gate.pass()
            return Response(json: ["server": .string(name), "echo": request.json ?? nil])
        }
        server.handle(type: 0x404) { _, _ in
            started?.yield()
            try await untilCancelledByServer()
            return Response()
        }
    }

    /// Awaits the drain notice among a connection's inbound frames.
    static func notice(in frames: Subscription<Frame>) async throws -> Frame {
        try await collect(1, from: frames.filter { $0.type == 0x1 && !$0.payload.isEmpty }, "the drain notice")[0]
    }

    @Test("a handler in flight when the drain begins finishes, and its response reaches the client; new connections are refused meanwhile; run() returns")
    func handlerFinishesDuringDrain() async throws {
        let gate = HandlerGate(open: false)
        let (started, starting) = AsyncStream<Void>.makeStream()
        var configuration = ServerConfiguration(port: 0)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        configuration.drain.deadline = .seconds(30)
        let server = Server(configuration: configuration)
        Self.handlers(server, name: "a", gate: gate, started: starting)
        let running = Task { try await server.run() }
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        let endpoint = Endpoint(host: address.ipAddress, port: address.port)
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        let frames = connection.frames
        let reply = Task { try await connection.request(Request(type: 0x405, json: ["n": 1])) }
        _ = try await collect(1, from: started, "the handler to start")
        let drained = Task { await server.drain() }
        let notice = try await Self.notice(in: frames)
        #expect(DrainNotice(notice) == DrainNotice(reconnectAfter: .zero, message: "the server is shutting down: finish, then reconnect"))
        // The listener has closed before the notice went out: a new connection is refused.
        var refusing = testConfiguration()
        refusing.reconnect.appliesToFirstConnect = false
        let refusal = await #expect(throws: TetherError.self) {
            try await Connection.connect(to: endpoint, configuration: refusing)
        }
        #expect(refusal?.code == .connectionRefused)
        #expect(server.peerCount == 1)
        gate.open()
        let response = try await bounded("the response") { try await reply.value }
        #expect(response.json == ["server": "a", "echo": ["n": 1]])
        try await bounded("drain() to return") { await drained.value }
        try await bounded("run() to return") { try await running.value }
        // Reconnecting is off in the test configuration: the planned reconnect ends it.
        let final = try await finalState(of: connection)
        #expect(final.phase == .closed)
        #expect(final.reason?.message == "\(address) is draining: the server is shutting down: finish, then reconnect")
        let metrics = await connection.metrics
        #expect(metrics.requestsFailed == 0)
        #expect(metrics.reconnectAttempts == 0)
    }

    @Test("a client leaves a draining server for its alternate endpoint: connecting, connected, no attempt counted; a request made meanwhile goes to the next server")
    func clientMovesToSecondServer() async throws {
        let gate = HandlerGate(open: false)
        let (started, starting) = AsyncStream<Void>.makeStream()
        try await withServer(handlers: { Self.handlers($0, name: "b", gate: HandlerGate()) }) { _, second in
            var configuration = ServerConfiguration(port: 0)
            configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
            configuration.drain = DrainConfiguration(deadline: .seconds(30))
            let first = Server(configuration: configuration)
            Self.handlers(first, name: "a", gate: gate, started: starting)
            let running = Task { try await first.run() }
            let address = try await bounded("the first server to listen") { try await first.listeningAddress() }
            let connection = Connection(to: Endpoint(host: address.ipAddress, port: address.port), configuration: testConfiguration {
                $0.reconnect = .backoff(initialDelay: .seconds(5), maximumAttempts: 3)
                $0.alternateEndpoints = [second]
            })
            let states = connection.states
            let frames = connection.frames
            try await connection.connect()
            let inFlight = Task { try await connection.request(Request(type: 0x405, json: ["n": 1])) }
            _ = try await collect(1, from: started, "the handler to start")
            let drained = Task { await first.drain() }
            _ = try await Self.notice(in: frames)
            // Made after the notice: it waits for the next connection.
            let later = Task { try await connection.request(Request(type: 0x402, json: ["n": 2])) }
            try await bounded("the request to be queued") {
                while await connection.metrics.queuedRequests != 1 { await Task.yield() }
            }
            #expect(await connection.metrics.inFlightRequests == 1)
            gate.open()
            #expect(try await bounded("the first response") { try await inFlight.value }.json == ["server": "a", "echo": ["n": 1]])
            #expect(try await bounded("the later response") { try await later.value }.json == ["server": "b", "echo": ["n": 2]])
            let seen = try await collect(5, from: states, "the states")
            #expect(seen == [.idle, .connecting, .connected(to: connection.endpoint), .connecting, .connected(to: second)])
            #expect(await connection.currentEndpoint == second)
            let metrics = await connection.metrics
            #expect(metrics.reconnectAttempts == 0)
            #expect(metrics.connects == 2)
            #expect(metrics.requestsFailed == 0)
            try await bounded("drain() to return") { await drained.value }
            try await bounded("run() to return") { try await running.value }
            await connection.close()
        }
    }

    @Test("a handler still running at the deadline is cancelled, and its client gets an error response that names the deadline; the server closes")
    func handlerOutlivesDeadline() async throws {
        let (started, starting) = AsyncStream<Void>.makeStream()
        var configuration = ServerConfiguration(port: 0)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        configuration.drain.deadline = .milliseconds(300)
        let server = Server(configuration: configuration)
        Self.handlers(server, name: "a", gate: HandlerGate(), started: starting)
        let events = server.events
        let running = Task { try await server.run() }
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        let connection = try await Connection.connect(to: Endpoint(host: address.ipAddress, port: address.port), configuration: testConfiguration())
        let reply = Task { try await connection.request(Request(type: 0x404, json: ["n": 1])) }
        _ = try await collect(1, from: started, "the handler to start")
        try await bounded("drain() to return") { await server.drain() }
        let response = try await bounded("the response") { try await reply.value }
        #expect(response.errorMessage == "the server shut down before answering request 0x404: it was still being handled at the 300 ms drain deadline")
        try await bounded("run() to return") { try await running.value }
        let gone = try await firstEvent(events, "the peer to end") { $0.kind == .peerDisconnected }
        #expect(gone.reason?.message == "the server drained and closed the connection with \(gone.address) at its 300 ms drain deadline")
        #expect(gone.reason?.code == .serverDraining)
        #expect(try await finalState(of: connection).phase == .closed)
    }

    @Test("every built-in profile with a heartbeat carries the notice: an idle client leaves at once, and the drain ends long before its deadline", arguments: [Profile.seed, .seedExtended, .compact])
    func noticeInProfile(_ profile: Profile) async throws {
        var configuration = ServerConfiguration(port: 0, profile: profile)
        // Far beyond what the drain takes on any machine: the final state shows it ended by
        // the client leaving, not by the deadline.
        configuration.drain.deadline = eventBound
        // The idle client sends nothing: a busy machine may begin the drain after the
        // default 10 s handshake timeout, which this test does not time.
        configuration.handshakeTimeout = nil
        let server = Server(configuration: configuration)
        let running = Task { try await server.run() }
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        let connection = try await Connection.connect(to: Endpoint(host: address.ipAddress, port: address.port), configuration: testConfiguration {
            $0.profile = profile
        })
        try await bounded("drain() to return") { await server.drain() }
        try await bounded("run() to return") { try await running.value }
        let final = try await finalState(of: connection)
        #expect(final == .closed(TetherError(code: .serverDraining, message: "\(address) is draining: the server is shutting down: finish, then reconnect")))
    }

    @Test("the WebSocket port stops accepting too: a ws:// client is refused during the drain")
    func webSocketPortCloses() async throws {
        let gate = HandlerGate(open: false)
        let (started, starting) = AsyncStream<Void>.makeStream()
        var configuration = ServerConfiguration(port: 0)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        configuration.webSocket = WebSocketServerConfiguration(port: 0, path: "/tether")
        let server = Server(configuration: configuration)
        Self.handlers(server, name: "a", gate: gate, started: starting)
        let running = Task { try await server.run() }
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        let webSocket = try await server.webSocketAddress()
        let connection = try await Connection.connect(to: Endpoint(host: address.ipAddress, port: address.port), configuration: testConfiguration())
        let frames = connection.frames
        let reply = Task { try await connection.request(Request(type: 0x405, json: ["n": 1])) }
        _ = try await collect(1, from: started, "the handler to start")
        let drained = Task { await server.drain() }
        _ = try await Self.notice(in: frames)
        var refusing = testConfiguration()
        refusing.reconnect.appliesToFirstConnect = false
        let refusal = await #expect(throws: TetherError.self) {
            try await Connection.connect(to: Endpoint(host: webSocket.ipAddress, port: webSocket.port, webSocketPath: "/tether"), configuration: refusing)
        }
        #expect(refusal?.code == .connectionRefused)
        gate.open()
        #expect(try await bounded("the response") { try await reply.value }.json == ["server": "a", "echo": ["n": 1]])
        try await bounded("drain() to return") { await drained.value }
        try await bounded("run() to return") { try await running.value }
    }

    @Test("a client whose profile carries no notice (lines) is closed once its request is answered, and the drain ends without waiting for the deadline")
    func profileWithoutNotice() async throws {
        #expect(DrainNotice.carried(by: .seed))
        #expect(DrainNotice.carried(by: .seedExtended))
        #expect(DrainNotice.carried(by: .compact))
        #expect(!DrainNotice.carried(by: .marker))
        #expect(!DrainNotice.carried(by: .lines))
        #expect(!DrainNotice.carried(by: try Profile.lines(delimiter: [0x0A], heartbeatLine: Array("PING".utf8))))
        let gate = HandlerGate(open: false)
        let (started, starting) = AsyncStream<Void>.makeStream()
        var configuration = ServerConfiguration(port: 0, profile: .lines)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        configuration.drain.deadline = .seconds(30)
        let server = Server(configuration: configuration)
        server.handle(type: 0x401) { request, _ in
            starting.yield()
            await gate.pass()
            return Response(payload: Array("echo: ".utf8) + request.payload)
        }
        let running = Task { try await server.run() }
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        let socket = try RawSocket.connect(to: Endpoint(host: address.ipAddress, port: address.port))
        try socket.write(Array("hello\r\n".utf8))
        _ = try await collect(1, from: started, "the handler to start")
        let drained = Task { await server.drain() }
        gate.open()
        #expect(try await offThread { try socket.read(13) } == Array("echo: hello\r\n".utf8))
        #expect(try await socket.waitForClose())
        try await bounded("drain() to return") { await drained.value }
        try await bounded("run() to return") { try await running.value }
    }
}
