// The code of Documentation.docc/RequestsAndTimeouts.md, compiled, and run against a local
// server where the example is self-contained.

import Foundation
import Synchronization
import Testing
import Tether
import TetherTesting

private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    recordAndPrint(items, separator: separator, terminator: terminator)
}

// MARK: The article's code

private func overviewExample(connection: Connection) async throws {
    let reply = try await connection.request(Request(type: 0x402, json: ["hello": "world"]),
                                             timeout: .seconds(2))
    print(reply.json?["echo"]?["hello"]?.stringValue ?? "")   // world
}

private func defaultTimeoutConfiguration() -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration()
    configuration.requestTimeout = .seconds(5)        // for requests that give no timeout
    return configuration
}

private func defaultTimeoutExample(endpoint: Endpoint, configuration: ConnectionConfiguration) async throws {
    let connection = try await Connection.connect(to: endpoint, configuration: configuration)
    let reply = try await connection.request(Request(type: 0x402))                        // 5 s
    let quick = try await connection.request(Request(type: 0x402), timeout: .seconds(2))
    await connection.close()
    _ = (reply, quick)
}

private func pipelineExample(connection: Connection) async {
    let ids = [17, 18, 19, 20]
    let outcomes = await connection.pipeline(ids.map { Request(type: 0x402, json: ["id": .int($0)]) },
                                             timeout: .seconds(2))
    for (id, outcome) in zip(ids, outcomes) {
        switch outcome {
        case .success(let response): print(id, response.text)
        case .failure(let error): print(id, "failed:", error)
        }
    }
}

private func timeoutExample(connection: Connection) async throws {
    do {
        let reply = try await connection.request(Request(type: 0x404, json: ["delay_ms": 250]),
                                                 timeout: .milliseconds(100))
        print(reply.text)
    } catch let error as TetherError where error.code == .timedOut {
        print(error.message)   // request 0x404 serial 1 timed out after 100 ms
    }
}

private func unlimitedExample(connection: Connection) async throws {
    let export = try await connection.request(Request(type: 0x404, json: ["table": "orders"]),
                                              timeout: .unlimited)   // as long as it takes
    print(export.text)
}

private func cancellationExample(connection: Connection) async throws {
    let lookup = Task {
        try await connection.request(Request(type: 0x404, json: ["delay_ms": 250]))
    }
    lookup.cancel()                                  // the user left the screen
    do {
        _ = try await lookup.value
    } catch is CancellationError {
        print("cancelled")                           // at once, not after 250 ms
    }
}

private func sendExample(connection: Connection) async throws {
    let event: JSONValue = ["screen": "settings", "action": "opened"]
    try await connection.send(Frame(type: 0x420, payload: event.encoded))
}

private func writtenExample(connection: Connection, jpeg: [UInt8]) async throws {
    let photo = Frame(type: 0x430, payload: jpeg)
    do {
        try await connection.send(photo, completion: .written(timeout: .seconds(30)))
    } catch let error as TetherError where error.code == .timedOut {
        print(error.message)   // …was not written to 10.0.0.5:7000 within 30 s: 4194304 bytes still wait to be written…
    }
}

private func progressExample(connection: Connection, video: [UInt8]) async throws {
    let watching = Task {
        for await progress in connection.transfers where progress.type == 0x430 {
            print(progress)   // sending 0x430 serial 0: 1048588 of 52428812 bytes (2 %)
            if progress.isComplete { break }
        }
    }
    try await connection.send(Frame(type: 0x430, payload: video), completion: .written(timeout: nil))
    await watching.value
}

private func limitsExample() {
    var configuration = ConnectionConfiguration()
    configuration.limits.maximumInFlightRequests = 64     // written, waiting for their answer
    configuration.limits.maximumQueuedRequests = 256      // waiting to be written; then refused
    _ = configuration
}

