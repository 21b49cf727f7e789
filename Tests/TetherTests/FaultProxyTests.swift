import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import Tether
import TetherTesting

@Suite("Fault proxy", .timeLimit(.guarded))
struct FaultProxyTests {
    @Test("1-byte pieces both ways: 50 requests each get exactly their echo and serial")
    func tinyPieces() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await withFaultProxy(to: endpoint, mode: .pieces(1)) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                for id in 0..<50 {
                    let payload: JSONValue = ["id": .int(id), "text": .string(String(repeating: "x", count: id))]
                    let reply = try await bounded("response \(id)") {
                        try await connection.request(Request(type: 0x402, json: payload))
                    }
                    #expect(reply.type == 0x402)
                    #expect(reply.serial == UInt32(id + 1))
                    #expect(reply.json == ["echo": payload])
                }
                let counters = proxy.counters
                #expect(counters.bytesUpstream > 50 * SeedCodec.headerLength)
                #expect(counters.writesUpstream == counters.bytesUpstream)
                #expect(counters.writesDownstream == counters.bytesDownstream)
                await connection.close()
            }
        }
    }

    @Test("coalesced writes both ways: 200 concurrent requests each get exactly their echo")
    func coalesced() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await withFaultProxy(to: endpoint, mode: .coalesce(minimum: 4096, flushAfter: .milliseconds(2))) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                let replies = try await bounded("200 responses") {
                    try await withThrowingTaskGroup(of: (Int, Response).self) { group in
                        for id in 0..<200 {
                            group.addTask {
                                (id, try await connection.request(Request(type: 0x402, json: ["id": .int(id), "pad": .string(String(repeating: "p", count: id % 37))])))
                            }
                        }
                        var replies: [Int: Response] = [:]
                        for try await (id, reply) in group { replies[id] = reply }
                        return replies
                    }
                }
                #expect(replies.count == 200)
                for (id, reply) in replies {
                    #expect(reply.json == ["echo": ["id": .int(id), "pad": .string(String(repeating: "p", count: id % 37))]])
                }
                #expect(Set(replies.values.map(\.serial)) == Set(1...200))
                let statistics = await connection.metrics
                #expect(statistics.requestsCompleted == 200)
                #expect(statistics.lateResponses == 0)
                await connection.close()
            }
        }
    }

    @Test("raw bytes arrive unchanged: one client write as 1-byte writes, separate server writes as one write")
    func rawBytesSplitAndCoalesced() async throws {
        let (listener, upstream) = try RawSocket.listen()
        defer { listener.close() }
        let requests = (1...8).flatMap { seedBytes(type: 0x402, serial: UInt32($0), payload: Array(repeating: UInt8($0), count: $0 * 5)) }
        let responses = (1...8).map { seedBytes(type: 0x402, serial: UInt32($0), payload: Array(repeating: UInt8(0xA0 + $0), count: $0 * 3)) }
        let responseBytes = responses.flatMap { $0 }
        let mode = FaultProxy.Mode(
            upstream: .pieces(maximum: 1),
            downstream: .coalesce(minimum: responseBytes.count, flushAfter: .seconds(60))
        )
        try await withFaultProxy(to: upstream, mode: mode) { proxy in
            let client = try RawSocket.connect(to: proxy.endpoint)
            let server = try await listener.accept()

            try client.write(requests)
            let received = try await offThread { try server.read(requests.count) }
            #expect(received == requests)
            try await proxy.waitUntil("all request bytes forwarded") { $0.bytesUpstream == requests.count }
            #expect(proxy.counters.writesUpstream == requests.count)

            for response in responses { try server.write(response) }
            let answered = try await offThread { try client.read(responseBytes.count) }
            #expect(answered == responseBytes)
            try await proxy.waitUntil("all response bytes forwarded") { $0.bytesDownstream == responseBytes.count }
            #expect(proxy.counters.writesDownstream == 1)

            // A half-close passes through: the server sees the client's FIN, and vice versa.
            _ = shutdown(client.fd, Int32(SHUT_WR))
            #expect(try await server.waitForClose())
            server.close()
            #expect(try await client.waitForClose())
            try await proxy.waitForClosed(1)
        }
    }

    @Test("a cut mid-frame fails the pending request with connectionLost, caused by exactly what the client saw", arguments: [
        // 20 bytes is inside the request frame (12-byte header, 50-odd bytes of JSON); 5 is
        // inside the response frame's header.
        FaultProxy.Cut(after: 20, counting: .upstream),
        FaultProxy.Cut(after: 5, counting: .downstream),
        FaultProxy.Cut(after: 20, counting: .upstream, reset: true),
        FaultProxy.Cut(after: 5, counting: .downstream, reset: true),
    ])
    func cutMidFrame(cut: FaultProxy.Cut) async throws {
        let after = cut.afterBytes
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await withFaultProxy(to: endpoint, mode: FaultProxy.Mode(cut: cut)) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                let request = Request(type: 0x402, json: ["pad": .string(String(repeating: "p", count: 40))])
                let error = await #expect(throws: TetherError.self) {
                    try await bounded("the request to fail") { try await connection.request(request, timeout: .seconds(30)) }
                }
                // A reset is a reset; a FIN before the response is a clean close; a FIN inside
                // the response is a truncated frame.
                let code: TetherError.Code = cut.reset ? .connectionReset : cut.counting == .upstream ? .peerClosed : .truncatedFrame
                #expect(error?.code == .connectionLost)
                #expect((error?.underlying as? TetherError)?.code == code)
                try await proxy.waitForClosed(1)
                let counters = proxy.counters
                if cut.counting == .upstream {
                    #expect(counters.bytesUpstream == after)
                    #expect(counters.bytesDownstream == 0)
                } else {
                    #expect(counters.bytesUpstream == SeedCodec.headerLength + request.payload.count)
                    #expect(counters.bytesDownstream == after)
                }
                let state = try await finalState(of: connection)
                #expect(state.reason?.code == code)
            }
        }
    }

    @Test("a stalled proxy forwards nothing: the request times out, and once unstalled the connection works again")
    func stall() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                _ = try await connection.request(Request(type: 0x402, json: ["before": true]))
                let forwarded = proxy.counters
                proxy.setMode(.stalled)
                let error = await #expect(throws: TetherError.self) {
                    try await bounded("the request to time out") {
                        try await connection.request(Request(type: 0x402, json: ["during": true]), timeout: .milliseconds(300))
                    }
                }
                #expect(error?.code == .timedOut)
                #expect(proxy.counters.bytesUpstream == forwarded.bytesUpstream)
                #expect(await connection.currentState.phase == .connected)

                let frames = connection.frames
                proxy.setMode(.passThrough)
                let reply = try await bounded("the request after the stall") {
                    try await connection.request(Request(type: 0x402, json: ["after": true]))
                }
                #expect(reply.json == ["echo": ["after": true]])
                // The timed-out request went out when the stall ended; its response is dropped as late.
                let responses = try await collect(2, from: frames, "both responses")
                #expect(Set(responses.map(\.serial)) == [2, 3])
                #expect(await connection.metrics.lateResponses == 1)
                await connection.close()
            }
        }
    }

    enum Garbage: String, CaseIterable, Sendable {
        case frameOfTypeZero, oversizeLength

        var bytes: [UInt8] {
            switch self {
            case .frameOfTypeZero: seedBytes(type: 0, serial: 7)
            case .oversizeLength: [0, 0, 0x04, 0x02, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF]
            }
        }

        var code: TetherError.Code {
            switch self {
            case .frameOfTypeZero: .protocolError
            case .oversizeLength: .frameTooLarge
            }
        }
    }

    @Test("garbage injected toward the client closes it, and fails its pending request, with the exact error", arguments: Garbage.allCases)
    func garbageDownstream(garbage: Garbage) async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                _ = try await connection.request(Request(type: 0x402))
                let before = proxy.counters.bytesUpstream
                let slow = Request(type: 0x404, json: ["never": "answered"])
                let pending = Task { try await connection.request(slow, timeout: .seconds(30)) }
                let length = SeedCodec.headerLength + slow.payload.count
                try await proxy.waitUntil("the slow request to reach the server") { $0.bytesUpstream == before + length }

                #expect(proxy.inject(garbage.bytes, toward: .downstream) == 1)
                let state = try await finalState(of: connection)
                #expect(state.reason?.code == garbage.code)
                let error = await #expect(throws: TetherError.self) {
                    try await bounded("the pending request to fail") { try await pending.value }
                }
                #expect(error?.code == .connectionLost)
                #expect((error?.underlying as? TetherError)?.code == garbage.code)
                // The relay counts the bytes after its send returns, which the client may
                // outrun: await the count rather than read it.
                try await proxy.waitUntil("the injected bytes to be counted") { $0.bytesInjected == garbage.bytes.count }
            }
        }
    }

    @Test("garbage injected toward the server makes it drop that peer with a protocol error")
    func garbageUpstream() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                _ = try await connection.request(Request(type: 0x402))
                #expect(proxy.inject(seedBytes(type: 0, serial: 9), toward: .upstream) == 1)
                let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected }, "the server to drop the peer")
                #expect(gone.first?.reason?.code == .protocolError)
                let state = try await finalState(of: connection)
                #expect(state.phase == .closed)
            }
        }
    }

    @Test("modes apply to current or new connections; resetAll() resets every connection")
    func scopesAndReset() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let first = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                _ = try await first.request(Request(type: 0x402))
                proxy.setMode(.stalled, for: .currentConnections)
                #expect(proxy.defaultMode == .passThrough)

                let second = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                let reply = try await bounded("a request on a new connection") {
                    try await second.request(Request(type: 0x402, json: ["new": true]))
                }
                #expect(reply.json == ["echo": ["new": true]])
                let error = await #expect(throws: TetherError.self) {
                    try await bounded("the stalled request to time out") {
                        try await first.request(Request(type: 0x402), timeout: .milliseconds(200))
                    }
                }
                #expect(error?.code == .timedOut)
                try await proxy.waitForAccepted(2)

                proxy.resetAll()
                try await proxy.waitForClosed(2)
                #expect(try await finalState(of: first).reason?.code == .connectionReset)
                #expect(try await finalState(of: second).reason?.code == .connectionReset)
                #expect(proxy.counters.open == 0)
            }
        }
    }

    @Test("cutAll() closes every connection with a FIN")
    func cutAll() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                _ = try await connection.request(Request(type: 0x402))
                proxy.cutAll()
                #expect(try await finalState(of: connection).reason?.code == .peerClosed)
                try await proxy.waitForClosed(1)
            }
        }
    }

    @Test("stop() returns promptly even with a stalled connection, closes it, and the port then refuses connections")
    func stop() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let proxy = try FaultProxy(upstream: endpoint)
            let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
            _ = try await connection.request(Request(type: 0x402))
            proxy.setMode(.stalled)
            let waiting = Task { try await proxy.waitForAccepted(2) }

            try await bounded("stop()", .seconds(2)) { await proxy.stop() }
            #expect(proxy.counters.open == 0)
            #expect(try await finalState(of: connection).reason?.code == .peerClosed)
            let stopped = await #expect(throws: TetherError.self) { try await waiting.value }
            #expect(stopped?.code == .connectionClosed)
            #expect(stopped?.message == "the fault proxy stopped before 2 accepted connections")
            let error = await #expect(throws: TetherError.self) {
                _ = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
            }
            #expect(error?.code == .connectionRefused)
            try await bounded("a second stop()", .seconds(2)) { await proxy.stop() }
        }
    }
}

