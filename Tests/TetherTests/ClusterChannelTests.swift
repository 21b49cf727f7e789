import Synchronization
import Testing
import TetherTesting
@testable import Tether

/// The messages of `subscription` until `count` have come: their texts in order, and any
/// reset (which these tests must not see).
private func messages(_ count: Int, of subscription: ChannelSubscription, within bound: Duration = .seconds(120)) async throws -> (texts: [String], offsets: [UInt64], resets: [ChannelReset]) {
    let delivered: @Sendable (ChannelEvent) -> Bool = { event in
        switch event {
        case .message, .reset: true
        default: false
        }
    }
    let events = try await TetherTesting.collect(count, from: subscription.filter(delivered), within: bound)
    var texts: [String] = []
    var offsets: [UInt64] = []
    var resets: [ChannelReset] = []
    for event in events {
        switch event {
        case .message(let message):
            texts.append(String(decoding: message.payload, as: UTF8.self))
            offsets.append(message.offset)
        case .reset(let reset):
            resets.append(reset)
        default:
            break
        }
    }
    return (texts, offsets, resets)
}

/// Channels on every node; `change` adjusts them.
private func withChannels(_ change: @escaping @Sendable (inout ChannelConfiguration) -> Void = { _ in }) -> @Sendable (inout ServerConfiguration) -> Void {
    { configuration in
        var channels = ChannelConfiguration()
        change(&channels)
        configuration.channels = channels
    }
}

/// A wall clock for the channels' histories that a test moves by hand.
private final class HandClock: Sendable {
    private let now = Mutex(MailboxTime.now().millisecondsSince1970)

    func advance(_ duration: Duration) {
        now.withLock { $0 += duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000 }
    }

    var read: @Sendable () -> MailboxTime {
        { [self] in MailboxTime(millisecondsSince1970: now.withLock { $0 }) }
    }
}

