import Testing
import TetherTLS
import TetherTesting
@testable import Tether

/// The error the first connect of `connection` ends with, within the bound.
private func connectError(of connect: Task<Void, any Error>) async throws -> TetherError? {
    let outcome = try await bounded("the connect to end") { await connect.result }
    guard case .failure(let error) = outcome else {
        Issue.record("the connect succeeded")
        return nil
    }
    return error as? TetherError
}

/// Connects, handshakes and the time a frame may take, each on a manual clock: checked at
/// its deadline and 1 ns before it.
@Suite("Connect and handshake timeouts on a manual clock", .timeLimit(.guarded))
struct ManualTimeHandshakeTests {
    @Test("a connect that gets no answer fails with connectTimedOut exactly at the connect timeout")
    func connectTimeout() async throws {
        try await withManualLoop { clock, group in
            // A listener with a full backlog that never accepts: the kernel stops answering SYNs.
            let (listener, endpoint) = try RawSocket.listen(backlog: 0)
            defer { listener.close() }
            var fillers: [RawSocket] = []
            defer { fillers.forEach { $0.close() } }
            for _ in 0..<8 {
                guard let filler = try? RawSocket.connect(to: endpoint, timeout: .milliseconds(200)) else { break }
                fillers.append(filler)
            }
            let connection = Connection(to: endpoint, configuration: testConfiguration {
                $0.eventLoopGroup = group
                $0.connectTimeout = .seconds(30)
            })
            let watcher = StateWatcher(connection)
            let connecting = Task { try await connection.connect() }
            // The attempt is set up on the loop in the turn that announced it, before the
            // advance lets any time pass.
            try await watcher.next(.connecting)
            await clock.advance(by: .seconds(30) - .nanoseconds(1))
            #expect(await connection.currentState.phase == .connecting)
            await clock.advance(by: .nanoseconds(1))
            let error = try await connectError(of: connecting)
            #expect(error?.code == .connectTimedOut)
            #expect(error?.message == "connecting to \(endpoint.host):\(endpoint.port) timed out after 30 s")
        }
    }

    @Test("a server whose TLS handshake never answers fails the connect exactly at the client's TLS handshake timeout")
    func clientTLSHandshakeTimeout() async throws {
        let certificates = try await TestCertificates.shared()
        try await withManualLoop { clock, group in
            let (listener, endpoint) = try RawSocket.listen()
            defer { listener.close() }
            var options = TLSClientOptions()
            options.trustRoots = .file(certificates.caCertificate)
            options.serverName = "localhost"
            options.handshakeTimeout = .seconds(20)
            let connection = Connection(to: endpoint, configuration: testConfiguration {
                $0.eventLoopGroup = group
                $0.tls = .client(options: options)
            })
            let connecting = Task { try await connection.connect() }
            let server = try await listener.accept()
            defer { server.close() }
            // The ClientHello has gone out, so the handshake's timer is set.
            #expect(try await offThread { try server.read(5) }.first == 0x16)
            await clock.advance(by: .seconds(20) - .nanoseconds(1))
            #expect(await connection.currentState.phase == .connecting)
            await clock.advance(by: .nanoseconds(1))
            let error = try await connectError(of: connecting)
            #expect(error?.code == .handshakeTimeout)
            #expect(error?.message == "TLS handshake with \(endpoint.host):\(endpoint.port) timed out after 20 s")
        }
    }

