// The code of Documentation.docc/GettingStarted.md, block by block, and a test that runs the
// article's steps in order against its server and checks what they print.
import Testing
import Tether
import TetherTesting

/// The examples' `print`, recorded by the test that runs them (see ``Transcript``).
private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    Transcript.print(items, separator: separator, terminator: terminator)
}

// MARK: - Start a server

func gettingStartedServer() -> Server {
    let server = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: 0))
    server.handle(type: 0x402) { request, peer in
        Response(json: ["echo": request.json ?? .null])
    }
    server.handle(type: 0x404) { request, peer in
        let delay = request.json?["delay_ms"]?.intValue ?? 0
        try await Task.sleep(for: .milliseconds(delay))
        return Response(json: ["slept_ms": .int(delay)])
    }
    return server
}

func gettingStartedRunServer(_ server: Server) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await server.run() }
        let address = try await server.listeningAddress()
        print("listening on \(address)")                  // listening on 127.0.0.1:40325

        // … connect and talk to it: the steps below …

        group.cancelAll()                                  // stops the server
    }
}

// MARK: - Connect

func gettingStartedConnect(to address: TetherSocketAddress) async throws -> Connection {
    var configuration = ConnectionConfiguration()
    configuration.heartbeat = .every(.seconds(5))
    configuration.requestTimeout = .seconds(5)

    let connection = try await Connection.connect(
        to: Endpoint(host: "127.0.0.1", port: address.port),
        configuration: configuration
    )
    return connection
}

/// Compiled, not run: the article's way to follow the first connect, and to fail at once.
func gettingStartedFollowFirstConnect(to address: TetherSocketAddress, configuration: ConnectionConfiguration) async throws -> Connection {
    let endpoint = Endpoint(host: "127.0.0.1", port: address.port)
    let connection = Connection(to: endpoint, configuration: configuration)
    let states = connection.states    // idle, connecting, reconnecting (attempt 1 in 1 s): connection refused by …, connecting, connected
    try await connection.connect()    // returns once connected
    _ = states
    return connection
}

func gettingStartedFailFast(_ configuration: inout ConnectionConfiguration) {
    configuration.reconnect.appliesToFirstConnect = false
}

// MARK: - Send a request

func gettingStartedRequest(_ connection: Connection) async throws {
    let reply = try await connection.request(Request(type: 0x402, json: ["hello": "world"]))
    print(reply.serial, reply.text)                        // 1 {"echo":{"hello":"world"}}
    print(reply.json?["echo"]?["hello"]?.stringValue ?? "") // world
}

func gettingStartedErrorResponse(_ connection: Connection) async throws {
    let unknown = try await connection.request(Request(type: 0x999))
    if let message = unknown.errorMessage {
        print("server said:", message)                     // server said: unknown type 0x999
    }
}

func gettingStartedConcurrentRequests(_ connection: Connection) async throws {
    try await withThrowingTaskGroup(of: Response.self) { group in
        for delay in [300, 100, 200] {
            group.addTask {
                try await connection.request(Request(type: 0x404, json: ["delay_ms": .int(delay)]))
            }
        }
        for try await response in group {
            print(response.text)                           // {"slept_ms":100}, then 200, then 300
        }
    }
}

// MARK: - Listen to pushes

func gettingStartedPushes(_ connection: Connection, server: Server) async {
    let pushes = connection.notifications(ofType: 0x2)

    let news: JSONValue = ["news": "hi"]
    await server.broadcast(Frame(type: 0x2, serial: 1, payload: news.encoded))

    for await push in pushes {
        print(push.type, push.serial, push.json ?? .null)  // 2 1 {"news":"hi"}
        break
    }
}

// MARK: - Watch heartbeats

func gettingStartedHeartbeats(_ connection: Connection) async {
    var acks = 0
    for await beat in connection.heartbeats where beat.outcome == .acked {
        print("heartbeat \(beat.serial): \(beat.roundTripTime ?? .zero)")
        acks += 1
        if acks == 3 { break }
    }
}

// MARK: - Close

func gettingStartedClose(_ connection: Connection) async {
    let states = connection.states
    await connection.close()
    for await state in states {
        print(state)            // connected to 127.0.0.1:40325, then: closed: connection to 127.0.0.1:40325 closed by close()
    }
}

// MARK: - Handle errors

func gettingStartedHandleErrors(_ connection: Connection) async throws {
    do {
        _ = try await connection.request(Request(type: 0x402), timeout: .milliseconds(100))
    } catch let error as TetherError where error.code == .connectionLost {
        print("in flight when the connection broke, not resent:", error.message)
    } catch let error as TetherError where error.code == .notConnected || error.code == .connectionClosed {
        print("closed:", error.message)
    } catch let error as TetherError where error.code == .timedOut {
        print("slow server:", error.message)
    }
}