@Suite("Channels across a cluster, on PostgreSQL and on Redis", .serialized, .timeLimit(.guarded))
struct ClusterChannelTests {
    @Test("three nodes, 1,000 subscribers of two channels each over 100 channels, 10,000 messages published at once from every node and a backend; 100 subscribers moved mid-stream and one node stopped: every subscriber of a channel gets its messages once, in one order, each publisher's in its order", arguments: ClusterEngineKind.allCases)
    func threeNodes(kind: ClusterEngineKind) async throws {
        try await withClusterNodes(kind, 3, server: withChannels()) { nodes, publisher in
            let endpoints = nodes.map(\.endpoint)
            let channelCount = 100
            let subscriberCount = 1_000
            var connections: [Connection] = []
            var subscriptions: [(channel: Int, ChannelSubscription)] = []
            for number in 0..<subscriberCount {
                let home = number % 3
                let alternates = (1...2).map { endpoints[(home + $0) % 3] }
                let connection = try await clusterClient(String(format: "sub-%04d", number), endpoints[home], alternates: alternates)
                connections.append(connection)
                for channel in [number % channelCount, (number + 7) % channelCount] {
                    subscriptions.append((channel, try await connection.subscribe(to: "room-\(channel)")))
                }
            }
            let live = Lock([0, 1, 2])
            let perPublisher = 2_500
            let progress = Lock(0)
            let (milestones, reached) = AsyncStream.makeStream(of: Int.self)
            // Publisher 0...2 publish through a node (the first still alive, from theirs on),
            // publisher 3 as the backend; each message's text names its publisher and index.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for source in 0..<4 {
                    group.addTask {
                        for n in 0..<perPublisher {
                            let text = Array("\(source)-\(n)".utf8)
                            let channel = "room-\((n * 4 + source) % channelCount)"
                            if source == 3 {
                                try await publisher.publish(text, to: channel)
                            } else {
                                let alive = live.withLock { $0 }
                                let node = alive.contains(source) ? source : alive[n % alive.count]
                                try await nodes[node].server.publish(text, to: channel)
                            }
                            let done = progress.withLock { count in
                                count += 1
                                return count
                            }
                            if done == perPublisher * 4 / 3 || done == perPublisher * 8 / 3 { reached.yield(done) }
                        }
                    }
                }
                group.addTask {
                    for await milestone in milestones {
                        if milestone == perPublisher * 4 / 3 {
                            // 100 subscribers are sent away by their node; each comes back on
                            // another and recovers what it missed.
                            for moved in 0..<subscriberCount / 10 {
                                let id = String(format: "sub-%04d", moved * 10)
                                for node in nodes {
                                    for peer in node.server.peers where await peer.clientID == id { await peer.close() }
                                }
                            }
                        } else {
                            // n3 stops with its subscribers connected: they come back on n1
                            // or n2.
                            live.withLock { $0 = [0, 1] }
                            await nodes[2].stop()
                            return
                        }
                    }
                }
                try await group.waitForAll()
            }
            reached.finish()
            // What each channel was sent: by publisher and index.
            var sent: [Int: Set<String>] = [:]
            for source in 0..<4 {
                for n in 0..<perPublisher { sent[(n * 4 + source) % channelCount, default: []].insert("\(source)-\(n)") }
            }
            var orders: [Int: [String]] = [:]
            for (channel, subscription) in subscriptions {
                let expected = sent[channel]!.count
                let got = try await messages(expected, of: subscription)
                #expect(got.resets.isEmpty, "room-\(channel): \(got.resets.map(\.reason))")
                #expect(got.offsets == Array(1...UInt64(expected)), "room-\(channel)")
                #expect(Set(got.texts) == sent[channel]!, "room-\(channel)")
                if let order = orders[channel] {
                    #expect(got.texts == order, "room-\(channel): two subscribers saw different orders")
                } else {
                    orders[channel] = got.texts
                    for source in 0..<4 {
                        let mine = got.texts.filter { $0.hasPrefix("\(source)-") }.map { Int($0.split(separator: "-")[1])! }
                        #expect(mine == mine.sorted(), "room-\(channel): publisher \(source) out of order")
                    }
                }
            }
            for connection in connections { await connection.close() }
        }
    }

    @Test("a subscriber that leaves n1 after 5 messages and comes back on n2 gets the 5 published meanwhile on both nodes, once and in order, with an expired one skipped; one away too long is told, then goes on live", arguments: ClusterEngineKind.allCases)
    func recoveryOnAnotherNode(kind: ClusterEngineKind) async throws {
        let clock = HandClock()
        try await withClusterNodes(kind, 2, server: withChannels {
            $0.historySize = 16
            $0.historyAge = nil
            $0.clock = clock.read
        }) { nodes, _ in
            let first = try await Connection.connect(to: nodes[0].endpoint, configuration: testConfiguration())
            let room = try await first.subscribe(to: "room")
            for n in 1...5 { try await nodes[n % 2].server.publish(Array("m\(n)".utf8), to: "room") }
            let before = try await messages(5, of: room)
            #expect(before.texts == ["m1", "m2", "m3", "m4", "m5"])
            let epoch = try #require(await firstMessage(of: room, after: { try await nodes[1].server.publish(Array("m6".utf8), to: "room") })).epoch
            await first.close()
            // Published while away: one with a time to live that passes before it comes back.
            try await nodes[0].server.publish(Array("m7".utf8), to: "room", timeToLive: .seconds(10))
            try await nodes[1].server.publish(Array("m8".utf8), to: "room")
            try await nodes[0].server.publish(Array("m9".utf8), to: "room")
            clock.advance(.seconds(11))

            let second = try await Connection.connect(to: nodes[1].endpoint, configuration: testConfiguration())
            let back = try await second.subscribe(to: "room", from: .after(offset: 6, epoch: epoch))
            let recovered = try await messages(2, of: back)
            #expect(recovered.texts == ["m8", "m9"])
            #expect(recovered.offsets == [8, 9])
            #expect(recovered.resets.isEmpty)

            // Away for 20 messages, with a history of 16: told, then live.
            for n in 10...29 { try await nodes[n % 2].server.publish(Array("m\(n)".utf8), to: "room") }
            let late = try await second.subscribe(to: "news-unused")
            _ = late
            let third = try await Connection.connect(to: nodes[0].endpoint, configuration: testConfiguration())
            let stale = try await third.subscribe(to: "room", from: .after(offset: 9, epoch: epoch))
            try await nodes[1].server.publish(Array("m30".utf8), to: "room")
            let events = try await collect(2, from: stale, "the reset and m30")
            guard case .reset(let reset) = events[0] else {
                Issue.record("expected a reset first, got \(events)")
                return
            }
            #expect(reset.reason.contains("no longer reaches back to offset 10"), "\(reset.reason)")
            #expect(reset.after == 29)
            guard case .message(let next) = events[1] else {
                Issue.record("expected m30, got \(events[1])")
                return
            }
            #expect(String(decoding: next.payload, as: UTF8.self) == "m30")
            #expect(next.offset == 30)
            await second.close()
            await third.close()
        }
    }

    @Test("a backend publishes to a channel with subscribers on two nodes, messages small and larger than a notice: both get all of them in offset order, the large ones read from the engine", arguments: ClusterEngineKind.allCases)
    func backendPublisher(kind: ClusterEngineKind) async throws {
        try await withClusterNodes(kind, 2, server: withChannels()) { nodes, publisher in
            let a = try await Connection.connect(to: nodes[0].endpoint, configuration: testConfiguration())
            let b = try await Connection.connect(to: nodes[1].endpoint, configuration: testConfiguration())
            let onA = try await a.subscribe(to: "feed")
            let onB = try await b.subscribe(to: "feed")
            var sent: [String] = []
            for n in 0..<40 {
                // Every fifth message is larger than a notice holds.
                let text = n % 5 == 4 ? "big-\(n)-" + String(repeating: "x", count: 20_000) : "m\(n)"
                sent.append(text)
                #expect(try await publisher.publish(Array(text.utf8), to: "feed") == UInt64(n + 1))
            }
            for subscription in [onA, onB] {
                let got = try await messages(40, of: subscription)
                #expect(got.texts == sent)
                #expect(got.offsets == Array(1...40))
            }
            await #expect(throws: TetherError.self) { try await publisher.publish([1], to: "no spaces") }
            await a.close()
            await b.close()
        }
    }
}

