#if canImport(Glibc)
import Glibc
#endif
import Testing
import TetherTLS
@testable import Tether

/// The TLS test fixtures themselves: the generated certificates are what they claim to be,
/// and `ChildProcess` runs, talks to and ends openssl's client and server.
@Suite("TLS fixtures", .serialized, .timeLimit(.guarded))
struct TLSFixtureTests {
    // MARK: - Certificates

    @Test("the server and client certificates verify against the test CA, for their purposes")
    func issuedByTheCA() async throws {
        let certificates = try await TestCertificates.shared()
        let server = try await openssl(["verify", "-purpose", "sslserver", "-CAfile", certificates.caCertificate, certificates.server.certificateChain])
        #expect(server.status == 0, "\(server.output)")
        #expect(server.output.contains("\(certificates.server.certificateChain): OK"))

        let client = try await openssl(["verify", "-purpose", "sslclient", "-CAfile", certificates.caCertificate, certificates.client.certificateChain])
        #expect(client.status == 0, "\(client.output)")
        #expect(client.output.contains("\(certificates.client.certificateChain): OK"))

        let names = try await openssl(["x509", "-in", certificates.server.certificateChain, "-noout", "-subject", "-ext", "subjectAltName"])
        #expect(names.output.contains("subject=CN = localhost"))
        #expect(names.output.contains("DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1"))
    }

    @Test("the test CA is a CA that may sign certificates")
    func caExtensions() async throws {
        let certificates = try await TestCertificates.shared()
        let ca = try await openssl(["x509", "-in", certificates.caCertificate, "-noout", "-ext", "basicConstraints,keyUsage"])
        #expect(ca.status == 0, "\(ca.output)")
        #expect(ca.output.contains("CA:TRUE"))
        #expect(ca.output.contains("Certificate Sign"))
    }

    @Test("the untrusted client certificate verifies against the other CA only")
    func untrustedClient() async throws {
        let certificates = try await TestCertificates.shared()
        let stranger = certificates.untrustedClient.certificateChain
        let byOther = try await openssl(["verify", "-purpose", "sslclient", "-CAfile", certificates.otherCACertificate, stranger])
        #expect(byOther.status == 0, "\(byOther.output)")
        let byTestCA = try await openssl(["verify", "-CAfile", certificates.caCertificate, stranger])
        #expect(byTestCA.status != 0)
        #expect(byTestCA.output.contains("unable to get local issuer certificate"), "\(byTestCA.output)")
    }

    @Test("the expired certificate was valid on 2020-01-01 only and fails verification")
    func expired() async throws {
        let certificates = try await TestCertificates.shared()
        let verification = try await openssl(["verify", "-CAfile", certificates.caCertificate, certificates.expired.certificateChain])
        #expect(verification.status != 0)
        #expect(verification.output.contains("certificate has expired"), "\(verification.output)")

        let details = try await openssl(["x509", "-in", certificates.expired.certificateChain, "-noout", "-startdate", "-enddate", "-ext", "subjectAltName"])
        #expect(details.output.contains("notBefore=Jan  1 00:00:00 2020 GMT"), "\(details.output)")
        #expect(details.output.contains("notAfter=Jan  2 00:00:00 2020 GMT"), "\(details.output)")
        #expect(details.output.contains("DNS:localhost, IP Address:127.0.0.1"))
    }

    @Test("the wrong-name certificate is issued by the CA for other.example only")
    func wrongName() async throws {
        let certificates = try await TestCertificates.shared()
        let names = try await openssl(["x509", "-in", certificates.wrongName.certificateChain, "-noout", "-ext", "subjectAltName"])
        let lines = names.output.split(separator: "\n").map { $0.trimmingSpaces }
        #expect(lines == ["X509v3 Subject Alternative Name:", "DNS:other.example"], "\(names.output)")

        let verification = try await openssl(["verify", "-CAfile", certificates.caCertificate, certificates.wrongName.certificateChain])
        #expect(verification.status == 0, "\(verification.output)")
        let forLocalhost = try await openssl([
            "verify", "-CAfile", certificates.caCertificate, "-verify_hostname", "localhost", certificates.wrongName.certificateChain,
        ])
        #expect(forLocalhost.status != 0)
        #expect(forLocalhost.output.contains("hostname mismatch"), "\(forLocalhost.output)")
    }

