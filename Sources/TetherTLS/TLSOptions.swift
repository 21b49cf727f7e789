import COpenSSL
public import Tether

/// Where a TLS client finds the certificate authorities it trusts.
public enum TLSTrustRoots: Sendable, Hashable, CustomStringConvertible {
    /// The system's trust store: the file named by `SSL_CERT_FILE` when set, else the CA
    /// bundle where the distribution keeps it (`/etc/ssl/certs/ca-certificates.crt` on
    /// Debian and Ubuntu, `/etc/pki/tls/certs/ca-bundle.crt` on Fedora and RHEL,
    /// `/etc/ssl/ca-bundle.pem` on openSUSE, `/etc/ssl/cert.pem` on Alpine and macOS), else
    /// OpenSSL's built-in default paths.
    case system
    /// The CA certificates in one PEM file, instead of the system's: for a private CA.
    case file(String)

    /// A short textual form, for logs and messages.
    public var description: String {
        switch self {
        case .system: "the system's CAs"
        case .file(let path): "the CAs in \(path)"
        }
    }
}

/// A certificate chain and its private key, as PEM files.
public struct TLSCertificateFiles: Sendable, Hashable {
    /// The certificate first, then the intermediates that lead to the CA, in PEM.
    public var certificateChain: String
    /// The private key of the certificate, in PEM, not encrypted.
    public var privateKey: String

    /// Names the two files.
    ///
    /// - Parameters:
    ///   - certificateChain: The PEM file with the certificate and its intermediates.
    ///   - privateKey: The PEM file with the private key.
    public init(certificateChain: String, privateKey: String) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
    }
}

/// The oldest TLS version a side accepts. TLS 1.3 is always preferred when both sides have it.
public enum TLSMinimumVersion: Sendable, Hashable {
    /// TLS 1.2 and 1.3: the default.
    case tls12
    /// TLS 1.3 only.
    case tls13
}

/// What a TLS client verifies and presents.
public struct TLSClientOptions: Sendable {
    /// The CAs the server's chain must lead to. Default ``TLSTrustRoots/system``.
    public var trustRoots: TLSTrustRoots = .system
    /// The name to send as SNI and to verify the server's certificate against; `nil` uses
    /// the host of the endpoint connected to. An IP address is verified against the
    /// certificate's IP address entries and is not sent as SNI. Default `nil`.
    public var serverName: String?
    /// Public keys the server's certificate must have one of, in addition to a chain that
    /// verifies: each the SHA-256 of a SubjectPublicKeyInfo, as `sha256/` and base64 (what
    /// ``Tether/TLSDetails/peerPublicKeyPin`` and ``Tether/TLSConfiguration/publicKeyPin(ofCertificateFile:)``
    /// print) or as 64 hex digits. Default: none, no pinning.
    public var pinnedPublicKeys: [String] = []
    /// A certificate to present when the server asks for one (mutual TLS). Default `nil`.
    public var certificate: TLSCertificateFiles?
    /// Protocols to offer with ALPN, most preferred first, such as `["tether/1"]`. Default: none.
    public var applicationProtocols: [String] = []
    /// The oldest version accepted. Default ``TLSMinimumVersion/tls12``.
    public var minimumVersion: TLSMinimumVersion = .tls12
    /// How long the handshake may take. Default 10 s.
    public var handshakeTimeout: Duration = .seconds(10)
    /// With TLS 1.3 a client finishes its side of the handshake before the server has
    /// checked its certificate, and a server that refuses it says so with an alert just
    /// after. So a client the server asked for a certificate waits for the server's next
    /// message (its session tickets, or data) before it counts as connected, and a refusal
    /// fails the connect instead of a connection that looked open. A server that sends
    /// nothing after its handshake is taken at its word after this long. Default 1 s.
    public var serverVerdictTimeout: Duration = .seconds(1)

    /// The defaults: the system's CAs, the endpoint's host name, no pinning, no client certificate.
    public init() {}
}

/// Whether a TLS server asks clients for certificates, and which CAs it accepts them from.
public enum TLSClientAuthentication: Sendable, Hashable {
    /// Clients are not asked for a certificate: the default.
    case none
    /// Clients are asked for a certificate and may connect without one; one they send
    /// must verify against the CAs in the PEM file. ``optional(trusting:)`` takes the
    /// roots typed as ``TLSTrustRoots``, as clients give theirs.
    case optional(trustRoots: String)
    /// Clients must send a certificate that verifies against the CAs in the PEM file.
    case required(trustRoots: String)

    /// Clients are asked for a certificate and may connect without one; one they send must
    /// verify against `roots`, given as a client gives its own (``TLSClientOptions/trustRoots``).
    ///
    /// - Parameter roots: The CAs: a PEM file, or ``TLSTrustRoots/system`` for the system's
    ///   bundle (the file ``TLSTrustRoots/system`` names).
    /// - Returns: ``optional(trustRoots:)`` with that file.
    public static func optional(trusting roots: TLSTrustRoots) -> TLSClientAuthentication {
        .optional(trustRoots: roots.bundlePath)
    }

    /// Clients must send a certificate that verifies against `roots`, given as a client
    /// gives its own (``TLSClientOptions/trustRoots``).
    ///
    /// - Parameter roots: The CAs: a PEM file, or ``TLSTrustRoots/system`` for the system's
    ///   bundle (the file ``TLSTrustRoots/system`` names).
    /// - Returns: ``required(trustRoots:)`` with that file.
    public static func required(trusting roots: TLSTrustRoots) -> TLSClientAuthentication {
        .required(trustRoots: roots.bundlePath)
    }
}

