import Synchronization
import Testing
@testable import Tether

@Suite("Handlers that answer without suspending", .timeLimit(.guarded))
struct ImmediateHandlerTests {
    @Test("a handler with no await answers on the loop without a task, in the read that decoded it")
    func noTask() async throws {
        let ranInTask = Atomic<Int>(0)
        let ran = Atomic<Int>(0)
        try await withServer(handlers: { server in
            server.handle(type: 0x402) { request, _ in
                ran.add(1, ordering: .relaxed)
                if withUnsafeCurrentTask(body: { $0 != nil }) { ranInTask.add(1, ordering: .relaxed) }
                return Response(payload: request.payload)
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            for n in 1...20 {
                let reply = try await connection.request(Request(type: 0x402, payload: [UInt8(n)]))
                #expect(reply.serial == UInt32(n))
                #expect(reply.payload == [UInt8(n)])
            }
            await connection.close()
        }
        #expect(ran.load(ordering: .relaxed) == 20)
        #expect(ranInTask.load(ordering: .relaxed) == 0)
    }

    @Test("a peer whose handler tasks have all finished starts tasks again for later requests; one still running when the peer closes is cancelled")
    func tasksComeAndGo() async throws {
        let (events, feed) = AsyncStream<String>.makeStream()
        try await withServer(handlers: { server in
            server.handle(type: 0x402) { request, _ in Response(payload: request.payload) }
            server.handle(type: 0x403) { request, _ in
                await Task.yield()
                return Response(payload: request.payload + [0xFF])
            }
            server.handle(type: 0x404) { _, _ in
                feed.yield("started")
                await untilCancelled()
                feed.yield("cancelled")
                return Response()
            }
        }) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            for n in 1...10 {
                let slow = try await connection.request(Request(type: 0x403, payload: [UInt8(n)]))
                #expect(slow.payload == [UInt8(n), 0xFF])
                let quick = try await connection.request(Request(type: 0x402, payload: [UInt8(n)]))
                #expect(quick.payload == [UInt8(n)])
            }
            let waiting = Task { try await connection.request(Request(type: 0x404)) }
            #expect(try await collect(1, from: events, "the handler to start") == ["started"])
            #expect(await server.metrics().handlersInFlight == 1)
            await connection.close()
            #expect(try await collect(1, from: events, "the handler to be cancelled") == ["cancelled"])
            await #expect(throws: TetherError.self) { try await waiting.value }
            #expect(await server.metrics().requestsHandled == 20)
        }
    }

    @Test("the peer is isolated in the handler: a push sent there goes out before the response")
    func pushBeforeAnswer() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x402) { request, peer in
                try peer.push(Frame(type: 0x2, serial: 7, payload: request.payload))
                return Response(payload: request.payload.reversed())
            }
        }) { _, endpoint in
            let connection = Connection(to: endpoint, configuration: testConfiguration())
            let frames = connection.frames
            try await connection.connect()
            let reply = try await connection.request(Request(type: 0x402, payload: [1, 2, 3]))
            #expect(reply.payload == [3, 2, 1])
            let seen = try await collect(2, from: frames, "the push and the response")
            #expect(seen.map(\.type) == [0x2, 0x402])
            #expect(seen.map(\.serial) == [7, 1])
            #expect(seen.map(\.payload) == [[1, 2, 3], [3, 2, 1]])
            await connection.close()
        }
    }

    @Test("immediate and suspending handlers on one connection: 300 pipelined requests each get their own answer")
    func mixed() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x402) { request, _ in Response(payload: request.payload) }
            server.handle(type: 0x403) { request, _ in
                await Task.yield()
                return Response(payload: request.payload + [0xFF])
            }
            server.handle(type: 0x405) { _, _ in
                throw TetherError(code: .invalidArgument, message: "odd one out")
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            try await bounded("300 answers") {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for n in 0..<300 {
                        let type: UInt32 = [0x402, 0x403, 0x405][n % 3]
                        let payload = [UInt8(n & 0xFF), UInt8(n >> 8)]
                        group.addTask {
                            let reply = try await connection.request(Request(type: type, payload: payload))
                            switch type {
                            case 0x402: #expect(reply.payload == payload)
                            case 0x403: #expect(reply.payload == payload + [0xFF])
                            default: #expect(reply.errorMessage == "odd one out")
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            #expect(await connection.metrics.requestsCompleted == 300)
            await connection.close()
        }
    }
}
