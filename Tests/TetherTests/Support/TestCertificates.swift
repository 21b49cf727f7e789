import Foundation
import TetherTLS
@testable import Tether

/// Certificates for TLS tests, made with the `openssl` command at test time, once per test
/// process, in a directory of their own under the system's temporary directory (left there
/// at exit).
///
/// All keys are EC P-256, unencrypted PEM; every chain file holds the one certificate. The
/// test CA signs everything but `untrustedClient` (signed by the other CA) and `selfSigned`.
final class TestCertificates: Sendable {
    /// The generated certificates, made on first use; throws with the failing openssl
    /// command's output if generation fails (and again on every later call).
    ///
    /// The openssl commands are waited for on a thread of their own: a test that blocked
    /// one of the few cooperative threads for that long would delay every other test's
    /// timers and tasks.
    static func shared() async throws -> TestCertificates {
        if let done = ready.withLock({ $0 }) { return try done.get() }
        return try await offThread { try generateOnce() }
    }

    /// Set once the certificates are made (or failed); its lock is never held for long.
    private static let ready = Lock<Result<TestCertificates, any Error>?>(nil)
    /// Held while generating, so parallel tests wait for the one set; counts the
    /// generations run. (Not a lock over `Void`: a zero-sized value shares its address with
    /// the lock's mutex field, and the thread sanitizer reports the two as racing.)
    private static let generating = Lock<Int>(0)

    /// The certificate a server presents in a failure test: "expired", "wrong name",
    /// "self-signed", or (for anything else) the good server certificate.
    func presented(in situation: String) -> TLSCertificateFiles {
        switch situation {
        case "expired": expired
        case "wrong name": wrongName
        case "self-signed": selfSigned
        default: server
        }
    }

    private static func generateOnce() throws -> TestCertificates {
        try generating.withLock { runs in
            if let done = ready.withLock({ $0 }) { return try done.get() }
            runs += 1
            let result = Result { try TestCertificates() }
            ready.withLock { $0 = result }
            return try result.get()
        }
    }

    /// Starts `openssl arguments` at the test process's own CPU priority.
    ///
    /// Not lowered: on a machine whose cores are busy with other work, a process at the
    /// lowest priority gets almost no CPU, so making the certificates took tens of seconds
    /// and an s_server could miss the bound for printing its ACCEPT line. Its CPU use is
    /// small, and the tests that run meanwhile compare times on their own event loops.
    static func openSSLProcess(_ arguments: [String], workingDirectory: String? = nil) throws -> ChildProcess {
        try ChildProcess(openSSL, arguments, workingDirectory: workingDirectory)
    }

