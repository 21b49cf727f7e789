import Synchronization
import Testing
import TetherTesting
@testable import Tether

/// A client configuration that reconnects at once after a cut, with no jitter.
private func reconnecting() -> ConnectionConfiguration {
    testConfiguration {
        var policy = ReconnectPolicy()
        policy.initialDelay = .milliseconds(20)
        policy.maximumDelay = .milliseconds(20)
        policy.jitter = 0
        $0.reconnect = policy
    }
}

/// The next `count` events of `subscription`.
private func events(_ count: Int, of subscription: ChannelSubscription) async throws -> [ChannelEvent] {
    try await collect(count, from: subscription, "\(count) events of channel \(subscription.channel)")
}

/// The offsets of the messages among `events`.
private func offsets(_ events: [ChannelEvent]) -> [UInt64] {
    events.compactMap { if case .message(let message) = $0 { message.offset } else { nil } }
}

private func texts(_ events: [ChannelEvent]) -> [String] {
    events.compactMap { if case .message(let message) = $0 { String(decoding: message.payload, as: UTF8.self) } else { nil } }
}

@Suite("Channels: named topics with history and recovery", .timeLimit(.guarded))
struct ChannelTests {
    @Test("three subscribers of one channel get the messages of four publishers at once: every offset once, in order, each publisher's in its order")
    func concurrentPublishers() async throws {
        try await withServer(configure: { $0.channels = ChannelConfiguration() }) { server, endpoint in
            var connections: [Connection] = []
            var subscriptions: [ChannelSubscription] = []
            for _ in 0..<3 {
                let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
                connections.append(connection)
                subscriptions.append(try await connection.subscribe(to: "feed"))
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for publisher in 0..<4 {
                    group.addTask {
                        for n in 0..<250 { try await server.publish(Array("\(publisher)-\(n)".utf8), to: "feed") }
                    }
                }
                try await group.waitForAll()
            }
            for subscription in subscriptions {
                let received = try await events(1_000, of: subscription)
                #expect(offsets(received) == Array(1...1_000))
                let sent = texts(received)
                #expect(Set(sent).count == 1_000)
                for publisher in 0..<4 {
                    let mine = sent.filter { $0.hasPrefix("\(publisher)-") }.map { Int($0.split(separator: "-")[1])! }
                    #expect(mine == Array(0..<250), "publisher \(publisher)'s messages out of order")
                }
            }
            for connection in connections { await connection.close() }
        }
    }