private func noWaitingExample() {
    var configuration = ConnectionConfiguration()
    configuration.requestsWaitForConnection = false       // fail at once while disconnected
    _ = configuration
}

/// Sends an idempotent request again when the connection broke before its answer came.
func requestRetryingIfLost(_ request: Request, on connection: Connection, attempts: Int = 3) async throws -> Response {
    var attempt = 1
    while true {
        do {
            return try await connection.request(request)
        } catch let error as TetherError where error.code == .connectionLost && attempt < attempts {
            attempt += 1                             // the connection is coming back: wait for it
        }
    }
}

struct Order: Codable, Sendable {
    var item: String
    var quantity: Int
}
struct Receipt: Codable, Sendable {
    var orderID: Int
    var total: Double
}

private func installOrderHandler(on server: Server) {
    server.handle(type: 0x430) { request, peer in
        let order = try request.decode(Order.self)
        return try Response(encoding: Receipt(orderID: 17, total: Double(order.quantity) * 3.5))
    }
}

private func codableExample(connection: Connection) async throws {
    let reply = try await connection.request(try Request(type: 0x430, encoding: Order(item: "tea", quantity: 2)))
    let receipt = try reply.decode(Receipt.self)
    print(receipt.orderID, receipt.total)            // 17 7.0
}

struct PriceChange: Codable, Sendable {
    var symbol: String
    var lastPrice: Double
    var changedAt: Date
}

/// Runs inside a handler, where the peer is isolated.
private func pushWithStrategiesExample(peer: isolated Peer) throws {
    let encoder = JSONEncoder()
    encoder.dateEncodingStrategy = .iso8601
    encoder.keyEncodingStrategy = .convertToSnakeCase
    encoder.outputFormatting = [.sortedKeys]
    let change = PriceChange(symbol: "ACME", lastPrice: 101.5, changedAt: Date(timeIntervalSince1970: 1_700_000_000))
    let push = try Frame(type: 0x501, encoding: change, encoder: encoder)
    print(push.text)        // {"changed_at":"2023-11-14T22:13:20Z","last_price":101.5,"symbol":"ACME"}
    try peer.push(push)
}

private func readPushWithStrategiesExample(connection: Connection) async throws {
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .iso8601
    decoder.keyDecodingStrategy = .convertFromSnakeCase
    for await push in connection.notifications(ofType: 0x501) {
        let change = try push.decode(PriceChange.self, decoder: decoder)
        print(change.symbol, change.lastPrice)       // ACME 101.5
    }
}

private func textAndDictionaryExample(connection: Connection) async throws {
    let line = try await connection.request(Request(type: 0x431, text: "ping"))
    print(line.text)                                 // pong
    let legacy = try await connection.request(try Request(type: 0x402, jsonObject: ["ids": [1, 2, 3]]))
    let object = try legacy.jsonObject()             // [String: Any]
    print(object.keys.sorted())                      // ["echo"]
}

func loadProfile(on connection: Connection) async -> String {
    do {
        let reply = try await connection.request(Request(type: 0x402, json: ["user": 42]),
                                                 timeout: .seconds(5))
        if let message = reply.errorMessage { return "The server refused: \(message)" }
        return reply.text
    } catch let error as TetherError {
        switch error.code {
        case .timedOut:
            return "The server is slow. Try again."      // it may still act on the request
        case .connectionLost:
            return "The connection broke. Try again."    // sent, perhaps acted on, not resent
        case .notConnected, .connectionClosed:
            return "Offline."
        case .tooManyPendingRequests:
            return "Busy. Try again in a moment."
        default:
            return "Failed: \(error.message)"
        }
    } catch {
        return "Cancelled."                              // CancellationError
    }
}

// MARK: Running them
//
// Every test but one runs on an in-memory network, whose clock moves only when the test
// advances it: a timeout or a backoff ends at its exact instant, however busy the machine.

/// 0x402 echoes `{"echo": content}`, as `tether serve` does.
private func echoHandlers(_ server: Server) {
    server.handle(type: 0x402) { request, _ in
        Response(json: ["echo": request.json ?? .null])
    }
}

