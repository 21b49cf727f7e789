// The code of Documentation.docc/TLS.md ("Encrypted Connections"). Its examples need
// certificate files and a real host name, so they are compiled, not run; the TLS test
// suite (Tests/TetherTests/TLS*.swift) covers the same calls with generated certificates.
import Tether
import TetherTLS

/// The examples' `print`, recorded by the test that runs them (see ``Transcript``).
private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    Transcript.print(items, separator: separator, terminator: terminator)
}

// MARK: - Overview

func tlsOverview() async throws -> (ServerConfiguration, Connection) {
    // Server: a certificate chain and its key, as PEM files.
    var serverConfiguration = ServerConfiguration(host: "0.0.0.0", port: 9443)
    serverConfiguration.tls = .server(certificateChain: "/etc/tether/server.pem",
                                      privateKey: "/etc/tether/server.key")

    // Client: verifies the server against the system's CAs and the host name it connects to.
    var configuration = ConnectionConfiguration.defaults
    configuration.tls = .client()
    let connection = try await Connection.connect(to: Endpoint(host: "chat.example.com", port: 9443),
                                                  configuration: configuration)
    print(await connection.tlsDetails!)   // TLSv1.3 TLS_AES_256_GCM_SHA384 peer=/CN=chat.example.com
    return (serverConfiguration, connection)
}

// MARK: - Pinning a public key

func tlsPinning() -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration.defaults
    configuration.tls = .client(pinnedPublicKeys: ["sha256/kZ1N…=", "sha256/backupKey…="])
    return configuration
}

// MARK: - Mutual TLS

func tlsMutual(
    serverConfiguration: inout ServerConfiguration,
    server: Server,
    configuration: inout ConnectionConfiguration
) {
    serverConfiguration.tls = .server(certificateChain: "server.pem", privateKey: "server.key",
                                      clientAuthentication: .required(trusting: .file("clients-ca.pem")))
    server.handle(type: 0x402) { request, peer in
        let subject = await peer.tlsDetails?.peerSubject    // "/CN=device-42"
        return Response(json: ["hello": .string(subject ?? "stranger")])
    }

    configuration.tls = .client(trustRoots: .file("ca.pem"),
                                certificate: TLSCertificateFiles(certificateChain: "device.pem",
                                                                 privateKey: "device.key"))
}