    @Test("a subscriber cut off while 20 messages are published gets them on its next connection, after the 10 it had, once and in order, with no reset")
    func recoversAfterReconnect() async throws {
        try await withServer(configure: { $0.channels = ChannelConfiguration() }) { server, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: reconnecting())
                let room = try await connection.subscribe(to: "room-42")
                for n in 1...10 { try await server.publish(json: ["n": .int(n)], to: "room-42") }
                #expect(offsets(try await events(10, of: room)) == Array(1...10))
                let watcher = StateWatcher(connection)
                proxy.refusesConnections = true
                proxy.cutAll()
                try await watcher.next(.reconnecting)
                for n in 11...30 { try await server.publish(json: ["n": .int(n)], to: "room-42") }
                proxy.refusesConnections = false
                try await watcher.next(.connected)
                let after = try await events(20, of: room)
                #expect(offsets(after) == Array(11...30))
                #expect(after.allSatisfy { if case .message = $0 { true } else { false } })
                try await server.publish(json: ["n": 31], to: "room-42")
                #expect(offsets(try await events(1, of: room)) == [31])
                await connection.close()
            }
        }
    }

    @Test("messages the server could not write to a subscriber that stopped reading (its outbound bound) come from the history once it reads again: every offset once, in order, no reset")
    func recoversWhatTheOutboundBoundDropped() async throws {
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.historySize = 1_000
            channels.maximumHistoryBytesPerChannel = 128 << 20
            channels.maximumHistoryBytes = 128 << 20
            $0.channels = channels
            $0.limits.maximumOutboundBytes = 256 << 10
        }) { server, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: testConfiguration())
                let feed = try await connection.subscribe(to: "feed")
                proxy.updateMode { $0.stalled = true }
                // 60 MB: more than the kernel's buffers on loopback (up to 36 MB here) and the
                // outbound bound hold.
                let body = [UInt8](repeating: 0x61, count: 100 << 10)
                for _ in 1...600 { try await server.publish(body, to: "feed") }
                // Every message has been written or missed by the time the peer answers
                // this: its loop runs the publications' jobs first. The last ones are
                // missed, and no later message shows the client that they were.
                _ = await server.metrics()
                proxy.updateMode { $0.stalled = false }
                let received = try await events(600, of: feed)
                #expect(offsets(received) == Array(1...600))
                #expect(received.allSatisfy { if case .message(let message) = $0 { message.payload == body } else { false } })
                #expect(feed.dropped == 0)
                await connection.close()
            }
        }
    }

    @Test("a history of 9.6 MB asked for at once, behind an outbound bound of 256 KiB, is written in pages as the connection drains: every offset once, in order")
    func longHistoryBehindTheOutboundBound() async throws {
        let body = [UInt8](repeating: 0x62, count: 16 << 10)
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.historySize = 1_000
            channels.maximumHistoryBytesPerChannel = 32 << 20
            $0.channels = channels
            $0.limits.maximumOutboundBytes = 256 << 10
        }) { server, endpoint in
            for _ in 1...600 { try await server.publish(body, to: "archive") }
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let archive = try await connection.subscribe(to: "archive", from: .latest(600))
            let received = try await events(600, of: archive)
            #expect(offsets(received) == Array(1...600))
            #expect(archive.dropped == 0)
            await connection.close()
        }
    }

    @Test("a message whose time to live passed is not recovered: a subscriber that starts before it gets the messages around it, offsets consecutive underneath, no reset; one that was there got it live")
    func timeToLive() async throws {
        let now = Mutex(MailboxTime(millisecondsSince1970: 1_000_000))
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.clock = { now.withLock { $0 } }
            $0.channels = channels
        }) { server, endpoint in
            let early = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let live = try await early.subscribe(to: "offers")
            try await server.publish(Array("m1".utf8), to: "offers")
            try await server.publish(Array("m2".utf8), to: "offers", timeToLive: .seconds(10))
            try await server.publish(Array("m3".utf8), to: "offers")
            #expect(texts(try await events(3, of: live)) == ["m1", "m2", "m3"])
            now.withLock { $0 = $0.adding(.seconds(20)) }
            let late = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let recovered = try await late.subscribe(to: "offers", from: .after(offset: 0, epoch: nil))
            try await server.publish(Array("m4".utf8), to: "offers")
            let received = try await events(3, of: recovered)
            #expect(texts(received) == ["m1", "m3", "m4"])
            #expect(offsets(received) == [1, 3, 4])
            await early.close()
            await late.close()
        }
    }

    @Test("when the history no longer reaches back, the subscriber is told with a reset that says where it begins, then goes on from the latest")
    func resetWhenHistoryIsGone() async throws {
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.historySize = 5
            $0.channels = channels
        }) { server, endpoint in
            try await withFaultProxy(to: endpoint) { proxy in
                let connection = try await Connection.connect(to: proxy.endpoint, configuration: reconnecting())
                let room = try await connection.subscribe(to: "room")
                for n in 1...10 { try await server.publish(Array("m\(n)".utf8), to: "room") }
                #expect(offsets(try await events(10, of: room)) == Array(1...10))
                let watcher = StateWatcher(connection)
                proxy.refusesConnections = true
                proxy.cutAll()
                try await watcher.next(.reconnecting)
                for n in 11...30 { try await server.publish(Array("m\(n)".utf8), to: "room") }
                proxy.refusesConnections = false
                let first = try await events(1, of: room)
                guard case .reset(let reset)? = first.first else {
                    Issue.record("expected a reset, got \(first)")
                    return
                }
                #expect(reset.channel == "room")
                #expect(reset.after == 30)
                #expect(reset.reason == "the history of channel room no longer reaches back to offset 11: it begins at 26")
                try await server.publish(Array("m31".utf8), to: "room")
                let next = try await events(1, of: room)
                #expect(offsets(next) == [31])
                #expect(texts(next) == ["m31"])
                await connection.close()
            }
        }
    }

    @Test("a subscription starts after an offset of its epoch, with the latest N, or with a reset when the epoch is not the channel's")
    func starts() async throws {
        try await withServer(configure: { $0.channels = ChannelConfiguration() }) { server, endpoint in
            for n in 1...10 { try await server.publish(Array("m\(n)".utf8), to: "news") }
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let latest = try await connection.subscribe(to: "news", from: .latest(3))
            let three = try await events(3, of: latest)
            #expect(offsets(three) == [8, 9, 10])
            guard case .message(let eighth)? = three.first else { return }

            let other = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let resumed = try await other.subscribe(to: "news", from: .after(offset: 6, epoch: eighth.epoch))
            #expect(texts(try await events(4, of: resumed)) == ["m7", "m8", "m9", "m10"])

            let third = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let stale = try await third.subscribe(to: "news", from: .after(offset: 6, epoch: "0"))
            guard case .reset(let reset)? = try await events(1, of: stale).first else {
                Issue.record("expected a reset for another epoch")
                return
            }
            #expect(reset.reason == "the history of channel news began again (epoch 0 is gone, \(eighth.epoch) is current)")
            #expect(reset.after == 10)
            try await server.publish(Array("m11".utf8), to: "news")
            #expect(offsets(try await events(1, of: stale)) == [11])
            for connection in [connection, other, third] { await connection.close() }
        }
    }

    @Test("refusals name the channel and the reason: the authorizer, the per-connection bound, a server without channels; bad names and a second subscription fail at once")
    func refusals() async throws {
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.maximumChannelsPerPeer = 2
            channels.authorize = { subscriber in
                if subscriber.channel.hasPrefix("staff/") { throw TetherError(code: .invalidArgument, message: "members only") }
            }
            $0.channels = channels
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let refused = await #expect(throws: TetherError.self) { try await connection.subscribe(to: "staff/room") }
            #expect(refused?.code == .channelRefused)
            #expect(refused?.message == "channel staff/room: the server refused the subscription: members only")
            // Kept: a subscription let go ends, on the server too.
            let a = try await connection.subscribe(to: "a")
            let b = try await connection.subscribe(to: "b")
            let full = await #expect(throws: TetherError.self) { try await connection.subscribe(to: "c") }
            #expect(full?.code == .channelRefused)
            #expect(full?.message == "channel c: this connection is subscribed to 2 channels already, the most it may (ChannelConfiguration.maximumChannelsPerPeer)")
            let twice = await #expect(throws: TetherError.self) { try await connection.subscribe(to: "a") }
            #expect(twice?.code == .invalidArgument)
            #expect(twice?.message == "this connection is subscribed to channel a already")
            withExtendedLifetime((a, b)) {}
            let badName = await #expect(throws: TetherError.self) { try await connection.subscribe(to: "no spaces") }
            #expect(badName?.message == "channel name 'no spaces' has a character other than ASCII letters, digits and - _ . : / @")
            await connection.close()
        }
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let none = await #expect(throws: TetherError.self) { try await connection.subscribe(to: "room") }
            #expect(none?.code == .channelRefused)
            #expect(none?.message == "channel room: the server refused the subscription: unknown type 0xff01")
            await connection.close()
        }
    }

    @Test("a client publishes where the server's publish authorizer lets it, and every subscriber gets it; elsewhere, or on a server that lets no client publish, it is refused with the reason")
    func clientsPublish() async throws {
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.authorizePublish = { access in
                guard access.channel.hasPrefix("chat/") else { throw TetherError(code: .invalidArgument, message: "read-only channel") }
            }
            $0.channels = channels
        }) { _, endpoint in
            let reader = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let writer = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let room = try await reader.subscribe(to: "chat/general")
            #expect(try await writer.publish(Array("hello".utf8), to: "chat/general") == 1)
            #expect(try await writer.publish(Array("again".utf8), to: "chat/general") == 2)
            let received = try await events(2, of: room)
            #expect(texts(received) == ["hello", "again"])
            let refused = await #expect(throws: TetherError.self) { try await writer.publish(Array("x".utf8), to: "news") }
            #expect(refused?.code == .channelRefused)
            #expect(refused?.message == "channel news: the server refused the publication: read-only channel")
            await reader.close()
            await writer.close()
        }
        try await withServer(configure: { $0.channels = ChannelConfiguration() }) { _, endpoint in
            let writer = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let refused = await #expect(throws: TetherError.self) { try await writer.publish(Array("x".utf8), to: "news") }
            #expect(refused?.message == "channel news: clients may not publish to channels on this server (ChannelConfiguration.authorizePublish)")
            await writer.close()
        }
    }

    @Test("presence: a watcher sees others join with their info and leave when their connection ends; the server and a client list the members, counted whole and listed within the bound; info past its bound is refused")
    func presence() async throws {
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.maximumPresenceMembers = 1
            $0.channels = channels
        }) { server, endpoint in
            let alice = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let room = try await alice.subscribe(to: "room", info: ["name": "Alice"], presenceEvents: true)
            let bob = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let bobs = try await bob.subscribe(to: "room", info: ["name": "Bob"])
            guard case .joined(let joined)? = try await events(1, of: room).first else {
                Issue.record("expected Bob to join")
                return
            }
            #expect(joined.info == ["name": "Bob"])
            #expect(joined.clientID == nil)
            let listed = try await server.presence(of: "room")
            #expect(listed.count == 2)
            #expect(listed.members.count == 1)
            let asked = try await bob.presence(of: "room")
            #expect(asked.count == 2)
            #expect(asked.members.count == 1)
            #expect(try await server.presence(of: "nowhere").count == 0)

            await bob.close()
            guard case .left(let left)? = try await events(1, of: room).first else {
                Issue.record("expected Bob to leave")
                return
            }
            #expect(left == joined)
            #expect(try await server.presence(of: "room").count == 1)

            let large = JSONValue.string(String(repeating: "x", count: 2_000))
            let refused = await #expect(throws: TetherError.self) { try await alice.subscribe(to: "other", info: large) }
            #expect(refused?.message == "channel other: the subscriber's info of 2002 bytes is more than 1024 (ChannelConfiguration.maximumPresenceInfoBytes)")
            withExtendedLifetime(bobs) {}
            await alice.close()
        }
    }

    @Test("a server that sends a channel message too short for its name and offset ends the client's connection with a protocol error that says so; the subscription ends")
    func malformedMessageFromTheServer() async throws {
        let (listener, endpoint) = try RawSocket.listen()
        let connecting = Task { try await Connection.connect(to: endpoint, configuration: testConfiguration()) }
        let server = try await listener.accept()
        let connection = try await connecting.value
        let states = connection.states
        let subscribing = Task { try await connection.subscribe(to: "room") }
        let request = try #require(try await server.readFrame())
        #expect(request.type == ChannelWireTypes().subscribe)
        let answer = ChannelWire.Subscribed(channel: "room", epoch: "e1", after: 0, recovered: true)
        try server.write(seedBytes(type: request.type, serial: request.serial, payload: SessionWire.encode(answer)))
        let room = try await subscribing.value
        // A flags byte, a name length of 4, and nothing else.
        try server.write(seedBytes(type: ChannelWireTypes().message, serial: 0, payload: [0, 4]))
        let ended = try await bounded("the connection to end") { () -> ConnectionState? in
            for await state in states where state.phase == .failed || state.phase == .closed { return state }
            return nil
        }
        #expect(ended?.reason?.code == .protocolError)
        #expect(ended?.reason?.message.contains("a channel message of 2 bytes is too short for its channel name and offset") == true, "\(String(describing: ended?.reason))")
        var iterator = room.makeAsyncIterator()
        #expect(await iterator.next() == nil)
        await connection.close()
    }

    @Test("a subscription, publication or presence request that is not what its type says is answered with an error that says what was expected; the connection goes on")
    func malformedRequests() async throws {
        try await withServer(configure: { $0.channels = ChannelConfiguration() }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let types = ChannelWireTypes()
            let subscribe = try await connection.request(Request(type: types.subscribe, payload: Array("junk".utf8)))
            #expect(subscribe.errorMessage == #"malformed channel subscription: expected {"channel": …} with "after" and "epoch", or "last""#)
            let publish = try await connection.request(Request(type: types.publish, payload: [200, 1]))
            #expect(publish.errorMessage == "malformed channel publication: expected the channel name's length, the name, then the content")
            let presence = try await connection.request(Request(type: types.presence, payload: Array("[]".utf8)))
            #expect(presence.errorMessage == #"malformed presence request: expected {"channel": …}"#)
            #expect(try await connection.presence(of: "room").count == 0)
            await connection.close()
        }
    }

    @Test("a subscription whose app does not read holds at most maximumSubscriberBytes of messages: the rest are dropped and counted, a message of no bytes still fits")
    func clientBytesBound() async throws {
        try await withServer(configure: { $0.channels = ChannelConfiguration() }, handlers: echoHandlers) { server, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration { $0.limits.maximumSubscriberBytes = 64 << 10 })
            let feed = try await connection.subscribe(to: "feed")
            let body = [UInt8](repeating: 0x66, count: 16 << 10)
            for _ in 1...10 { try await server.publish(body, to: "feed") }
            try await server.publish([], to: "feed")
            // Answered after the 11 messages were written: the client has taken them all in.
            _ = try await connection.request(Request(type: 0x402, json: [:]))
            #expect(feed.dropped == 6)
            var sizes: [Int] = []
            for await event in feed {
                guard case .message(let message) = event else { continue }
                sizes.append(message.payload.count)
                if message.offset == 11 { break }
            }
            #expect(sizes == [16 << 10, 16 << 10, 16 << 10, 16 << 10, 0])
            await connection.close()
        }
    }

    @Test("while the authorizer is slow, at most maximumRequestsPerPeer channel requests of one connection wait for it; the next is refused at once, saying so; once it answers they go on")
    func authorizationsInFlightAreBounded() async throws {
        let (started, startedSink) = AsyncStream<Void>.makeStream()
        let gate = Gate()
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.authorize = { _ in
                startedSink.yield()
                await gate.wait()
            }
            $0.channels = channels
            $0.maximumRequestsPerPeer = 4
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let types = ChannelWireTypes()
            var waiting: [Task<Response, any Error>] = []
            for n in 0..<4 {
                waiting.append(Task { try await connection.request(Request(type: types.subscribe, json: ["channel": .string("c\(n)")])) })
            }
            _ = try await collect(4, from: started, "four authorizations to start")
            let fifth = try await connection.request(Request(type: types.subscribe, json: ["channel": "c4"]))
            #expect(fifth.errorMessage == "channel c4: 4 channel requests of this connection wait for the server's authorizer already, the most it may (ServerConfiguration.maximumRequestsPerPeer)")
            gate.open()
            for task in waiting {
                #expect(try await task.value.errorMessage == nil)
            }
            await connection.close()
        }
    }

    @Test("a peer that asks for 300 channels gets 128 and a refusal for each of the rest; the server's channels stay within their bound and others are served")
    func floodOfSubscriptions() async throws {
        try await withServer(configure: {
            var channels = ChannelConfiguration()
            channels.maximumChannels = 200
            $0.channels = channels
        }) { server, endpoint in
            let flooder = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            var refused = 0
            for n in 0..<300 {
                let answer = try await flooder.request(Request(type: ChannelWireTypes().subscribe, json: ["channel": .string("c\(n)")]))
                if answer.errorMessage != nil { refused += 1 }
            }
            #expect(refused == 300 - 128)
            let kept = server.channelHub!.state.withLock { $0.topics.count }
            #expect(kept <= 200)
            let other = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let room = try await other.subscribe(to: "c1")
            try await server.publish(Array("hi".utf8), to: "c1")
            #expect(texts(try await events(1, of: room)) == ["hi"])
            await flooder.close()
            await other.close()
        }
    }
}

/// Opens once; everyone waiting, and every later waiter, goes on.
private final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { continuation in
            let resume = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiters.append(continuation)
                return false
            }
            if resume { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}