extension TLSTrustRoots {
    /// The PEM file of these roots: the file, or the system's bundle (the first of the
    /// usual places that is readable, else the Debian one, which then fails to load with a
    /// message naming it).
    var bundlePath: String {
        switch self {
        case .file(let path): path
        case .system: OpenSSLProvider.systemBundle() ?? OpenSSLProvider.systemBundles[0]
        }
    }
}

/// What a TLS server presents and requires.
public struct TLSServerOptions: Sendable {
    /// The server's certificate chain and key.
    public var certificate: TLSCertificateFiles
    /// Whether clients must present certificates. Default ``TLSClientAuthentication/none``.
    public var clientAuthentication: TLSClientAuthentication = .none
    /// Protocols accepted with ALPN, most preferred first. A client that offers none of them
    /// connects without one. Default: none.
    public var applicationProtocols: [String] = []
    /// The oldest version accepted. Default ``TLSMinimumVersion/tls12``.
    public var minimumVersion: TLSMinimumVersion = .tls12
    /// How long a client's handshake may take before it is closed. Default 10 s.
    public var handshakeTimeout: Duration = .seconds(10)

    /// Options with a certificate and the defaults for the rest.
    ///
    /// - Parameter certificate: The server's certificate chain and key.
    public init(certificate: TLSCertificateFiles) {
        self.certificate = certificate
    }
}

extension TLSConfiguration {
    /// TLS for a connection, on the system's OpenSSL.
    ///
    /// The server's certificate chain must verify against `trustRoots` and be for the host
    /// connected to (or `serverName`), and its key must be one of `pinnedPublicKeys` when
    /// any are given.
    ///
    /// ```swift
    /// configuration.tls = .client()                                   // public CAs
    /// configuration.tls = .client(trustRoots: .file("ca.pem"))        // a private CA
    /// ```
    ///
    /// - Parameters:
    ///   - trustRoots: The CAs to trust. Default: the system's.
    ///   - serverName: The name to verify and send as SNI, if not the endpoint's host.
    ///   - pinnedPublicKeys: SPKI pins the server's key must match one of.
    ///   - certificate: A client certificate for servers that ask for one.
    ///   - applicationProtocols: Protocols to offer with ALPN.
    /// - Returns: The configuration to set as ``ConnectionConfiguration/tls``.
    public static func client(
        trustRoots: TLSTrustRoots = .system,
        serverName: String? = nil,
        pinnedPublicKeys: [String] = [],
        certificate: TLSCertificateFiles? = nil,
        applicationProtocols: [String] = []
    ) -> TLSConfiguration {
        var options = TLSClientOptions()
        options.trustRoots = trustRoots
        options.serverName = serverName
        options.pinnedPublicKeys = pinnedPublicKeys
        options.certificate = certificate
        options.applicationProtocols = applicationProtocols
        return client(options: options)
    }

    /// TLS for a connection, with every option.
    ///
    /// - Parameter options: What to verify and present.
    /// - Returns: The configuration to set as ``ConnectionConfiguration/tls``.
    public static func client(options: TLSClientOptions) -> TLSConfiguration {
        TLSConfiguration(provider: OpenSSLProvider(role: .client(options)))
    }

    /// TLS for a server, on the system's OpenSSL.
    ///
    /// ```swift
    /// configuration.tls = .server(certificateChain: "server.pem", privateKey: "server.key")
    /// ```
    ///
    /// The files are read when the server starts, which throws
    /// ``TetherError/Code/tlsFailed`` if they cannot be.
    ///
    /// - Parameters:
    ///   - certificateChain: The PEM file with the server's certificate and intermediates.
    ///   - privateKey: The PEM file with its private key.
    ///   - clientAuthentication: Whether clients must present certificates.
    /// - Returns: The configuration to set as ``ServerConfiguration/tls``.
    public static func server(
        certificateChain: String,
        privateKey: String,
        clientAuthentication: TLSClientAuthentication = .none
    ) -> TLSConfiguration {
        var options = TLSServerOptions(certificate: TLSCertificateFiles(certificateChain: certificateChain, privateKey: privateKey))
        options.clientAuthentication = clientAuthentication
        return server(options: options)
    }

    /// TLS for a server, with every option.
    ///
    /// - Parameter options: What to present and require.
    /// - Returns: The configuration to set as ``ServerConfiguration/tls``.
    public static func server(options: TLSServerOptions) -> TLSConfiguration {
        TLSConfiguration(provider: OpenSSLProvider(role: .server(options)))
    }
}

extension TLSConfiguration {
    /// The pin of the public key in a PEM certificate file, as `sha256/` and base64: the
    /// value to put in ``TetherTLS/TLSClientOptions/pinnedPublicKeys``.
    ///
    /// - Parameter path: A PEM file; its first certificate is read.
    /// - Returns: The pin.
    /// - Throws: ``TetherError`` with ``TetherError/Code/tlsFailed`` when the file has no
    ///   readable certificate.
    public static func publicKeyPin(ofCertificateFile path: String) throws(TetherError) -> String {
        OpenSSLErrors.clear()
        defer { OpenSSLErrors.clear() }
        guard let file = BIO_new_file(path, "r") else {
            throw TetherError(code: .tlsFailed, message: "cannot open \(path): \(OpenSSLErrors.takeMessage())")
        }
        defer { BIO_free(file) }
        guard let certificate = PEM_read_bio_X509(file, nil, nil, nil) else {
            throw TetherError(code: .tlsFailed, message: "no PEM certificate in \(path): \(OpenSSLErrors.takeMessage())")
        }
        defer { X509_free(certificate) }
        guard let pin = PublicKeyPin.of(certificate) else {
            throw TetherError(code: .tlsFailed, message: "cannot encode the public key of the certificate in \(path)")
        }
        return pin.description
    }
}