@Suite("Requests, timeouts and cancellation, as the article shows them", .timeLimit(.guarded))
struct RequestsAndTimeoutsSnippets {
    @Test("the defaults the article states")
    func defaults() {
        let configuration = ConnectionConfiguration()
        #expect(configuration.requestTimeout == .seconds(30))
        #expect(configuration.requestsWaitForConnection)
        let limits = configuration.limits
        #expect(limits.maximumInFlightRequests == 4_096)
        #expect(limits.maximumQueuedRequests == 4_096)
        #expect(limits.outboundHighWaterMark == 1 << 20)
        #expect(limits.maximumOutboundBytes == 64 << 20)
        #expect(limits.maximumPayloadLength == 16 << 20)
    }

    @available(macOS 26, iOS 26, *)  // Task.immediate
    @Test("a request that times out while queued says it was never sent, at its timeout exactly")
    func timeoutWhileQueued() async throws {
        try await withNetworkConnection(handlers: echoHandlers, configure: {
            $0.reconnect = .backoff(initialDelay: .seconds(30), jitter: 0)
        }) { network, server, connection in
            let states = connection.states
            for peer in server.peers { await peer.close() }
            _ = try await firstElement(of: states.filter { $0.phase == .reconnecting })
            // Runs until it reaches the connection, on the network's loop, at once: the
            // request is queued, and its timer started, before the clock moves.
            let request = Task.immediate {
                try await connection.request(Request(type: 0x402), timeout: .milliseconds(50))
            }
            await network.advance(by: .milliseconds(50) - .nanoseconds(1))
            let before = await connection.metrics
            #expect(before.queuedRequests == 1)
            #expect(before.requestsTimedOut == 0)
            await network.advance(by: .nanoseconds(1))
            let error = await #expect(throws: TetherError.self) { try await withTimeLimit { try await request.value } }
            #expect(error?.code == .timedOut)
            #expect(error?.message == "request 0x402 serial 1 timed out after 50 ms (never sent: reconnecting)")
            #expect(await connection.metrics.requestsTimedOut == 1)
        }
    }

