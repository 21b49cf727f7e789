import Tether

/// `tether request`: one request, its response on stdout.
struct RequestCommand: Command {
    static let name = "request"
    static let summary = "send one request and print the response content"
    static let synopsis = """
        tether request HOST:PORT --type TYPE [--json JSON] [--timeout SECONDS] \
        [--heartbeat-interval SECONDS] [--heartbeat-timeout SECONDS] [--max-missed N] \
        \(ClientTLSOptions.synopsis)
        """
    static let help = """
        Connects, sends one request, prints the response content (UTF-8) on stdout and
        exits 0. An error response ({"error": "…"}) prints its message on stderr and exits 1.

          tether request 127.0.0.1:9000 --type 0x402 --json '{"hello": "world"}'

        Heartbeats are off unless a heartbeat option is given. With them, a server that
        stops answering is found before --timeout: the connection counts as lost after
        MAX-MISSED misses in a row and the request fails at once (exit 1).

        With TLS, what the handshake settled is printed on stderr before the response:

          tether: TLSv1.3 TLS_AES_256_GCM_SHA384, server /CN=localhost (sha256/…)

        and a certificate that fails to verify fails the request (exit 1) with the reason:

          tether: certificate verify failed for localhost: certificate has expired

        arguments:
          HOST:PORT                      the server: 127.0.0.1:9000, localhost:9000, [::1]:9000
          --type TYPE                    the request type, above 0x400 in the seed profile
          --json JSON                    the content, checked to be JSON (default: no content)
          --timeout SECONDS              limit for connecting, for the TLS handshake and for
                                         the response (default 10)
          --heartbeat-interval SECONDS   time between heartbeats (default 10 once heartbeats
                                         are on)
          --heartbeat-timeout SECONDS    how long each ack may take (default half the
                                         interval, or 5 when no interval is given)
          --max-missed N                 misses in a row that count the connection as lost
                                         (default 3)
        \(ClientTLSOptions.help(column: 33))
          -h, --help                     show this help
        """

    var endpoint: Endpoint
    var type: UInt32
    var payload: [UInt8] = []
    var timeout: Duration = .seconds(10)
    var heartbeat = HeartbeatOptions()
    var tls = ClientTLSOptions()

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        guard let type = try arguments.option("--type") else { throw ArgumentError("missing --type") }
        self.type = try Parse.frameType(type, option: "--type")
        guard Profile.seed.classify(self.type) == .message else {
            throw ArgumentError("--type \(hex(self.type)) is not a request type (above 0x400)")
        }
        if let json = try arguments.option("--json") {
            payload = try Parse.json(json, option: "--json")
        }
        if let timeout = try arguments.option("--timeout") {
            self.timeout = try Parse.seconds(timeout, option: "--timeout")
        }
        heartbeat = try HeartbeatOptions(parsing: &arguments)
        tls = try ClientTLSOptions(parsing: &arguments)
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
    }

    func run() async throws -> ExitStatus {
        var configuration = ConnectionConfiguration()
        configuration.connectTimeout = timeout
        // Off unless asked for: the request timeout bounds the wait. With heartbeats, a
        // peer that stops answering fails the request sooner, with connectionLost.
        configuration.heartbeat = heartbeat.isEmpty ? .disabled : heartbeat.applied(to: HeartbeatConfiguration())
        configuration.tls = tls.configuration(handshakeTimeout: timeout)
        let request = Request(type: type, payload: payload)
        let timeout = timeout
        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        if let details = await connection.tlsDetails {
            Console.err("tether: \(tlsSummary(details, peer: "server"))")
        }
        let response: Response
        do {
            response = try await connection.request(request, timeout: timeout)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
        if let message = response.errorMessage {
            Console.fail(message)
            return .failure
        }
        Console.out(response.text)
        return .success
    }
}
