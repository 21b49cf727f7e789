#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import COpenSSL
import Tether

/// An `SSL_CTX`, freed with the last reference. OpenSSL allows creating sessions from one
/// context on many threads at once; it is not changed after it is built.
final class SSLContext: @unchecked Sendable {
    let pointer: OpaquePointer
    /// ALPN protocols in wire form (length-prefixed), kept alive for the server's select callback.
    let alpnWire: [UInt8]

    init(pointer: OpaquePointer, alpnWire: [UInt8]) {
        self.pointer = pointer
        self.alpnWire = alpnWire
    }

    deinit { SSL_CTX_free(pointer) }
}

/// Builds the OpenSSL context of a client or server configuration once, and a session per
/// connection from it.
final class OpenSSLProvider: TLSProvider, @unchecked Sendable {
    // @unchecked Sendable: `role` is immutable; `built` is behind its lock.

    enum Role {
        case client(TLSClientOptions)
        case server(TLSServerOptions)
    }

    let role: Role
    private let built = Lock<Result<SSLContext, TetherError>?>(nil)
    /// The client's pins, read once.
    private let pins: Result<[PublicKeyPin], TetherError>

    init(role: Role) {
        self.role = role
        if case .client(let options) = role {
            do throws(TetherError) {
                pins = .success(try PublicKeyPin.parse(options.pinnedPublicKeys))
            } catch {
                pins = .failure(error)
            }
        } else {
            pins = .success([])
        }
    }

    var handshakeTimeout: Duration {
        switch role {
        case .client(let options): options.handshakeTimeout
        case .server(let options): options.handshakeTimeout
        }
    }

    var description: String {
        switch role {
        case .client(let options):
            var text = "TLS client trusting \(options.trustRoots)"
            if let serverName = options.serverName { text += ", verifying \(serverName)" }
            if !options.pinnedPublicKeys.isEmpty { text += ", \(options.pinnedPublicKeys.count) pinned key(s)" }
            if let certificate = options.certificate { text += ", presenting \(certificate.certificateChain)" }
            return text
        case .server(let options):
            var text = "TLS server presenting \(options.certificate.certificateChain)"
            switch options.clientAuthentication {
            case .none: break
            case .optional(let roots): text += ", asking for client certificates from the CAs in \(roots)"
            case .required(let roots): text += ", requiring client certificates from the CAs in \(roots)"
            }
            return text
        }
    }

    func prepare() throws(TetherError) {
        _ = try pins.get()
        _ = try context()
    }

    func makeSession(host: String?, remoteAddress: TetherSocketAddress) throws(TetherError) -> any TLSSession {
        let context = try context()
        switch role {
        case .client(let options):
            return try OpenSSLSession(
                context: context,
                client: options.serverName ?? host ?? remoteAddress.description,
                pins: try pins.get(),
                verdictTimeout: options.serverVerdictTimeout,
                remoteAddress: remoteAddress
            )
        case .server:
            return try OpenSSLSession(context: context, serverFor: remoteAddress)
        }
    }

    /// The context, built on first use; a failure is kept and thrown again.
    private func context() throws(TetherError) -> SSLContext {
        let result = built.withLock { built -> Result<SSLContext, TetherError> in
            if let built { return built }
            let result: Result<SSLContext, TetherError>
            do throws(TetherError) {
                result = .success(try build())
            } catch {
                result = .failure(error)
            }
            built = result
            return result
        }
        return try result.get()
    }

