import Foundation
import Tether
import TetherHTTP

/// `tether request`: one request, its response on stdout.
struct RequestCommand: Command {
    static let name = "request"
    static let summary = "send one request and print the response content"
    static let synopsis = """
        tether request (HOST:PORT | ws://HOST:PORT/PATH | wss://HOST:PORT/PATH) (--type TYPE [--json JSON | --text TEXT | --file PATH] | --http-get URL [--header NAME:VALUE]...) \
        [--profile NAME] [--field NAME=VALUE]... [--client-id ID [--idempotency-key KEY]] \
        [--timeout SECONDS] [--heartbeat fixed|adaptive] [--heartbeat-interval SECONDS] [--heartbeat-timeout SECONDS] [--max-missed N] \
        \(VerboseOption.synopsis) \(FallbackOption.synopsis) \(ProxyOption.synopsis) \(ClientTLSOptions.synopsis)
        """
    static let briefHelp: String? = """
        Connects, sends one request, prints the response content (UTF-8) on stdout and
        exits 0. An error response ({"error": "…"}) prints its message on stderr and exits 1.

          tether request 127.0.0.1:9000 --type 0x402 --json '{"hello": "world"}'
          tether request 127.0.0.1:9000 --http-get http://127.0.0.1:8080/status

        common options:
        \(optionHelp([
            ("HOST:PORT", "the server: 127.0.0.1:9000, [::1]:9000, or ws://HOST:PORT/PATH, wss://…"),
            ("--type TYPE", "the request type: above 0x400 in the seed profile"),
            ("--json JSON", "the content, checked to be JSON (default: no content)"),
            ("--text TEXT", "the content as it is, UTF-8"),
            ("--file PATH", "the content read from a file, as it is"),
            ("--http-get URL", "have the server GET this http or https URL"),
            ("--profile NAME", "the wire format (default seed; `tether profiles`)"),
            ("--timeout SECONDS", "limit for connecting and for the response (default 10)"),
            ("--verbose", "print on stderr how the connection was opened"),
            ("--fallback URL", "a ws:// or wss:// endpoint for when HOST:PORT cannot connect"),
            ("--tls", "connect with TLS; --ca FILE trusts other CAs than the system's"),
        ], column: 23))
        """
    static let help = """
        Connects, sends one request, prints the response content (UTF-8) on stdout and
        exits 0. An error response ({"error": "…"}) prints its message on stderr and exits 1.

          tether request 127.0.0.1:9000 --type 0x402 --json '{"hello": "world"}'
          tether request 127.0.0.1:9000 --profile lines --text 'hello'
          tether request 127.0.0.1:9000 --profile marker --field destination=7 --field source=1 --text on

        With --http-get, the server performs an HTTP GET for it (type 0x403; the server
        must allow the host, see `tether serve --http-allow`). The status and headers go
        to stderr, the body to stdout as it is; a status of 400 or more exits 1:

          tether request 127.0.0.1:9000 --http-get http://127.0.0.1:8080/status
          tether: HTTP 200 from http://127.0.0.1:8080/status
          tether: Content-Type: application/json

        With --profile, it speaks another wire format (`tether profiles`). In marker and
        lines --type may be left out: their one request type, 0x401, is the default.
        --field sets a header field of the profile (marker: destination, source;
        seed-extended: version, contentType; compact: version). The response's header
        fields are printed on stderr, in wire order:

          tether: fields destination=1 source=7

        In seed-extended, whose frames carry a SHA-256 of the body, a response whose
        checksum does not match prints `tether: checksum failed` on stderr and exits 1 (in
        marker a frame with a bad CRC is skipped, and the request times out).

        Heartbeats are off unless a heartbeat option is given. With them, a server that
        stops answering is found before --timeout: the connection counts as lost after
        MAX-MISSED misses in a row and the request fails at once (exit 1). Profiles without
        heartbeats (marker, lines) refuse the heartbeat options.

        When stderr is a terminal, a request or response of 1 MiB or more draws its progress
        there, one line redrawn every 256 KiB:

          tether request 127.0.0.1:9000 --type 0x402 --file photo.json
          tether: sending 0x402 serial 1: 3145728 of 52428812 bytes (6 %)

        With TLS, what the handshake settled is printed on stderr before the response:

          tether: TLSv1.3 TLS_AES_256_GCM_SHA384, server /CN=localhost (sha256/…)

        With --verbose, how the connection was opened is printed on stderr first: the
        address and family that won (a host's IPv6 and IPv4 addresses are raced), the
        connect and resolution times, the time until ready (TLS and a session included),
        and every address tried when there were several:

          tether: connected to 127.0.0.1:9000 (IPv4) in 0.412 ms, resolved in 0.095 ms, ready in 0.530 ms
          tether:   tried [::1]:9000 after 0.000 ms: failed in 0.051 ms: connection refused by [::1]:9000
          tether:   tried 127.0.0.1:9000 after 0.052 ms: connected in 0.201 ms

        And with TLS, a certificate that fails to verify fails the request (exit 1) with the reason:

          tether: certificate verify failed for localhost: certificate has expired

        arguments:
          HOST:PORT                      the server: 127.0.0.1:9000, localhost:9000, [::1]:9000
          ws://HOST:PORT/PATH            the server's WebSocket endpoint (ws://127.0.0.1:8080/tether)
          wss://HOST:PORT/PATH           the same over TLS (port 443 by default); turns TLS on
                                         with the options below
          --type TYPE                    the request type: above 0x400 in the seed profile;
                                         0x401 (the default) in marker and lines
        \(ProfileOption.help(column: 33))
          --json JSON                    the content, checked to be JSON (default: no content)
          --text TEXT                    the content as it is, UTF-8: a line in the lines
                                         profile
          --file PATH                    the content read from a file, as it is
          --http-get URL                 have the server GET this http or https URL (type
                                         0x403 unless --type says otherwise)
          --header NAME:VALUE            an HTTP header for --http-get; repeat it for several
          --field NAME=VALUE             a header field of the profile, decimal or hex;
                                         repeat it for several
          --client-id ID                 identify with a session as this client (1 to 256 bytes)
          --idempotency-key KEY          with --client-id: the request runs once on the
                                         server, however often it is sent again after a
                                         break; a repeat of the key gets the first answer
          --timeout SECONDS              limit for connecting, for the TLS handshake and for
                                         the response (default 10)
          --heartbeat fixed|adaptive     a fixed interval (the default once heartbeats are
                                         on) or one that adapts to the network, from 30 s
                                         up to 9 min; adaptive refuses --heartbeat-interval
          --heartbeat-interval SECONDS   time between heartbeats (default 10 once heartbeats
                                         are on)
          --heartbeat-timeout SECONDS    how long each ack may take (default half the
                                         interval, or 5 when no interval is given)
          --max-missed N                 misses in a row that count the connection as lost
                                         (default 3)
        \(VerboseOption.help(column: 33))
        \(FallbackOption.help(column: 33))
        \(ProxyOption.help(column: 33))
        \(ClientTLSOptions.help(column: 33))
          -h, --help                     show this help
        """