    /// The `openssl` executable: the first in `PATH`, or /usr/bin/openssl.
    static let openSSL: String = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates = path.split(separator: ":").map { "\($0)/openssl" }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/usr/bin/openssl"
    }()

    let directory: String
    /// The test CA's certificate (PEM): CA:TRUE, keyCertSign.
    let caCertificate: String
    /// A second CA, unrelated to the first.
    let otherCACertificate: String
    /// CN=localhost; SAN DNS:localhost, IP:127.0.0.1, IP:::1; EKU serverAuth.
    let server: TLSCertificateFiles
    /// CN=tether-test-client; EKU clientAuth.
    let client: TLSCertificateFiles
    /// Signed by the other CA: CN=stranger; EKU clientAuth.
    let untrustedClient: TLSCertificateFiles
    /// The names of `server`, valid only from 2020-01-01 to 2020-01-02.
    let expired: TLSCertificateFiles
    /// CN=other.example; SAN DNS:other.example only; EKU serverAuth.
    let wrongName: TLSCertificateFiles
    /// Self-signed, not by the CA: CN=localhost; SAN DNS:localhost, IP:127.0.0.1.
    let selfSigned: TLSCertificateFiles

    private init() throws {
        let base = FileManager.default.temporaryDirectory.path
        directory = "\(base)/tether-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        try Self.configuration.write(toFile: "\(directory)/openssl.cnf", atomically: false, encoding: .utf8)
        // The database and serial that `openssl ca` keeps.
        try "".write(toFile: "\(directory)/index.txt", atomically: false, encoding: .utf8)
        try "1000\n".write(toFile: "\(directory)/serial.txt", atomically: false, encoding: .utf8)

        let directory = directory
        func files(_ name: String) -> TLSCertificateFiles {
            TLSCertificateFiles(certificateChain: "\(directory)/\(name).pem", privateKey: "\(directory)/\(name).key")
        }
        let newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc"]
        let tenYears = ["-days", "3650"]
        func selfSign(_ name: String, subject: String, extensions: String) throws {
            try Self.run(["req", "-x509", "-config", "openssl.cnf"] + newKey + tenYears + [
                "-keyout", "\(name).key", "-out", "\(name).pem", "-subj", subject, "-extensions", extensions,
            ], in: directory)
        }
        func issue(_ name: String, by issuer: String, subject: String, extensions: String) throws {
            try Self.run(["req", "-x509", "-config", "openssl.cnf", "-CA", "\(issuer).pem", "-CAkey", "\(issuer).key"]
                + newKey + tenYears + [
                    "-keyout", "\(name).key", "-out", "\(name).pem", "-subj", subject, "-extensions", extensions,
                ], in: directory)
        }

        try selfSign("ca", subject: "/CN=Tether Test CA", extensions: "ca_extensions")
        try selfSign("other-ca", subject: "/CN=Tether Other Test CA", extensions: "ca_extensions")
        try issue("server", by: "ca", subject: "/CN=localhost", extensions: "server_extensions")
        try issue("client", by: "ca", subject: "/CN=tether-test-client", extensions: "client_extensions")
        try issue("untrusted-client", by: "other-ca", subject: "/CN=stranger", extensions: "client_extensions")
        try issue("wrong-name", by: "ca", subject: "/CN=other.example", extensions: "wrong_name_extensions")
        try selfSign("self-signed", subject: "/CN=localhost", extensions: "self_signed_extensions")
        // `x509 -days` and `req -days` only count from now: a validity in the past takes
        // `openssl ca`, its database and explicit dates.
        try Self.run(["req", "-new", "-config", "openssl.cnf"] + newKey + [
            "-keyout", "expired.key", "-out", "expired.csr", "-subj", "/CN=localhost",
        ], in: directory)
        try Self.run([
            "ca", "-batch", "-config", "openssl.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
            "-in", "expired.csr", "-out", "expired.pem", "-notext", "-extensions", "server_extensions",
            "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
        ], in: directory)

        caCertificate = "\(directory)/ca.pem"
        otherCACertificate = "\(directory)/other-ca.pem"
        server = files("server")
        client = files("client")
        untrustedClient = files("untrusted-client")
        expired = files("expired")
        wrongName = files("wrong-name")
        selfSigned = files("self-signed")
    }

    /// The `sha256/<base64>` pin of the public key of `certificate` (a PEM file), as the
    /// openssl commands compute it:
    /// `x509 -pubkey | pkey -pubin -outform der | dgst -sha256 -binary | base64`.
    func pin(of certificate: String) async throws -> String {
        try await offThread { try self.pinBlocking(of: certificate) }
    }

    private func pinBlocking(of certificate: String) throws -> String {
        let stem = "\(directory)/pin-\(UUID().uuidString)"
        defer {
            for file in ["\(stem).pub.pem", "\(stem).pub.der", "\(stem).sha256"] {
                try? FileManager.default.removeItem(atPath: file)
            }
        }
        try Self.run(["x509", "-in", certificate, "-noout", "-pubkey", "-out", "\(stem).pub.pem"], in: directory)
        try Self.run(["pkey", "-pubin", "-in", "\(stem).pub.pem", "-outform", "der", "-out", "\(stem).pub.der"], in: directory)
        try Self.run(["dgst", "-sha256", "-binary", "-out", "\(stem).sha256", "\(stem).pub.der"], in: directory)
        guard let digest = FileManager.default.contents(atPath: "\(stem).sha256"), digest.count == 32 else {
            throw OpenSSLFailed(command: "openssl dgst -sha256 -binary", problem: "no 32-byte digest", output: "")
        }
        return "sha256/" + digest.base64EncodedString()
    }

    /// Runs `openssl arguments` in `directory`, waiting at most 30 s (then SIGKILL); throws
    /// with its output (stdout and stderr) unless it exits with status 0.
    private static func run(_ arguments: [String], in directory: String) throws {
        // In `directory`, where the relative file names of `arguments` and of the
        // configuration are.
        let child = try openSSLProcess(arguments, workingDirectory: directory)
        defer { child.kill() }
        let command = (["openssl"] + arguments).joined(separator: " ")
        let status: Int32
        do {
            status = try child.waitForExitBlocking(within: .seconds(30))
        } catch {
            throw OpenSSLFailed(command: command, problem: "did not finish within 30 s", output: child.outputText)
        }
        guard status == 0 else {
            throw OpenSSLFailed(command: command, problem: "exit status \(status)", output: child.outputText)
        }
    }

    /// The configuration for `req` and `ca`: extension sections for every kind of
    /// certificate, and a minimal CA for `openssl ca` (database, serial, any subject).
    private static let configuration = """
        [req]
        distinguished_name = distinguished_name
        prompt = no

        [distinguished_name]
        CN = replaced by -subj

        [ca_extensions]
        basicConstraints = critical, CA:TRUE
        keyUsage = critical, keyCertSign, cRLSign
        subjectKeyIdentifier = hash

        [server_extensions]
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature
        extendedKeyUsage = serverAuth
        subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1
        subjectKeyIdentifier = hash
        authorityKeyIdentifier = keyid

        [client_extensions]
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature
        extendedKeyUsage = clientAuth
        subjectKeyIdentifier = hash
        authorityKeyIdentifier = keyid

        [wrong_name_extensions]
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature
        extendedKeyUsage = serverAuth
        subjectAltName = DNS:other.example
        subjectKeyIdentifier = hash
        authorityKeyIdentifier = keyid

        [self_signed_extensions]
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature
        extendedKeyUsage = serverAuth
        subjectAltName = DNS:localhost, IP:127.0.0.1
        subjectKeyIdentifier = hash

        [ca]
        default_ca = test_ca

        [test_ca]
        database = index.txt
        serial = serial.txt
        new_certs_dir = .
        default_md = sha256
        policy = any_subject
        unique_subject = no
        email_in_dn = no

        [any_subject]
        commonName = supplied

        """
}

/// An openssl command failed while making or reading the test certificates.
struct OpenSSLFailed: Error, CustomStringConvertible {
    var command: String
    var problem: String
    var output: String
    var description: String { "\(command): \(problem); its output:\n\(output)" }
}

extension TLSServerOptions {
    /// Options for a test server with `certificate`, whose handshake timeout is the tests'
    /// guard (``eventBound``) rather than 10 s of real time a busy machine can stretch: for
    /// tests that do not time the handshake.
    static func guarded(_ certificate: TLSCertificateFiles) -> TLSServerOptions {
        var options = TLSServerOptions(certificate: certificate)
        options.handshakeTimeout = eventBound
        return options
    }
}