extension ClusterChannelTests {
    @Test("presence across two nodes: joins on one node reach watchers on the other, both nodes list every member with its client id and info, a leave and a node that stops are told", arguments: ClusterEngineKind.allCases)
    func presence(kind: ClusterEngineKind) async throws {
        try await withClusterNodes(kind, 2, server: withChannels()) { nodes, _ in
            // A watcher on n2, then alice on n1: the watcher hears alice join once her join
            // is recorded.
            let watcherConnection = try await Connection.connect(to: nodes[1].endpoint, configuration: testConfiguration())
            let watcher = try await watcherConnection.subscribe(to: "room", presenceEvents: true)
            let alice = try await clusterClient("alice", nodes[0].endpoint)
            let aliceRoom = try await alice.subscribe(to: "room", info: ["name": "Alice"], presenceEvents: true)
            let heard = try await collect(1, from: watcher, "alice's join on n2")
            guard case .joined(let joined) = heard[0] else {
                Issue.record("expected alice's join, got \(heard)")
                return
            }
            #expect(joined.clientID == "alice")
            #expect(joined.info == ["name": "Alice"])
            #expect(joined.connection.hasPrefix("n1/"), "\(joined.connection)")
            // Bob on n2: alice, on n1, hears him; by then every join is recorded (each node
            // records its own in order). (Alice may hear the watcher's join first: it may be
            // recorded after she subscribed.)
            let bob = try await clusterClient("bob", nodes[1].endpoint)
            let bobRoom = try await bob.subscribe(to: "room", info: ["name": "Bob"])
            let bobJoined = try await collect(1, from: aliceRoom.filter { event in
                if case .joined(let member) = event { member.clientID == "bob" } else { false }
            }, "bob's join on n1")
            guard case .joined(let member) = bobJoined[0] else {
                Issue.record("expected bob's join, got \(bobJoined)")
                return
            }
            #expect(member.clientID == "bob")
            for node in nodes {
                let here = try await node.server.presence(of: "room")
                #expect(here.count == 3, "\(node.name): \(here)")
                #expect(here.members.map(\.clientID) == [nil, "alice", "bob"], "\(node.name): \(here)")
            }
            let asked = try await alice.presence(of: "room")
            #expect(asked.count == 3)
            #expect(asked.members.first { $0.clientID == "bob" }?.info == ["name": "Bob"])

            _ = bobRoom
            await bob.close()
            let bobLeft = try await collect(1, from: aliceRoom.filter { event in
                if case .left(let member) = event { member.clientID == "bob" } else { false }
            }, "bob's leave on n1")
            guard case .left(let gone) = bobLeft[0] else {
                Issue.record("expected bob's leave, got \(bobLeft)")
                return
            }
            #expect(gone.clientID == "bob")
            #expect(try await nodes[0].server.presence(of: "room").count == 2)
            // n2 stops with the watcher on it: alice hears the watcher leave.
            await watcherConnection.close()
            await nodes[1].stop()
            let watcherLeft = try await collect(1, from: aliceRoom.filter { event in
                if case .left(let member) = event { member.clientID == nil } else { false }
            }, "the watcher's leave on n1")
            guard case .left(let other) = watcherLeft[0] else {
                Issue.record("expected the watcher's leave, got \(watcherLeft)")
                return
            }
            #expect(other.connection.hasPrefix("n2/"))
            let left = try await nodes[0].server.presence(of: "room")
            #expect(left.count == 1)
            #expect(left.members.map(\.clientID) == ["alice"])
            await alice.close()
        }
    }
}

/// The first message of `subscription` after `action` runs.
private func firstMessage(of subscription: ChannelSubscription, after action: () async throws -> Void) async throws -> ChannelMessage? {
    try await action()
    let events = try await collect(1, from: subscription, "one message of channel \(subscription.channel)")
    if case .message(let message) = events.first { return message }
    return nil
}
