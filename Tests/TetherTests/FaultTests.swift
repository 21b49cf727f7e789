import Testing
@testable import Tether

@Suite("Bad peers and bad addresses", .timeLimit(.guarded))
struct FaultTests {
    @Test("a client that sends an oversize length is closed with frameTooLarge; others keep being served")
    func oversizeFromClient() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let good = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let bad = try RawSocket.connect(to: endpoint)
            try bad.write([0, 0, 0x04, 0x02, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF])
            #expect(try await bad.waitForClose())
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
            let reason = try #require(gone.first?.reason)
            #expect(reason.code == .frameTooLarge)
            #expect(reason.message.hasPrefix("frame length 4294967295 exceeds the 16 MiB limit from 127.0.0.1:"))
            let reply = try await good.request(Request(type: 0x402, json: ["still": "here"]))
            #expect(reply.json == ["echo": ["still": "here"]])
            await good.close()
        }
    }

    @Test("a client that sends garbage text is closed with a protocol error naming it")
    func garbageFromClient() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let bad = try RawSocket.connect(to: endpoint)
            try bad.write(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
            #expect(try await bad.waitForClose())
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
            // HTTP, named as such; what the codec saw is underneath.
            #expect(gone.first?.reason?.code == .protocolError)
            #expect(gone.first?.reason?.message.hasSuffix(" sent an HTTP request (\"GET / HTTP/1.1\") to a port that speaks seed frames: an HTTP client on the wrong port?") == true)
            #expect((gone.first?.reason?.underlying as? TetherError)?.message == "frame length 1414541105 exceeds the 16 MiB limit")
        }
    }

    @Test("a frame of type 0 is a protocol error")
    func invalidType() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let bad = try RawSocket.connect(to: endpoint)
            try bad.write(seedBytes(type: 0, serial: 1))
            #expect(try await bad.waitForClose())
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
            #expect(gone.first?.reason?.code == .protocolError)
            #expect(gone.first?.reason?.message.hasPrefix("frame type 0x0 is not valid in the seed profile from 127.0.0.1:") == true)
        }
    }

    @Test("a client that disconnects mid-frame is reported as a truncated frame")
    func truncatedFromClient() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let bad = try RawSocket.connect(to: endpoint)
            try bad.write(Array(seedBytes(type: 0x402, serial: 1, payload: [1, 2, 3, 4]).prefix(14)))
            bad.close()
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
            #expect(gone.first?.reason?.code == .truncatedFrame)
        }
    }

    @Test("a server that sends an oversize frame ends the connection; pending requests fail with connectionLost caused by frameTooLarge")
    func oversizeFromServer() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        let peer = try await listener.accept()
        let pending = Task { try await connection.request(Request(type: 0x402), timeout: .seconds(30)) }
        let request = try #require(try await peer.readFrame())
        #expect(request.type == 0x402)
        try peer.write([0, 0, 0x04, 0x02, 0, 0, 0, 1, 0x7F, 0xFF, 0xFF, 0xFF])
        let error = await #expect(throws: TetherError.self) { try await pending.value }
        #expect(error?.code == .connectionLost)
        #expect((error?.underlying as? TetherError)?.code == .frameTooLarge)
        #expect(error?.message == "request 0x402 serial 1 failed: connection lost: frame length 2147483647 exceeds the 16 MiB limit from \(endpoint.host):\(endpoint.port)")
        #expect(await connection.pendingRequestCount == 0)
        #expect(try await peer.waitForClose())
    }

    @Test("frames fully received before the peer closes are still delivered")
    func unreadDataDelivered() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        let pushes = connection.notifications
        let peer = try await listener.accept()
        try peer.write(seedBytes(type: 0x2, serial: 1, payload: [1]) + seedBytes(type: 0x2, serial: 2, payload: [2]))
        peer.close()
        let received = try await collect(3, from: pushes)
        #expect(received.map(\.serial) == [1, 2])
        let state = try await finalState(of: connection)
        #expect(state.reason?.code == .peerClosed)
    }

    @Test("a server that stops mid-frame is reported as a truncated frame, not a clean close")
    func truncatedFromServer() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        let peer = try await listener.accept()
        try peer.write(Array(seedBytes(type: 0x2, serial: 1, payload: [1, 2, 3]).prefix(13)))
        peer.close()
        let state = try await finalState(of: connection)
        #expect(state.reason?.code == .truncatedFrame)
        #expect(state.reason?.message == "stream ended inside a frame: 13 bytes of an incomplete frame from \(endpoint.host):\(endpoint.port)")
    }

    @Test("connecting to a closed port fails with connection refused naming the address")
    func refused() async throws {
        let (reserved, endpoint) = try RawSocket.bindOnly()
        defer { reserved.close() }
        let port = endpoint.port
        let error = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: port), configuration: testConfiguration())
        }
        #expect(error?.code == .connectionRefused)
        #expect(error?.message == "connection refused by 127.0.0.1:\(port)")
    }

    @Test("a name that does not resolve fails with resolutionFailed")
    func unresolvable() async throws {
        let error = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: Endpoint(host: "no-such-host.invalid", port: 9), configuration: testConfiguration())
        }
        #expect(error?.code == .resolutionFailed)
        #expect(error?.message.hasPrefix("cannot resolve no-such-host.invalid: ") == true)
    }

    @Test("cancelling run() flushes and closes every peer")
    func gracefulShutdown() async throws {
        let server = Server(configuration: .init(port: 0))
        echoHandlers(server)
        let running = Task { try await server.run() }
        let address = try await bounded("listening") { try await server.listeningAddress() }
        let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: address.port), configuration: testConfiguration())
        _ = try await connection.request(Request(type: 0x402))
        running.cancel()
        try await bounded("run() to return") { try await running.value }
        let state = try await finalState(of: connection)
        #expect(state.reason?.code == .peerClosed)
        #expect(server.peerCount == 0)
    }

    @Test("a port already in use fails run() with bindFailed")
    func bindConflict() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        let server = Server(configuration: .init(port: endpoint.port))
        let error = await #expect(throws: TetherError.self) { try await server.run() }
        #expect(error?.code == .bindFailed)
        #expect(error?.message.hasPrefix("cannot listen on 127.0.0.1:\(endpoint.port): ") == true)
    }
}

