import Testing
import TetherTesting
@testable import Tether

/// Small things a newcomer trips over: what a handler can reach, how durations print.
@Suite("What a newcomer reaches for", .timeLimit(.guarded))
struct SurfaceTrapTests {
    @Test("a handler reaches its server through the peer, and pushes to another client's mailbox with it")
    func handlerReachesServer() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: { server in
            server.handle(type: 0x402) { request, peer in
                guard let server = peer.server else { return Response(text: "no server") }
                let sequence = try await server.push(Frame(type: 0x10, text: request.text), toClient: "bob")
                return Response(text: "\(sequence)")
            }
        }) { server, endpoint in
            let bob = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("bob"))
            let pushes = bob.notifications
            let alice = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("alice"))
            #expect(try await alice.request(Request(type: 0x402, text: "from alice")).text == "1")
            let push = try #require(try await collect(1, from: pushes, "bob's push").first)
            #expect(push.text == "from alice")
            #expect(server.peers.allSatisfy { $0.server === server })
            await alice.close()
            await bob.close()
        }
    }

    @Test("a request's outcome prints its duration with the unit and the digits that count", arguments: [
        (Duration.microseconds(390), "response after 0.39 ms"),
        (.microseconds(1200), "response after 1.2 ms"),
        (.milliseconds(100), "response after 100 ms"),
        (.nanoseconds(800), "response after 800 ns"),
        (.milliseconds(1500), "response after 1.5 s"),
        (.milliseconds(1755), "response after 1.755 s"),
        (.seconds(5), "response after 5 s"),
        (.zero, "response after 0 s"),
    ])
    func outcomeDuration(duration: Duration, text: String) {
        #expect(RequestOutcome(response: Response(), duration: duration).description == text)
    }

    @Test("the scoped helpers take a one-line closure whose result is not wanted, with no warning (the build has none)")
    func oneLineClosures() async throws {
        try await withTestNetwork { network in
            try await withTestServer(configuration: .testing(on: network)) { server in
                try await Connection.withConnection(to: server.endpoint, configuration: .testing(on: network)) { connection in await connection.metrics }
            }
        }
        try await withTestServer { server in server.endpoint }
        try await withTimeLimit { 42 }
    }
}

@Suite("A subscription as an AsyncStream", .timeLimit(.guarded))
struct SubscriptionStreamTests {
    @Test("frames arrive through the AsyncStream of a subscription, bounded by the subscription's buffer, and what it drops is counted", arguments: [false, true])
    func boundedStream(session: Bool) async throws {
        try await withServer(configure: { if session { $0.mailboxes = .inMemory } }, handlers: { server in
            server.handle(type: 0x402) { _, _ in Response(text: "after the pushes") }
        }) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration {
                $0.limits.subscriberBufferSize = 2
                if session { $0.session = SessionConfiguration(clientID: "alice") }
            })
            let frames = connection.frames
            let stream: AsyncStream<Frame> = frames.asyncStream
            // A broadcast reaches the peers the server has attached, which can be a moment
            // after connect returns.
            _ = try await collect(1, from: events.filter { $0.kind == .peerConnected }, "the peer")
            for index in 0..<5 {
                let reached = await server.broadcast(Frame(type: 0x10, text: "\(index)"))
                try #require(reached == 1, "broadcast \(index) reached \(reached) peers")
            }
            // The response is written after the five pushes, and the client reads its frames
            // in order: once it is back, all six have reached the subscription, which keeps
            // the newest two.
            _ = try await connection.request(Request(type: 0x402))
            await connection.close()
            var texts: [String] = []
            for await frame in stream { texts.append(frame.text) }
            #expect(texts == ["4", "after the pushes"])
            #expect(frames.dropped == 4)
        }
    }
}
