// The code of Documentation.docc/ChannelsWithHistory.md, compiled, and the room example run against a
// server on 127.0.0.1.

import Testing
import Tether

// Stand-ins for the application code the article's examples call.
private func show(_ payload: [UInt8], at offset: UInt64) {}
private func reloadRoom(after offset: UInt64) async {}
private func loadPosition() -> (offset: UInt64, epoch: String) { (0, "") }
private struct Rooms: Sendable {
    func isMember(_ user: String, of channel: String) async throws -> Bool { true }
}
private let rooms = Rooms()

// MARK: The article's code

private func serverExample() -> Server {
    var configuration = ServerConfiguration(port: 9000)
    configuration.channels = ChannelConfiguration()
    let server = Server(configuration: configuration)
    server.handle(type: 0x410) { request, peer in
        // A member posts to the room: everyone in it gets the message.
        let offset = try await peer.server?.publish(request.payload, to: "room-42")
        return Response(json: ["offset": .int(Int(offset ?? 0))])
    }
    return server
}

private func clientExample(connection: Connection) async throws {
    let room = try await connection.subscribe(to: "room-42")
    for await event in room {
        switch event {
        case .message(let message):
            show(message.payload, at: message.offset)
        case .reset(let reset):
            // Messages were lost while away: reload the room, then go on.
            await reloadRoom(after: reset.after)
        case .joined, .left:
            break   // only with presenceEvents: true
        }
    }
}

private func resumeExample(connection: Connection) async throws -> ChannelSubscription {
    let saved = loadPosition()   // offset and epoch of the last message handled
    let feed = try await connection.subscribe(to: "news", from: .after(offset: saved.offset, epoch: saved.epoch))
    return feed
}

private func authorizeExample(configuration: inout ServerConfiguration) {
    var channels = ChannelConfiguration()
    channels.authorize = { subscriber in
        guard let user = subscriber.clientID, try await rooms.isMember(user, of: subscriber.channel) else {
            throw TetherError(code: .invalidArgument, message: "not a member")
        }
    }
    configuration.channels = channels
}

private func publishExamples(channels: inout ChannelConfiguration, connection: Connection) async throws -> UInt64 {
    channels.authorizePublish = { access in
        guard access.channel.hasPrefix("chat/") else {
            throw TetherError(code: .invalidArgument, message: "read-only channel")
        }
    }
    let offset = try await connection.publish(Array("hello".utf8), to: "chat/general")
    return offset
}

private func expiryExample(server: Server) async throws {
    try await server.publish(Array("50% off until noon".utf8), to: "offers", timeToLive: .seconds(3600))
}

private func presenceExamples(connection: Connection) async throws -> ChannelSubscription {
    let room = try await connection.subscribe(to: "room-42", info: ["name": "Alice"], presenceEvents: true)
    let here = try await connection.presence(of: "room-42")
    print("\(here.count) in the room")
    return room
}

@Suite("Channels article")
struct ChannelsArticleTests {
    @Test("the room example: a post through the handler reaches a subscriber with its offset")
    func room() async throws {
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.channels = ChannelConfiguration()
        let server = Server(configuration: configuration)
        server.handle(type: 0x410) { request, peer in
            let offset = try await peer.server?.publish(request.payload, to: "room-42")
            return Response(json: ["offset": .int(Int(offset ?? 0))])
        }
        let running = Task { try await server.run() }
        defer { running.cancel() }
        let address = try await server.listeningAddress()
        try await Connection.withConnection(to: Endpoint(host: "127.0.0.1", port: address.port)) { connection in
            let room = try await connection.subscribe(to: "room-42")
            let reply = try await connection.request(Request(type: 0x410, payload: Array("hi".utf8)))
            #expect(reply.json == ["offset": 1])
            for await event in room {
                guard case .message(let message) = event else { continue }
                #expect(message.payload == Array("hi".utf8))
                #expect(message.offset == 1)
                break
            }
        }
    }
}
