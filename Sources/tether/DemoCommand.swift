#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import Synchronization
import Tether
import TetherHTTP
import TetherTLS

/// `tether demo`: a server and a client in one process, every feature once, in about a second and a half.
struct DemoCommand: Command {
    static let name = "demo"
    static let summary = "run a server and a client in one process and show what Tether does"
    static let synopsis = "tether demo"
    static let briefHelp: String? = """
        Starts the seed demo server on 127.0.0.1 (a free port) and connects a client to it in
        the same process, then shows each feature once: requests and responses, concurrent
        requests answered out of order, a push to a client id, heartbeats, a reconnect with
        backoff, the app going to the background and back, TLS, wire formats, HTTP through
        the channel, a WebSocket fallback when TCP is blocked, and a clean close.

        Ends by itself in about a second and a half and exits 0; exits 1 if any step
        fails. Every wait is bounded, and the whole demo gives up after 10 s.
        """
    static let help = """
        Starts the seed demo server on 127.0.0.1 (a free port), with mailboxes in memory,
        and connects a client to it in the same process, identified with a session as
        client `demo`, then shows:

          1. a request and its response, and an error response for an unknown type
          2. five concurrent requests that the server answers out of order, each matched
             to its request by serial
          3. a push to the client id, received with `for await` on
             connection.notifications; its serial is its sequence in the client's mailbox
          4. heartbeats every 200 ms with their round-trip times
          5. a reconnect: the server stops, and the client prints each state change as
             it retries with backoff (200 ms, then ×1.6 per attempt); a request made
             meanwhile waits in the queue; a new server starts on the same port, the
             client comes back by itself, the queued request is answered and requests
             flow again. Prints the time from reconnecting to connected, and the
             connection's metrics
          6. the app lifecycle: the client goes to the background (suspend()), the server
             pushes five notifications to its client id, stored in its mailbox while it is
             away (onOfflinePush hears each); the client comes back (resume()), its
             session resumes and it catches up on all five, in order, then gets one live
             push
          7. an encrypted connection: a second server, TLS only, with a throwaway
             certificate made with the `openssl` command (skipped without it); a client
             that trusts it connects, shows what the handshake settled and gets its
             answer; a client that expects another host name is refused, and says why
          8. wire formats: a server and a client on the compact profile, a 20 KB JSON
             request whose bytes on the wire (metrics.bytesOut) show zlib at work; then
             on the marker profile, a reply whose address fields the server swapped
          9. HTTP through the channel: a small HTTP server on 127.0.0.1 stands for the
             business servers; the demo server forwards to it alone (its allow-list), the
             client GETs its /weather through the long connection, and a GET of an address
             that is not allowed is refused before any connection is made
         10. when TCP is blocked: a second server with a WebSocket port, and a firewall on
             127.0.0.1 that lets the TCP handshake through and then resets the connection;
             a client with that TCP port first and ws:// as its fallback connects over
             WebSocket in its one attempt, prints its states, and gets its answer
         11. a clean close and the final state

        Ends by itself in about a second and a half and exits 0; exits 1 if any step
        fails. Every wait is bounded, and the whole demo gives up after 10 s.

        options:
          -h, --help   show this help
        """

    /// Bound on each single wait of the demo.
    static let stepLimit: Duration = .seconds(3)
    /// Bound on the whole demo.
    static let overallLimit = 10
    /// The client id of the demo's session.
    static let clientID = "demo"

    init(parsing arguments: inout Arguments) throws(ArgumentError) {}

    func run() async throws -> ExitStatus {
        let clock = ContinuousClock()
        let start = clock.now
        DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(Self.overallLimit)) {
            Console.fail("demo did not finish within \(Self.overallLimit) s")
            exit(ExitStatus.failure.code)
        }

