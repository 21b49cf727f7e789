import Tether
import TetherTLS

/// `--tls`, `--ca`, `--server-name`, `--cert`, `--key` and `--pin`: TLS for the commands
/// that connect (`request`, `listen`, `ping`, `bench`). Any of them but `--tls` implies it.
struct ClientTLSOptions: Sendable {
    /// Whether to connect with TLS.
    var isEnabled = false
    /// `--ca`: the CAs to trust instead of the system's.
    var caFile: String?
    /// `--server-name`: the name to verify and send as SNI instead of the endpoint's host.
    var serverName: String?
    /// `--cert` and `--key`: the client certificate.
    var certificate: TLSCertificateFiles?
    /// `--pin`, each occurrence: keys the server's certificate must have one of.
    var pins: [String] = []

    /// For the synopsis of each command.
    static let synopsis = "[--tls] [--ca FILE] [--server-name NAME] [--cert FILE --key FILE] [--pin PIN]..."

    /// No TLS.
    init() {}

    /// Takes the options from `arguments`.
    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        isEnabled = arguments.flag("--tls")
        if let path = try arguments.option("--ca") {
            caFile = try Parse.file(path, option: "--ca")
        }
        if let name = try arguments.option("--server-name") {
            guard !name.isEmpty else { throw ArgumentError("--server-name needs a host name") }
            serverName = name
        }
        let certificatePath = try arguments.option("--cert")
        let keyPath = try arguments.option("--key")
        switch (certificatePath, keyPath) {
        case (let chain?, let key?):
            certificate = TLSCertificateFiles(
                certificateChain: try Parse.file(chain, option: "--cert"),
                privateKey: try Parse.file(key, option: "--key")
            )
        case (.some, nil):
            throw ArgumentError("--cert needs --key: the private key of the client certificate")
        case (nil, .some):
            throw ArgumentError("--key needs --cert: the client certificate it is the key of")
        case (nil, nil):
            break
        }
        pins = try arguments.options("--pin")
        for pin in pins where !Self.isPin(pin) {
            throw ArgumentError("--pin '\(pin)' is not a public key pin: sha256/ and 44 base64 characters, as `tether pin` prints, or 64 hex digits")
        }
        if caFile != nil || serverName != nil || certificate != nil || !pins.isEmpty {
            isEnabled = true
        }
    }

    /// A `wss://` endpoint (the one dialed, or the fallback) turns TLS on, as `--tls` does;
    /// a `ws://` endpoint with TLS would not be encrypted, and is refused.
    ///
    /// - Parameter endpoints: The endpoints the command may dial.
    /// - Throws: ``ArgumentError`` for a `ws://` endpoint with TLS options.
    mutating func check(for endpoints: [Endpoint?]) throws(ArgumentError) {
        let webSocket = endpoints.compactMap { $0 }.filter { $0.webSocketPath != nil }
        if webSocket.contains(where: \.webSocketSecure) { isEnabled = true }
        if isEnabled, let plain = webSocket.first(where: { !$0.webSocketSecure }) {
            throw ArgumentError("'\(plain)' is WebSocket without TLS, but TLS is on (--tls, --ca, --server-name, --cert, --pin, or a wss:// endpoint): use wss://")
        }
    }

    /// The configuration to connect with, or `nil` without TLS.
    ///
    /// - Parameter handshakeTimeout: How long the TLS handshake may take, when not the
    ///   library's default.
    func configuration(handshakeTimeout: Duration? = nil) -> TLSConfiguration? {
        guard isEnabled else { return nil }
        var options = TLSClientOptions()
        if let caFile { options.trustRoots = .file(caFile) }
        options.serverName = serverName
        options.certificate = certificate
        options.pinnedPublicKeys = pins
        if let handshakeTimeout { options.handshakeTimeout = handshakeTimeout }
        return .client(options: options)
    }

    /// The options' lines for a command's help, descriptions starting at `column`.
    static func help(column: Int) -> String {
        optionHelp(
            [
                ("--tls", "connect with TLS, verifying the server's certificate against the system's CAs and for HOST (default: plain TCP); each option below implies it"),
                ("--ca FILE", "trust the CAs in this PEM file instead of the system's"),
                ("--server-name NAME", "verify the certificate for NAME, and send NAME as SNI, instead of HOST"),
                ("--cert FILE", "present this client certificate (PEM, with its intermediates) to a server that asks for one; needs --key"),
                ("--key FILE", "the private key of --cert (PEM, not encrypted)"),
                ("--pin PIN", "also require the server's public key to match PIN: sha256/… from `tether pin`, or 64 hex digits; repeat it to accept any of several keys"),
            ],
            column: column
        )
    }

    /// Whether `text` has the form of a pin: `sha256/` and the base64 of 32 bytes (44
    /// characters, the last `=`), or 64 hex digits, optionally separated by colons.
    static func isPin(_ text: String) -> Bool {
        if text.hasPrefix("sha256/") {
            let encoded = Array(text.utf8.dropFirst(7))
            guard encoded.count == 44, encoded[43] == UInt8(ascii: "=") else { return false }
            return encoded[..<43].allSatisfy { byte in
                (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/")
            }
        }
        let digits = text.utf8.filter { $0 != UInt8(ascii: ":") }
        return digits.count == 64 && digits.allSatisfy { byte in
            (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
                || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F"))
        }
    }
}

/// `--tls-cert`, `--tls-key`, `--tls-client-ca` and `--tls-client-ca-optional`: TLS for
/// `tether serve`.
struct ServerTLSOptions: Sendable {
    /// The server's certificate chain and key.
    var certificate: TLSCertificateFiles
    /// Whether clients must present certificates, and from which CAs.
    var clientAuthentication: TLSClientAuthentication = .none

    /// For the synopsis of `serve`.
    static let synopsis = "[--tls-cert FILE --tls-key FILE [--tls-client-ca FILE | --tls-client-ca-optional FILE]]"

    /// Takes the options from `arguments`.
    ///
    /// - Returns: The options, or `nil` when none of them was given: plain TCP.
    static func parse(_ arguments: inout Arguments) throws(ArgumentError) -> ServerTLSOptions? {
        let certificatePath = try arguments.option("--tls-cert")
        let keyPath = try arguments.option("--tls-key")
        let required = try arguments.option("--tls-client-ca")
        let optional = try arguments.option("--tls-client-ca-optional")
        guard let certificatePath, let keyPath else {
            if certificatePath != nil { throw ArgumentError("--tls-cert needs --tls-key: the private key of the server's certificate") }
            if keyPath != nil { throw ArgumentError("--tls-key needs --tls-cert: the certificate it is the key of") }
            if required != nil { throw ArgumentError("--tls-client-ca needs --tls-cert and --tls-key") }
            if optional != nil { throw ArgumentError("--tls-client-ca-optional needs --tls-cert and --tls-key") }
            return nil
        }
        var options = ServerTLSOptions(
            certificate: TLSCertificateFiles(
                certificateChain: try Parse.file(certificatePath, option: "--tls-cert"),
                privateKey: try Parse.file(keyPath, option: "--tls-key")
            )
        )
        switch (required, optional) {
        case (.some, .some):
            throw ArgumentError("--tls-client-ca and --tls-client-ca-optional exclude each other: give one of them")
        case (let path?, nil):
            options.clientAuthentication = .required(trustRoots: try Parse.file(path, option: "--tls-client-ca"))
        case (nil, let path?):
            options.clientAuthentication = .optional(trustRoots: try Parse.file(path, option: "--tls-client-ca-optional"))
        case (nil, nil):
            break
        }
        return options
    }

    /// The configuration to serve with.
    /// The server's TLS, its handshakes bounded by `handshakeTimeout` (`nil`: the default).
    func configuration(handshakeTimeout: Duration?) -> TLSConfiguration {
        var options = TLSServerOptions(certificate: certificate)
        options.clientAuthentication = clientAuthentication
        if let handshakeTimeout { options.handshakeTimeout = handshakeTimeout }
        return .server(options: options)
    }

    /// `TLS, certificate server.pem, client certificates required from the CAs in ca.pem`:
    /// for the line that says where the server listens.
    var summary: String {
        var text = "TLS, certificate \(certificate.certificateChain)"
        switch clientAuthentication {
        case .none: break
        case .optional(let roots): text += ", client certificates optional, from the CAs in \(roots)"
        case .required(let roots): text += ", client certificates required from the CAs in \(roots)"
        }
        return text
    }

    /// The options' lines for the help of `serve`, descriptions starting at `column`.
    static func help(column: Int) -> String {
        optionHelp(
            [
                ("--tls-cert FILE", "serve TLS only, presenting this certificate (PEM, the certificate first, then its intermediates); needs --tls-key"),
                ("--tls-key FILE", "the private key of --tls-cert (PEM, not encrypted)"),
                ("--tls-client-ca FILE", "require a client certificate that verifies against the CAs in this PEM file: clients without one are refused"),
                ("--tls-client-ca-optional FILE", "ask for a client certificate, verified against the CAs in this PEM file when one is sent, but let clients connect without one"),
            ],
            column: column
        )
    }
}

extension Parse {
    /// A file name: an empty one is a mistake on the command line. Whether the file can be
    /// read is for the library to say, when it loads it.
    static func file(_ path: String, option: String) throws(ArgumentError) -> String {
        guard !path.isEmpty else { throw ArgumentError("\(option) needs a file name") }
        return path
    }
}

// MARK: Details

/// `TLSv1.3 TLS_AES_256_GCM_SHA384, server /CN=localhost (sha256/…)`: what a handshake
/// settled, for the commands' output.
///
/// - Parameters:
///   - details: The handshake's outcome.
///   - peer: Who the peer is, `server` or `client`, before its certificate's subject.
func tlsSummary(_ details: TLSDetails, peer: String) -> String {
    var text = "\(details.version) \(details.cipher)"
    if let protocolName = details.applicationProtocol { text += ", ALPN \(protocolName)" }
    if let subject = details.peerSubject {
        text += ", \(peer) \(subject)"
        if let pin = details.peerPublicKeyPin { text += " (\(pin))" }
    } else {
        text += ", no \(peer) certificate"
    }
    return text
}

// MARK: Help layout

/// How wide the help texts are.
let helpWidth = 84

/// Option lines for a help text: `  --name VALUE` and its description from `column` on,
/// wrapped to ``helpWidth``; a name that reaches the column puts its description on the
/// next line.
func optionHelp(_ rows: [(option: String, text: String)], column: Int) -> String {
    var lines: [String] = []
    for row in rows {
        let name = "  " + row.option
        let text = wrap(row.text, width: helpWidth - column, indent: column)
        if name.count + 2 <= column {
            lines.append(name + String(repeating: " ", count: column - name.count) + text)
        } else {
            lines.append(name)
            lines.append(String(repeating: " ", count: column) + text)
        }
    }
    return lines.joined(separator: "\n")
}

/// `text` broken into lines of at most `width` characters between words; each line after
/// the first starts with `indent` spaces.
func wrap(_ text: String, width: Int, indent: Int) -> String {
    var lines: [String] = []
    var line = ""
    for word in text.split(separator: " ") {
        if !line.isEmpty, line.count + 1 + word.count > width {
            lines.append(line)
            line = ""
        }
        line += (line.isEmpty ? "" : " ") + word
    }
    if !line.isEmpty { lines.append(line) }
    return lines.joined(separator: "\n" + String(repeating: " ", count: indent))
}