    @Test("a client that stalls mid-handshake is closed exactly at the server's TLS handshake timeout")
    func serverTLSHandshakeTimeout() async throws {
        let certificates = try await TestCertificates.shared()
        try await withManualLoop { clock, group in
            var options = TLSServerOptions(certificate: certificates.server)
            options.handshakeTimeout = .seconds(5)
            let tls = TLSConfiguration.server(options: options)
            try await withServer(configure: {
                $0.eventLoopGroup = group
                $0.tls = tls
                $0.handshakeTimeout = nil
                $0.idleTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let stalled = try RawSocket.connect(to: endpoint)
                defer { stalled.close() }
                _ = try await firstEvent(events, "the peer to connect") { $0.kind == .peerConnected }
                // The start of a TLS record header, and then nothing.
                try stalled.write([0x16, 0x03, 0x01, 0x00])
                await clock.advance(by: .seconds(5) - .nanoseconds(1))
                #expect(server.peerCount == 1)
                await clock.advance(by: .nanoseconds(1))
                let gone = try await firstEvent(events, "the stalled peer to be closed") { $0.kind == .peerDisconnected }
                #expect(gone.reason?.code == .handshakeTimeout)
                #expect(gone.reason?.message.hasSuffix(" timed out after 5 s") == true)
                #expect(try await stalled.waitForClose())
                #expect(await server.metrics().handshakeTimeouts == 1)
            }
        }
    }

    @Test("a server that never answers the session hello fails the connect exactly at the hello timeout")
    func helloTimeout() async throws {
        try await withTestNetwork { network in
            let (checking, checkingSink) = AsyncStream.makeStream(of: String.self)
            try await withNetworkServer(on: network, configure: {
                $0.mailboxes = .inMemory
            }, handlers: { server in
                // The hello reaches the server, whose check never ends.
                server.authenticate { hello in
                    checkingSink.yield(hello.clientID)
                    await untilCancelled()
                }
            }) { _, endpoint in
                let connection = Connection(to: endpoint, configuration: session("quinn", on: network) {
                    $0.reconnect = .disabled
                    $0.session?.helloTimeout = .seconds(15)
                })
                let connecting = Task { try await connection.connect() }
                // The hello has gone out, so its timer is set.
                #expect(try await firstElement(of: checking) == "quinn")
                await network.advance(by: .seconds(15) - .nanoseconds(1))
                #expect(await connection.currentState.phase == .connecting)
                await network.advance(by: .nanoseconds(1))
                let error = try await connectError(of: connecting)
                #expect(network.clock.elapsed == .seconds(15))
                #expect(error?.code == .timedOut)
                #expect(error?.message == "127.0.10.1:9000 did not answer the session hello within 15 s")
            }
        }
    }

    @Test("a peer that starts a frame and sends nothing more is closed exactly at the frame-completion timeout")
    func frameCompletionTimeout() async throws {
        try await withManualLoop { clock, group in
            try await withServer(configure: {
                $0.eventLoopGroup = group
                $0.frameCompletionTimeout = .seconds(20)
                $0.handshakeTimeout = nil
                $0.idleTimeout = nil
            }, handlers: echoHandlers) { server, endpoint in
                let events = server.events
                let socket = try RawSocket.connect(to: endpoint)
                defer { socket.close() }
                let local = try Syscall.localAddress(socket.fd).port
                // One write: a whole frame and the first 12 bytes of the next, read together.
                let next = seedBytes(type: 0x402, serial: 2, payload: Array(repeating: 0x20, count: 100))
                try socket.write(seedBytes(type: 0x402, serial: 1) + next.prefix(12))
                // Answered, so the bytes after it have been read too.
                #expect(try await socket.readFrame()?.serial == 1)
                await clock.advance(by: .seconds(20) - .nanoseconds(1))
                #expect(server.peerCount == 1)
                await clock.advance(by: .nanoseconds(1))
                #expect(try await socket.waitForClose())
                let gone = try await firstEvent(events, "the peer to be closed") { $0.kind == .peerDisconnected }
                #expect(gone.reason?.code == .frameTimeout)
                #expect(gone.reason?.message == "peer 127.0.0.1:\(local) did not finish a frame within 20 s of its first byte (12 bytes of it received)")
                let metrics = await server.metrics()
                #expect(metrics.frameTimeouts == 1)
                #expect(metrics.framesIn == 1)
            }
        }
    }
}
