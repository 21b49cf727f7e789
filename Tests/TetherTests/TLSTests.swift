#if canImport(Glibc)
import Glibc
#endif
import COpenSSL
import Testing
import TetherTLS
@testable import Tether
import TetherTesting

/// A server configuration change that turns on TLS with `files` (the test server certificate
/// by default).
private func serverTLS(
    _ certificates: TestCertificates,
    files: TLSCertificateFiles? = nil,
    change: @escaping @Sendable (inout TLSServerOptions) -> Void = { _ in }
) -> @Sendable (inout ServerConfiguration) -> Void {
    var options = TLSServerOptions.guarded(files ?? certificates.server)
    change(&options)
    let tls = TLSConfiguration.server(options: options)
    return { $0.tls = tls }
}

/// A test connection configuration with TLS trusting the test CA and verifying `localhost`.
private func clientTLS(
    _ certificates: TestCertificates,
    _ change: (inout TLSClientOptions) -> Void = { _ in },
    configuration: (inout ConnectionConfiguration) -> Void = { _ in }
) -> ConnectionConfiguration {
    var options = TLSClientOptions()
    options.handshakeTimeout = eventBound
    options.trustRoots = .file(certificates.caCertificate)
    options.serverName = "localhost"
    change(&options)
    return testConfiguration {
        $0.tls = .client(options: options)
        configuration(&$0)
    }
}

/// The error a connect throws, or a failed test when it connects.
private func connectError(_ endpoint: Endpoint, _ configuration: ConnectionConfiguration) async throws -> TetherError {
    do {
        let connection = try await bounded("the connect to fail") {
            try await Connection.connect(to: endpoint, configuration: configuration)
        }
        await connection.close()
    } catch let error as TetherError {
        return error
    }
    Issue.record("the connection was accepted")
    return TetherError(code: .invalidArgument, message: "connected")
}

