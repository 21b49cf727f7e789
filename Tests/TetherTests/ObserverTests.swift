import Synchronization
import Testing
@testable import Tether

/// Records what it observes as lines, in order: requests and handlers in ``requests``,
/// states, session and server events in ``events``. Each start returns a span number that
/// its end must get back.
final class RecordingObserver: TetherObserver {
    typealias RequestSpan = Int

    private let recorded = Mutex<(requests: [String], events: [String], spans: Int, durations: [Duration])>(([], [], 0, []))
    /// Yields once per line recorded, for waits.
    private let changes: AsyncStream<Void>
    private let changed: AsyncStream<Void>.Continuation

    init() {
        (changes, changed) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Waits, within the bound, until `count` request lines are recorded, and returns them.
    func waitForRequests(_ count: Int) async throws -> [String] {
        try await bounded("\(count) observed request lines") { [self] in
            if requests.count < count {
                for await _ in changes where requests.count >= count { break }
            }
            return requests
        }
    }

    /// Waits, within the bound, until `count` event lines are recorded, and returns them.
    func waitForEvents(_ count: Int) async throws -> [String] {
        try await bounded("\(count) observed events") { [self] in
            if events.count < count {
                for await _ in changes where events.count >= count { break }
            }
            return events
        }
    }

    var requests: [String] { recorded.withLock { $0.requests } }
    var events: [String] { recorded.withLock { $0.events } }
    /// The durations of the ends, in order.
    var durations: [Duration] { recorded.withLock { $0.durations } }

    private func start(_ line: String) -> Int {
        recorded.withLock { state in
            state.spans += 1
            state.requests.append("\(line) span \(state.spans)")
            changed.yield()
            return state.spans
        }
    }

    private func end(_ line: String, _ duration: Duration) {
        recorded.withLock { state in
            state.requests.append(line)
            state.durations.append(duration)
            changed.yield()
        }
    }

    private func event(_ line: String) {
        recorded.withLock { state in
            state.events.append(line)
            changed.yield()
        }
    }

    static func describe(_ outcome: RequestOutcome) -> String {
        var parts: [String] = []
        if let response = outcome.response {
            parts.append("response \(hex(response.type)) serial \(response.serial) \(response.text)")
        }
        if let error = outcome.error as? TetherError {
            parts.append("\(error.code): \(error.message)")
        } else if let error = outcome.error {
            parts.append("\(type(of: error))")
        }
        return parts.joined(separator: ", ") + (outcome.failed ? " (failed)" : "")
    }

    func requestStarted(_ request: ObservedRequest) -> Int {
        start("start \(hex(request.type)) serial \(request.serial) \(request.payloadSize) bytes to \(request.endpoint.map { "\($0)" } ?? "?")")
    }

    func requestEnded(_ request: ObservedRequest, outcome: RequestOutcome, span: Int) {
        end("end \(hex(request.type)) serial \(request.serial) span \(span): \(Self.describe(outcome))", outcome.duration)
    }

    func handlerStarted(_ request: ObservedRequest, peer: PeerID) -> Int {
        start("handler \(hex(request.type)) serial \(request.serial) \(request.payloadSize) bytes from \(peer)")
    }

    func handlerEnded(_ request: ObservedRequest, peer: PeerID, outcome: RequestOutcome, span: Int) {
        end("handled \(hex(request.type)) serial \(request.serial) from \(peer) span \(span): \(Self.describe(outcome))", outcome.duration)
    }

    func connectionStateChanged(_ state: ConnectionState, of endpoint: Endpoint) {
        event("state \(state.phase)")
    }

    func sessionEvent(_ event: SessionEvent, of endpoint: Endpoint) {
        self.event("session \(event.kind)")
    }

    func serverEvent(_ event: ServerEvent) {
        self.event("server \(event.kind)")
    }
}

@Suite("Observers of connections and servers", .timeLimit(.guarded))
struct ObserverTests {
    @Test("a request that succeeds: the client sees its start and its response with serial 1, the server its handler, each span handed back")
    func success() async throws {
        let client = RecordingObserver()
        let server = RecordingObserver()
        try await withServer(configure: { $0.observer = server }, handlers: echoHandlers) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: testConfiguration { $0.observer = client }) { connection in
                let reply = try await connection.request(Request(type: 0x402, json: ["n": 1]))
                #expect(reply.text == #"{"echo":{"n":1}}"#)
                #expect(client.requests == [
                    "start 0x402 serial 0 7 bytes to \(endpoint) span 1",
                    #"end 0x402 serial 1 span 1: response 0x402 serial 1 {"echo":{"n":1}}"#,
                ])
                // The server's observer heard of the end before the response was written.
                #expect(server.requests == [
                    "handler 0x402 serial 1 7 bytes from peer#1 span 1",
                    #"handled 0x402 serial 1 from peer#1 span 1: response 0x402 serial 1 {"echo":{"n":1}}"#,
                ])
            }
        }
        #expect(client.events == ["state connecting", "state connected", "state closed"])
        // The client closed first: the peer's end is published before the server stops.
        #expect(server.events == ["server listening", "server peerConnected", "server peerDisconnected"])
    }

    @Test("a request that times out: its end has timedOut and its serial, after at least its timeout; the handler is cancelled as the client leaves")
    func timeout() async throws {
        let client = RecordingObserver()
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: testConfiguration { $0.observer = client }) { connection in
                await #expect(throws: TetherError.self) { try await connection.request(Request(type: 0x404), timeout: .milliseconds(100)) }
                #expect(client.requests == [
                    "start 0x404 serial 0 0 bytes to \(endpoint) span 1",
                    "end 0x404 serial 1 span 1: timedOut: request 0x404 serial 1 timed out after 100 ms (failed)",
                ])
                #expect(client.durations.count == 1)
                #expect(client.durations[0] >= .milliseconds(100))
            }
        }
    }

    @Test("a request answered with an error: the client's end has the error response and counts as failed; the server's end has the thrown error and that response", arguments: [false, true])
    func errorResponse(immediate: Bool) async throws {
        let client = RecordingObserver()
        let server = RecordingObserver()
        try await withServer(configure: { $0.observer = server }, handlers: { server in
            if immediate {
                let immediate: Server.ImmediateHandler = { _, _ in throw TetherError(code: .invalidArgument, message: "no such user") }
                server.handle(type: 0x408, immediate)
            } else {
                let suspending: Server.Handler = { _, _ in throw TetherError(code: .invalidArgument, message: "no such user") }
                server.handle(type: 0x408, suspending)
            }
        }) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: testConfiguration { $0.observer = client }) { connection in
                let reply = try await connection.request(Request(type: 0x408, payload: Array("42".utf8)))
                #expect(reply.errorMessage == "no such user")
                #expect(client.requests == [
                    "start 0x408 serial 0 2 bytes to \(endpoint) span 1",
                    #"end 0x408 serial 1 span 1: response 0x408 serial 1 {"error":"no such user"} (failed)"#,
                ])
                #expect(server.requests == [
                    "handler 0x408 serial 1 2 bytes from peer#1 span 1",
                    #"handled 0x408 serial 1 from peer#1 span 1: response 0x408 serial 1 {"error":"no such user"}, invalidArgument: no such user (failed)"#,
                ])
            }
        }
    }

    @Test("a handler still running when its peer leaves ends with CancellationError and no response")
    func cancelledHandler() async throws {
        let server = RecordingObserver()
        try await withServer(configure: { $0.observer = server }, handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            await #expect(throws: TetherError.self) { try await connection.request(Request(type: 0x404), timeout: .milliseconds(50)) }
            await connection.close()
            #expect(try await server.waitForRequests(2) == [
                "handler 0x404 serial 1 0 bytes from peer#1 span 1",
                "handled 0x404 serial 1 from peer#1 span 1: CancellationError (failed)",
            ])
        }
    }

    @Test("a pipeline: every start in order, then every end with its own serial")
    func pipeline() async throws {
        let client = RecordingObserver()
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: testConfiguration { $0.observer = client }) { connection in
                let outcomes = await connection.pipeline([Request(type: 0x402, json: 1), Request(type: 0x402, json: 2)])
                #expect(outcomes.count == 2)
                #expect(client.requests == [
                    "start 0x402 serial 0 1 bytes to \(endpoint) span 1",
                    "start 0x402 serial 0 1 bytes to \(endpoint) span 2",
                    #"end 0x402 serial 1 span 1: response 0x402 serial 1 {"echo":1}"#,
                    #"end 0x402 serial 2 span 2: response 0x402 serial 2 {"echo":2}"#,
                ])
            }
        }
    }

    @Test("state changes across a reconnect are observed in the order the states sequence yields them")
    func reconnectStates() async throws {
        let client = RecordingObserver()
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .milliseconds(20)) { $0.observer = client })
            let states = connection.states
            // The peer closes: the client reconnects once.
            let connected = try await firstEvent(events, "the peer to connect") { $0.kind == .peerConnected }
            let peer = try #require(server.peers.first { $0.id == connected.peer })
            await peer.close()
            let seen = try await bounded("the reconnect") {
                var seen: [String] = []
                for await state in states {
                    seen.append("state \(state.phase)")
                    if seen.count > 2 && state.phase == .connected { break }
                }
                return seen
            }
            await connection.close()
            #expect(seen == ["state connected", "state reconnecting", "state connecting", "state connected"])
            #expect(client.events == ["state connecting", "state connected", "state reconnecting", "state connecting", "state connected", "state closed"])
        }
    }

    @Test("session events are observed as the session reports them")
    func sessionEvents() async throws {
        let client = RecordingObserver()
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("olga") { $0.observer = client })
            await connection.close()
        }
        // The welcome's event comes before the state that lets connect() return.
        #expect(client.events == ["state connecting", "session resumed", "state connected", "state closed"])
    }

    @Test("nothing is observed without an observer: the default is none, and one set on another connection hears only its own")
    func unset() async throws {
        #expect(ConnectionConfiguration().observer == nil)
        #expect(ServerConfiguration().observer == nil)
        let other = RecordingObserver()
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let observed = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.observer = other })
            try await Connection.withConnection(to: endpoint, configuration: testConfiguration()) { connection in
                _ = try await connection.request(Request(type: 0x402))
                _ = await connection.pipeline([Request(type: 0x402)])
            }
            #expect(other.requests.isEmpty)
            #expect(other.events == ["state connecting", "state connected"])
            await observed.close()
        }
    }
}
