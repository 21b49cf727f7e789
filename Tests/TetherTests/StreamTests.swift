import Testing
@testable import Tether

@Suite("Pushes, heartbeats and states", .timeLimit(.minutes(1)))
struct StreamTests {
    @Test("two subscribers both receive every push, in order")
    func twoSubscribers() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let first = connection.notifications
            let second = connection.notifications
            let onlyThree = connection.notifications(ofType: 0x3)
            try await until("the server to see the peer") { server.peerCount > 0 }
            for index in 0..<100 {
                await server.broadcast(Frame(type: index % 2 == 0 ? 0x2 : 0x3, serial: UInt32(index), payload: Array("\(index)".utf8)))
            }
            let a = try await collect(100, from: first)
            let b = try await collect(100, from: second)
            let threes = try await collect(50, from: onlyThree)
            #expect(a.map(\.serial) == Array(0..<100))
            #expect(b == a)
            #expect(a[7].payload == Array("7".utf8))
            #expect(threes.map(\.serial) == Array(stride(from: 1, to: 100, by: 2)))
            #expect(threes.allSatisfy { $0.type == 0x3 })
            #expect(await connection.metrics.notificationsReceived == 100)
            await connection.close()
        }
    }

    @Test("push to one peer reaches only that peer")
    func pushToOne() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let one = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let two = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let connected = try await collect(2, from: events.filter { $0.kind == .peerConnected })
            let local = try #require(await one.localAddress)
            let target = try #require(connected.first { $0.address == local }?.peer)
            let oneFrames = one.notifications
            let twoFrames = two.frames
            try await server.push(Frame(type: 0x2, serial: 9, payload: [1]), to: target)
            let got = try await collect(1, from: oneFrames)
            #expect(got == [Frame(type: 0x2, serial: 9, payload: [1])])
            // two sees nothing: prove it by a request whose response is the first frame two receives.
            _ = try await two.request(Request(type: 0x402))
            let twoFirst = try await collect(1, from: twoFrames)
            #expect(twoFirst.first?.type == 0x402)
            await one.close()
            await two.close()
        }
    }

    @Test("heartbeats are acked and reported with a round-trip time")
    func heartbeats() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(
                to: endpoint,
                configuration: testConfiguration { $0.heartbeat = .every(.milliseconds(20), timeout: .seconds(5)) }
            )
            // The subscription starts after connect returns, so it may join mid-heartbeat:
            // start at the first `sent` it sees.
            let seen = try await collect(8, from: connection.heartbeats, "three heartbeats")
            let beats = Array(seen.drop { $0.outcome != .sent }.prefix(6))
            let first = try #require(beats.first?.serial)
            #expect(beats.map(\.outcome) == [.sent, .acked, .sent, .acked, .sent, .acked])
            #expect(beats.map(\.serial) == [first, first, first + 1, first + 1, first + 2, first + 2])
            for beat in beats where beat.outcome == .acked {
                let rtt = try #require(beat.roundTripTime)
                #expect(rtt > .zero && rtt < .seconds(5))
            }
            await connection.close()
        }
    }

    @Test("a peer that accepts but never acks heartbeats is closed with heartbeatTimeout")
    func deadPeer() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connection = try await Connection.connect(
            to: endpoint,
            configuration: testConfiguration { $0.heartbeat = .every(.milliseconds(200), timeout: .milliseconds(20), maximumMissed: 2) }
        )
        let beats = connection.heartbeats
        let peer = try await listener.accept()
        let state = try await finalState(of: connection)
        #expect(state.reason?.code == .heartbeatTimeout)
        #expect(state.reason?.message == "no heartbeat ack from \(endpoint.host):\(endpoint.port) for 2 heartbeats in a row (20 ms each)")
        _ = beats
        #expect(await connection.metrics.heartbeatsMissed == 2)
        // The raw peer really received the heartbeats, as seed frames of type 0x1.
        let first = try await peer.readFrame()
        #expect(first?.type == 0x1)
        #expect(first?.serial == 1)
    }

    @Test("states go connecting, connected, closed; late subscribers see the current state")
    func states() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let states = connection.states
            await connection.close()
            let seen = try await collect(3, from: states)
            #expect(seen.map(\.phase) == [.connected, .closed])
            let late = try await collect(3, from: connection.states)
            #expect(late.map(\.phase) == [.closed])
        }
    }

    @Test("frames carries every inbound frame, responses included")
    func rawFrames() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let frames = connection.frames
            _ = try await connection.request(Request(type: 0x402, json: ["n": 1]))
            await server.broadcast(Frame(type: 0x2, payload: [7]))
            let seen = try await collect(2, from: frames)
            #expect(seen.map(\.type) == [0x402, 0x2])
            #expect(seen[0].json == ["echo": ["n": 1]])
            await connection.close()
        }
    }
}