@Suite("TLS between Tether clients and servers", .serialized, .timeLimit(.guarded))
struct TLSTests {
    @Test("requests, pushes and heartbeats cross TLS 1.3 with the server's certificate verified")
    func endToEnd() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: serverTLS(certificates), handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates, configuration: {
                $0.heartbeat = .every(.milliseconds(50), timeout: .seconds(5))
            }))
            let pushes = connection.notifications
            let acked = connection.heartbeats.filter { $0.outcome == .acked }

            let reply = try await connection.request(Request(type: 0x402, json: ["hello": "world"]))
            #expect(reply.type == 0x402)
            #expect(reply.serial == 1)
            #expect(reply.json == ["echo": ["hello": "world"]])

            let details = try #require(await connection.tlsDetails)
            #expect(details.version == "TLSv1.3")
            #expect(details.peerSubject == "/CN=localhost")
            #expect(details.peerPublicKeyPin == (try await certificates.pin(of: certificates.server.certificateChain)))

            let push = Frame(type: 0x3F0, serial: 7, payload: Array("over tls".utf8))
            #expect(await server.broadcast(push) == 1)
            #expect(try await collect(1, from: pushes, "the push") == [push])

            let beats = try await collect(2, from: acked, "two acked heartbeats")
            #expect(beats.count == 2)
            #expect(beats[0].serial < beats[1].serial)

            let metrics = await connection.metrics
            #expect(metrics.requestsCompleted == 1)
            await connection.close()
        }
    }

    @Test("three 192 KiB requests and their echoes cross intact, split over many TLS records and write slices")
    func largePayload() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: serverTLS(certificates), handlers: { server in
            server.handle(type: 0x410) { request, _ in Response(payload: request.payload) }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates))
            // Twelve 16 KiB records and four 64 KiB write slices each. Filled through a
            // pointer: the tests build unoptimized (and run under the thread sanitizer),
            // where large payloads cost far more than here.
            var payload = [UInt8](repeating: 0, count: 192 << 10)
            payload.withUnsafeMutableBufferPointer { bytes in
                var state: UInt32 = 0x1234_5678
                for index in stride(from: 0, to: bytes.count, by: 4) {
                    state = state &* 1_664_525 &+ 1_013_904_223
                    withUnsafeBytes(of: state) { word in
                        UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(bytes)[index..<(index + 4)]).copyMemory(from: word)
                    }
                }
            }
            let expected = payload
            let replies = try await bounded("three echoes") {
                try await withThrowingTaskGroup(of: Response.self) { group in
                    for _ in 0..<3 { group.addTask { try await connection.request(Request(type: 0x410, payload: expected)) } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
            }
            #expect(replies.count == 3)
            for reply in replies {
                let same = reply.payload.count == expected.count && reply.payload.withUnsafeBytes { got in
                    expected.withUnsafeBytes { want in memcmp(got.baseAddress!, want.baseAddress!, want.count) == 0 }
                }
                #expect(same, "an echo of \(reply.payload.count) bytes differs from the request")
            }
            await connection.close()
        }
    }

    @Test("the connection comes back over TLS after the server restarts")
    func reconnect() async throws {
        let certificates = try await TestCertificates.shared()
        let tls = serverTLS(certificates)
        var configuration = TestServer.defaultConfiguration
        tls(&configuration)
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        let connection = try await Connection.connect(to: server.endpoint, configuration: clientTLS(certificates, configuration: {
            $0.reconnect = .backoff(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(100))
        }))
        let watcher = StateWatcher(connection)
        try await watcher.next(.connected)
        #expect(try await connection.request(Request(type: 0x402, json: ["n": 1])).json == ["echo": ["n": 1]])

        await server.stop()
        try await watcher.next(.reconnecting)
        try await server.start()
        try await watcher.next(.connected)
        #expect(try await connection.request(Request(type: 0x402, json: ["n": 2])).json == ["echo": ["n": 2]])
        let metrics = await connection.metrics
        #expect(metrics.connects == 2)
        #expect(await connection.tlsDetails?.version == "TLSv1.3")
        await connection.close()
        await server.stop()
    }

    @Test("a session over TLS: pushes stored while the client was away are replayed after the handshake and the hello")
    func sessionOverTLS() async throws {
        let certificates = try await TestCertificates.shared()
        let tls = serverTLS(certificates)
        try await withServer(configure: { tls(&$0); $0.mailboxes = .inMemory }, handlers: echoHandlers) { server, endpoint in
            for number in 0..<3 { _ = try await server.push(indexed(number), toClient: "alice") }
            let connection = Connection(to: endpoint, configuration: clientTLS(certificates, configuration: {
                $0.session = SessionConfiguration(clientID: "alice")
            }))
            let pushes = connection.notifications
            try await connection.connect()
            let replayed = try await collect(3, from: pushes, "three replayed pushes")
            #expect(replayed == (0..<3).map { Frame(type: 0x10, serial: UInt32($0 + 1), payload: Array("\($0)".utf8)) })
            #expect(try await server.push(indexed(3), toClient: "alice") == 4)
            #expect(try await collect(1, from: pushes, "the live push") == [Frame(type: 0x10, serial: 4, payload: Array("3".utf8))])
            #expect(await connection.lastSequence == 4)
            await connection.close()
        }
    }

    @Test("closing sends close_notify: the server sees a clean close, not a truncated stream")
    func closeNotify() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: serverTLS(certificates), handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates))
            _ = try await connection.request(Request(type: 0x402, json: [:]))
            await connection.close()
            let gone = try await firstEvent(events, "the peer to go") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .peerClosed)
            #expect(gone.reason?.message == "peer \(await connection.localAddress!) closed the connection")
        }
    }

    @Test("a server that closes a peer sends close_notify; the client reports a clean close")
    func serverCloseNotify() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: serverTLS(certificates), handlers: { server in
            server.handle(type: 0x420) { _, peer in
                await peer.close()
                return Response(json: [:])
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates))
            let watcher = StateWatcher(connection)
            await #expect(throws: TetherError.self) { try await connection.request(Request(type: 0x420, json: [:])) }
            let closed = try await watcher.next("the final state") { $0.isFinal }
            #expect(closed.reason?.code == .peerClosed)
        }
    }

    @Test("mutual TLS: the client's certificate is verified and its subject reaches the handler")
    func mutualTLS() async throws {
        let certificates = try await TestCertificates.shared()
        let configure = serverTLS(certificates) { $0.clientAuthentication = .required(trusting: .file(certificates.caCertificate)) }
        try await withServer(configure: configure, handlers: { server in
            server.handle(type: 0x430) { _, peer in
                Response(json: ["subject": .string(await peer.tlsDetails?.peerSubject ?? "none")])
            }
        }) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates) {
                $0.certificate = certificates.client
            })
            let reply = try await connection.request(Request(type: 0x430, json: [:]))
            #expect(reply.json == ["subject": "/CN=tether-test-client"])
            let secured = try await firstEvent(events, "the peer's handshake") { $0.kind == .peerSecured }
            #expect(secured.tls?.peerSubject == "/CN=tether-test-client")
            #expect(secured.tls?.peerPublicKeyPin == (try await certificates.pin(of: certificates.client.certificateChain)))
            #expect(secured.description.hasSuffix(" secured: TLSv1.3 TLS_AES_256_GCM_SHA384 peer=/CN=tether-test-client"))
            await connection.close()
        }
    }

    @Test("mutual TLS: a client without a certificate is refused, and connect() says why")
    func clientCertificateRequired() async throws {
        let certificates = try await TestCertificates.shared()
        let configure = serverTLS(certificates) { $0.clientAuthentication = .required(trustRoots: certificates.caCertificate) }
        try await withServer(configure: configure, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            // TLS 1.3 finishes the client's side of the handshake before the server has
            // checked its certificate: the client waits for the server's word before it
            // counts as connected, so the refusal fails the connect.
            let error = try await connectError(endpoint, clientTLS(certificates))
            #expect(error.code == .tlsFailed)
            #expect(error.message == "TLS handshake with \(endpoint.host):\(endpoint.port) failed: peer requires a client certificate")
            let gone = try await firstEvent(events, "the server to drop the peer") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .tlsFailed)
            #expect(gone.reason?.message.hasSuffix("failed: peer sent no client certificate, and one is required") == true, "\(String(describing: gone.reason))")
        }
    }

    @Test("optional client certificates: a client connects with one or without one, and the server knows which")
    func optionalClientCertificate() async throws {
        let certificates = try await TestCertificates.shared()
        let configure = serverTLS(certificates) { $0.clientAuthentication = .optional(trusting: .file(certificates.caCertificate)) }
        try await withServer(configure: configure, handlers: { server in
            server.handle(type: 0x430) { _, peer in
                Response(json: ["subject": .string(await peer.tlsDetails?.peerSubject ?? "none")])
            }
        }) { _, endpoint in
            let anonymous = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates))
            #expect(try await anonymous.request(Request(type: 0x430, json: [:])).json == ["subject": "none"])
            await anonymous.close()
            let identified = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates) { $0.certificate = certificates.client })
            #expect(try await identified.request(Request(type: 0x430, json: [:])).json == ["subject": "/CN=tether-test-client"])
            await identified.close()
        }
    }

    @Test("mutual TLS: a client certificate from another CA is rejected by the server, and the connect fails")
    func untrustedClientCertificate() async throws {
        let certificates = try await TestCertificates.shared()
        let configure = serverTLS(certificates) { $0.clientAuthentication = .required(trustRoots: certificates.caCertificate) }
        try await withServer(configure: configure, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let error = try await connectError(endpoint, clientTLS(certificates) { $0.certificate = certificates.untrustedClient })
            #expect(error.code == .tlsFailed)
            #expect(error.message == "TLS handshake with \(endpoint.host):\(endpoint.port) failed: tlsv1 alert unknown ca")
            let gone = try await firstEvent(events, "the server to drop the peer") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .certificateRejected)
            #expect(gone.reason?.message.hasPrefix("client certificate verify failed for 127.0.0.1:") == true)
            #expect(gone.reason?.message.hasSuffix(": unable to get local issuer certificate") == true, "\(String(describing: gone.reason))")
        }
    }

    @Test(
        "a server certificate that does not pass fails the connect with what failed and for which host",
        arguments: [
            ("expired", "certificate verify failed for localhost: certificate has expired"),
            ("wrong name", "host name mismatch: certificate is for other.example, connected to localhost"),
            ("self-signed", "certificate verify failed for localhost: self-signed certificate"),
            ("untrusted CA", "certificate verify failed for localhost: unable to get local issuer certificate"),
        ]
    )
    func rejectedCertificates(_ situation: String, _ expected: String) async throws {
        let certificates = try await TestCertificates.shared()
        let files = certificates.presented(in: situation)
        let trust = situation == "untrusted CA" ? certificates.otherCACertificate : certificates.caCertificate
        try await withServer(configure: serverTLS(certificates, files: files), handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let error = try await connectError(endpoint, clientTLS(certificates) { $0.trustRoots = .file(trust) })
            #expect(error.code == .certificateRejected)
            #expect(error.message == expected)
            // The server hears the client's alert.
            let gone = try await firstEvent(events, "the server to drop the peer") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .tlsFailed)
        }
    }

    @Test("the system's trust store loads, and does not trust the test CA")
    func systemTrust() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: serverTLS(certificates), handlers: echoHandlers) { _, endpoint in
            let error = try await connectError(endpoint, clientTLS(certificates) { $0.trustRoots = .system })
            #expect(error.code == .certificateRejected)
            #expect(error.message == "certificate verify failed for localhost: unable to get local issuer certificate")
        }
    }

    @Test("an IP address is verified against the certificate's IP entries, over IPv4 and IPv6")
    func ipAddresses() async throws {
        let certificates = try await TestCertificates.shared()
        for host in ["127.0.0.1", "::1"] {
            try await withServer(host: host, configure: serverTLS(certificates), handlers: echoHandlers) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates) { $0.serverName = nil })
                #expect(try await connection.request(Request(type: 0x402, json: ["host": .string(host)])).json == ["echo": ["host": .string(host)]])
                await connection.close()
            }
        }
        try await withServer(configure: serverTLS(certificates, files: certificates.wrongName), handlers: echoHandlers) { _, endpoint in
            let error = try await connectError(endpoint, clientTLS(certificates) { $0.serverName = nil })
            #expect(error.message == "host name mismatch: certificate is for other.example, connected to 127.0.0.1")
        }
    }

    @Test("a pinned key: the right pin connects, another one fails with both pins named")
    func pinning() async throws {
        let certificates = try await TestCertificates.shared()
        let serverPin = try await certificates.pin(of: certificates.server.certificateChain)
        let otherPin = try await certificates.pin(of: certificates.client.certificateChain)
        try await withServer(configure: serverTLS(certificates), handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates) {
                $0.pinnedPublicKeys = [otherPin, serverPin]
            })
            #expect(await connection.tlsDetails?.peerPublicKeyPin == serverPin)
            await connection.close()

            let error = try await connectError(endpoint, clientTLS(certificates) { $0.pinnedPublicKeys = [otherPin] })
            #expect(error.code == .certificateRejected)
            #expect(error.message == "public key pin mismatch for localhost: the certificate's key is \(serverPin), pinned: \(otherPin)")
        }
    }

    @Test("ALPN: the server picks its preferred protocol among those the client offers")
    func alpn() async throws {
        let certificates = try await TestCertificates.shared()
        let configure = serverTLS(certificates) { $0.applicationProtocols = ["tether/2", "tether/1"] }
        try await withServer(configure: configure, handlers: { server in
            server.handle(type: 0x431) { _, peer in
                Response(json: ["alpn": .string(await peer.tlsDetails?.applicationProtocol ?? "none")])
            }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates) {
                $0.applicationProtocols = ["tether/1", "tether/2"]
            })
            #expect(await connection.tlsDetails?.applicationProtocol == "tether/2")
            #expect(try await connection.request(Request(type: 0x431, json: [:])).json == ["alpn": "tether/2"])
            await connection.close()
        }
    }

    @Test("a server whose TLS handshake never answers fails the connect after the handshake timeout")
    func clientHandshakeTimeout() async throws {
        let certificates = try await TestCertificates.shared()
        // A socket that listens and never accepts: TCP connects, TLS gets no answer.
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        let error = try await connectError(endpoint, clientTLS(certificates) { $0.handshakeTimeout = .milliseconds(200) })
        #expect(error.code == .handshakeTimeout)
        #expect(error.message == "TLS handshake with \(endpoint.host):\(endpoint.port) timed out after 200 ms")
    }

    @Test("a client that stalls mid-handshake is closed at the server's handshake timeout; others are served meanwhile")
    func serverHandshakeTimeout() async throws {
        let certificates = try await TestCertificates.shared()
        let configure = serverTLS(certificates) { $0.handshakeTimeout = .seconds(1) }
        try await withServer(configure: configure, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates))
            let stalled = try RawSocket.connect(to: endpoint)
            // The start of a TLS record header, and then nothing.
            try stalled.write([0x16, 0x03, 0x01, 0x00])
            for n in 0..<5 {
                #expect(try await connection.request(Request(type: 0x402, json: ["n": .int(n)])).json == ["echo": ["n": .int(n)]])
            }
            let gone = try await firstEvent(events, "the stalled peer to be closed") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .handshakeTimeout)
            #expect(gone.reason?.message.hasPrefix("TLS handshake with 127.0.0.1:") == true)
            #expect(gone.reason?.message.hasSuffix(" timed out after 1 s") == true)
            #expect(try await stalled.waitForClose())
            #expect(await connection.currentState.phase == .connected)
            #expect(await server.metrics().handshakeTimeouts == 1)
            await connection.close()
        }
    }

    @Test("garbage instead of a ClientHello closes that connection with what OpenSSL saw; others are untouched")
    func garbageClientHello() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: serverTLS(certificates), handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates))
            let events = server.events
            let garbage = try RawSocket.connect(to: endpoint)
            try garbage.write(Array("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8))
            let gone = try await firstEvent(events, "the server to drop the garbage") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .tlsFailed)
            #expect(gone.reason?.message.hasPrefix("TLS handshake with 127.0.0.1:") == true)
            #expect(gone.reason?.message.contains("failed: http request: 127.0.0.1:") == true, "\(String(describing: gone.reason))")
            #expect(gone.reason?.message.hasSuffix("sent a plaintext HTTP request (\"GET / HTTP/1.1\"), not a TLS handshake: a ws:// or http:// client on a port with TLS?") == true, "\(String(describing: gone.reason))")
            // A plaintext HTTP client is told in HTTP what the port speaks.
            let answer = String(decoding: try await offThread { try garbage.read(4096) }, as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 400 Bad Request\r\n"), "\(answer)")
            #expect(answer.hasSuffix("This port speaks TLS: connect with wss:// (or https://), not ws:// (or http://).\n"), "\(answer)")
            #expect(try await connection.request(Request(type: 0x402, json: ["still": true])).json == ["echo": ["still": true]])
            await connection.close()
        }
    }

    @Test("a plain-TCP client against a TLS server fails at the server with a clear error")
    func plainClientAgainstTLS() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: serverTLS(certificates), handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            await #expect(throws: TetherError.self) { try await connection.request(Request(type: 0x402, json: [:])) }
            let gone = try await firstEvent(events, "the server to drop the plain client") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .tlsFailed)
            await connection.close()
        }
    }

    @Test("files that cannot be loaded fail where they are named: the server's start, the client's connect")
    func configurationErrors() async throws {
        let certificates = try await TestCertificates.shared()
        let missing = certificates.directory + "/missing.pem"
        var configuration = ServerConfiguration(port: 0)
        configuration.tls = .server(certificateChain: missing, privateKey: certificates.server.privateKey)
        let error = await #expect(throws: TetherError.self) { try await Server(configuration: configuration).run() }
        #expect(error?.code == .tlsFailed)
        #expect(error?.message == "cannot read the certificate chain in \(missing): No such file or directory")

        configuration.tls = .server(certificateChain: certificates.server.certificateChain, privateKey: certificates.client.privateKey)
        let mismatch = await #expect(throws: TetherError.self) { try await Server(configuration: configuration).run() }
        #expect(mismatch?.message.hasPrefix("the private key in \(certificates.client.privateKey) does not match the certificate in \(certificates.server.certificateChain)") == true, "\(String(describing: mismatch))")

        try await withServer(configure: serverTLS(certificates), handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let missingCA = try await connectError(endpoint, clientTLS(certificates) { $0.trustRoots = .file(missing) })
            #expect(missingCA.code == .tlsFailed)
            #expect(missingCA.message == "cannot read the CA certificates in \(missing): No such file or directory")

            let badPin = try await connectError(endpoint, clientTLS(certificates) { $0.pinnedPublicKeys = ["sha256/short"] })
            #expect(badPin.code == .invalidArgument)
            #expect(badPin.message.hasPrefix("\"sha256/short\" is not a public key pin") == true)

            // Neither failure opened a socket: the server never saw a peer.
            let connection = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates))
            let first = try await firstEvent(events, "the first peer") { $0.kind == .peerConnected }
            #expect(first.peer == PeerID(rawValue: 1))
            await connection.close()
        }
    }

    @Test("no OpenSSL error is left on the loop thread after failed handshakes")
    func errorQueueIsClean() async throws {
        let certificates = try await TestCertificates.shared()
        let group = TetherEventLoopGroup(loopCount: 1)
        defer { group.shutdown() }
        let onLoop = serverTLS(certificates)
        try await withServer(configure: { onLoop(&$0); $0.eventLoopGroup = group }, handlers: echoHandlers) { _, endpoint in
            for trust in [certificates.otherCACertificate, certificates.caCertificate] {
                let configuration = clientTLS(certificates, { $0.trustRoots = .file(trust) }, configuration: { $0.eventLoopGroup = group })
                if let connection = try? await Connection.connect(to: endpoint, configuration: configuration) {
                    _ = try await connection.request(Request(type: 0x402, json: [:]))
                    await connection.close()
                }
            }
            let loop = group.loops[0]
            let queued = try await bounded("the loop to answer") {
                await withCheckedContinuation { continuation in
                    loop.execute { continuation.resume(returning: ERR_peek_error()) }
                }
            }
            #expect(queued == 0)
        }
    }
}
