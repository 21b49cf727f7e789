import Tether
import TetherTLS

/// `tether pin`: the public key pin of a certificate, for `--pin`.
struct PinCommand: Command {
    static let name = "pin"
    static let summary = "print the public key pin of a PEM certificate, for --pin"
    static let synopsis = "tether pin FILE"
    static let help = """
        Prints the pin of the public key of the first certificate in a PEM file: the
        SHA-256 of its SubjectPublicKeyInfo, as sha256/ and base64. Give it to the commands
        that connect with --pin, so that they accept only a server with that key, even when
        a CA they trust signed another:

          $ tether pin server.pem
          sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=
          $ tether ping localhost:9443 --ca ca.pem --pin sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=

        The pin stays the same when the certificate is renewed with the same key. Pinning
        the key of the CA's certificate does not work: the pin is checked against the
        server's own certificate.

        arguments:
          FILE         a PEM file; its first certificate is read
          -h, --help   show this help
        """

    var path: String

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        path = try Parse.file(try arguments.positional("FILE"), option: "FILE")
    }

    func run() async throws -> ExitStatus {
        Console.out(try TLSConfiguration.publicKeyPin(ofCertificateFile: path))
        return .success
    }
}