        // The server running now: step 5 stops it and starts another, with the same mailboxes.
        var running = DemoServer(port: 0, store: InMemoryMailboxStore())
        do {
            try await Self.tour(&running)
        } catch {
            try? await running.stop()
            throw error
        }
        try await running.stop()
        let elapsed = milliseconds(clock.now - start) / 1000
        Console.out("server stopped; demo finished in \(String(format: "%.2f", elapsed)) s")
        return .success
    }

    private static func tour(_ running: inout DemoServer) async throws {
        let address = try await running.listeningAddress()
        Console.out("server listening on \(address)")

        var configuration = ConnectionConfiguration()
        configuration.connectTimeout = stepLimit
        configuration.requestTimeout = stepLimit
        configuration.heartbeat = .every(.milliseconds(200))
        // Short, so that step 5 takes well under a second.
        configuration.reconnect = .backoff(initialDelay: .milliseconds(200))
        configuration.session = SessionConfiguration(clientID: clientID)
        let connection = try await Connection.connect(
            to: Endpoint(host: address.ipAddress, port: address.port),
            configuration: configuration
        )
        let local = await connection.localAddress?.description ?? "?"
        Console.out("client connected from \(local), identified as client \(clientID)")

        try await requestAndResponse(connection)
        try await outOfOrder(connection)
        try await push(running.server, connection)
        try await heartbeats(connection)
        try await reconnect(&running, address: address, connection)
        try await lifecycle(running.server, connection)
        try await encrypted()
        try await wireFormats()
        try await httpThroughTheChannel(running.server, connection)
        try await whenTCPIsBlocked()
        try await close(connection)
    }

    // MARK: Steps

    private static func requestAndResponse(_ connection: Connection) async throws {
        Console.out("\n1. request and response")
        let request = Request(type: SeedService.echoType, json: ["hello": "world"])
        Console.out("   -> \(hex(request.type)) \(embeddedJSON(request.payload))")
        let response = try await connection.request(request)
        Console.out("   <- \(hex(response.type)) serial \(response.serial): \(response.text)")

        let unknown = try await connection.request(Request(type: 0x999))
        Console.out("   -> 0x999 (no handler on the server)")
        Console.out("   <- \(hex(unknown.type)) serial \(unknown.serial): error response \"\(unknown.errorMessage ?? "?")\"")
    }

    private static func outOfOrder(_ connection: Connection) async throws {
        let delays = [250, 50, 200, 10, 120]
        Console.out("\n2. \(delays.count) concurrent requests; the server sleeps delay_ms before answering each")
        Console.out("   -> #0…#\(delays.count - 1) sent at once as 0x404 with delay_ms \(delays.map(String.init).joined(separator: ", "))")
        let clock = ContinuousClock()
        let start = clock.now
        var arrival: [Int] = []
        try await withThrowingTaskGroup(of: (index: Int, response: Response, elapsed: Duration).self) { group in
            for (index, delay) in delays.enumerated() {
                group.addTask {
                    let request = Request(type: SeedService.delayedEchoType, json: ["index": .int(index), "delay_ms": .int(delay)])
                    let response = try await connection.request(request)
                    return (index, response, clock.now - start)
                }
            }
            for try await (index, response, elapsed) in group {
                guard response.json?["echo"]?["index"]?.intValue == index else {
                    throw TetherError(code: .protocolError, message: "request #\(index) got the response \(response.text)")
                }
                arrival.append(index)
                let millis = String(Int(milliseconds(elapsed).rounded()))
                let time = String(repeating: " ", count: max(0, 3 - millis.count)) + millis
                Console.out("   <- serial \(response.serial) after \(time) ms: \(response.text)  matches request #\(index)")
            }
        }
        Console.out("   answered in the order #\(arrival.map(String.init).joined(separator: ", #")); every response matched its request by serial")
    }

    private static func push(_ server: Server, _ connection: Connection) async throws {
        Console.out("\n3. push")
        let pushes = connection.notifications(ofType: SeedService.pushType)
        let frame = SeedService.push(type: SeedService.pushType, sequence: 1, time: Date().ISO8601Format())
        let sequence = try await server.push(frame, toClient: clientID)
        Console.out("   server pushed \(hex(frame.type)) to client \(clientID): sequence \(sequence) in its mailbox, sent as the serial")
        let received = try await withTimeout(stepLimit, waitingFor: "the push") {
            for await push in pushes { return push }
            throw TetherError(code: .connectionClosed, message: "the connection closed before the push arrived")
        }
        Console.out("   for await push in connection.notifications -> \(hex(received.type)) serial \(received.serial): \(received.payloadText)")
    }

    private static func heartbeats(_ connection: Connection) async throws {
        let wanted = 3
        Console.out("\n4. heartbeats every 200 ms")
        let beats = connection.heartbeats
        try await withTimeout(stepLimit, waitingFor: "\(wanted) heartbeat acks") {
            var acked = 0
            for await beat in beats {
                switch beat.outcome {
                case .acked:
                    acked += 1
                    let rtt = beat.roundTripTime.map(milliseconds) ?? 0
                    Console.out("   heartbeat \(beat.serial) acked: rtt \(formatMilliseconds(rtt)) ms")
                    if acked == wanted { return }
                case .missed:
                    Console.out("   heartbeat \(beat.serial) missed")
                default:
                    continue
                }
            }
            throw TetherError(code: .connectionClosed, message: "the connection closed after \(acked) heartbeat acks")
        }
    }

    private static func reconnect(_ running: inout DemoServer, address: TetherSocketAddress, _ connection: Connection) async throws {
        Console.out("\n5. reconnect")
        // The current state (connected) first, then every change.
        let states = connection.states
        try await running.stop()
        Console.out("   server stopped (its task cancelled, run() returned): \(address) refuses connections")
        let clock = ContinuousClock()

        // Until attempt 1 has been refused: the client is waiting to try again.
        let lostAt = try await withTimeout(stepLimit, waitingFor: "a refused reconnect attempt") {
            var lostAt: ContinuousClock.Instant?
            for await state in states where state.phase != .connected {
                if state.phase == .reconnecting, lostAt == nil { lostAt = clock.now }
                Console.out("   state: \(state)")
                if let lostAt, state.phase == .reconnecting, let attempt = state.attempt, attempt >= 2 { return lostAt }
            }
            throw TetherError(code: .connectionClosed, message: "the connection ended instead of reconnecting")
        }

        let request = Request(type: SeedService.echoType, json: ["sent": "while the server was down"])
        async let queued = connection.request(request)
        let waiting = try await withTimeout(stepLimit, waitingFor: "the request to be queued") {
            while true {
                let queued = await connection.metrics.queuedRequests
                if queued > 0 { return queued }
                try await Task.sleep(for: .milliseconds(1))
            }
        }
        Console.out("   -> \(hex(request.type)) \(embeddedJSON(request.payload)): waits in the queue (metrics.queuedRequests = \(waiting))")

        let restarted = DemoServer(port: address.port, store: running.store)
        running = restarted
        let again = try await restarted.listeningAddress()
        Console.out("   new server listening on \(again), with the same handlers and mailboxes")

        let connectedAt = try await withTimeout(stepLimit, waitingFor: "the client to reconnect") {
            for await state in states {
                Console.out("   state: \(state)")
                if state.phase == .connected { return clock.now }
            }
            throw TetherError(code: .connectionClosed, message: "the connection ended instead of reconnecting")
        }
        Console.out("   reconnected by itself \(format(connectedAt - lostAt)) after the connection was lost (reconnecting -> connected)")

        let response = try await queued
        Console.out("   <- \(hex(response.type)) serial \(response.serial): \(response.text)  the queued request, sent once connected")
        for index in 1...3 {
            let response = try await connection.request(Request(type: SeedService.echoType, json: ["after": .int(index)]))
            Console.out("   <- \(hex(response.type)) serial \(response.serial): \(response.text)")
        }
        let metrics = await connection.metrics
        Console.out("   metrics: \(metrics.connects) connects, \(metrics.reconnectAttempts) reconnect attempts, requests \(metrics.requestsCompleted) completed / \(metrics.requestsFailed) failed")
    }

    private static func lifecycle(_ server: Server, _ connection: Connection) async throws {
        let count = 5
        Console.out("\n6. app lifecycle: background, pushes stored offline, catch-up on resume")
        let pushes = connection.notifications(ofType: SeedService.pushType)
        let events = connection.sessionEvents
        let offline = SequenceLog()
        server.onOfflinePush { push in offline.append(push.sequence) }

        await connection.suspend()
        try await withTimeout(stepLimit, waitingFor: "the server to see the client leave") {
            while server.peer(forClient: clientID) != nil { try await Task.sleep(for: .milliseconds(1)) }
        }
        Console.out("   client suspended (the app went to the background) after sequence \(await connection.lastSequence)")

        var sequences: [UInt64] = []
        for number in 1...count {
            let frame = Frame(type: SeedService.pushType, payload: JSONValue.object(["message": .int(number)]).encoded)
            sequences.append(try await server.push(frame, toClient: clientID))
        }
        let heard = try await withTimeout(stepLimit, waitingFor: "the offline callbacks") {
            while offline.values.count < count { try await Task.sleep(for: .milliseconds(1)) }
            return offline.values
        }
        Console.out("   server pushed \(count) notifications to client \(clientID) while it was away: stored in its mailbox as sequences \(list(sequences)) (onOfflinePush heard \(list(heard)))")

        await connection.resume()
        Console.out("   client resumed (back in the foreground)")
        let resumed = try await withTimeout(stepLimit, waitingFor: "the session to resume") {
            for await event in events where event.kind == .resumed { return event }
            throw TetherError(code: .connectionClosed, message: "the connection closed before its session resumed")
        }
        Console.out("   session \(resumed)")
        let caughtUp = try await withTimeout(stepLimit, waitingFor: "the \(count) stored pushes") {
            var received: [Frame] = []
            for await push in pushes {
                received.append(push)
                if received.count == count { return received }
            }
            throw TetherError(code: .connectionClosed, message: "the connection closed after \(received.count) of the stored pushes")
        }
        for push in caughtUp {
            Console.out("   <- \(hex(push.type)) serial \(push.serial): \(push.payloadText)  caught up")
        }
        guard caughtUp.map({ UInt64($0.serial) }) == sequences else {
            throw TetherError(code: .protocolError, message: "caught up on serials \(caughtUp.map(\.serial)) instead of \(list(sequences))")
        }

        let live = Frame(type: SeedService.pushType, payload: JSONValue.object(["message": .int(count + 1)]).encoded)
        let sequence = try await server.push(live, toClient: clientID)
        let received = try await withTimeout(stepLimit, waitingFor: "the live push") {
            for await push in pushes { return push }
            throw TetherError(code: .connectionClosed, message: "the connection closed before the live push arrived")
        }
        Console.out("   <- \(hex(received.type)) serial \(received.serial): \(received.payloadText)  live (sequence \(sequence)); last sequence \(await connection.lastSequence)")
    }

    private static func encrypted() async throws {
        Console.out("\n7. an encrypted connection (TLS)")
        guard let certificate = try DemoCertificate.make() else {
            Console.out("   skipped: no `openssl` command to make a certificate with")
            return
        }
        defer { certificate.remove() }
        let tlsServer = DemoServer(
            port: 0,
            store: InMemoryMailboxStore(),
            tls: .server(certificateChain: certificate.chain, privateKey: certificate.key)
        )
        do {
            let address = try await tlsServer.listeningAddress()
            Console.out("   a second server, TLS only, on \(address), with a throwaway certificate for localhost and 127.0.0.1")
            var configuration = ConnectionConfiguration()
            configuration.connectTimeout = stepLimit
            configuration.requestTimeout = stepLimit
            configuration.tls = .client(trustRoots: .file(certificate.chain))
            let endpoint = Endpoint(host: address.ipAddress, port: address.port)
            let connection = try await Connection.connect(to: endpoint, configuration: configuration)
            if let details = await connection.tlsDetails {
                Console.out("   handshake: \(details.version) \(details.cipher), server \(details.peerSubject ?? "?") (\(details.peerPublicKeyPin ?? "?"))")
            }
            let request = Request(type: SeedService.echoType, json: ["secret": "over TLS"])
            Console.out("   -> \(hex(request.type)) \(embeddedJSON(request.payload))")
            let response = try await connection.request(request)
            Console.out("   <- \(hex(response.type)) serial \(response.serial): \(response.text)")
            await connection.close()

            configuration.tls = .client(trustRoots: .file(certificate.chain), serverName: "chat.example.com")
            // Shown failing at once: by default a first connect retries by the reconnect policy.
            configuration.reconnect.appliesToFirstConnect = false
            do {
                let wrong = try await Connection.connect(to: endpoint, configuration: configuration)
                await wrong.close()
                throw TetherError(code: .protocolError, message: "a client expecting chat.example.com accepted a certificate for localhost")
            } catch let error as TetherError where error.code == .certificateRejected {
                Console.out("   a client expecting chat.example.com refuses it: \(error.message)")
            }
        } catch {
            try? await tlsServer.stop()
            throw error
        }
        try await tlsServer.stop()
    }

    private static func wireFormats() async throws {
        Console.out("\n8. wire formats (profiles)")
        // A repetitive JSON body of about 20 KB: readings from four sensors.
        let readings = (0..<480).map { index -> JSONValue in
            ["sensor": .string("t\(index % 4)"), "celsius": 21.5, "ok": true]
        }
        let request = Request(type: SeedService.echoType, json: ["readings": .array(readings)])
        let compact = try await exchange(request, on: .compact)
        guard compact.response.json?["echo"] == request.json else {
            throw TetherError(code: .protocolError, message: "the compact server answered \(compact.response.payload.count) bytes that are not the echo of the request")
        }
        Console.out("   a compact server on \(compact.address): a 7-byte header (version | function code | compressed | length), bodies of 256 bytes or more zlib-compressed")
        Console.out("   -> \(hex(request.type)) with \(request.payload.count) bytes of JSON: \(compact.metrics.bytesOut) bytes on the wire (metrics.bytesOut)")
        Console.out("   <- \(hex(compact.response.type)) with \(compact.response.payload.count) bytes of JSON, {\"echo\": …}: \(compact.metrics.bytesIn) bytes on the wire (metrics.bytesIn)")

        let addressed = Request(type: SeedService.messageType, payload: JSONValue.object(["on": true]).encoded, fields: ["destination": 7, "source": 1])
        let marker = try await exchange(addressed, on: .marker)
        guard marker.response.fields["destination"] == 1, marker.response.fields["source"] == 7 else {
            throw TetherError(code: .protocolError, message: "the marker reply has the fields \(marker.response.fields) instead of destination 1, source 7")
        }
        let fields = { (fields: [String: UInt64]) in "destination \(fields["destination"] ?? 0), source \(fields["source"] ?? 0)" }
        Console.out("   a marker server on \(marker.address): a start marker, two addresses and a CRC-16 trailer; no type, no serial: answered in order")
        Console.out("   -> \(fields(addressed.fields)): \(embeddedJSON(addressed.payload))")
        Console.out("   <- \(fields(marker.response.fields)): \(marker.response.text)  the server swapped the addresses")
    }

    /// Starts a server on `profile`, sends `request` from a client without heartbeats (so
    /// the metrics count the request alone), and stops both.
    ///
    /// - Returns: The server's address, the response and the client's metrics.
    private static func exchange(
        _ request: Request,
        on profile: Profile
    ) async throws -> (address: TetherSocketAddress, response: Response, metrics: ConnectionMetrics) {
        let server = DemoServer(port: 0, store: nil, profile: profile)
        do {
            let address = try await server.listeningAddress()
            var configuration = ConnectionConfiguration(profile: profile)
            configuration.connectTimeout = stepLimit
            configuration.requestTimeout = stepLimit
            configuration.heartbeat = .disabled
            let connection = try await Connection.connect(to: Endpoint(host: address.ipAddress, port: address.port), configuration: configuration)
            let response: Response
            do {
                response = try await connection.request(request)
            } catch {
                await connection.close()
                throw error
            }
            let metrics = await connection.metrics
            await connection.close()
            try await server.stop()
            return (address, response, metrics)
        } catch {
            try? await server.stop()
            throw error
        }
    }

    private static func httpThroughTheChannel(_ server: Server, _ connection: Connection) async throws {
        Console.out("\n9. HTTP through the channel")
        let upstream = try DemoHTTPServer()
        defer { upstream.stop() }
        let allowed = "127.0.0.1:\(upstream.port)"
        server.forwardHTTP(HTTPForwardingConfiguration(allowedHosts: [HTTPAllowedHost(host: "127.0.0.1", port: upstream.port)]))
        Console.out("   an HTTP server on \(allowed); the demo server forwards type 0x403 to it and to nothing else")
        let url = "http://\(allowed)/weather"
        Console.out("   -> 0x403 GET \(url)")
        let response = try await connection.http(.get(url, headers: ["Accept": "application/json"]))
        guard response.status == 200, response.json?["city"] == "Lisbon" else {
            throw TetherError(code: .protocolError, message: "GET \(url) through the channel answered \(response.status): \(response.text)")
        }
        Console.out("   <- HTTP \(response.status), \(response.headers["Content-Type"] ?? "?"): \(response.text)")
        let metadata = "http://169.254.169.254/latest/meta-data/"
        Console.out("   -> 0x403 GET \(metadata)")
        do {
            _ = try await connection.http(.get(metadata))
            throw TetherError(code: .protocolError, message: "GET \(metadata) was not refused")
        } catch let error as TetherError where error.code == .httpFailed {
            let reason = (error.underlying as? HTTPForwardingError)?.reason.rawValue ?? "?"
            Console.out("   <- \(error.code), \(reason): \(error.message)")
        }
    }

    private static func whenTCPIsBlocked() async throws {
        Console.out("\n10. when TCP is blocked: the WebSocket fallback")
        var webSocket = WebSocketServerConfiguration(port: 0, path: "/tether")
        webSocket.host = "127.0.0.1"
        let server = DemoServer(port: 0, store: InMemoryMailboxStore(), webSocket: webSocket)
        let firewall = try DemoFirewall()
        defer { firewall.stop() }
        do {
            let tcp = try await server.listeningAddress()
            let address = try await withTimeout(stepLimit, waitingFor: "the WebSocket port") { try await server.server.webSocketAddress() }
            let fallback = Endpoint(host: address.ipAddress, port: address.port, webSocketPath: "/tether")
            Console.out("   a server on \(tcp), with a WebSocket port: \(fallback)")
            Console.out("   a firewall on 127.0.0.1:\(firewall.port) lets the TCP handshake through, then resets the connection")
            var configuration = ConnectionConfiguration()
            configuration.connectTimeout = stepLimit
            configuration.requestTimeout = stepLimit
            configuration.session = SessionConfiguration(clientID: "\(clientID)-fallback")
            configuration.fallback = FallbackPolicy(endpoint: fallback)
            let connection = Connection(to: Endpoint(host: "127.0.0.1", port: firewall.port), configuration: configuration)
            let states = connection.states
            Console.out("   client: 127.0.0.1:\(firewall.port) first, \(fallback) when it cannot connect")
            do {
                try await connection.connect()
                try await withTimeout(stepLimit, waitingFor: "the connected state") {
                    for await state in states {
                        Console.out("   state: \(state)")
                        if state.phase == .connected { break }
                    }
                }
                let request = Request(type: 0x402, json: ["through": "the firewall"])
                Console.out("   -> \(hex(request.type)) \(embeddedJSON(request.payload))")
                let response = try await connection.request(request)
                Console.out("   <- \(hex(response.type)) serial \(response.serial): \(response.text)  over \(await connection.currentEndpoint)")
                let metrics = await connection.metrics
                Console.out("   the firewall reset \(firewall.resetCount) connection\(firewall.resetCount == 1 ? "" : "s"); \(metrics.connects) connect, \(metrics.reconnectAttempts) reconnect attempts; TCP is tried again after 5 minutes (FallbackPolicy.primaryRetryInterval)")
            } catch {
                await connection.close()
                throw error
            }
            await connection.close()
        } catch {
            try? await server.stop()
            throw error
        }
        try await server.stop()
    }

    private static func close(_ connection: Connection) async throws {
        Console.out("\n11. close")
        let states = connection.states
        await connection.close()
        let seen = try await withTimeout(stepLimit, waitingFor: "the closed state") {
            var seen: [ConnectionState] = []
            for await state in states { seen.append(state) }
            return seen
        }
        for state in seen { Console.out("   state: \(state)") }
        let statistics = await connection.metrics
        Console.out("   \(statistics.requestsSent) requests, \(statistics.requestsCompleted) responses, \(statistics.notificationsReceived) push\(statistics.notificationsReceived == 1 ? "" : "es"), \(statistics.inFlightRequests) pending")
        guard seen.last?.phase == .closed else {
            throw TetherError(code: .protocolError, message: "the connection did not report its closed state")
        }
    }
}