    private func build() throws(TetherError) -> SSLContext {
        OpenSSLErrors.clear()
        defer { OpenSSLErrors.clear() }
        let method: OpaquePointer?
        switch role {
        case .client: method = TLS_client_method()
        case .server: method = TLS_server_method()
        }
        guard let context = SSL_CTX_new(method) else {
            throw TetherError(code: .tlsFailed, message: "cannot create a TLS context: \(OpenSSLErrors.takeMessage())")
        }
        var alpn: [UInt8] = []
        do throws(TetherError) {
            let minimum: TLSMinimumVersion
            let protocols: [String]
            switch role {
            case .client(let options):
                minimum = options.minimumVersion
                protocols = options.applicationProtocols
            case .server(let options):
                minimum = options.minimumVersion
                protocols = options.applicationProtocols
            }
            guard tether_SSL_CTX_set_min_proto_version(context, minimum == .tls13 ? TLS1_3_VERSION : TLS1_2_VERSION) == 1 else {
                throw TetherError(code: .tlsFailed, message: "cannot set the minimum TLS version: \(OpenSSLErrors.takeMessage())")
            }
            SSL_CTX_set_options(context, tether_SSL_OP_NO_RENEGOTIATION() | tether_SSL_OP_NO_COMPRESSION())
            _ = tether_SSL_CTX_set_mode(context, tether_SSL_MODE_RELEASE_BUFFERS())
            alpn = try Self.alpnWire(protocols)
            switch role {
            case .client(let options):
                try configureClient(context, options, alpn: alpn)
            case .server(let options):
                try configureServer(context, options)
            }
        } catch {
            SSL_CTX_free(context)
            throw error
        }
        let built = SSLContext(pointer: context, alpnWire: alpn)
        if case .server = role, !alpn.isEmpty {
            // The context object outlives the SSL_CTX's use of the pointer: it frees it.
            SSL_CTX_set_alpn_select_cb(context, alpnSelect, Unmanaged.passUnretained(built).toOpaque())
        }
        return built
    }

    private func configureClient(_ context: OpaquePointer, _ options: TLSClientOptions, alpn: [UInt8]) throws(TetherError) {
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, verifyCallback)
        switch options.trustRoots {
        case .system:
            try Self.loadSystemTrust(context)
        case .file(let path):
            try Self.checkReadable(path, "the CA certificates")
            guard SSL_CTX_load_verify_locations(context, path, nil) == 1 else {
                throw TetherError(code: .tlsFailed, message: "cannot load the CA certificates in \(path): \(OpenSSLErrors.takeMessage())")
            }
        }
        if let certificate = options.certificate {
            try Self.useCertificate(certificate, in: context)
        }
        if !alpn.isEmpty {
            // Returns 0 on success, unlike its neighbours.
            guard SSL_CTX_set_alpn_protos(context, alpn, UInt32(alpn.count)) == 0 else {
                throw TetherError(code: .tlsFailed, message: "cannot set the ALPN protocols: \(OpenSSLErrors.takeMessage())")
            }
        }
    }

    private func configureServer(_ context: OpaquePointer, _ options: TLSServerOptions) throws(TetherError) {
        try Self.useCertificate(options.certificate, in: context)
        let roots: String
        var mode = SSL_VERIFY_PEER
        switch options.clientAuthentication {
        case .none:
            SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
            return
        case .optional(let path):
            roots = path
        case .required(let path):
            roots = path
            mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT
        }
        try Self.checkReadable(roots, "the client CA certificates")
        guard SSL_CTX_load_verify_locations(context, roots, nil) == 1 else {
            throw TetherError(code: .tlsFailed, message: "cannot load the client CA certificates in \(roots): \(OpenSSLErrors.takeMessage())")
        }
        guard let names = SSL_load_client_CA_file(roots) else {
            throw TetherError(code: .tlsFailed, message: "cannot read the CA names in \(roots): \(OpenSSLErrors.takeMessage())")
        }
        SSL_CTX_set_client_CA_list(context, names)
        SSL_CTX_set_verify(context, mode, verifyCallback)
    }

    private static func useCertificate(_ files: TLSCertificateFiles, in context: OpaquePointer) throws(TetherError) {
        try checkReadable(files.certificateChain, "the certificate chain")
        try checkReadable(files.privateKey, "the private key")
        guard SSL_CTX_use_certificate_chain_file(context, files.certificateChain) == 1 else {
            throw TetherError(code: .tlsFailed, message: "cannot load the certificate chain in \(files.certificateChain): \(OpenSSLErrors.takeMessage())")
        }
        let mismatch = TetherError(
            code: .tlsFailed,
            message: "the private key in \(files.privateKey) does not match the certificate in \(files.certificateChain)"
        )
        guard SSL_CTX_use_PrivateKey_file(context, files.privateKey, SSL_FILETYPE_PEM) == 1 else {
            let errors = OpenSSLErrors.take()
            if errors.contains(where: { $0.library == ERR_LIB_X509 && $0.reason == X509_R_KEY_VALUES_MISMATCH }) { throw mismatch }
            throw TetherError(code: .tlsFailed, message: "cannot load the private key in \(files.privateKey): \(OpenSSLErrors.phrase(errors))")
        }
        guard SSL_CTX_check_private_key(context) == 1 else {
            OpenSSLErrors.clear()
            throw mismatch
        }
    }

    /// Throws a plain message (`cannot read the private key in x.key: No such file or
    /// directory`) for a file that cannot be opened, where OpenSSL's would be cryptic.
    static func checkReadable(_ path: String, _ what: String) throws(TetherError) {
        guard access(path, R_OK) != 0 else { return }
        let reason = String(cString: strerror(errno))
        throw TetherError(code: .tlsFailed, message: "cannot read \(what) in \(path): \(reason)")
    }

    /// Where distributions keep their CA bundle, most common first.
    static let systemBundles = [
        "/etc/ssl/certs/ca-certificates.crt",  // Debian, Ubuntu, Arch, Gentoo
        "/etc/pki/tls/certs/ca-bundle.crt",  // Fedora, RHEL, CentOS
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 7 and later
        "/etc/ssl/ca-bundle.pem",  // openSUSE
        "/etc/ssl/cert.pem",  // Alpine, macOS
    ]

    /// The CA bundle the system trust store resolves to, or `nil` for OpenSSL's defaults.
    static func systemBundle() -> String? {
        if let named = getenv("SSL_CERT_FILE") { return String(cString: named) }
        return systemBundles.first { access($0, R_OK) == 0 }
    }

    private static func loadSystemTrust(_ context: OpaquePointer) throws(TetherError) {
        if let bundle = systemBundle() {
            guard SSL_CTX_load_verify_locations(context, bundle, nil) == 1 else {
                throw TetherError(code: .tlsFailed, message: "cannot load the system's CA certificates in \(bundle): \(OpenSSLErrors.takeMessage())")
            }
        } else if SSL_CTX_set_default_verify_paths(context) != 1 {
            throw TetherError(code: .tlsFailed, message: "cannot find the system's CA certificates: \(OpenSSLErrors.takeMessage())")
        }
    }

    /// ALPN names in their wire form: each prefixed by its length.
    static func alpnWire(_ protocols: [String]) throws(TetherError) -> [UInt8] {
        var wire: [UInt8] = []
        for name in protocols {
            let bytes = Array(name.utf8)
            guard !bytes.isEmpty, bytes.count <= 255 else {
                throw TetherError(code: .invalidArgument, message: "ALPN protocol name \"\(name)\" must be 1 to 255 bytes long")
            }
            wire.append(UInt8(bytes.count))
            wire.append(contentsOf: bytes)
        }
        return wire
    }
}

