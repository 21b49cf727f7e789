import Testing
import TetherTLS
@testable import Tether

/// Tether's TLS against an independent implementation: the `openssl` command's own server
/// and client.
@Suite("TLS interop with openssl s_server and s_client", .serialized, .timeLimit(.guarded))
struct TLSInteropTests {
    /// A Tether client configuration trusting the test CA and verifying `localhost`.
    private func client(_ change: (inout TLSClientOptions) -> Void = { _ in }) async throws -> ConnectionConfiguration {
        var options = TLSClientOptions()
        options.handshakeTimeout = eventBound
        options.trustRoots = .file(try await TestCertificates.shared().caCertificate)
        options.serverName = "localhost"
        change(&options)
        return testConfiguration { $0.tls = .client(options: options) }
    }

    /// `openssl s_client` to a Tether server on 127.0.0.1, verifying it as `localhost`.
    private func sClient(port: Int, _ extraArguments: [String] = []) async throws -> ChildProcess {
        try TestCertificates.openSSLProcess([
            "s_client", "-connect", "127.0.0.1:\(port)", "-CAfile", try await TestCertificates.shared().caCertificate,
            "-servername", "localhost", "-verify_return_error", "-verify_hostname", "localhost", "-brief",
        ] + extraArguments)
    }

    /// A TLS server configuration with the test server certificate.
    private func server(_ clientAuthentication: TLSClientAuthentication = .none) async throws -> @Sendable (inout ServerConfiguration) -> Void {
        let certificates = try await TestCertificates.shared()
        let tls = TLSConfiguration.server(
            certificateChain: certificates.server.certificateChain,
            privateKey: certificates.server.privateKey,
            clientAuthentication: clientAuthentication
        )
        return { $0.tls = tls }
    }

    // MARK: Tether client, openssl server