// MARK: - Tests

@Suite struct GettingStartedTests {
    @Test func serverPrintsItsAddressAndStopsWhenCancelled() async throws {
        let lines = try await printedLines {
            try await gettingStartedRunServer(gettingStartedServer())
        }
        #expect(lines.count == 1)
        #expect(lines.first?.hasPrefix("listening on 127.0.0.1:") == true)
    }

    @Test func theArticleStepByStep() async throws {
        let server = gettingStartedServer()
        try await whileServing(server) { address in
            let connection = try await bounded("connect") { try await gettingStartedConnect(to: address) }

            let reply = try await printedLines { try await gettingStartedRequest(connection) }
            #expect(reply == [#"1 {"echo":{"hello":"world"}}"#, "world"])

            let unknown = try await printedLines { try await gettingStartedErrorResponse(connection) }
            #expect(unknown == ["server said: unknown type 0x999"])

            // The article's 0x404 sleeps for real: one call that sleeps for nothing shows its answer.
            let slept = try await bounded("0x404") { try await connection.request(Request(type: 0x404, json: ["delay_ms": 0])) }
            #expect(slept.text == #"{"slept_ms":0}"#)

            // The concurrent step with the test in place of the time: each answer is held
            // until the test lets it go, shortest delay first, so what the example prints
            // follows the order of the answers, however busy the machine.
            let gates = [100: RequestGate(), 200: RequestGate(), 300: RequestGate()]
            server.handle(type: 0x404) { request, peer in
                let delay = request.json?["delay_ms"]?.intValue ?? 0
                await gates[delay]?.wait()
                return Response(json: ["slept_ms": .int(delay)])
            }
            // The gates hold the answers for as long as the test takes, which on a busy
            // machine can pass the article's 5 s request timeout: this step runs on a second
            // connection with the article's settings but no request timeout.
            var settings = ConnectionConfiguration()
            settings.heartbeat = .disabled
            settings.requestTimeout = nil
            let unhurried = settings
            let patient = try await bounded("connect") {
                try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: address.port), configuration: unhurried)
            }
            let transcript = Transcript()
            let concurrent = Task {
                try await Transcript.$current.withValue(transcript) { try await gettingStartedConcurrentRequests(patient) }
            }
            for gate in gates.values { _ = try await firstElement(of: gate.arrivals, within: testBound) }
            for (answered, delay) in [100, 200, 300].enumerated() {
                gates[delay]?.open()
                _ = try await transcript.waitForLines(answered + 1)
            }
            try await bounded("the concurrent requests") { try await concurrent.value }
            #expect(transcript.lines == [#"{"slept_ms":100}"#, #"{"slept_ms":200}"#, #"{"slept_ms":300}"#])
            await patient.close()

            let pushes = try await printedLines { await gettingStartedPushes(connection, server: server) }
            #expect(pushes == [#"2 1 {"news":"hi"}"#])

            let states = try await printedLines { await gettingStartedClose(connection) }
            #expect(states == ["connected to 127.0.0.1:\(address.port)", "closed: connection to 127.0.0.1:\(address.port) closed by close()"])

            let errors = try await printedLines { try await gettingStartedHandleErrors(connection) }
            #expect(errors.count == 1)
            #expect(errors.first?.hasPrefix("closed: ") == true)
        }
    }

    @available(macOS 26, iOS 26, *)  // Task.immediate
    @Test func heartbeatsAreAckedAtTheirInterval() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: { _ in }) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.heartbeat = .every(.seconds(5))          // the article's
                let connection = Connection(to: endpoint, configuration: configuration)
                let transcript = Transcript()
                // Runs until its loop waits for a heartbeat, at once: it has subscribed before
                // the connection opens.
                let example = Task.immediate {
                    await Transcript.$current.withValue(transcript) { await gettingStartedHeartbeats(connection) }
                }
                try await connection.connect()
                // The first goes out as the connection opens, and comes back with no time passing.
                #expect(try await transcript.waitForLines(1) == ["heartbeat 1: 0.0 seconds"])
                for serial in 2...3 {
                    let framesOut = await connection.metrics.framesOut
                    await network.advance(by: .seconds(5) - .nanoseconds(1))
                    #expect(await connection.metrics.framesOut == framesOut)
                    await network.advance(by: .nanoseconds(1))
                    #expect(try await transcript.waitForLines(serial).last == "heartbeat \(serial): 0.0 seconds")
                }
                try await bounded("the example to stop after three acks") { await example.value }
                #expect(transcript.lines.count == 3)
                #expect(network.clock.elapsed == .seconds(10))
                await connection.close()
            }
        }
    }
}
