import Testing
@testable import Tether

/// What a plain web server answers to bytes it does not understand, before it closes.
let httpBadRequest = Array("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request".utf8)

/// A peer that accepts and then fails: every connection it accepts gets `answer`, then is closed.
/// It accepts exactly `count` connections, in the order the client makes them.
func acceptAndFail(_ listener: RawSocket, count: Int, answer: [UInt8] = httpBadRequest) async throws {
    for _ in 0..<count {
        let peer = try await listener.accept()
        if !answer.isEmpty { try peer.write(answer) }
        peer.close()
    }
}

/// Over sockets, since the peer sends bytes no Tether server sends; the client's loop runs on
/// a manual clock, so every backoff passes only when the test moves the clock past it.
@Suite("The reconnect budget against a peer that accepts and fails", .timeLimit(.guarded))
struct ReconnectBudgetTests {
    @Test("an HTTP server that answers 400 and closes: exactly 1 + 3 connects, then failed with the error")
    func httpPeerSpendsTheBudget() async throws {
        try await withManualLoop { clock, group in
            let (listener, endpoint) = try RawSocket.listen()
            defer { listener.close() }
            let connection = Connection(to: endpoint, configuration: testConfiguration {
                $0.reconnect = .backoff(initialDelay: .milliseconds(50), maximumAttempts: 3)
                $0.eventLoopGroup = group
            })
            // Watching from before the connect: the peer may fail it before connect() returns.
            let watcher = StateWatcher(connection)
            async let accepted: Void = acceptAndFail(listener, count: 1)
            try await connection.connect()
            try await accepted
            for attempt in 1...3 {
                let waiting = try await watcher.next(.reconnecting)
                #expect(waiting.attempt == attempt)
                await clock.advance(by: try #require(waiting.delay))
                try await acceptAndFail(listener, count: 1)
            }
            let failed = try await watcher.next(.failed)
            let reason = try #require(failed.reason)
            #expect(reason.message.hasPrefix("gave up on \(endpoint) after 3 reconnect attempts: "), "\(reason.message)")
            let seen = await watcher.seen
            #expect(seen.map(\.phase) == [
                .idle, .connecting, .connected, .reconnecting, .connecting, .connected, .reconnecting, .connecting, .connected,
                .reconnecting, .connecting, .connected, .failed,
            ])
            #expect(seen.compactMap(\.attempt) == [1, 2, 3])
            #expect(await connection.metrics.reconnectAttempts == 3)
            #expect(await connection.metrics.connects == 4)
            // Given up: however far time moves, nothing knocks on the listener any more.
            await clock.advance(by: .seconds(600))
            await #expect(throws: TimedOut.self) { _ = try await listener.accept(timeout: .zero) }
        }
    }

    @Test("a peer that accepts and closes at once, silently: the attempts add up the same way")
    func silentCloseSpendsTheBudget() async throws {
        try await withManualLoop { clock, group in
            let (listener, endpoint) = try RawSocket.listen()
            defer { listener.close() }
            let connection = Connection(to: endpoint, configuration: reconnecting(after: .milliseconds(10), attempts: 2) {
                $0.heartbeat = .every(.seconds(5))
                $0.eventLoopGroup = group
            })
            let watcher = StateWatcher(connection)
            async let accepted: Void = acceptAndFail(listener, count: 1, answer: [])
            try await connection.connect()
            try await accepted
            for delay in [Duration.milliseconds(10), .milliseconds(20)] {
                let waiting = try await watcher.next(.reconnecting)
                #expect(waiting.delay == delay)
                await clock.advance(by: delay)
                try await acceptAndFail(listener, count: 1, answer: [])
            }
            let failed = try await watcher.next(.failed)
            #expect(failed.reason?.message.hasPrefix("gave up on \(endpoint) after 2 reconnect attempts: ") == true, "\(String(describing: failed.reason))")
            #expect(await watcher.seen.compactMap(\.attempt) == [1, 2])
            await clock.advance(by: .seconds(600))
            await #expect(throws: TimedOut.self) { _ = try await listener.accept(timeout: .zero) }
        }
    }

    @Test("a connection that answered a heartbeat was healthy: losing it starts again from attempt 1")
    func healthyConnectionResetsTheBudget() async throws {
        try await withManualLoop { clock, group in
            let (listener, endpoint) = try RawSocket.listen()
            defer { listener.close() }
            async let first = listener.accept()
            let connection = try await Connection.connect(to: endpoint, configuration: reconnecting(after: .milliseconds(10), attempts: 2) {
                $0.heartbeat = .every(.seconds(30))
                $0.eventLoopGroup = group
            })
            let watcher = StateWatcher(connection)
            var peer = try await first
            for round in 1...4 {
                // A Tether peer: it acks the connection's first heartbeat, then the connection breaks.
                let heartbeat = try #require(try await peer.readFrame())
                #expect(heartbeat.type == 0x1)
                // Connected on this socket: no other connect can be under way.
                #expect(await connection.metrics.connects == round)
                try peer.write(seedBytes(type: heartbeat.type, serial: heartbeat.serial))
                peer.close()
                let lost = try await watcher.next(.reconnecting)
                #expect(lost.attempt == 1, "round \(round): \(lost)")
                #expect(lost.delay == .milliseconds(10))
                if round < 4 {
                    await clock.advance(by: .milliseconds(10))
                    peer = try await listener.accept()
                }
            }
            #expect(await connection.currentState.phase != .failed)
            await connection.close()
        }
    }

    @Test("a connection that never proved healthy moves on to the next alternate endpoint, as a refused attempt does")
    func unhealthyMovesOn() async throws {
        try await withManualLoop { clock, group in
            let (listener, httpPeer) = try RawSocket.listen()
            defer { listener.close() }
            try await withServer(handlers: echoHandlers) { _, endpoint in
                async let accepted: Void = acceptAndFail(listener, count: 1)
                let connection = try await Connection.connect(to: httpPeer, configuration: reconnecting {
                    $0.alternateEndpoints = [endpoint]
                    $0.eventLoopGroup = group
                })
                let watcher = StateWatcher(connection)
                try await accepted
                let waiting = try await watcher.next(.reconnecting)
                await clock.advance(by: try #require(waiting.delay))
                try await watcher.next(.connected)
                #expect(await connection.currentEndpoint == endpoint)
                #expect(try await connection.request(Request(type: 0x402, json: ["n": 1]), timeout: .after(eventBound)).json == ["echo": ["n": 1]])
                await connection.close()
            }
        }
    }
}