/// The server's ALPN choice: its own most preferred protocol that the client offers;
/// without one in common the handshake goes on without ALPN.
private let alpnSelect: @convention(c) (
    OpaquePointer?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, UnsafeMutablePointer<UInt8>?,
    UnsafePointer<UInt8>?, UInt32, UnsafeMutableRawPointer?
) -> Int32 = { _, out, outLength, offered, offeredLength, argument in
    guard let argument, let out, let outLength, let offered else { return SSL_TLSEXT_ERR_NOACK }
    let context = Unmanaged<SSLContext>.fromOpaque(argument).takeUnretainedValue()
    let ours = context.alpnWire
    var index = 0
    while index < ours.count {
        let length = Int(ours[index])
        let candidate = ours[(index + 1)..<(index + 1 + length)]
        var position = 0
        while position < Int(offeredLength) {
            let offeredCount = Int(offered[position])
            if offeredCount == length, position + 1 + offeredCount <= Int(offeredLength),
                candidate.elementsEqual(UnsafeBufferPointer(start: offered + position + 1, count: offeredCount))
            {
                // Point into the client's list, which lives as long as the handshake needs.
                out.pointee = offered + position + 1
                outLength.pointee = UInt8(offeredCount)
                return SSL_TLSEXT_ERR_OK
            }
            position += 1 + offeredCount
        }
        index += 1 + length
    }
    return SSL_TLSEXT_ERR_NOACK
}

/// Records the first certificate that fails verification on its session, for the message.
let verifyCallback: @convention(c) (Int32, OpaquePointer?) -> Int32 = { ok, store in
    guard ok == 0, let store,
        let ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()),
        let session = OpenSSLSession.session(of: OpaquePointer(ssl))
    else { return ok }
    session.recordVerifyFailure(store)
    return ok
}