/// `2, 3, 4`.
private func list(_ sequences: [UInt64]) -> String {
    sequences.map(String.init).joined(separator: ", ")
}

/// Sequences heard by a callback, in order.
private final class SequenceLog: Sendable {
    private let state = Lock<[UInt64]>([])

    func append(_ sequence: UInt64) {
        state.withLock { $0.append(sequence) }
    }

    var values: [UInt64] { state.withLock { $0 } }
}

/// A demo server in a task of its own, so the demo can stop it and start another on its port.
private struct DemoServer: Sendable {
    let server: Server
    /// Its mailboxes, handed on to the next server.
    let store: (any MailboxStore)?
    private let task: Task<Void, Never>
    /// What ``Server/run()`` returned or threw, once it has.
    private let stopped: AsyncStream<Result<Void, any Error>>

    /// Starts a server on 127.0.0.1.
    ///
    /// - Parameters:
    ///   - port: The port; 0 picks a free one.
    ///   - store: Where its mailboxes are kept; `nil` for none, as a profile without
    ///     sessions needs.
    ///   - profile: Its wire format.
    ///   - tls: TLS for the server, if any.
    ///   - webSocket: Its WebSocket port, if any.
    init(port: Int, store: (any MailboxStore)?, profile: Profile = .seed, tls: TLSConfiguration? = nil, webSocket: WebSocketServerConfiguration? = nil) {
        var configuration = ServerConfiguration(host: "127.0.0.1", port: port, profile: profile)
        configuration.mailboxes = store.map(MailboxConfiguration.init(store:))
        configuration.tls = tls
        configuration.webSocket = webSocket
        let server = Server(configuration: configuration)
        SeedService.install(on: server, profile: profile)
        let (stopped, ended) = AsyncStream<Result<Void, any Error>>.makeStream()
        self.server = server
        self.store = store
        self.stopped = stopped
        task = Task {
            do {
                try await server.run()
                ended.yield(.success(()))
            } catch {
                ended.yield(.failure(error))
            }
            ended.finish()
        }
    }

