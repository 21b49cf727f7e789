import Testing
import TetherTesting
@testable import Tether

/// The server says why it closes a connection (``CloseNotice``): the codec of the notice,
/// and each reason over real loopback sockets, where the client's error carries the
/// server's code and message.
@Suite("Close notices", .timeLimit(.guarded))
struct CloseNoticeTests {
    // MARK: The notice

    @Test("a notice goes out as type 0xFFFFFFFF, serial 0, {\"closed\": code, \"error\": message}, and reads back as the client's error with the server's code and words")
    func roundTrip() throws {
        let reason = TetherError(code: .frameTimeout, message: "did not finish a frame within 30 s")
        let frame = CloseNotice(reason).frame
        #expect(frame.type == 0xFFFF_FFFF)
        #expect(frame.serial == 0)
        #expect(try JSONValue(parsing: frame.payload) == ["closed": "frameTimeout", "error": "did not finish a frame within 30 s"])
        let notice = try #require(CloseNotice(frame))
        #expect(notice.error(from: "127.0.0.1:9000") == TetherError(code: .frameTimeout, message: "127.0.0.1:9000 closed the connection: did not finish a frame within 30 s"))
    }

    @Test("an older server's refusal at its connection limit still reads; a code this version does not know reads as a reset that names it")
    func compatibility() throws {
        let old = Frame(type: 0xFFFF_FFFF, serial: 0, payload: Array(#"{"refused":"tooManyConnections","error":"the server is at its limit of 1 connection"}"#.utf8))
        #expect(try #require(CloseNotice(old)).error(from: "a:1") == TetherError(code: .tooManyConnections, message: "a:1 is at its connection limit and refused the connection: the server is at its limit of 1 connection"))
        #expect(CloseNotice(tooManyConnections: "full").frame.payload == Array(#"{"error":"full","refused":"tooManyConnections"}"#.utf8))
        let future = Frame(type: 0xFFFF_FFFF, serial: 0, payload: Array(#"{"closed":"moonPhase","error":"wrong moon"}"#.utf8))
        #expect(try #require(CloseNotice(future)).error(from: "a:1") == TetherError(code: .connectionReset, message: "a:1 closed the connection (moonPhase): wrong moon"))
        // A response with serial 0 or another type is no notice.
        #expect(CloseNotice(Frame(type: 0xFFFF_FFFF, serial: 3, payload: CloseNotice(TetherError(code: .idleTimeout, message: "x")).frame.payload)) == nil)
        #expect(CloseNotice(Frame(type: 0x402, serial: 0, payload: Array(#"{"closed":"idleTimeout","error":"x"}"#.utf8))) == nil)
    }

    @Test("the profiles that match responses by serial carry a notice; those that answer in order close without one")
    func profiles() throws {
        #expect(CloseNotice.carried(by: .seed))
        #expect(CloseNotice.carried(by: .seedExtended))
        #expect(!CloseNotice.carried(by: .compact))
        #expect(!CloseNotice.carried(by: .marker))
        #expect(!CloseNotice.carried(by: .lines))
        #expect(CloseNotice(TetherError(code: .idleTimeout, message: "x")).bytes(in: .compact) == nil)
    }

    // MARK: Over sockets

    /// Connects a client that sends nothing (no heartbeats, no reconnect) and returns the
    /// final state and the server's reason for the peer it closed.
    static func closedQuietClient(configure: @escaping (inout ServerConfiguration) -> Void) async throws -> (state: ConnectionState, serverReason: TetherError, server: String) {
        try await withServer(configure: configure, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let final = try await finalState(of: connection)
            let gone = try await firstEvent(events, "the peer to end") { $0.kind == .peerDisconnected }
            return (final, try #require(gone.reason), "\(endpoint.host):\(endpoint.port)")
        }
    }

    @Test("idle timeout: the client's error is the server's idleTimeout, with its words")
    func idleTimeout() async throws {
        let (state, reason, server) = try await Self.closedQuietClient { $0.idleTimeout = .milliseconds(200) }
        #expect(reason.code == .idleTimeout)
        #expect(state == .closed(TetherError(code: .idleTimeout, message: "\(server) closed the connection: \(reason.message)")))
        #expect(reason.message.hasSuffix("sent nothing for 200 ms"))
    }

    @Test("handshake timeout: a client that sends no first frame hears handshakeTimeout, with the server's words")
    func handshakeTimeout() async throws {
        let (state, reason, server) = try await Self.closedQuietClient { $0.handshakeTimeout = .milliseconds(200) }
        #expect(reason.code == .handshakeTimeout)
        #expect(state == .closed(TetherError(code: .handshakeTimeout, message: "\(server) closed the connection: \(reason.message)")))
        #expect(reason.message.hasSuffix("sent no complete frame within 200 ms of connecting"))
    }

    /// Writes `bytes` on a raw socket and returns the close notice the server answers with,
    /// once it has closed.
    static func notice(after bytes: [UInt8], configure: @escaping (inout ServerConfiguration) -> Void = { _ in }, handlers: (Server) -> Void = echoHandlers) async throws -> (notice: CloseNotice, server: Endpoint) {
        try await withServer(configure: configure, handlers: handlers) { _, endpoint in
            let socket = try RawSocket.connect(to: endpoint)
            defer { socket.close() }
            try socket.write(bytes)
            var frame = try #require(try await socket.readFrame())
            // Answers before the notice (a hello's refusal) are not what this looks for.
            while frame.type != CloseNotice.frameType { frame = try #require(try await socket.readFrame()) }
            #expect(try await socket.waitForClose())
            return (try #require(CloseNotice(frame)), endpoint)
        }
    }

    @Test("frame completion timeout: a frame started and not finished is answered with frameTimeout and the bytes received")
    func frameTimeout() async throws {
        // A header that announces 100 bytes, and 10 of them.
        let header: [UInt8] = [0, 0, 0x04, 0x02, 0, 0, 0, 1, 0, 0, 0, 100]
        let (notice, server) = try await Self.notice(after: header + Array(repeating: 0x41, count: 10)) { $0.frameCompletionTimeout = .milliseconds(200) }
        let error = notice.error(from: "\(server.host):\(server.port)")
        #expect(error.code == .frameTimeout)
        #expect(error.message.hasPrefix("\(server.host):\(server.port) closed the connection: peer "))
        #expect(error.message.hasSuffix("did not finish a frame within 200 ms of its first byte (22 bytes of it received)"))
    }

    @Test("a limit: a frame longer than the server's payload bound is answered with frameTooLarge")
    func frameTooLarge() async throws {
        let header: [UInt8] = [0, 0, 0x04, 0x02, 0, 0, 0, 1, 0, 0, 0x10, 0]
        let (notice, _) = try await Self.notice(after: header) { $0.limits.maximumPayloadLength = 1_024 }
        #expect(notice.code == TetherError.Code.frameTooLarge.description)
        #expect(notice.message.contains("1 KiB"), "\(notice.message)")
    }

    @Test("a protocol error: a frame of a type the profile does not have is answered with protocolError")
    func protocolError() async throws {
        let (notice, _) = try await Self.notice(after: [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0])
        let error = notice.error(from: "s")
        #expect(error.code == .protocolError)
        #expect(error.message.hasPrefix("s closed the connection: frame type 0x0 is not valid in the seed profile from 127.0.0.1:"), "\(error)")
    }

    @Test("authentication failure: after the hello's refusal the server closes with sessionRejected")
    func authenticationFailure() async throws {
        let (notice, _) = try await Self.notice(after: Self.hello(clientID: "mallory"), configure: { $0.mailboxes = .inMemory }) { server in
            server.authenticate { _ in throw TetherError(code: .sessionRejected, message: "unknown token") }
        }
        #expect(notice.code == TetherError.Code.sessionRejected.description)
        #expect(notice.message == "the server rejected the session of client mallory: unknown token")
    }

    /// A seed session hello for `clientID`.
    static func hello(clientID: String) -> [UInt8] {
        let payload = Array(#"{"clientID":"\#(clientID)","lastSequence":0}"#.utf8)
        var buffer = FrameBuffer()
        try! SeedCodec().encode(Frame(type: 0x401, serial: 1, payload: payload), into: &buffer)
        return Array(buffer.readableBytesView)
    }

    @Test("drain deadline: what still runs is answered, then the connection closes with serverDraining")
    func drainDeadline() async throws {
        var configuration = ServerConfiguration(port: 0)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        configuration.drain.deadline = .milliseconds(300)
        let server = Server(configuration: configuration)
        echoHandlers(server)
        // 0x404 as the standard handlers have it (never answers, ends when cancelled), and
        // says when it starts.
        let (started, start) = AsyncStream<Void>.makeStream()
        server.handle(type: 0x404) { _, _ in
            start.yield()
            try await suspendUntilCancelled()
        }
        let running = Task { try await server.run() }
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        let socket = try RawSocket.connect(to: Endpoint(host: address.ipAddress, port: address.port))
        defer { socket.close() }
        var buffer = FrameBuffer()
        try SeedCodec().encode(Frame(type: 0x404, serial: 7, payload: []), into: &buffer)
        try socket.write(Array(buffer.readableBytesView))
        _ = try await collect(1, from: started, "the request to start")
        let drained = Task { await server.drain() }
        let drainNotice = try #require(try await socket.readFrame())
        #expect(DrainNotice(drainNotice) != nil)
        let answer = try #require(try await socket.readFrame())
        #expect(answer.serial == 7)
        let last = try #require(try await socket.readFrame())
        let notice = try #require(CloseNotice(last))
        #expect(notice.error(from: "s") == TetherError(code: .serverDraining, message: "s closed the connection: \(notice.message)"))
        #expect(notice.message.hasSuffix("at its 300 ms drain deadline"))
        #expect(try await socket.waitForClose())
        try await bounded("drain() to return") { await drained.value }
        try await bounded("run() to return") { try await running.value }
    }
}
