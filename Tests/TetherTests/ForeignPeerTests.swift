import Testing
import TetherTLS
@testable import Tether

/// A client configuration with TLS trusting the test CA and verifying `localhost`.
private func clientTLS(_ certificates: TestCertificates) -> ConnectionConfiguration {
    var options = TLSClientOptions()
    options.handshakeTimeout = eventBound
    options.trustRoots = .file(certificates.caCertificate)
    options.serverName = "localhost"
    return testConfiguration { $0.tls = .client(options: options) }
}

@Suite("Errors that name the real problem when the peer speaks something else", .timeLimit(.guarded))
struct ForeignPeerTests {
    @Test("bytes recognised as HTTP or TLS, and bytes that are neither")
    func recognize() {
        #expect(ForeignProtocol.recognize(httpBadRequest[...]) == .httpResponse("HTTP/1.1 400 Bad Request"))
        #expect(ForeignProtocol.recognize(Array("GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n".utf8)[...]) == .httpRequest("GET /index.html HTTP/1.1"))
        #expect(ForeignProtocol.recognize([0x16, 0x03, 0x01, 0x02, 0x00, 0x01][...]) == .tlsHandshake)
        #expect(ForeignProtocol.recognize([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46][...]) == .tlsAlert(70))
        #expect(ForeignProtocol.recognize([0x15, 0x03, 0x03][...]) == .tlsAlert(nil))
        #expect(ForeignProtocol.recognize(seedBytes(type: 0x402, serial: 1, payload: [1, 2])[...]) == nil)
        #expect(ForeignProtocol.recognize([0x16, 0x04, 0x01][...]) == nil)
        #expect(ForeignProtocol.recognize([][...]) == nil)
    }

    @Test("a client connected to an HTTP server: protocolError that says HTTP and wrong port, not a frame length")
    func clientMeetsHTTP() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        try await acceptAndFail(listener, count: 1)
        let final = try await finalState(of: connection)
        let reason = try #require(final.reason)
        #expect(reason.code == .protocolError)
        #expect(reason.message == "the peer \(endpoint) answered with HTTP (\"HTTP/1.1 400 Bad Request\"), not seed frames: wrong port, or a web server or proxy in the way?")
        #expect((reason.underlying as? TetherError)?.code == .frameTooLarge)
    }

    @Test("the budget spent on an HTTP server ends with the HTTP hint")
    func budgetEndsWithHint() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .milliseconds(10), attempts: 1))
        try await acceptAndFail(listener, count: 2)
        let final = try await finalState(of: connection)
        #expect(final.phase == .failed)
        #expect(final.reason?.code == .protocolError)
        #expect(final.reason?.message == "gave up on \(endpoint) after 1 reconnect attempt: the peer \(endpoint) answered with HTTP (\"HTTP/1.1 400 Bad Request\"), not seed frames: wrong port, or a web server or proxy in the way?")
    }

    @Test("a peer that answers with a TLS alert and closes: the client says the peer seems to speak TLS")
    func clientMeetsTLSAlert() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        // A fatal protocol_version alert, as a TLS server sends to bytes that are not TLS.
        try await acceptAndFail(listener, count: 1, answer: [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46])
        let reason = try #require(try await finalState(of: connection).reason)
        #expect(reason.code == .protocolError)
        #expect(reason.message == "the peer \(endpoint) seems to speak TLS: it answered with a TLS alert (protocol_version); does the server need TLS (ConnectionConfiguration.tls)?")
    }

    @Test("a plaintext client against Tether's TLS server: the first bytes it sends are answered so it says TLS")
    func plaintextClientMeetsTLSServer() async throws {
        let certificates = try await TestCertificates.shared()
        let tls = TLSConfiguration.server(options: TLSServerOptions.guarded(certificates.server))
        try await withServer(configure: { $0.tls = tls }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let error = await #expect(throws: TetherError.self) { _ = try await connection.request(Request(type: 0x402), timeout: .seconds(10)) }
            let reason = try #require(error?.underlying as? TetherError)
            #expect(reason.code == .protocolError, "\(reason)")
            #expect(reason.message.hasPrefix("the peer \(endpoint) seems to speak TLS: "), "\(reason.message)")
            #expect(reason.message.hasSuffix("; does the server need TLS (ConnectionConfiguration.tls)?"), "\(reason.message)")
            let gone = try await firstEvent(events, "the server to drop the plain client") { $0.kind == .peerDisconnected }
            #expect(gone.reason?.code == .tlsFailed)
            // The request's header: type 0x402, serial 1.
            #expect(gone.reason?.message.hasSuffix(": \(gone.address) sent bytes that are not TLS (0x0000040200000001) instead of a TLS handshake: a peer without TLS?") == true, "\(String(describing: gone.reason))")
            await connection.close()
        }
    }

    @Test("a TLS client against a plaintext server: the server says it got a ClientHello on a port without TLS")
    func tlsClientMeetsPlainServer() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            await #expect(throws: TetherError.self) {
                _ = try await Connection.connect(to: endpoint, configuration: clientTLS(certificates))
            }
            let ended = try await firstEvent(events, "the peer's end") { $0.kind == .peerDisconnected }
            #expect(ended.reason?.code == .protocolError)
            #expect(ended.reason?.message.hasSuffix(" sent a TLS handshake (a ClientHello) to a port without TLS: the client expects TLS, and this server has none configured") == true, "\(String(describing: ended.reason))")
        }
    }

    @Test("an HTTP request on the server's port: logged as such and answered with a 400 that says what the port speaks")
    func serverMeetsHTTP() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let browser = try RawSocket.connect(to: endpoint)
            try browser.write(Array("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8))
            let answer = try await offThread { try browser.read(4096, timeout: eventBound) }
            let body = "This port speaks the Tether seed protocol, not HTTP or WebSocket: connect without ws://.\n"
            #expect(String(decoding: answer, as: UTF8.self) == "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)")
            let ended = try await firstEvent(events, "the peer's end") { $0.kind == .peerDisconnected }
            #expect(ended.reason?.code == .protocolError)
            #expect(ended.reason?.message == "\(ended.address) sent an HTTP request (\"GET / HTTP/1.1\") to a port that speaks seed frames: an HTTP client on the wrong port?")
        }
    }

    @Test(
        "a server at its connection limit tells the refused client why: tooManyConnections, not a reset",
        arguments: [false, true]
    )
    func refusedAtTheLimit(heartbeats: Bool) async throws {
        try await withServer(configure: { $0.maximumConnections = 1 }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let first = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            // A first frame at once: a peer that sends nothing is closed by the server's
            // handshake timeout (10 s), which a busy machine can reach before the end.
            #expect(try await first.request(Request(type: 0x402)).type == 0x402)
            _ = try await collect(1, from: events.filter { $0.kind == .peerConnected })
            // With heartbeats the refused client writes at once, so the server closes with
            // unread bytes (a reset): the refusal is still read first.
            let second = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                if heartbeats { $0.heartbeat = .every(.seconds(5)) }
            })
            let reason = try #require(try await finalState(of: second).reason)
            #expect(reason.code == .tooManyConnections)
            #expect(reason.message == "\(endpoint) is at its connection limit and refused the connection: the server is at its limit of 1 connection")
            let rejected = try await collect(1, from: events.filter { $0.kind == .peerRejected })
            #expect(rejected.first?.reason?.code == .tooManyConnections)
            #expect(try await first.request(Request(type: 0x402)).type == 0x402)
            await first.close()
        }
    }
}