    var endpoint: Endpoint
    var profile = Profile.seed
    var type: UInt32
    var payload: [UInt8] = []
    var fields: [String: UInt64] = [:]
    var timeout: Duration = .seconds(10)
    var clientID: String?
    var idempotencyKey: String?
    var heartbeat = HeartbeatOptions()
    var tls = ClientTLSOptions()
    var verbose = false
    var fallback: FallbackPolicy?
    var proxy: HTTPProxy?
    var http: HTTPRequest?

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        profile = try ProfileOption.parse(&arguments)
        if let url = try arguments.option("--http-get") {
            var request = HTTPRequest.get(url)
            for header in try arguments.options("--header") {
                guard let colon = header.firstIndex(of: ":"), colon != header.startIndex else {
                    throw ArgumentError("--header \(header): write it as NAME:VALUE")
                }
                request.headers.add(name: String(header[..<colon]),
                                    value: String(header[header.index(after: colon)...].drop { $0 == " " }))
            }
            http = request
        } else if !(try arguments.options("--header")).isEmpty {
            throw ArgumentError("--header needs --http-get")
        }
        if let type = try arguments.option("--type") {
            self.type = try Parse.frameType(type, option: "--type")
            guard profile.kind(of: self.type) == .message else {
                let types = profile.typeList(of: .message) ?? "none"
                throw ArgumentError("--type \(hex(self.type)) is not a request type in the \(profile.name) profile (\(types))")
            }
        } else if http != nil {
            self.type = 0x403
            guard profile.kind(of: type) == .message else {
                throw ArgumentError("--http-get: 0x403 is not a request type in the \(profile.name) profile; name one with --type")
            }
        } else if let type = profile.onlyRequestType {
            // The profile has one request type: no need to name it.
            self.type = type
        } else {
            throw ArgumentError("missing --type")
        }
        let json = try arguments.option("--json")
        let text = try arguments.option("--text")
        let file = try arguments.option("--file")
        if http != nil, json != nil || text != nil || file != nil {
            throw ArgumentError("--http-get sends an HTTP request; it takes no --json, --text or --file")
        }
        if let file {
            guard json == nil, text == nil else { throw ArgumentError("--file: give the content once, with --json, --text or --file") }
            guard let bytes = FileManager.default.contents(atPath: file) else {
                throw ArgumentError("--file \(file): cannot read it")
            }
            payload = Array(bytes)
        } else if let content = try Parse.content(json: json, text: text) {
            payload = content
        }
        if let delimiter = profile.layout?.delimiter, payload.firstRange(of: delimiter) != nil {
            throw ArgumentError("\(json != nil ? "--json" : file != nil ? "--file" : "--text"): a frame of the \(profile.name) profile cannot contain its delimiter (\(ProfilesCommand.escaped(delimiter)))")
        }
        fields = try Parse.fields(try arguments.options("--field"), profile: profile)
        if let timeout = try arguments.option("--timeout") {
            self.timeout = try Parse.seconds(timeout, option: "--timeout")
        }
        clientID = try arguments.option("--client-id")
        if let clientID, !(1...ListenCommand.maximumClientIDLength).contains(clientID.utf8.count) {
            throw ArgumentError("--client-id must be 1 to \(ListenCommand.maximumClientIDLength) bytes")
        }
        idempotencyKey = try arguments.option("--idempotency-key")
        if let key = idempotencyKey {
            guard clientID != nil else { throw ArgumentError("--idempotency-key needs --client-id: the server keeps its record per client") }
            guard (1...128).contains(key.utf8.count), key.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw ArgumentError("--idempotency-key must be 1 to 128 bytes of printable ASCII, without spaces")
            }
            guard http == nil else { throw ArgumentError("--idempotency-key is for a request of --type, not --http-get") }
        }
        heartbeat = try HeartbeatOptions(parsing: &arguments)
        if !heartbeat.isEmpty, profile.heartbeatType == nil {
            throw ArgumentError("the heartbeat options need heartbeats, and the \(profile.name) profile has none")
        }
        tls = try ClientTLSOptions(parsing: &arguments)
        verbose = arguments.flag("--verbose")
        fallback = try FallbackOption.parse(&arguments)
        proxy = try ProxyOption.parse(&arguments)
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
        try tls.check(for: [endpoint, fallback?.endpoint])
    }

    func run() async throws -> ExitStatus {
        var configuration = ConnectionConfiguration(profile: profile)
        configuration.fallback = fallback
        configuration.webSocket.proxy = proxy
        configuration.connectTimeout = timeout
        // Off unless asked for: the request timeout bounds the wait. With heartbeats, a
        // peer that stops answering fails the request sooner, with connectionLost.
        configuration.heartbeat = heartbeat.isEmpty ? .disabled : heartbeat.applied(to: HeartbeatConfiguration())
        configuration.tls = tls.configuration(handshakeTimeout: timeout)
        // A server that is not there is reported at once, not waited for.
        configuration.reconnect.appliesToFirstConnect = false
        if let clientID { configuration.session = SessionConfiguration(clientID: clientID) }
        let request = Request(type: type, payload: payload, fields: fields)
        let timeout = timeout
        let clock = ContinuousClock()
        let started = clock.now
        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        if verbose { await VerboseOption.print(connection, readyIn: clock.now - started) }
        if let details = await connection.tlsDetails {
            Console.err("tether: \(tlsSummary(details, peer: "server"))")
        }
        if let http {
            return try await get(http, through: connection)
        }
        let transfers = Console.errIsTerminal ? connection.transfers : nil
        let drawing = transfers.map { transfers in
            Task {
                for await progress in transfers { Console.progress(progress.description, done: progress.isComplete) }
            }
        }
        let response: Response
        do {
            if let idempotencyKey {
                response = try await connection.request(request, idempotencyKey: idempotencyKey, timeout: .after(timeout))
            } else {
                response = try await connection.request(request, timeout: .after(timeout))
            }
        } catch {
            await connection.close()
            await drawing?.value
            throw error
        }
        await connection.close()
        // The sequence ends with the connection: every line is drawn before the response.
        await drawing?.value
        if let fields = profile.describeFields(response.fields) {
            Console.err("tether: fields \(fields)")
        }
        if response.integrity == .failed {
            Console.fail("checksum failed")
            return .failure
        }
        if let message = response.errorMessage {
            Console.fail(message)
            return .failure
        }
        Console.out(response.text)
        return .success
    }

    /// `--http-get`: the status and headers on stderr, the body on stdout.
    private func get(_ request: HTTPRequest, through connection: Connection) async throws -> ExitStatus {
        let response: HTTPResponse
        do {
            response = try await connection.http(request, timeout: .after(timeout), type: type)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
        Console.err("tether: HTTP \(response.status) from \(response.url)")
        for field in response.headers {
            Console.err("tether: \(field.name): \(field.value)")
        }
        Console.write(response.body)
        return response.status >= 400 ? .failure : .success
    }
}
