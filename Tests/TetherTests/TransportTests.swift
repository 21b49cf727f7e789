import Testing
import TetherTesting
@testable import Tether

@Suite("Transport", .timeLimit(.guarded))
struct TransportTests {
    @Test("an 8 MiB payload round trips: partial writes and reads on both sides")
    func largePayload() async throws {
        // The first frame is the 8 MiB one: under the thread sanitizer on a busy machine it can
        // take longer than the handshake timeout to arrive whole, which is not what this tests.
        try await withServer(configure: { $0.handshakeTimeout = nil }, handlers: { server in
            server.handle(type: 0x410) { request, _ in Response(payload: request.payload.reversed()) }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let payload = (0..<(8 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let reply = try await connection.request(Request(type: 0x410, payload: payload))
            #expect(reply.payload.count == payload.count)
            #expect(reply.payload == payload.reversed())
            await connection.close()
        }
    }

    @Test("TCP_NODELAY is set on client and accepted sockets by default")
    func noDelay() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let fd = try #require(await (connection.channel?.transport as? TCPTransport)?.descriptor)
            #expect(try Syscall.getOption(fd, level: SocketOptions.tcpLevel, name: SocketOptions.noDelay) != 0)
            await connection.close()
        }
    }

    @Test("writing to a peer that has gone away ends the connection with an error; SIGPIPE does not kill the process")
    func brokenPipe() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        let peer = try await listener.accept()
        peer.close()
        let states = connection.states
        // Keep writing until the kernel reports the reset; each send queues a frame.
        let state = try await bounded("the write error") {
            var last: ConnectionState?
            for _ in 0..<10_000 {
                do {
                    try await connection.send(Frame(type: 0x2, payload: Array(repeating: 1, count: 4096)))
                } catch {
                    break
                }
                await Task.yield()
            }
            for await state in states { last = state }
            return last
        }
        let reason = try #require(state?.reason)
        #expect([.peerClosed, .connectionReset].contains(reason.code))
    }

    @Test("a peer that never reads fills the outbound buffer up to its limit, then sends fail with outboundBufferFull")
    func outboundLimit() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.limits.maximumOutboundBytes = 1 << 20
                let connection = try await Connection.connect(to: endpoint, configuration: configuration)
                // The server's end takes nothing more: the link holds what fits in its 256 KiB
                // queue, and the rest waits in the client's outbound buffer.
                network.links[0].faults.toServer = .stalled
                let chunk = Frame(type: 0x2, payload: Array(repeating: 7, count: 256 << 10))
                var sent = 0
                var failure: TetherError?
                while failure == nil, sent < 100 {
                    do {
                        try await connection.send(chunk)
                        sent += 1
                        await network.runUntilIdle()
                    } catch let error as TetherError {
                        failure = error
                    }
                }
                // 256 KiB in the link, the rest of four frames waiting: a fifth would take the
                // waiting bytes over 1 MiB.
                #expect(sent == 4)
                #expect(failure?.code == .outboundBufferFull)
                #expect(failure?.message.hasSuffix("bytes are waiting to be written to 127.0.10.1:9000, over the 1 MiB limit") == true, "\(failure?.message ?? "")")
                #expect(await connection.currentState.phase == .connected)
                await connection.close()
            }
        }
    }

    @Test("failures on several addresses are combined into one error that names each")
    func combinedFailures() {
        let endpoint = Endpoint(host: "example.test", port: 9000)
        let refusedBoth = TCPConnector.combine([
            TetherError(code: .connectionRefused, message: "connection refused by [::1]:9000"),
            TetherError(code: .connectionRefused, message: "connection refused by 127.0.0.1:9000"),
        ], endpoint: endpoint)
        #expect(refusedBoth.code == .connectionRefused)
        #expect(refusedBoth.message == "cannot connect to example.test:9000: connection refused by [::1]:9000; connection refused by 127.0.0.1:9000")
        let mixed = TCPConnector.combine([
            TetherError(code: .connectionRefused, message: "a"),
            TetherError(code: .connectTimedOut, message: "b"),
        ], endpoint: endpoint)
        #expect(mixed.code == .connectTimedOut)
        let single = TetherError(code: .connectFailed, message: "only one")
        #expect(TCPConnector.combine([single], endpoint: endpoint) == single)
    }

    @Test("a connect that gets no answer times out after the connect timeout")
    func connectTimeout() async throws {
        // A listener with a full backlog that never accepts: the kernel stops answering SYNs.
        let (listener, endpoint) = try RawSocket.listen(backlog: 0)
        defer { listener.close() }
        var fillers: [RawSocket] = []
        defer { fillers.forEach { $0.close() } }
        for _ in 0..<8 {
            guard let filler = try? RawSocket.connect(to: endpoint, timeout: .milliseconds(200)) else { break }
            fillers.append(filler)
        }
        let started = ContinuousClock.now
        let error = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.connectTimeout = .milliseconds(300) })
        }
        #expect(error?.code == .connectTimedOut)
        #expect(error?.message == "connecting to \(endpoint.host):\(endpoint.port) timed out after 300 ms")
        // Far below the kernel's own give-up time for unanswered SYNs (about two minutes),
        // with room for a machine busy with the thread sanitizer.
        #expect(ContinuousClock.now - started < .seconds(20))
    }
}