@Suite("Addresses", .timeLimit(.guarded))
struct AddressTests {
    @Test("IPv6 loopback works end to end")
    func ipv6() async throws {
        try await withServer(host: "::1", handlers: echoHandlers) { _, endpoint in
            #expect(endpoint.host == "::1")
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            #expect(await connection.remoteAddress?.isIPv6 == true)
            #expect(await connection.remoteAddress?.description == "[::1]:\(endpoint.port)")
            let reply = try await connection.request(Request(type: 0x402, json: ["v": 6]))
            #expect(reply.json == ["echo": ["v": 6]])
            await connection.close()
        }
    }

    @Test("localhost resolves and connects")
    func localhost() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: Endpoint(host: "localhost", port: endpoint.port), configuration: testConfiguration())
            #expect(try await connection.request(Request(type: 0x402)).type == 0x402)
            await connection.close()
        }
    }

    @Test("endpoints parse host:port and [v6]:port", arguments: [
        ("127.0.0.1:9000", "127.0.0.1", 9000),
        ("localhost:1", "localhost", 1),
        ("[::1]:9443", "::1", 9443),
        ("::1:80", "::1", 80),
    ])
    func parse(text: String, host: String, port: Int) {
        #expect(Endpoint(parsing: text) == Endpoint(host: host, port: port))
    }

    @Test("bad endpoints are rejected", arguments: ["9000", ":9000", "host:", "host:70000", "[::1]9000"])
    func parseFailure(text: String) {
        #expect(Endpoint(parsing: text) == nil)
    }
}
