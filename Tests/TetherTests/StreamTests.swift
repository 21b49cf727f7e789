import Testing
import TetherTesting
@testable import Tether

@Suite("Pushes, heartbeats and states", .timeLimit(.guarded))
struct StreamTests {
    @Test("two subscribers both receive every push, in order")
    func twoSubscribers() async throws {
        try await withTestNetwork { network in try await withNetworkServer(on: network, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let connection = try await Connection.connect(to: endpoint, configuration: .testing(on: network))
            let first = connection.notifications
            let second = connection.notifications
            let onlyThree = connection.notifications(ofType: 0x3)
            _ = try await firstEvent(events, "the server to see the peer") { $0.kind == .peerConnected }
            for index in 0..<100 {
                await server.broadcast(Frame(type: index % 2 == 0 ? 0x2 : 0x3, serial: UInt32(index), payload: Array("\(index)".utf8)))
            }
            let a = try await collect(100, from: first, "the first subscriber's pushes")
            let b = try await collect(100, from: second, "the second subscriber's pushes")
            let threes = try await collect(50, from: onlyThree, "the 0x3 pushes")
            #expect(a.map(\.serial) == Array(0..<100))
            #expect(b == a)
            #expect(a[7].payload == Array("7".utf8))
            #expect(threes.map(\.serial) == Array(stride(from: 1, to: 100, by: 2)))
            #expect(threes.allSatisfy { $0.type == 0x3 })
            #expect(await connection.metrics.notificationsReceived == 100)
            await connection.close()
        } }
    }

    @Test("push to one peer reaches only that peer")
    func pushToOne() async throws {
        try await withServer(handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let one = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let two = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let connected = try await collect(2, from: events.filter { $0.kind == .peerConnected }, "two peers")
            let local = try #require(await one.localAddress)
            let target = try #require(connected.first { $0.address == local }?.peer)
            let oneFrames = one.notifications
            let twoFrames = two.frames
            try await server.push(Frame(type: 0x2, serial: 9, payload: [1]), to: target)
            let got = try await collect(1, from: oneFrames, "the push")
            #expect(got == [Frame(type: 0x2, serial: 9, payload: [1])])
            // two sees nothing: prove it by a request whose response is the first frame two receives.
            _ = try await two.request(Request(type: 0x402))
            let twoFirst = try await collect(1, from: twoFrames, "the response")
            #expect(twoFirst.first?.type == 0x402)
            await one.close()
            await two.close()
        }
    }

    @Test("heartbeats go out every interval on the clock, and are acked with their round-trip time")
    func heartbeats() async throws {
        try await withTestNetwork { network in
            try await withNetworkServer(on: network) { _, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.heartbeat = .every(.milliseconds(20), timeout: .seconds(5))
                let connection = Connection(to: endpoint, configuration: configuration)
                let beats = connection.heartbeats
                try await connection.connect()
                await network.advance(by: .milliseconds(20) - .nanoseconds(1))
                #expect(await connection.heartbeatsSent == 1)
                await network.advance(by: .nanoseconds(1))
                await network.advance(by: .milliseconds(20))
                // The server acks on its loop, in the turn the heartbeat arrives: no time passes.
                #expect(try await collect(6, from: beats, "three heartbeats") == [
                    Heartbeat(serial: 1, outcome: .sent), Heartbeat(serial: 1, outcome: .acked, roundTripTime: .zero),
                    Heartbeat(serial: 2, outcome: .sent), Heartbeat(serial: 2, outcome: .acked, roundTripTime: .zero),
                    Heartbeat(serial: 3, outcome: .sent), Heartbeat(serial: 3, outcome: .acked, roundTripTime: .zero),
                ])
                #expect(await connection.metrics.heartbeatsMissed == 0)
                await connection.close()
            }
        }
    }

    @Test("a peer that accepts but never acks heartbeats is closed with heartbeatTimeout at the second miss")
    func deadPeer() async throws {
        try await withTestNetwork { network in
            try await withSilentHeartbeatServer(on: network) { reached, endpoint in
                var configuration = ConnectionConfiguration.testing(on: network)
                configuration.reconnect = .disabled
                configuration.heartbeat = .every(.milliseconds(200), timeout: .milliseconds(20), maximumMissed: 2)
                let connection = try await Connection.connect(to: endpoint, configuration: configuration)
                let watcher = StateWatcher(connection)
                // Misses at 20 ms and at 220 ms: the second ends the connection.
                await network.advance(by: .milliseconds(220) - .nanoseconds(1))
                #expect(await connection.metrics.heartbeatsMissed == 1)
                #expect(await connection.currentState.phase == .connected)
                await network.advance(by: .nanoseconds(1))
                let state = try await watcher.next(.closed)
                #expect(state.reason?.code == .heartbeatTimeout)
                #expect(state.reason?.message == "no heartbeat ack from 127.0.10.1:9000 for 2 heartbeats in a row (20 ms each)")
                #expect(await connection.metrics.heartbeatsMissed == 2)
                // The server really received the heartbeats.
                #expect(try await collect(2, from: reached, "the heartbeats at the server") == [1, 2])
            }
        }
    }

    @Test("states go connecting, connected, closed; late subscribers see the current state")
    func states() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let states = connection.states
            await connection.close()
            let seen = try await collect(3, from: states, "the states")
            #expect(seen.map(\.phase) == [.connected, .closed])
            let late = try await collect(3, from: connection.states, "the late states")
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
            let seen = try await collect(2, from: frames, "two frames")
            #expect(seen.map(\.type) == [0x402, 0x2])
            #expect(seen[0].json == ["echo": ["n": 1]])
            await connection.close()
        }
    }
}