    @Test("the self-signed certificate fails against the CA, and verifies against itself")
    func selfSigned() async throws {
        let certificates = try await TestCertificates.shared()
        let certificate = certificates.selfSigned.certificateChain
        let byCA = try await openssl(["verify", "-CAfile", certificates.caCertificate, certificate])
        #expect(byCA.status != 0)
        #expect(byCA.output.contains("self-signed certificate"), "\(byCA.output)")
        let byItself = try await openssl(["verify", "-CAfile", certificate, certificate])
        #expect(byItself.status == 0, "\(byItself.output)")
    }

    @Test("a pin is sha256/ and 44 characters of base64, the same every time, one per key")
    func pins() async throws {
        let certificates = try await TestCertificates.shared()
        let pin = try await certificates.pin(of: certificates.server.certificateChain)
        #expect(pin.hasPrefix("sha256/"))
        let encoded = pin.dropFirst("sha256/".count)
        #expect(encoded.count == 44)
        #expect(encoded.hasSuffix("="))
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
        #expect(encoded.allSatisfy(alphabet.contains), "\(pin)")

        #expect(try await certificates.pin(of: certificates.server.certificateChain) == pin)
        // The library, reading the same file in-process, agrees with the openssl command.
        #expect(try TLSConfiguration.publicKeyPin(ofCertificateFile: certificates.server.certificateChain) == pin)
        #expect(try await certificates.pin(of: certificates.client.certificateChain) != pin)
        #expect(try await certificates.pin(of: certificates.expired.certificateChain) != pin)
        await #expect(throws: OpenSSLFailed.self) { try await certificates.pin(of: "\(certificates.directory)/missing.pem") }
    }

    // MARK: - openssl s_server

    // s_server and s_client against Tether are in TLSInteropTests.

    @Test("s_server refuses arguments that would move it off 127.0.0.1")
    func serverStaysOnLoopback() async throws {
        let certificates = try await TestCertificates.shared()
        await #expect(throws: OpenSSLServerFailed.self) {
            _ = try await ChildProcess.startOpenSSLServer(certificate: certificates.server, extraArguments: ["-port", "4433"])
        }
    }

    // MARK: - ChildProcess

    @Test("a child gets what is written to its stdin, and exits at its end")
    func childInputAndOutput() async throws {
        let cat = try ChildProcess("cat", [])
        defer { cat.kill() }
        let bytes = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        try cat.write(bytes)
        #expect(try await cat.waitForOutputBytes(count: bytes.count, from: 0, within: eventBound) == bytes)
        try cat.write([1, 2, 3])
        #expect(try await cat.waitForOutputBytes(count: 3, from: bytes.count, within: eventBound) == [1, 2, 3])
        cat.closeInput()
        #expect(try await cat.waitForExit(within: eventBound) == 0)
    }

    @Test("a wait that times out reports the output so far")
    func timeoutHasOutput() async throws {
        let cat = try ChildProcess("cat", [])
        defer { cat.kill() }
        try cat.write(Array("something else\n".utf8))
        _ = try await cat.waitForOutput(containing: "something else", within: eventBound)
        let error = await #expect(throws: TimedOut.self) {
            try await cat.waitForOutput(containing: "never printed", within: .milliseconds(50))
        }
        #expect(error?.description.contains("something else") == true, "\(String(describing: error))")
    }

    @Test("a wait for output ends as soon as the child's output does")
    func outputEnds() async throws {
        let version = try TestCertificates.openSSLProcess(["version"])
        defer { version.kill() }
        let start = ContinuousClock.now
        let error = await #expect(throws: ChildProcessEnded.self) {
            try await version.waitForOutput(containing: "never printed", within: eventBound)
        }
        #expect(ContinuousClock.now - start < eventBound / 2)
        #expect(error?.description.contains("OpenSSL 3") == true, "\(String(describing: error))")
        #expect(try await version.waitForExit(within: eventBound) == 0)
    }

    // MARK: - Helpers

    /// Runs `openssl arguments` to its end: its exit status and its output (stdout and stderr).
    private func openssl(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let child = try TestCertificates.openSSLProcess(arguments)
        defer { child.kill() }
        let status = try await child.waitForExit(within: eventBound)
        return (status, child.outputText)
    }
}

private extension Substring {
    var trimmingSpaces: Substring {
        var trimmed = self
        while trimmed.first == " " { trimmed = trimmed.dropFirst() }
        while trimmed.last == " " { trimmed = trimmed.dropLast() }
        return trimmed
    }
}

