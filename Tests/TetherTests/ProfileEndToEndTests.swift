import Testing
@testable import Tether

/// A client and a server speaking each built-in profile over 127.0.0.1.
@Suite("Every profile end to end", .timeLimit(.minutes(1)))
struct ProfileEndToEndTests {
    /// Runs a server speaking `profile` with `handlers`, and a client connected to it.
    func withProfile<T: Sendable>(
        _ profile: Profile,
        heartbeat: HeartbeatConfiguration = .disabled,
        handlers: (Server) -> Void,
        _ body: @escaping @Sendable (Server, Connection) async throws -> T
    ) async throws -> T {
        try await withServer(configure: { $0.profile = profile }, handlers: handlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.profile = profile
                $0.heartbeat = heartbeat
            })
            do {
                let result = try await body(server, connection)
                await connection.close()
                return result
            } catch {
                await connection.close()
                throw error
            }
        }
    }

    /// Waits until the server has the client as a peer.
    func awaitPeer(_ server: Server) async throws {
        try await until("the server to see the peer") { server.peerCount > 0 }
    }

    /// Sends concurrent requests whose answers finish in another order than they were asked;
    /// returns each request's answer text by index.
    func outOfOrder(_ connection: Connection, type: UInt32, delays: [Int], make: @escaping @Sendable (Int, Int) -> Request) async throws -> [Int: String] {
        try await bounded("\(delays.count) answers") {
            try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for (index, delay) in delays.enumerated() {
                    group.addTask { (index, try await connection.request(make(index, delay)).text) }
                }
                var answers: [Int: String] = [:]
                for try await (index, text) in group { answers[index] = text }
                return answers
            }
        }
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
        }) { server, connection in
            let reply = try await connection.request(Request(type: 0x402, payload: Array("{}".utf8), fields: ["contentType": 7, "version": 2]))
            #expect(reply.json == ["integrity": "verified", "contentType": 7])
            #expect(reply.fields == ["contentType": 7, "version": 2])
            #expect(reply.integrity == .verified)
            #expect(reply.serial == 1)
            // The first heartbeat goes out as the connection opens, before this subscription.
            let acked = try await collect(2, from: connection.heartbeats.filter { $0.outcome == .acked }, "heartbeat acks")
            #expect(acked.count == 2 && acked[1].serial == acked[0].serial + 1)
            let pushes = connection.notifications
            try await awaitPeer(server)
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
        try await withProfile(.compact, heartbeat: .every(.milliseconds(200), timeout: .seconds(5), maximumMissed: 3), handlers: echoHandlers) { server, connection in
            // 0x404 answers after the delay: later requests finish first, but are answered in order.
            let answers = try await outOfOrder(connection, type: 0x404, delays: [150, 0, 60, 0]) { index, delay in
                Request(type: 0x404, json: ["id": .int(index), "delay_ms": .int(delay)])
            }
            for index in 0..<4 {
                #expect(answers[index] == #"{"echo":{"delay_ms":\#([150, 0, 60, 0][index]),"id":\#(index)}}"#)
            }
            let text = String(repeating: "the same words again and again, ", count: 6_000)
            let big = try await connection.request(Request(type: 0x402, json: ["text": .string(text)]))
            #expect(big.json?["echo"]?["text"]?.stringValue == text)
            let metrics = await connection.metrics
            #expect(metrics.bytesOut < text.utf8.count / 10, "the request went out compressed")
            #expect(metrics.lateResponses == 0)
            _ = try await collect(1, from: connection.heartbeats.filter { $0.outcome == .acked }, "a heartbeat ack")
            let pushes = connection.notifications
            try await awaitPeer(server)
            await server.broadcast(Frame(type: 0x7, payload: Array(#"{"n":1}"#.utf8)))
            #expect(try await collect(1, from: pushes, "the push").first?.payload == Array(#"{"n":1}"#.utf8))
        }
    }

    @Test("compact: the answers to a timed-out request and to a sent frame are dropped; the next request gets its own")
    func compactTimeout() async throws {
        try await withProfile(.compact, handlers: echoHandlers) { _, connection in
            try await connection.send(Frame(type: 0x402, payload: Array(#"{"id":0}"#.utf8)))
            // The answer comes long after the timeout: a loop stalled by other tests' work
            // reads a response before it runs its due timers, so a short gap could let it win.
            let error = await #expect(throws: TetherError.self) {
                _ = try await connection.request(Request(type: 0x404, json: ["id": 1, "delay_ms": 1500]), timeout: .milliseconds(50))
            }
            #expect(error?.code == .timedOut)
            let next = try await connection.request(Request(type: 0x404, json: ["id": 2, "delay_ms": 0]))
            #expect(next.json == ["echo": ["id": 2, "delay_ms": 0]])
            let plain = try await connection.request(Request(type: 0x402, json: ["id": 3]))
            #expect(plain.json == ["echo": ["id": 3]])
            #expect(await connection.metrics.lateResponses == 2)
        }
    }

    @Test("marker: requests answered in order, addresses swapped in the reply")
    func marker() async throws {
        try await withProfile(.marker, handlers: { server in
            server.handle(type: 0x401) { request, _ in
                let delay = Int(request.text.split(separator: ":").last ?? "0") ?? 0
                try await Task.sleep(for: .milliseconds(delay))
                return Response(payload: Array(request.text.uppercased().utf8))
            }
        }) { _, connection in
            let answers = try await outOfOrder(connection, type: 0x401, delays: [120, 0, 40]) { index, delay in
                Request(type: 0x401, payload: Array("r\(index):\(delay)".utf8), fields: ["destination": 10, "source": UInt64(20 + index)])
            }
            #expect(answers == [0: "R0:120", 1: "R1:0", 2: "R2:40"])
            let reply = try await connection.request(Request(type: 0x401, payload: Array("x".utf8), fields: ["destination": 0x0A, "source": 0x0B]))
            #expect(reply.fields == ["destination": 0x0B, "source": 0x0A])
            #expect(reply.integrity == .verified)
        }
    }

    @Test("lines: each line answered in order")
    func lines() async throws {
        try await withProfile(.lines, handlers: { server in
            server.handle(type: 0x401) { request, _ in
                let delay = Int(request.text.split(separator: " ").last ?? "0") ?? 0
                try await Task.sleep(for: .milliseconds(delay))
                return Response(payload: Array("OK \(request.text)".utf8))
            }
        }) { _, connection in
            let answers = try await outOfOrder(connection, type: 0x401, delays: [100, 0, 30, 0]) { index, delay in
                Request(type: 0x401, payload: Array("job\(index) \(delay)".utf8))
            }
            #expect(answers == [0: "OK job0 100", 1: "OK job1 0", 2: "OK job2 30", 3: "OK job3 0"])
        }
    }

    @Test("lines with a heartbeat line: the server echoes it, the client counts it acked")
    func linesHeartbeat() async throws {
        let profile = try Profile.lines(delimiter: [0x0A], heartbeatLine: Array("PING".utf8))
        try await withProfile(profile, heartbeat: .every(.milliseconds(100), timeout: .seconds(5), maximumMissed: 3), handlers: { _ in }) { _, connection in
            let acks = try await collect(2, from: connection.heartbeats.filter { $0.outcome == .acked }, "two heartbeat acks")
            #expect(acks.count == 2 && acks[1].serial == acks[0].serial + 1)
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