    @Test("a request over the payload limit fails at once with frameTooLarge")
    func tooLarge() async throws {
        try await withNetworkConnection(handlers: echoHandlers, configure: {
            $0.limits.maximumPayloadLength = 10
        }) { _, _, connection in
            let error = await #expect(throws: TetherError.self) {
                try await connection.request(Request(type: 0x402, payload: Array(repeating: 1, count: 20)))
            }
            #expect(error?.code == .frameTooLarge)
            #expect(error?.message == "frame 0x402 payload of 20 bytes exceeds the 10 bytes limit")
            #expect(await connection.currentState.phase == .connected)
        }
    }

    @Test("a request gets the echo of its content")
    func overview() async throws {
        try await withNetworkConnection(handlers: echoHandlers) { _, _, connection in
            let printed = try await withPrintedLines { try await overviewExample(connection: connection) }
            #expect(printed == ["world"])
        }
    }

    @Test("a pipeline prints each id with its own echo, in the order of the requests")
    func pipeline() async throws {
        try await withNetworkConnection(handlers: echoHandlers) { _, _, connection in
            let printed = await withPrintedLines { await pipelineExample(connection: connection) }
            #expect(printed == [17, 18, 19, 20].map { #"\#($0) {"echo":{"id":\#($0)}}"# })
        }
    }

    @Test("the configured default and a per-call timeout both answer (on the test network, whose clock moves only for the test: the timeouts are the example's, and no machine is too slow for them)")
    func defaultTimeout() async throws {
        #expect(defaultTimeoutConfiguration().requestTimeout == .seconds(5))
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: echoHandlers) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.requestTimeout = defaultTimeoutConfiguration().requestTimeout
                let example = configuration
                try await withTimeLimit(testBound) { try await defaultTimeoutExample(endpoint: endpoint, configuration: example) }
                #expect(network.clock.elapsed == .zero)
            }
        }
    }

    @Test("a request that times out says so at its timeout exactly, and its late answer is dropped and counted")
    func timeout() async throws {
        let gate = RequestGate()
        try await withNetworkConnection(handlers: { server in
            // Answers when the test opens the gate, in place of the example's 250 ms.
            server.handle(type: 0x404) { request, _ in
                await gate.wait()
                return Response(json: ["echo": request.json ?? .null])
            }
        }) { network, _, connection in
            defer { gate.open() }
            let frames = connection.frames
            let printed = PrintedLines()
            let example = Task {
                try await PrintedLines.$current.withValue(printed) { try await timeoutExample(connection: connection) }
            }
            _ = try await firstElement(of: gate.arrivals)      // written: its timer runs from now
            await network.advance(by: .milliseconds(100) - .nanoseconds(1))
            #expect(await connection.metrics.requestsTimedOut == 0)
            await network.advance(by: .nanoseconds(1))
            try await withTimeLimit { try await example.value }
            #expect(printed.all == ["request 0x404 serial 1 timed out after 100 ms"])
            gate.open()
            #expect(await connection.currentState.phase == .connected)
            let late = try await firstElement(of: frames)
            #expect(late?.serial == 1)
            let metrics = await connection.metrics
            #expect(metrics.requestsTimedOut == 1)
            #expect(metrics.lateResponses == 1)
            #expect(metrics.inFlightRequests == 0)
        }
    }

    @Test("an unlimited request outlives the configured 100 ms tenfold and gets its answer")
    func unlimited() async throws {
        let gate = RequestGate()
        try await withNetworkConnection(handlers: { server in
            server.handle(type: 0x404) { request, _ in
                await gate.wait()
                return Response(json: ["echo": request.json ?? .null])
            }
        }, configure: { $0.requestTimeout = .milliseconds(100) }) { network, _, connection in
            defer { gate.open() }
            let printed = PrintedLines()
            let example = Task {
                try await PrintedLines.$current.withValue(printed) { try await unlimitedExample(connection: connection) }
            }
            _ = try await firstElement(of: gate.arrivals)
            await network.advance(by: .seconds(1))
            let waiting = await connection.metrics
            #expect(waiting.requestsTimedOut == 0)
            #expect(waiting.inFlightRequests == 1)
            gate.open()
            try await withTimeLimit { try await example.value }
            #expect(printed.all == [#"{"echo":{"table":"orders"}}"#])
        }
    }

    @Test("a cancelled request ends at once with CancellationError, without its answer")
    func cancellation() async throws {
        try await withGatedServer { gate, connection in
            let printed = try await withTimeLimit(testBound) {
                try await withPrintedLines { try await cancellationExample(connection: connection) }
            }
            #expect(printed == ["cancelled"])
            #expect(await connection.pendingRequestCount == 0)
        }
    }

    @Test("a request cancelled once written gets its answer dropped as late")
    func cancellationAfterWriting() async throws {
        try await withGatedServer { gate, connection in
            let frames = connection.frames
            let lookup = Task { try await connection.request(Request(type: 0x404)) }
            _ = try await firstElement(of: gate.arrivals)          // the server has it
            lookup.cancel()
            await #expect(throws: CancellationError.self) { try await lookup.value }
            gate.open()
            let late = try await firstElement(of: frames)
            #expect(late?.json == ["late": true])
            #expect(await connection.metrics.lateResponses == 1)
        }
    }

    @Test("a frame sent with send(_:) reaches its handler, and the server's answer is dropped as late")
    func send() async throws {
        let (events, received) = AsyncStream<JSONValue>.makeStream()
        try await withNetworkConnection(handlers: { server in
            server.handle(type: 0x420) { request, _ in
                received.yield(request.json ?? .null)
                return Response()
            }
        }) { _, _, connection in
            let frames = connection.frames
            try await sendExample(connection: connection)
            let event = try await firstElement(of: events)
            #expect(event == ["screen": "settings", "action": "opened"])
            let answer = try await firstElement(of: frames)
            #expect(answer?.type == 0x420)
            #expect(await connection.metrics.lateResponses == 1)
        }
    }

    @Test("a frame of a notification type sent to a server comes back, as a push, with the server's answer")
    func sendNotificationType() async throws {
        try await withNetworkConnection(handlers: { _ in }) { _, _, connection in
            let pushes = connection.notifications
            try await connection.send(Frame(type: 0x20, payload: Array("hi".utf8)))
            let push = try await firstElement(of: pushes)
            #expect(push?.type == 0x20)
            #expect(push?.json == ["error": "unknown type 0x20"])
            #expect(await connection.metrics.lateResponses == 0)
        }
    }

    @Test("beyond the in-flight limit requests queue; beyond the queue limit they are refused at once")
    func limits() async throws {
        limitsExample()
        noWaitingExample()
        let gate = RequestGate()
        try await withNetworkConnection(handlers: { server in
            server.handle(type: 0x404) { _, _ in
                await gate.wait()
                return Response(json: ["done": true])
            }
        }, configure: {
            $0.limits.maximumInFlightRequests = 1
            $0.limits.maximumQueuedRequests = 1
        }) { _, _, connection in
            defer { gate.open() }
            let first = Task { try await connection.request(Request(type: 0x404)) }
            _ = try await firstElement(of: gate.arrivals)
            // Two more at once: one takes the only place in the queue, the other is refused.
            try await withThrowingTaskGroup(of: Result<Response, TetherError>.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        do {
                            return .success(try await connection.request(Request(type: 0x404)))
                        } catch let error as TetherError {
                            return .failure(error)
                        }
                    }
                }
                let refused = try await group.next()
                guard case .failure(let error) = refused else {
                    Issue.record("expected a refusal first, got \(String(describing: refused))")
                    return
                }
                #expect(error.code == .tooManyPendingRequests)
                #expect(error.message == "1 request already waits to be sent to \(connection.endpoint), the limit")
                let metrics = await connection.metrics
                #expect(metrics.inFlightRequests == 1)
                #expect(metrics.queuedRequests == 1)
                #expect(metrics.requestsRefused == 1)
                gate.open()
                let queued = try await group.next()
                #expect(try queued?.get().json == ["done": true])
            }
            let answered = try await first.value
            #expect(answered.json == ["done": true])
        }
    }

    @available(macOS 26, iOS 26, *)  // Task.immediate
    @Test("a request made while reconnecting waits for the connection, and is answered once the backoff has passed")
    func whileReconnecting() async throws {
        try await withNetworkConnection(handlers: echoHandlers) { network, server, connection in
            let states = connection.states
            for peer in server.peers { await peer.close() }
            let waiting = try await firstElement(of: states.filter { $0.phase == .reconnecting })
            #expect(waiting?.delay == .milliseconds(20))
            // Queued on the network's loop before the clock moves.
            let reply = Task.immediate {
                try await connection.request(Request(type: 0x402, json: ["after": "reconnect"]))
            }
            await network.advance(by: .milliseconds(20) - .nanoseconds(1))
            #expect(await connection.metrics.queuedRequests == 1)
            #expect(await connection.currentState.phase == .reconnecting)
            await network.advance(by: .nanoseconds(1))
            let answer = try await withTimeLimit { try await reply.value }
            #expect(answer.json == ["echo": ["after": "reconnect"]])
            #expect(await connection.metrics.connects == 2)
        }
    }

    @Test("with requestsWaitForConnection off, a request made while reconnecting fails at once")
    func notWaiting() async throws {
        try await withNetworkConnection(handlers: echoHandlers, configure: {
            $0.requestsWaitForConnection = false
            $0.reconnect = .backoff(initialDelay: .seconds(30))
        }) { _, server, connection in
            let states = connection.states
            for peer in server.peers { await peer.close() }
            _ = try await firstElement(of: states.filter { $0.phase == .reconnecting })
            let error = await #expect(throws: TetherError.self) {
                try await connection.request(Request(type: 0x402))
            }
            #expect(error?.code == .notConnected)
            #expect(error?.message == "not connected to \(connection.endpoint) (reconnecting), and requests do not wait for the connection")
        }
    }

    @Test("an idempotent request is sent again after the connection broke under it, once the backoff has passed")
    func retryIfLost() async throws {
        let calls = Mutex(0)
        try await withNetworkConnection(handlers: { server in
            server.handle(type: 0x402) { request, peer in
                let call = calls.withLock { count in
                    count += 1
                    return count
                }
                if call == 1 { await peer.close() }          // the first one is lost
                return Response(json: ["call": .int(call)])
            }
        }) { network, _, connection in
            let states = connection.states
            let retried = Task { try await requestRetryingIfLost(Request(type: 0x402), on: connection) }
            let waiting = try await firstElement(of: states.filter { $0.phase == .reconnecting })
            #expect(waiting?.delay == .milliseconds(20))
            await network.advance(by: .milliseconds(20) - .nanoseconds(1))
            #expect(await connection.metrics.connects == 1)
            await network.advance(by: .nanoseconds(1))
            let reply = try await withTimeLimit { try await retried.value }
            #expect(reply.json == ["call": 2])
            #expect(await connection.metrics.connects == 2)
        }
        #expect(calls.withLock { $0 } == 2)
    }

    @Test("Codable content, raw text and plain dictionaries")
    func typedContent() async throws {
        try await withNetworkConnection(handlers: { server in
            echoHandlers(server)
            installOrderHandler(on: server)
            server.handle(type: 0x431) { request, _ in
                Response(text: request.text == "ping" ? "pong" : "?")
            }
        }) { _, _, connection in
            let printed = try await withPrintedLines {
                try await codableExample(connection: connection)
                try await textAndDictionaryExample(connection: connection)
            }
            #expect(printed == ["17 7.0", "pong", #"["echo"]"#])
            let error = await #expect(throws: TetherError.self) {
                try await connection.request(Request(type: 0x402)).decode(Receipt.self)
            }
            #expect(error?.code == .decodingFailed)
        }
    }

    @Test("errors are told apart by their code")
    func errorCodes() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, handlers: { server in
                server.handle(type: 0x402) { request, _ in
                    guard request.json?["user"] == 42 else { throw TetherError(code: .invalidArgument, message: "no such user") }
                    return Response(json: ["name": "Ada"])
                }
            }) { _, endpoint in
                let connection = try await Connection.connect(to: endpoint, configuration: .testing(on: network))
                #expect(await loadProfile(on: connection) == #"{"name":"Ada"}"#)
                await connection.close()
                #expect(await loadProfile(on: connection) == "Offline.")
            }
        }
    }
}

/// A server whose `0x404` handler waits at a gate, then answers `{"late": true}`, and a
/// connection to it, on an in-memory network; the gate opens when `body` returns.
private func withGatedServer(_ body: (RequestGate, Connection) async throws -> Void) async throws {
    let gate = RequestGate()
    try await withNetworkConnection(handlers: { server in
        server.handle(type: 0x404) { _, _ in
            await gate.wait()
            return Response(json: ["late": true])
        }
    }) { _, _, connection in
        defer { gate.open() }
        try await body(gate, connection)
    }
}

// "Requests that run once".
func requestsThatRunOnce(connection: Connection) async throws -> Response {
    let messageID = "msg-7f3a9c"                 // made once, when the user pressed send
    let reply = try await connection.request(Request(type: 0x410, json: ["text": "on my way"]), idempotencyKey: messageID)
    return reply
}
