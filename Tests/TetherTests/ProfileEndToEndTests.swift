import Testing
import TetherTesting
@testable import Tether

/// Requests whose handlers wait, each at the gate of its index, until the test opens it:
/// answers finish in the order the test says, with no real delays.
final class GatedRequests: Sendable {
    let gates: [HandlerGate]
    let reached: AsyncStream<Int>
    private let arrival: AsyncStream<Int>.Continuation

    init(count: Int) {
        gates = (0..<count).map { _ in HandlerGate(open: false) }
        (reached, arrival) = AsyncStream<Int>.makeStream()
    }

    /// A handler that reports the request's index, waits at its gate, then answers.
    func handler(index: @escaping @Sendable (Request) -> Int, answer: @escaping @Sendable (Request) -> Response) -> @Sendable (Request, Peer) async throws -> Response {
        { [self] request, _ in
            let number = index(request)
            arrival.yield(number)
            await gates[number].pass()
            return answer(request)
        }
    }
}

/// A client and a server speaking each built-in profile: on the test network, or over
/// 127.0.0.1 for raw bytes.
@Suite("Every profile end to end", .timeLimit(.guarded))
struct ProfileEndToEndTests {
    /// Runs a server speaking `profile` with `handlers` on a test network, and a client
    /// connected to it, once the server has it as a peer.
    func withProfile<T: Sendable>(
        _ profile: Profile,
        heartbeat: HeartbeatConfiguration = .disabled,
        handlers: (Server) -> Void,
        _ body: @escaping @Sendable (Server, Connection, TestNetwork) async throws -> T
    ) async throws -> T {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.profile = profile }, handlers: handlers) { server, endpoint in
                let events = server.events
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                    $0.profile = profile
                    $0.heartbeat = heartbeat
                    $0.use(network)
                })
                do {
                    _ = try await firstEvent(events, "the server to see the peer") { $0.kind == .peerConnected }
                    let result = try await body(server, connection, network)
                    await connection.close()
                    return result
                } catch {
                    await connection.close()
                    throw error
                }
            }
        }
    }

    /// Sends concurrent requests whose answers finish in another order than they were asked:
    /// once all are at their handlers, opens the gates in `finishing` order. Returns each
    /// request's answer text by index.
    func outOfOrder(_ connection: Connection, gated: GatedRequests, finishing: [Int], make: @escaping @Sendable (Int) -> Request) async throws -> [Int: String] {
        let count = gated.gates.count
        let asking = Task {
            try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for index in 0..<count {
                    group.addTask { (index, try await connection.request(make(index)).text) }
                }
                var answers: [Int: String] = [:]
                for try await (index, text) in group { answers[index] = text }
                return answers
            }
        }
        #expect(try await collect(count, from: gated.reached, "\(count) requests at their handlers").sorted() == Array(0..<count))
        for index in finishing { gated.gates[index].open() }
        return try await withTimeLimit(.seconds(10), "\(count) answers") { try await asking.value }
    }

    @Test("seed-extended: requests carry version and content type, the SHA-256 verifies, pushes and heartbeats work")
    func seedExtended() async throws {
        try await withProfile(.seedExtended, heartbeat: .every(.milliseconds(200), timeout: .seconds(5), maximumMissed: 3), handlers: { server in
            server.handle(type: 0x402) { request, _ in
                Response(json: [
                    "integrity": .string("\(request.integrity)"),
                    "contentType": .int(Int(request.fields["contentType"] ?? 99)),
                ])
            }
        }) { server, connection, network in
            let reply = try await connection.request(Request(type: 0x402, payload: Array("{}".utf8), fields: ["contentType": 7, "version": 2]))
            #expect(reply.json == ["integrity": "verified", "contentType": 7])
            #expect(reply.fields == ["contentType": 7, "version": 2])
            #expect(reply.integrity == .verified)
            #expect(reply.serial == 1)
            // The first heartbeat went out as the connection opened, and the first subscription
            // starts with it; two more, 200 ms apart.
            let acks = connection.heartbeats.filter { $0.outcome == .acked }
            await network.advance(by: .milliseconds(200))
            await network.advance(by: .milliseconds(200))
            #expect(try await collect(3, from: acks, "heartbeat acks") == [
                Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero), Heartbeat(serial: 2, outcome: .acked, roundTripTime: .zero),
                Heartbeat(serial: 3, outcome: .acked, roundTripTime: .zero),
            ])
            let pushes = connection.notifications
            #expect(await server.broadcast(Frame(type: 0x3, serial: 0, payload: Array("news".utf8), fields: ["contentType": 5])) == 1)
            let push = try await collect(1, from: pushes, "the push").first
            #expect(push?.payload == Array("news".utf8))
            #expect(push?.fields == ["contentType": 5, "version": 1])
            #expect(push?.integrity == .verified)
        }
    }

    @Test("seed-extended: a request whose body does not match its checksum reaches the handler marked failed")
    func seedExtendedDamaged() async throws {
        try await withServer(configure: { $0.profile = .seedExtended }, handlers: { server in
            server.handle(type: 0x402) { request, _ in Response(payload: Array("\(request.integrity)".utf8)) }
        }) { _, endpoint in
            var buffer = FrameBuffer()
            try Profile.seedExtended.makeCodec(1 << 20).encode(Frame(type: 0x402, serial: 9, payload: Array("{}".utf8)), into: &buffer)
            var bytes = Array(buffer.readableBytesView)
            bytes[bytes.count - 1] = UInt8(ascii: "]")
            let socket = try RawSocket.connect(to: endpoint)
            try socket.write(bytes)
            let answer = try await offThread { try socket.read(52 + 6) }
            var codec = Profile.seedExtended.makeCodec(1 << 20)
            var incoming = FrameBuffer(bytes: answer)
            let frame = try #require(try codec.decode(&incoming))
            #expect(frame.serial == 9)
            #expect(frame.payload == Array("failed".utf8))
            #expect(frame.integrity == .verified)
        }
    }

    @Test("compact: function codes answered in order, compressed bodies both ways, pushes and heartbeats")
    func compact() async throws {
        let gated = GatedRequests(count: 4)
        try await withProfile(.compact, heartbeat: .every(.milliseconds(200), timeout: .seconds(5), maximumMissed: 3), handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x404, gated.handler(index: { $0.json?["id"]?.intValue ?? 0 }) { Response(json: ["echo": $0.json ?? nil]) })
        }) { server, connection, network in
            // Later requests finish first, but are answered in order.
            let answers = try await outOfOrder(connection, gated: gated, finishing: [1, 3, 2, 0]) { index in
                Request(type: 0x404, json: ["id": .int(index)])
            }
            for index in 0..<4 {
                #expect(answers[index] == #"{"echo":{"id":\#(index)}}"#)
            }
            let text = String(repeating: "the same words again and again, ", count: 6_000)
            let big = try await connection.request(Request(type: 0x402, json: ["text": .string(text)]))
            #expect(big.json?["echo"]?["text"]?.stringValue == text)
            let metrics = await connection.metrics
            #expect(metrics.bytesOut < text.utf8.count / 10, "the request went out compressed")
            #expect(metrics.lateResponses == 0)
            let acks = connection.heartbeats.filter { $0.outcome == .acked }
            await network.advance(by: .milliseconds(200))
            // The first subscription starts with heartbeat 1, sent as the connection opened.
            #expect(try await collect(2, from: acks, "heartbeat acks") == [
                Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero), Heartbeat(serial: 2, outcome: .acked, roundTripTime: .zero),
            ])
            let pushes = connection.notifications
            await server.broadcast(Frame(type: 0x7, payload: Array(#"{"n":1}"#.utf8)))
            #expect(try await collect(1, from: pushes, "the push").first?.payload == Array(#"{"n":1}"#.utf8))
        }
    }

    @Test("compact: the answers to a timed-out request and to a sent frame are dropped; the next request gets its own")
    func compactTimeout() async throws {
        let gated = GatedRequests(count: 3)
        gated.gates[2].open()
        try await withProfile(.compact, handlers: { server in
            echoHandlers(server)
            server.handle(type: 0x404, gated.handler(index: { $0.json?["id"]?.intValue ?? 0 }) { Response(json: ["echo": $0.json ?? nil]) })
        }) { _, connection, network in
            try await connection.send(Frame(type: 0x402, payload: Array(#"{"id":0}"#.utf8)))
            let pending = Task { try await connection.request(Request(type: 0x404, json: ["id": 1]), timeout: .milliseconds(50)) }
            #expect(try await collect(1, from: gated.reached, "the request at its handler") == [1])
            await network.advance(by: .milliseconds(50) - .nanoseconds(1))
            #expect(await connection.metrics.requestsTimedOut == 0)
            await network.advance(by: .nanoseconds(1))
            let error = await #expect(throws: TetherError.self) { try await withTimeLimit { try await pending.value } }
            #expect(error?.code == .timedOut)
            // The answer comes after the timeout, before the next request's.
            gated.gates[1].open()
            let next = try await connection.request(Request(type: 0x404, json: ["id": 2]))
            #expect(next.json == ["echo": ["id": 2]])
            let plain = try await connection.request(Request(type: 0x402, json: ["id": 3]))
            #expect(plain.json == ["echo": ["id": 3]])
            #expect(await connection.metrics.lateResponses == 2)
        }
    }

    @Test("compact: the answer to a frame sent until written is dropped as late too; the next request gets its own")
    func compactWrittenSend() async throws {
        try await withProfile(.compact, handlers: echoHandlers) { _, connection, _ in
            try await connection.send(Frame(type: 0x402, payload: Array(#"{"id":0}"#.utf8)), completion: .written(timeout: nil))
            let next = try await connection.request(Request(type: 0x402, json: ["id": 1]))
            #expect(next.json == ["echo": ["id": 1]])
            #expect(await connection.metrics.lateResponses == 1)
        }
    }

    @Test("marker: requests answered in order, addresses swapped in the reply")
    func marker() async throws {
        let gated = GatedRequests(count: 3)
        try await withProfile(.marker, handlers: { server in
            server.handle(type: 0x401, gated.handler(index: { Int(String($0.text.dropFirst())) ?? 0 }) { Response(payload: Array($0.text.uppercased().utf8)) })
        }) { _, connection, _ in
            let answers = try await outOfOrder(connection, gated: gated, finishing: [1, 2, 0]) { index in
                Request(type: 0x401, payload: Array("r\(index)".utf8), fields: ["destination": 10, "source": UInt64(20 + index)])
            }
            #expect(answers == [0: "R0", 1: "R1", 2: "R2"])
            for gate in gated.gates { gate.open() }
            let reply = try await connection.request(Request(type: 0x401, payload: Array("r0".utf8), fields: ["destination": 0x0A, "source": 0x0B]))
            #expect(reply.fields == ["destination": 0x0B, "source": 0x0A])
            #expect(reply.integrity == .verified)
        }
    }

    @Test("lines: each line answered in order")
    func lines() async throws {
        let gated = GatedRequests(count: 4)
        try await withProfile(.lines, handlers: { server in
            server.handle(type: 0x401, gated.handler(index: { Int(String($0.text.dropFirst(3))) ?? 0 }) { Response(payload: Array("OK \($0.text)".utf8)) })
        }) { _, connection, _ in
            let answers = try await outOfOrder(connection, gated: gated, finishing: [1, 3, 2, 0]) { index in
                Request(type: 0x401, payload: Array("job\(index)".utf8))
            }
            #expect(answers == [0: "OK job0", 1: "OK job1", 2: "OK job2", 3: "OK job3"])
        }
    }

    @Test("lines with a heartbeat line: the server echoes it, the client counts it acked")
    func linesHeartbeat() async throws {
        let profile = try Profile.lines(delimiter: [0x0A], heartbeatLine: Array("PING".utf8))
        try await withProfile(profile, heartbeat: .every(.milliseconds(100), timeout: .seconds(5), maximumMissed: 3), handlers: { _ in }) { _, connection, network in
            let acks = connection.heartbeats.filter { $0.outcome == .acked }
            await network.advance(by: .milliseconds(100))
            await network.advance(by: .milliseconds(100))
            // The first subscription, made as connect() returned, starts with heartbeat 1.
            let seen = try await collect(2, from: acks, "two heartbeat acks")
            #expect(seen == [Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero), Heartbeat(serial: 2, outcome: .acked, roundTripTime: .zero)])
            #expect(await connection.metrics.heartbeatsMissed == 0)
        }
    }

    @Test("sessions and mailboxes refuse a profile without serials")
    func sessionsNeedSerials() async throws {
        let connection = Connection(to: Endpoint(host: "127.0.0.1", port: 9), configuration: testConfiguration {
            $0.profile = .compact
            $0.session = SessionConfiguration(clientID: "a")
        })
        let error = await #expect(throws: TetherError.self) { try await connection.connect() }
        #expect(error?.message == "sessions need a profile that matches responses by serial; the compact profile has no serial")
        var configuration = ServerConfiguration(port: 0, profile: .lines)
        configuration.handshakeTimeout = nil   // not timed here; a busy machine may be slow to send the first frame
        configuration.mailboxes = MailboxConfiguration(store: InMemoryMailboxStore())
        let server = Server(configuration: configuration)
        let refused = await #expect(throws: TetherError.self) { try await server.run() }
        #expect(refused?.message == "mailboxes need a profile that matches responses by serial; the lines profile has no serial")
    }

    @Test("garbage in a marker stream is skipped and reported; the connection goes on")
    func markerGarbage() async throws {
        try await withServer(configure: { $0.profile = .marker }, handlers: { server in
            server.handle(type: 0x401) { request, _ in Response(payload: request.payload) }
        }) { _, endpoint in
            var buffer = FrameBuffer()
            try Profile.marker.makeCodec(1 << 20).encode(Frame(type: 0x401, payload: Array("ok".utf8)), into: &buffer)
            let socket = try RawSocket.connect(to: endpoint)
            try socket.write(Array("noise~~".utf8) + Array(buffer.readableBytesView))
            let size = buffer.readableBytes
            let echoed = try await offThread { try socket.read(size) }
            var codec = Profile.marker.makeCodec(1 << 20)
            var incoming = FrameBuffer(bytes: echoed)
            #expect(try codec.decode(&incoming)?.payload == Array("ok".utf8))
        }
    }
}
