internal import Tether
internal import Synchronization

/// The store's scripts, by name.
enum RedisScript: CaseIterable, Sendable {
    case append, open, messages, acknowledge, expire, beginRequest, finishRequest, claim, release, releaseNode
    case channelPublish, channelHistory, channelPresence, channelDropMembers

    var source: String {
        switch self {
        case .append: RedisScripts.append
        case .open: RedisScripts.open
        case .messages: RedisScripts.messages
        case .acknowledge: RedisScripts.acknowledge
        case .expire: RedisScripts.expire
        case .beginRequest: RedisScripts.beginRequest
        case .finishRequest: RedisScripts.finishRequest
        case .claim: RedisScripts.claim
        case .release: RedisScripts.release
        case .releaseNode: RedisScripts.releaseNode
        case .channelPublish: RedisChannelScripts.publish
        case .channelHistory: RedisChannelScripts.history
        case .channelPresence: RedisChannelScripts.presence
        case .channelDropMembers: RedisChannelScripts.dropMembers
        }
    }
}

/// Connections to one Redis server, used in turn, and the scripts loaded on it.
final class RedisClient: Sendable {
    let configuration: RedisConfiguration
    private let connections: [RedisConnection]
    private let turn = Atomic<Int>(0)
    /// The SHA-1 of each script the server has loaded, as it said.
    private let loaded = Mutex<[RedisScript: [UInt8]]>([:])

    init(configuration: RedisConfiguration) {
        self.configuration = configuration
        let group = TetherEventLoopGroup.shared
        connections = (0..<max(1, configuration.connections)).map { _ in
            RedisConnection(configuration: configuration, loop: group.next())
        }
    }

    private var next: RedisConnection {
        connections[turn.wrappingAdd(1, ordering: .relaxed).oldValue % connections.count]
    }

    /// Runs a command; an error reply is thrown, naming the step.
    func command(_ arguments: [String], name: String) async throws(TetherError) -> RESPValue {
        let reply = try await next.run(arguments.map { Array($0.utf8) }, name: name)
        if case .error(let message) = reply {
            throw TetherError(code: .storeFailed, message: "Redis at \(configuration.endpointName) refused \(name): \(message)")
        }
        return reply
    }

    /// Runs a command of bytes; an error reply is returned, not thrown.
    func run(_ arguments: [[UInt8]], name: String) async throws(TetherError) -> RESPValue {
        try await next.run(arguments, name: name)
    }

    /// Runs a script by its SHA-1, loading it first when the server does not have it (the
    /// first time, and after the server restarted or flushed its scripts).
    func evaluate(_ script: RedisScript, _ arguments: [[UInt8]], name: String) async throws(TetherError) -> RESPValue {
        let connection = next
        for attempt in 0..<2 {
            let sha = try await load(script, on: connection, again: attempt > 0)
            let reply = try await connection.run([Array("EVALSHA".utf8), sha, Array("0".utf8)] + arguments, name: name)
            if case .error(let message) = reply {
                if message.hasPrefix("NOSCRIPT"), attempt == 0 { continue }
                throw TetherError(code: .storeFailed, message: "Redis at \(configuration.endpointName) refused \(name): \(message)")
            }
            return reply
        }
        throw TetherError(code: .storeFailed, message: "Redis at \(configuration.endpointName) lost the script of \(name) as soon as it was loaded")
    }

    private func load(_ script: RedisScript, on connection: RedisConnection, again: Bool) async throws(TetherError) -> [UInt8] {
        if !again, let sha = loaded.withLock({ $0[script] }) { return sha }
        let reply = try await connection.run([Array("SCRIPT".utf8), Array("LOAD".utf8), Array(script.source.utf8)], name: "loading a script")
        guard let sha = reply.bytes else {
            throw TetherError(code: .storeFailed, message: "Redis at \(configuration.endpointName) refused a script of the store: \(reply.text ?? "\(reply)")")
        }
        loaded.withLock { $0[script] = sha }
        return sha
    }

    func close() async {
        for connection in connections { await connection.close() }
    }
}
