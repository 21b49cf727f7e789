import COpenSSL
import Tether

/// One connection's TLS on OpenSSL, over two memory BIOs: ciphertext from the socket is
/// written into one, and what OpenSSL wants sent is read out of the other into the
/// channel's buffer, so a loop turn's records go out in one `send`. Loop thread only.
final class OpenSSLSession: TLSSession {
    private let context: SSLContext
    private let ssl: OpaquePointer
    /// Ciphertext from the peer, owned by `ssl`.
    private let incoming: OpaquePointer
    /// Ciphertext for the peer, owned by `ssl`.
    private let outgoing: OpaquePointer
    private let isClient: Bool
    /// The name verified on a client; `nil` on a server.
    private let host: String?
    private let remoteAddress: TetherSocketAddress
    private let pins: [PublicKeyPin]
    private let verdictTimeout: Duration
    private(set) var isEstablished = false
    private(set) var details: TLSDetails?
    private var shutdownSent = false
    /// `SSL_do_handshake` has finished. The session is established then, except on a TLS 1.3
    /// client asked for a certificate: see ``awaitingConfirmation``.
    private var handshakeFinished = false
    /// A TLS 1.3 server judges the client's certificate after the client has finished its
    /// side of the handshake, and answers a refusal with an alert. So a client that was
    /// asked for a certificate counts as established only once the server has sent a
    /// message after the handshake (its session tickets, or data), or after
    /// ``pendingVerdict`` without one: a refusal then fails the handshake, not a connection
    /// that looked open.
    private var awaitingConfirmation = false
    /// The pin of the peer certificate's key, read once the handshake has finished.
    private var peerPin: PublicKeyPin?
    /// The server sent a CertificateRequest during the handshake.
    private var sawCertificateRequest = false
    /// The server sent a handshake message after the handshake finished.
    private var sawPostHandshakeMessage = false
    /// The first verification failure, seen by the verify callback.
    private var verifyFailure: (error: Int32, depth: Int32, names: String, subject: String)?

    /// The most plaintext encrypted by one `SSL_write`: four full TLS records.
    static let writeSlice = 64 << 10

    /// The ex-data slot where each `SSL` points back to its session, for the verify callback.
    private static let sessionSlot = tether_SSL_get_ex_new_index()

    /// The session of an `SSL`, from within an OpenSSL callback on the loop thread.
    static func session(of ssl: OpaquePointer) -> OpenSSLSession? {
        guard let raw = SSL_get_ex_data(ssl, sessionSlot) else { return nil }
        return Unmanaged<OpenSSLSession>.fromOpaque(raw).takeUnretainedValue()
    }

    /// A client session that verifies the server as `host`.
    convenience init(
        context: SSLContext,
        client host: String,
        pins: [PublicKeyPin],
        verdictTimeout: Duration,
        remoteAddress: TetherSocketAddress
    ) throws(TetherError) {
        try self.init(context: context, isClient: true, host: host, pins: pins, verdictTimeout: verdictTimeout, remoteAddress: remoteAddress)
    }

    /// A server session for a client at `remoteAddress`.
    convenience init(context: SSLContext, serverFor remoteAddress: TetherSocketAddress) throws(TetherError) {
        try self.init(context: context, isClient: false, host: nil, pins: [], verdictTimeout: .zero, remoteAddress: remoteAddress)
    }