    /// Waits, at most ``DemoCommand/stepLimit``, until the server listens.
    func listeningAddress() async throws -> TetherSocketAddress {
        let server = server
        return try await withTimeout(DemoCommand.stepLimit, waitingFor: "the server to listen") {
            try await server.listeningAddress()
        }
    }

    /// Cancels the server's task and waits, at most ``DemoCommand/stepLimit``, for ``Server/run()``
    /// to return: then its port is free. Rethrows what `run()` threw; returns at once when
    /// called again.
    func stop() async throws {
        task.cancel()
        let stopped = stopped
        let outcome = try await withTimeout(DemoCommand.stepLimit, waitingFor: "the server to stop") {
            () -> Result<Void, any Error>? in
            for await outcome in stopped { return outcome }
            return nil
        }
        try outcome?.get()
    }
}

/// A throwaway self-signed certificate for localhost and 127.0.0.1, made with the `openssl`
/// command in a temporary directory, for the demo's TLS step.
private struct DemoCertificate {
    let directory: String
    var chain: String { directory + "/cert.pem" }
    var key: String { directory + "/key.pem" }

    /// Makes one; `nil` when there is no `openssl` command.
    static func make() throws -> DemoCertificate? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        guard let openssl = path.split(separator: ":").map({ "\($0)/openssl" }).first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            return nil
        }
        let directory = NSTemporaryDirectory() + "tether-demo-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let certificate = DemoCertificate(directory: directory)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: openssl)
        process.arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", certificate.key, "-out", certificate.chain, "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE",
        ]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            certificate.remove()
            throw TetherError(code: .tlsFailed, message: "openssl could not make the demo's certificate (exit \(process.terminationStatus))")
        }
        return certificate
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }
}

extension Frame {
    /// The payload as UTF-8 text.
    fileprivate var payloadText: String { String(decoding: payload, as: UTF8.self) }
}
