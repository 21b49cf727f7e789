// The code of README.md as it stands, and tests that run its self-contained examples. When
// the README is rewritten, its new code gets a file of its own and this one goes.
import Testing
import Tether
import TetherTLS

/// The examples' `print`, recorded by the test that runs them (see ``Transcript``).
private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    Transcript.print(items, separator: separator, terminator: terminator)
}

// Stand-ins for the application code the README's examples call.
private func handle(_ push: Frame) {}
private func wakeDevice(_ clientID: String) async {}
private struct Rejected: Error {}

// MARK: - Example

func readmeExample() async throws {
    // A server on a free port that echoes requests of type 0x402.
    let server = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: 0))
    server.handle(type: 0x402) { request, peer in
        Response(json: ["echo": request.json ?? .null])
    }

    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await server.run() }           // serves until cancelled
        let address = try await server.listeningAddress()

        // A client: one request; the connection closes when the closure returns.
        try await Connection.withConnection(to: Endpoint(host: "127.0.0.1", port: address.port)) { connection in
            let reply = try await connection.request(Request(type: 0x402, json: ["hello": "world"]),
                                                     timeout: .seconds(5))
            print(reply.text)                               // {"echo":{"hello":"world"}}
        }
        group.cancelAll()                                   // stops the server gracefully
    }
}

// MARK: - Staying connected

func readmeStayingConnected() async throws {
    var configuration = ConnectionConfiguration()
    configuration.reconnect = .backoff(initialDelay: .milliseconds(250), maximumAttempts: 20)
    configuration.heartbeat = .every(.seconds(5), timeout: .seconds(2), maximumMissed: 2)  // a dead peer is found within 15 s
    let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: 9000), configuration: configuration)
    Task { for await state in connection.states { print(state) } }   // reconnecting (attempt 1 in 250 ms): …
    await connection.suspend()        // app to the background: a deliberate disconnect
    await connection.resume()         // back: connects at once
    await connection.reconnectNow()   // the network came back: skip the backoff
    print(await connection.metrics)   // bytes, frames, outcomes, reconnects, heartbeat RTT, drops
}

// MARK: - No push lost

func readmeSessions(token: String, savedSequence: UInt64, expected: String, body: [UInt8]) async throws -> UInt64 {
    var savedSequence = savedSequence
    // Client
    var configuration = ConnectionConfiguration()
    configuration.session = SessionConfiguration(clientID: "alice", token: token, resumeAfter: savedSequence)
    let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: 9000), configuration: configuration)
    for await push in connection.notifications {   // each once, in order; push.serial is its sequence
        handle(push)
        savedSequence = await connection.lastSequence
    }
    await connection.suspend()   // background: pushes pile up in the mailbox
    await connection.resume()    // foreground: every one of them, then live ones

    // Server
    var serverConfiguration = ServerConfiguration(port: 9000)
    serverConfiguration.mailboxes = MailboxConfiguration(store: try SQLiteMailboxStore(path: "mailboxes.sqlite"))
    let server = Server(configuration: serverConfiguration)
    server.authenticate { hello in guard hello.token == expected else { throw Rejected() } }
    server.onOfflinePush { push in await wakeDevice(push.clientID) }   // APNs or your push service
    try await server.push(Frame(type: 0x10, payload: body), toClient: "alice")
    return savedSequence
}

// MARK: - Encrypted connections (TLS)

func readmeTLS() -> (ServerConfiguration, ConnectionConfiguration) {
    var serverConfiguration = ServerConfiguration(host: "0.0.0.0", port: 9443)
    serverConfiguration.tls = .server(certificateChain: "server.pem", privateKey: "server.key")
    // … or require client certificates:
    //   .server(certificateChain: …, privateKey: …, clientAuthentication: .required(trustRoots: "clients-ca.pem"))

    var configuration = ConnectionConfiguration.defaults
    configuration.tls = .client()                                   // the system's CAs, the endpoint's host name
    configuration.tls = .client(trustRoots: .file("ca.pem"),        // a private CA,
                                pinnedPublicKeys: ["sha256/…"],     // a pinned key (`tether pin server.pem`),
                                certificate: TLSCertificateFiles(certificateChain: "me.pem", privateKey: "me.key"))
    return (serverConfiguration, configuration)
}

// MARK: - Wire formats

func readmeWireFormats() throws -> ConnectionConfiguration {
    let layout = FrameLayout.header(
        [.marker(0xAA55, width: 2), .type(width: 2), .serial(width: 2), .length(width: 4, endianness: .little)],
        checksum: .init(.crc32, coverage: .frame, placement: .trailer),
        resynchronizes: true
    )
    var configuration = ConnectionConfiguration.defaults
    configuration.profile = try Profile(name: "device", layout: layout, heartbeatType: 0x1, classify: Profile.seedKind(of:))
    return configuration
}

// MARK: - Tests

@Suite struct READMETests {
    @Test func theExampleEchoes() async throws {
        let lines = try await printedLines { try await readmeExample() }
        #expect(lines == [#"{"echo":{"hello":"world"}}"#])
    }

    @Test func theDeviceLayoutSkipsGarbageBeforeAMarker() throws {
        var codec = try readmeWireFormats().profile.makeCodec(1 << 16)
        var buffer = FrameBuffer(bytes: [0x00, 0xAA, 0x13])  // garbage, and a false marker
        try codec.encode(Frame(type: 0x402, serial: 9, payload: Array("hi".utf8)), into: &buffer)
        let frame = try #require(try codec.decode(&buffer))
        #expect(frame.type == 0x402)
        #expect(frame.serial == 9)
        #expect(frame.payload == Array("hi".utf8))
        #expect(frame.skippedBytes == 3)
    }
}