    private init(
        context: SSLContext,
        isClient: Bool,
        host: String?,
        pins: [PublicKeyPin],
        verdictTimeout: Duration,
        remoteAddress: TetherSocketAddress
    ) throws(TetherError) {
        OpenSSLErrors.clear()
        defer { OpenSSLErrors.clear() }
        guard let ssl = SSL_new(context.pointer) else {
            throw TetherError(code: .tlsFailed, message: "cannot create a TLS session for \(remoteAddress): \(OpenSSLErrors.takeMessage())")
        }
        guard let incoming = BIO_new(BIO_s_mem()), let outgoing = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw TetherError(code: .tlsFailed, message: "cannot create the TLS buffers for \(remoteAddress): \(OpenSSLErrors.takeMessage())")
        }
        // An empty buffer means "wait for more", not end of stream.
        tether_BIO_set_mem_eof_return(incoming, -1)
        tether_BIO_set_mem_eof_return(outgoing, -1)
        SSL_set_bio(ssl, incoming, outgoing)
        self.context = context
        self.ssl = ssl
        self.incoming = incoming
        self.outgoing = outgoing
        self.isClient = isClient
        self.host = host
        self.remoteAddress = remoteAddress
        self.pins = pins
        self.verdictTimeout = verdictTimeout
        SSL_set_ex_data(ssl, Self.sessionSlot, Unmanaged.passUnretained(self).toOpaque())
        if isClient, let host {
            SSL_set_connect_state(ssl)
            SSL_set_msg_callback(ssl, messageCallback)
            // An IP address is checked against the certificate's IP entries and is never
            // sent as SNI; a name is both.
            if X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1 {
                OpenSSLErrors.clear()
                SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
                guard SSL_set1_host(ssl, host) == 1, tether_SSL_set_tlsext_host_name(ssl, host) == 1 else {
                    throw TetherError(code: .tlsFailed, message: "cannot use \"\(host)\" as the TLS server name: \(OpenSSLErrors.takeMessage())")
                }
            }
        } else {
            SSL_set_accept_state(ssl)
        }
    }

    deinit {
        SSL_free(ssl)
    }

    // MARK: TLSSession

    var holdsPartialRecord: Bool {
        // Bytes OpenSSL took from the memory BIO into its record buffer, or left in the BIO.
        SSL_has_pending(ssl) == 1 || BIO_ctrl_pending(incoming) > 0
    }

    func start(output: inout FrameBuffer) throws(TetherError) {
        guard isClient else { return }
        _ = try handshake(output: &output)
    }

    func receive(_ ciphertext: inout FrameBuffer, plaintext: inout FrameBuffer, output: inout FrameBuffer) throws(TetherError) -> TLSProgress {
        OpenSSLErrors.clear()
        defer { OpenSSLErrors.clear() }
        let count = ciphertext.readableBytes
        if count > 0 {
            let written = ciphertext.withReadableBytes { BIO_write(incoming, $0.baseAddress, Int32(clamping: $0.count)) }
            guard Int(written) == count else {
                throw TetherError(code: .tlsFailed, message: "TLS with \(remoteAddress) failed: cannot buffer \(count) bytes of ciphertext")
            }
            ciphertext.moveReaderIndex(forwardBy: count)
        }
        if !handshakeFinished {
            guard try handshake(output: &output) else { return .handshaking }
        }
        defer { drain(into: &output) }
        let plaintextBefore = plaintext.readableBytes
        reading: while true {
            var status: Int32 = 0
            _ = plaintext.withWritableSpace(minimum: 16 << 10) { space -> Int in
                status = SSL_read(ssl, space.baseAddress, Int32(clamping: space.count))
                return status > 0 ? Int(status) : 0
            }
            if status > 0 { continue }
            switch SSL_get_error(ssl, status) {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                break reading
            case SSL_ERROR_ZERO_RETURN:
                return .closed
            default:
                throw failure(during: isEstablished ? "TLS with \(remoteAddress)" : "TLS handshake with \(remoteAddress)")
            }
        }
        if !isEstablished, sawPostHandshakeMessage || plaintext.readableBytes > plaintextBefore {
            establish()
        }
        return isEstablished ? .established : .handshaking
    }

    func send(_ plaintext: inout FrameBuffer, output: inout FrameBuffer) throws(TetherError) {
        OpenSSLErrors.clear()
        defer { OpenSSLErrors.clear() }
        // In slices, each drained before the next, so the memory BIO never holds more than
        // one slice: a large frame does not leave a large buffer behind in OpenSSL.
        while plaintext.readableBytes > 0 {
            let status = plaintext.withReadableBytes {
                SSL_write(ssl, $0.baseAddress, Int32(min($0.count, Self.writeSlice)))
            }
            guard status > 0 else {
                drain(into: &output)
                throw failure(during: "TLS with \(remoteAddress)")
            }
            plaintext.moveReaderIndex(forwardBy: Int(status))
            drain(into: &output)
        }
    }

    var pendingVerdict: Duration? { awaitingConfirmation ? verdictTimeout : nil }

    func establishWithoutVerdict() {
        guard awaitingConfirmation, !isEstablished else { return }
        establish()
    }

    func shutdown(output: inout FrameBuffer) {
        guard isEstablished, !shutdownSent else { return }
        shutdownSent = true
        SSL_shutdown(ssl)
        drain(into: &output)
        OpenSSLErrors.clear()
    }

    func endOfStreamError() -> TetherError {
        if !isEstablished {
            return TetherError(code: .tlsFailed, message: "TLS handshake with \(remoteAddress) failed: the peer closed the connection during the handshake")
        }
        return TetherError(code: .tlsFailed, message: "peer \(remoteAddress) closed the connection without a TLS close_notify: the stream may be truncated")
    }

    func handshakeTimeoutError(after timeout: Duration) -> TetherError {
        let message = "TLS handshake with \(remoteAddress) timed out after \(describe(timeout))"
        guard awaitingConfirmation else { return TetherError(code: .handshakeTimeout, message: message) }
        return TetherError(
            code: .handshakeTimeout,
            message: "\(message): the server asked for a client certificate and sent nothing after the handshake to accept it"
        )
    }

    // MARK: Handshake

    /// Moves the handshake on; `true` once `SSL_do_handshake` has finished, which
    /// establishes the session unless the server's confirmation is awaited.
    private func handshake(output: inout FrameBuffer) throws(TetherError) -> Bool {
        OpenSSLErrors.clear()
        defer { OpenSSLErrors.clear() }
        let status = SSL_do_handshake(ssl)
        if status != 1 {
            let error = SSL_get_error(ssl, status)
            drain(into: &output)
            if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE { return false }
            throw failure(during: "TLS handshake with \(remoteAddress)")
        }
        drain(into: &output)
        handshakeFinished = true
        peerPin = SSL_get0_peer_certificate(ssl).flatMap { PublicKeyPin.of($0) }
        if !pins.isEmpty {
            guard let pin = peerPin, pins.contains(pin) else {
                SSL_shutdown(ssl)
                drain(into: &output)
                shutdownSent = true
                throw TetherError(
                    code: .certificateRejected,
                    message: "public key pin mismatch for \(host ?? remoteAddress.description): the certificate's key is \(peerPin?.description ?? "missing"), pinned: \(pins.map(\.description).joined(separator: ", "))"
                )
            }
        }
        if isClient, sawCertificateRequest, SSL_version(ssl) == TLS1_3_VERSION {
            awaitingConfirmation = true
            return true
        }
        establish()
        return true
    }

    /// The handshake is done and accepted: application bytes may flow.
    private func establish() {
        isEstablished = true
        awaitingConfirmation = false
        if isClient { SSL_set_msg_callback(ssl, nil) }
        let peer = SSL_get0_peer_certificate(ssl)
        details = TLSDetails(
            version: String(cString: SSL_get_version(ssl)),
            cipher: SSL_get_current_cipher(ssl).map { String(cString: SSL_CIPHER_get_name($0)) } ?? "unknown",
            applicationProtocol: selectedProtocol(),
            peerSubject: peer.flatMap { Self.subject(of: $0) },
            peerPublicKeyPin: peerPin?.description
        )
    }

    /// Called by the message callback for each handshake message the server sends.
    func receivedHandshakeMessage(_ type: UInt8) {
        if !handshakeFinished {
            if type == Self.certificateRequest { sawCertificateRequest = true }
        } else {
            sawPostHandshakeMessage = true
        }
    }

    private static let certificateRequest: UInt8 = 13

    private func selectedProtocol() -> String? {
        var name: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &name, &length)
        guard let name, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: name, count: Int(length)), as: UTF8.self)
    }

    /// Moves what OpenSSL wrote for the peer into `output`.
    private func drain(into output: inout FrameBuffer) {
        let pending = Int(BIO_ctrl_pending(outgoing))
        guard pending > 0 else { return }
        _ = output.withWritableSpace(minimum: pending) { space -> Int in
            Int(max(0, BIO_read(outgoing, space.baseAddress, Int32(clamping: pending))))
        }
    }

    // MARK: Errors

    /// Called by the verify callback for a certificate that fails; keeps the first.
    func recordVerifyFailure(_ store: OpaquePointer) {
        guard verifyFailure == nil else { return }
        let certificate = X509_STORE_CTX_get_current_cert(store)
        verifyFailure = (
            error: X509_STORE_CTX_get_error(store),
            depth: X509_STORE_CTX_get_error_depth(store),
            names: certificate.map(Self.names(of:)) ?? "",
            subject: certificate.flatMap(Self.subject(of:)) ?? "unknown"
        )
    }

    /// The error for a failed OpenSSL call: what the verify callback saw, or what the error
    /// queue says, in words.
    private func failure(during what: String) -> TetherError {
        let queued = OpenSSLErrors.take()
        if let failure = verifyFailure {
            let reason = String(cString: X509_verify_cert_error_string(Int(failure.error)))
            if failure.error == X509_V_ERR_HOSTNAME_MISMATCH || failure.error == X509_V_ERR_IP_ADDRESS_MISMATCH {
                return TetherError(
                    code: .certificateRejected,
                    message: "host name mismatch: certificate is for \(failure.names.isEmpty ? "no name" : failure.names), connected to \(host ?? remoteAddress.description)"
                )
            }
            let whose = isClient ? "certificate verify failed for \(host ?? remoteAddress.description)" : "client certificate verify failed for \(remoteAddress)"
            let which = failure.depth == 0 ? "" : " (the certificate at depth \(failure.depth) of the chain, \(failure.subject))"
            return TetherError(code: .certificateRejected, message: "\(whose): \(reason)\(which)")
        }
        let reasons = queued.map(\.reason)
        let text: String
        if reasons.contains(SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED) {
            text = "peer requires a client certificate"
        } else if reasons.contains(SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
            text = "peer sent no client certificate, and one is required"
        } else {
            text = OpenSSLErrors.phrase(queued, fallback: "unexpected end of the TLS stream")
        }
        return TetherError(code: .tlsFailed, message: "\(what) failed: \(text)")
    }

    /// The names a certificate is for, for a mismatch message.
    static func names(of certificate: OpaquePointer) -> String {
        var buffer = [CChar](repeating: 0, count: 1024)
        _ = tether_x509_names(certificate, &buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A certificate's subject in OpenSSL's one-line form.
    static func subject(of certificate: OpaquePointer) -> String? {
        guard let line = X509_NAME_oneline(X509_get_subject_name(certificate), nil, 0) else { return nil }
        defer { tether_OPENSSL_free(line) }
        return String(cString: line)
    }
}

/// The SHA-256 of a certificate's SubjectPublicKeyInfo: what a pinned key is.
struct PublicKeyPin: Hashable, Sendable, CustomStringConvertible {
    let digest: [UInt8]

    /// As `sha256/` and base64.
    var description: String { "sha256/" + Self.base64(digest) }

    /// The pin of a certificate's public key; `nil` when it cannot be encoded.
    static func of(_ certificate: OpaquePointer) -> PublicKeyPin? {
        guard let key = X509_get_X509_PUBKEY(certificate) else { return nil }
        let length = i2d_X509_PUBKEY(key, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let encoded = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_X509_PUBKEY(key, &cursor)
        }
        guard encoded == length else { return nil }
        var digest = [UInt8](repeating: 0, count: 32)
        var digestLength: UInt32 = 0
        guard EVP_Digest(der, der.count, &digest, &digestLength, EVP_sha256(), nil) == 1, digestLength == 32 else {
            OpenSSLErrors.clear()
            return nil
        }
        return PublicKeyPin(digest: digest)
    }

    /// Reads pins written as `sha256/` and base64, or as 64 hex digits.
    static func parse(_ texts: [String]) throws(TetherError) -> [PublicKeyPin] {
        var pins: [PublicKeyPin] = []
        for text in texts {
            guard let pin = parse(text) else {
                throw TetherError(
                    code: .invalidArgument,
                    message: "\"\(text)\" is not a public key pin: expected sha256/ and the base64 of a SHA-256, or 64 hex digits"
                )
            }
            pins.append(pin)
        }
        return pins
    }

    static func parse(_ text: String) -> PublicKeyPin? {
        if text.hasPrefix("sha256/") {
            let encoded = Array(text.utf8.dropFirst(7))
            guard encoded.count == 44 else { return nil }
            var decoded = [UInt8](repeating: 0, count: 33)
            let count = EVP_DecodeBlock(&decoded, encoded, Int32(encoded.count))
            // 44 characters with one `=` decode to 33 bytes, the last of them padding.
            guard count == 33, encoded.last == UInt8(ascii: "="), encoded[42] != UInt8(ascii: "=") else { return nil }
            return PublicKeyPin(digest: Array(decoded.prefix(32)))
        }
        let hex = Array(text.utf8.filter { $0 != UInt8(ascii: ":") })
        guard hex.count == 64 else { return nil }
        var digest: [UInt8] = []
        var index = 0
        while index < 64 {
            guard let high = hexValue(hex[index]), let low = hexValue(hex[index + 1]) else { return nil }
            digest.append(high << 4 | low)
            index += 2
        }
        return PublicKeyPin(digest: digest)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    static func base64(_ bytes: [UInt8]) -> String {
        var encoded = [UInt8](repeating: 0, count: (bytes.count + 2) / 3 * 4 + 1)
        let count = EVP_EncodeBlock(&encoded, bytes, Int32(bytes.count))
        return String(decoding: encoded.prefix(Int(count)), as: UTF8.self)
    }
}

/// Tells a client session about each handshake message the server sends.
private let messageCallback: @convention(c) (
    Int32, Int32, Int32, UnsafeRawPointer?, Int, OpaquePointer?, UnsafeMutableRawPointer?
) -> Void = { writing, _, contentType, bytes, length, ssl, _ in
    guard writing == 0, contentType == SSL3_RT_HANDSHAKE, length > 0, let bytes, let ssl,
        let session = OpenSSLSession.session(of: ssl)
    else { return }
    session.receivedHandshakeMessage(bytes.load(as: UInt8.self))
}