    @Test("a Tether client completes TLS 1.3 with s_server, and frames cross both ways intact")
    func clientAgainstSServer() async throws {
        let certificates = try await TestCertificates.shared()
        let (server, port) = try await ChildProcess.startOpenSSLServer(certificate: certificates.server)
        defer { server.kill() }
        let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: port), configuration: await client())
        let pushes = connection.notifications
        #expect(await connection.currentState.phase == .connected)
        let details = try #require(await connection.tlsDetails)
        #expect(details.version == "TLSv1.3")
        #expect(details.peerSubject == "/CN=localhost")

        // s_server prints what it decrypts, and sends what it reads on its input.
        try await connection.send(Frame(type: 0x402, serial: 0, payload: Array("1 sent by tether".utf8)))
        _ = try await server.waitForOutput(containing: "1 sent by tether", within: eventBound)
        let push = Frame(type: 0x10, serial: 0, payload: Array("2 pushed by s_server".utf8))
        try server.write(seedBytes(type: push.type, serial: push.serial, payload: push.payload))
        #expect(try await collect(1, from: pushes, "the push from s_server") == [push])
        await connection.close()
    }

    @Test(
        "a Tether client refuses s_server's certificate, naming what failed",
        arguments: [
            ("expired", "certificate verify failed for localhost: certificate has expired"),
            ("wrong name", "host name mismatch: certificate is for other.example, connected to localhost"),
            ("self-signed", "certificate verify failed for localhost: self-signed certificate"),
            ("untrusted CA", "certificate verify failed for localhost: unable to get local issuer certificate"),
            ("pin mismatch", "public key pin mismatch for localhost: the certificate's key is {server}, pinned: {client}"),
        ]
    )
    func clientRefusesSServer(_ situation: String, _ expected: String) async throws {
        let certificates = try await TestCertificates.shared()
        let files = certificates.presented(in: situation)
        let serverPin = try await certificates.pin(of: certificates.server.certificateChain)
        let clientPin = try await certificates.pin(of: certificates.client.certificateChain)
        let (server, port) = try await ChildProcess.startOpenSSLServer(certificate: files)
        defer { server.kill() }
        let configuration = try await client {
            if situation == "untrusted CA" { $0.trustRoots = .file(certificates.otherCACertificate) }
            if situation == "pin mismatch" { $0.pinnedPublicKeys = [clientPin] }
        }
        do {
            let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: port), configuration: configuration)
            Issue.record("connected to s_server with a certificate that should fail: \(situation)")
            await connection.close()
        } catch let error as TetherError {
            #expect(error.code == .certificateRejected)
            #expect(error.message == expected.replacingOccurrences(of: "{server}", with: serverPin).replacingOccurrences(of: "{client}", with: clientPin))
        }
        if situation != "pin mismatch" {
            // The handshake failed inside OpenSSL, which told s_server with an alert.
            _ = try await server.waitForOutput(containing: "alert", within: eventBound)
        }
    }

    @Test("a Tether client presents its certificate to s_server when asked (mutual TLS)")
    func clientCertificateToSServer() async throws {
        let certificates = try await TestCertificates.shared()
        let (server, port) = try await ChildProcess.startOpenSSLServer(
            certificate: certificates.server,
            extraArguments: ["-Verify", "1", "-verify_return_error", "-CAfile", certificates.caCertificate]
        )
        defer { server.kill() }
        let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: port), configuration: await client {
            $0.certificate = certificates.client
        })
        try await connection.send(Frame(type: 0x402, serial: 0, payload: Array("3 with a certificate".utf8)))
        let log = try await server.waitForOutput(containing: "3 with a certificate", within: eventBound)
        #expect(log.contains("depth=0 CN = tether-test-client\nverify return:1"), "\(log)")
        await connection.close()
    }

    @Test("a Tether client without a certificate is refused by s_server requiring one, and connect() says so")
    func noCertificateForSServer() async throws {
        let certificates = try await TestCertificates.shared()
        let (server, port) = try await ChildProcess.startOpenSSLServer(
            certificate: certificates.server,
            extraArguments: ["-Verify", "1", "-verify_return_error", "-CAfile", certificates.caCertificate]
        )
        defer { server.kill() }
        do {
            let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: port), configuration: await client())
            Issue.record("connected without the certificate s_server requires")
            await connection.close()
        } catch let error as TetherError {
            #expect(error.code == .tlsFailed)
            #expect(error.message == "TLS handshake with 127.0.0.1:\(port) failed: peer requires a client certificate")
        }
        _ = try await server.waitForOutput(containing: "peer did not return a certificate", within: eventBound)
    }

    @Test("with a certificate, a Tether client connects to an s_server that sends nothing after its handshake, after the verdict timeout")
    func confirmationWithoutTickets() async throws {
        let certificates = try await TestCertificates.shared()
        let (server, port) = try await ChildProcess.startOpenSSLServer(
            certificate: certificates.server,
            extraArguments: ["-Verify", "1", "-verify_return_error", "-CAfile", certificates.caCertificate, "-num_tickets", "0"]
        )
        defer { server.kill() }
        let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: port), configuration: await client {
            $0.certificate = certificates.client
            $0.serverVerdictTimeout = .milliseconds(200)
        })
        #expect(await connection.tlsDetails?.version == "TLSv1.3")
        try await connection.send(Frame(type: 0x402, serial: 0, payload: Array("5 after the verdict timeout".utf8)))
        _ = try await server.waitForOutput(containing: "5 after the verdict timeout", within: eventBound)
        await connection.close()
    }

    @Test("a Tether client sees s_server killed mid-stream as a stream without close_notify")
    func truncatedStream() async throws {
        let certificates = try await TestCertificates.shared()
        let (server, port) = try await ChildProcess.startOpenSSLServer(certificate: certificates.server)
        defer { server.kill() }
        let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: port), configuration: await client())
        try await connection.send(Frame(type: 0x402, serial: 0, payload: Array("4 before the kill".utf8)))
        _ = try await server.waitForOutput(containing: "4 before the kill", within: eventBound)
        server.kill()
        let final = try await finalState(of: connection)
        #expect(final.reason?.code == .tlsFailed)
        #expect(final.reason?.message == "peer 127.0.0.1:\(port) closed the connection without a TLS close_notify: the stream may be truncated")
    }

    // MARK: openssl client, Tether server

    @Test("s_client completes TLS 1.3 with a Tether server, and a request written through it is answered")
    func sClientAgainstServer() async throws {
        try await withServer(configure: await server(), handlers: echoHandlers) { _, endpoint in
            let client = try await sClient(port: endpoint.port)
            defer { client.kill() }
            let summary = try await client.waitForOutput(containing: "Verification: OK", within: eventBound)
            #expect(summary.contains("Protocol version: TLSv1.3"), "\(summary)")
            #expect(summary.contains("Peer certificate: CN = localhost"), "\(summary)")

            try client.write(seedBytes(type: 0x402, serial: 7, payload: Array(#"{"x":1}"#.utf8)))
            let expected = seedBytes(type: 0x402, serial: 7, payload: Array(#"{"echo":{"x":1}}"#.utf8))
            _ = try await client.waitForOutput("the response frame", within: eventBound) { output in
                output.indices.contains { output[$0...].starts(with: expected) } ? true : nil
            }
        }
    }

    @Test("a Tether server requiring client certificates refuses s_client without one and serves it with one")
    func sClientCertificates() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: await server(.required(trustRoots: certificates.caCertificate)), handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let refused = try await sClient(port: endpoint.port)
            defer { refused.kill() }
            _ = try await refused.waitForOutput(containing: "alert certificate required", within: eventBound)
            #expect(try await refused.waitForExit(within: eventBound) == 1)
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected }, "the refused peer")[0]
            #expect(gone.reason?.code == .tlsFailed)
            #expect(gone.reason?.message.hasSuffix("failed: peer sent no client certificate, and one is required") == true)

            let accepted = try await sClient(port: endpoint.port, ["-cert", certificates.client.certificateChain, "-key", certificates.client.privateKey])
            defer { accepted.kill() }
            _ = try await accepted.waitForOutput(containing: "Verification: OK", within: eventBound)
            try accepted.write(seedBytes(type: 0x402, serial: 9, payload: Array(#"{"y":2}"#.utf8)))
            let expected = seedBytes(type: 0x402, serial: 9, payload: Array(#"{"echo":{"y":2}}"#.utf8))
            _ = try await accepted.waitForOutput("the response frame", within: eventBound) { output in
                output.indices.contains { output[$0...].starts(with: expected) } ? true : nil
            }
        }
    }

    @Test("a Tether server refuses renegotiation from an s_client on TLS 1.2, and keeps serving")
    func renegotiationRefused() async throws {
        try await withServer(configure: await server(), handlers: echoHandlers) { server, endpoint in
            let renegotiator = try TestCertificates.openSSLProcess([
                "s_client", "-connect", "127.0.0.1:\(endpoint.port)", "-CAfile", try await TestCertificates.shared().caCertificate,
                "-servername", "localhost", "-tls1_2",
            ])
            defer { renegotiator.kill() }
            _ = try await renegotiator.waitForOutput(containing: "Verify return code: 0 (ok)", within: eventBound)
            #expect(renegotiator.outputText.contains("Protocol  : TLSv1.2"), "\(renegotiator.outputText)")
            let events = server.events
            // s_client's "R" command asks the server for a renegotiation.
            try renegotiator.write(Array("R\n".utf8))
            _ = try await renegotiator.waitForOutput(containing: "ssl3_read_bytes:no renegotiation", within: eventBound)
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected }, "the peer to end")[0]
            // The server answered with a no_renegotiation alert; s_client gave up on it.
            #expect(gone.reason?.code == .tlsFailed)
            #expect(gone.reason?.message.hasPrefix("TLS with 127.0.0.1:") == true, "\(String(describing: gone.reason))")
            let connection = try await Connection.connect(to: endpoint, configuration: await client())
            #expect(try await connection.request(Request(type: 0x402, json: ["after": true])).json == ["echo": ["after": true]])
            await connection.close()
        }
    }
}
