/// Encryption for a connection or a server: TLS.
///
/// Tether's core carries no TLS code of its own. The `TetherTLS` module makes these values,
/// on the system's OpenSSL 3, so a program that never uses TLS never needs OpenSSL:
///
/// ```swift
/// import Tether
/// import TetherTLS
///
/// var configuration = ConnectionConfiguration.defaults
/// configuration.tls = .client()                     // verify against the system's CAs
///
/// var serverConfiguration = ServerConfiguration(port: 9443)
/// serverConfiguration.tls = .server(certificateChain: "server.pem", privateKey: "server.key")
/// ```
///
/// Nothing else changes: requests, pushes, heartbeats, sessions and reconnects work the same
/// over TLS. A TLS handshake that fails (a certificate that does not verify, a host name
/// mismatch, a handshake that times out) fails the connect attempt with
/// ``TetherError/Code/tlsFailed`` or ``TetherError/Code/certificateRejected`` and a message
/// that says what failed and for which host.
public struct TLSConfiguration: Sendable, CustomStringConvertible {
    /// The engine that makes each connection's TLS session.
    package let provider: any TLSProvider

    /// Wraps an engine; `TetherTLS` makes these.
    package init(provider: any TLSProvider) {
        self.provider = provider
    }

    /// How long a TLS handshake may take before the connection is closed with
    /// ``TetherError/Code/handshakeTimeout``.
    public var handshakeTimeout: Duration { provider.handshakeTimeout }

    /// What the configuration does, for logs: the role and what it verifies.
    public var description: String { provider.description }
}

/// What a TLS handshake settled, for logs and for authorizing a peer by its certificate.
public struct TLSDetails: Sendable, Hashable, CustomStringConvertible {
    /// The protocol version, such as `TLSv1.3`.
    public var version: String
    /// The cipher suite, such as `TLS_AES_256_GCM_SHA384`.
    public var cipher: String
    /// The application protocol chosen by ALPN, when both sides offered one.
    public var applicationProtocol: String?
    /// The subject of the peer's certificate (the server's on a client; the client's on a
    /// server that asked for one), in OpenSSL's one-line form, such as `/CN=localhost`.
    public var peerSubject: String?
    /// The SHA-256 of the peer certificate's public key (its SPKI), as `sha256/` and base64:
    /// the form a connection's pinned keys take.
    public var peerPublicKeyPin: String?

    /// Creates details; `TetherTLS` fills them in after a handshake.
    ///
    /// - Parameters:
    ///   - version: The protocol version.
    ///   - cipher: The cipher suite.
    ///   - applicationProtocol: The ALPN protocol, if any.
    ///   - peerSubject: The subject of the peer's certificate, if it sent one.
    ///   - peerPublicKeyPin: The pin of the peer's public key, if it sent a certificate.
    public init(version: String, cipher: String, applicationProtocol: String? = nil, peerSubject: String? = nil, peerPublicKeyPin: String? = nil) {
        self.version = version
        self.cipher = cipher
        self.applicationProtocol = applicationProtocol
        self.peerSubject = peerSubject
        self.peerPublicKeyPin = peerPublicKeyPin
    }

    /// A short textual form, for logs and messages.
    public var description: String {
        var text = "\(version) \(cipher)"
        if let applicationProtocol { text += " alpn=\(applicationProtocol)" }
        if let peerSubject { text += " peer=\(peerSubject)" }
        return text
    }
}

/// Makes the TLS session of each connection. Implementations are thread-safe.
package protocol TLSProvider: Sendable, CustomStringConvertible {
    /// How long a handshake may take.
    var handshakeTimeout: Duration { get }

    /// Loads what the sessions need (certificates, keys, trust roots), once; later calls
    /// return at once, or throw the same error again. Called where a failure is best
    /// reported: when a server starts, before a connection's first attempt.
    func prepare() throws(TetherError)

    /// A session for one connection to (client) or from (server) `remoteAddress`.
    ///
    /// - Parameters:
    ///   - host: The host the client connects to, for SNI and certificate verification;
    ///     `nil` on a server.
    ///   - remoteAddress: The peer's address, for messages.
    func makeSession(host: String?, remoteAddress: TetherSocketAddress) throws(TetherError) -> any TLSSession
}

/// Where a session's handshake stands after it took bytes.
package enum TLSProgress: Sendable {
    /// Still handshaking.
    case handshaking
    /// The handshake is done; application bytes flow.
    case established
    /// The peer sent its close_notify: no more bytes will come.
    case closed
}

/// One connection's TLS, over buffers: the channel reads ciphertext from the socket and
/// hands it over, and sends what the session puts in `output`. Loop thread only.
package protocol TLSSession: AnyObject {
    /// Whether the handshake has finished.
    var isEstablished: Bool { get }
    /// What the handshake settled, once established.
    var details: TLSDetails? { get }

    /// Starts the handshake: a client puts its hello in `output`.
    func start(output: inout FrameBuffer) throws(TetherError)

    /// Takes all of `ciphertext` read from the socket; appends the plaintext it decrypts to
    /// `plaintext` and whatever must be sent back (handshake messages, alerts) to `output`.
    ///
    /// - Throws: ``TetherError`` when the handshake or a record fails; `output` may then
    ///   hold an alert worth sending before closing.
    func receive(_ ciphertext: inout FrameBuffer, plaintext: inout FrameBuffer, output: inout FrameBuffer) throws(TetherError) -> TLSProgress

    /// Whether ciphertext of a record that has not arrived whole is held, after
    /// ``receive(_:plaintext:output:)`` took everything it could: what a peer that trickles
    /// a record byte by byte leaves behind.
    var holdsPartialRecord: Bool { get }

    /// Encrypts all of `plaintext` into `output`. Only once established.
    func send(_ plaintext: inout FrameBuffer, output: inout FrameBuffer) throws(TetherError)

    /// Once the handshake has finished but the session waits for the server's verdict on the
    /// client's certificate (TLS 1.3): how long to wait for it before counting the session
    /// as established anyway. `nil` when nothing is awaited.
    var pendingVerdict: Duration? { get }

    /// Counts the session as established without the server's verdict, after
    /// ``pendingVerdict`` has passed.
    func establishWithoutVerdict()

    /// Puts a close_notify in `output`, once established; nothing otherwise.
    func shutdown(output: inout FrameBuffer)

    /// The error for a socket that reached its end before the peer's close_notify: a
    /// handshake cut short, or a stream that may be truncated.
    func endOfStreamError() -> TetherError

    /// The error for a handshake that did not finish within `timeout`.
    func handshakeTimeoutError(after timeout: Duration) -> TetherError
}
