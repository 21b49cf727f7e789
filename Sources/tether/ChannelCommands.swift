import Tether
import TetherPostgres
import TetherRedis

/// `tether subscribe`: print a channel's messages as JSON lines, across reconnects.
struct SubscribeCommand: Command {
    static let name = "subscribe"
    static let summary = "print a channel's messages as JSON lines; recovers what it missed"
    static let synopsis = """
        tether subscribe HOST:PORT CHANNEL [--count N] [--from OFFSET [--epoch EPOCH] | --latest N | --state FILE] [--client-id ID]
        """
    static let help = """
        Subscribes to a channel of the server (`tether serve` has channels) and prints each
        message as one JSON line on stdout, the content embedded when it is JSON and as
        "text" otherwise:

          $ tether subscribe 127.0.0.1:9000 room-42 --count 2
          {"channel":"room-42","offset":1,"epoch":"9f3c…","content":{"text":"hello"}}
          {"channel":"room-42","offset":2,"epoch":"9f3c…","text":"plain words"}

        It reconnects by itself when the connection breaks, and the server writes what it
        missed from the channel's history first: every offset is printed once, in order.
        When the history no longer reaches back, it prints on stderr

          tether: reset: <the reason>

        and goes on from the latest message.

        Exits 0 after N messages; 1 when the first connect fails or the server refuses
        the subscription (with the reason).

        options:
          --count N           stop after N messages
          --from OFFSET       start after this offset, of --epoch EPOCH when given (the
                              epoch a printed line names); a reset when it is gone
          --latest N          start with up to N of the latest messages
          --state FILE        keep the offset and epoch of the last message printed in
                              FILE, and start after them when FILE exists
          --client-id ID      identify with a session as this client
          -h, --help          show this help
        """

    var endpoint: Endpoint
    var channel: String
    var count: Int?
    var start = ChannelStart.now
    var clientID: String?
    var statePath: String?

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
        channel = try arguments.positional("CHANNEL")

        if let count = try arguments.option("--count") { self.count = try Parse.count(count, option: "--count") }
        let from = try arguments.option("--from")
        let epoch = try arguments.option("--epoch")
        let latest = try arguments.option("--latest")
        switch (from, latest) {
        case (.some, .some):
            throw ArgumentError("--from and --latest are two places to start; give one of them")
        case (let from?, nil):
            guard let offset = UInt64(from) else { throw ArgumentError("--from '\(from)' is not an offset (0, 1, 2, …)") }
            start = .after(offset: offset, epoch: epoch)
        case (nil, let latest?):
            start = .latest(try Parse.count(latest, option: "--latest"))
        case (nil, nil):
            if epoch != nil { throw ArgumentError("--epoch goes with --from OFFSET") }
        }
        clientID = try arguments.option("--client-id")
        statePath = try arguments.option("--state")
        if let statePath {
            guard !statePath.isEmpty else { throw ArgumentError("--state needs a file name") }
            if from != nil || latest != nil {
                throw ArgumentError("--state and --\(from != nil ? "from" : "latest") both say where to start; give one of them")
            }
        }
    }

    func run() async throws -> ExitStatus {
        var start = start
        if let statePath, let text = try StateFile.load(statePath) {
            let words = text.split(whereSeparator: \.isWhitespace)
            guard words.count == 2, let offset = UInt64(words[0]) else {
                throw StateFile.malformed(statePath, expected: "the last offset and its epoch", found: text)
            }
            start = .after(offset: offset, epoch: String(words[1]))
        }
        var configuration = ConnectionConfiguration()
        configuration.heartbeat = .disabled
        configuration.reconnect.appliesToFirstConnect = false
        if let clientID { configuration.session = SessionConfiguration(clientID: clientID) }
        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        let subscription = try await connection.subscribe(to: channel, from: start)
        var printed = 0
        if count == 0 {
            await connection.close()
            return .success
        }
        for await event in subscription {
            switch event {
            case .message(let message):
                Console.out(Self.line(message))
                if let statePath {
                    do {
                        try StateFile.save("\(message.offset) \(message.epoch)\n", to: statePath)
                    } catch {
                        await connection.close()
                        throw error
                    }
                }
                printed += 1
                if let count, printed >= count {
                    await connection.close()
                    return .success
                }
            case .reset(let reset):
                Console.err("tether: reset: \(reset.reason)")
            case .joined, .left:
                break
            }
        }
        await connection.close()
        return .success
    }

    /// `{"channel":…,"offset":…,"epoch":…,"content":…}`, or `"text":…` for content that is not JSON.
    static func line(_ message: ChannelMessage) -> String {
        func quoted(_ text: String) -> String { String(decoding: JSONValue.string(text).encoded, as: UTF8.self) }
        let head = "{\"channel\":\(quoted(message.channel)),\"offset\":\(message.offset),\"epoch\":\(quoted(message.epoch)),"
        if let json = message.json {
            return head + "\"content\":" + String(decoding: json.encoded, as: UTF8.self) + "}"
        }
        return head + "\"text\":" + quoted(String(decoding: message.payload, as: UTF8.self)) + "}"
    }
}

/// `tether publish`: publish to a channel from a client, and print the offsets.
struct PublishCommand: Command {
    static let name = "publish"
    static let summary = "publish to a channel of a server, and print each message's offset"
    static let synopsis = """
        tether publish (HOST:PORT | --postgres URL | --redis URL) CHANNEL (--json JSON | --text TEXT) [--count N] [--ttl SECONDS]
        """
    static let help = """
        Publishes a message to a channel of the server (`tether serve` lets every client
        publish) and prints the offset it got, one line per message:

          $ tether publish 127.0.0.1:9000 room-42 --json '{"text": "hello"}' --count 2
          1
          2

        With --postgres or --redis instead of HOST:PORT it publishes to the channel of a
        cluster (`tether serve --postgres URL` or `--redis URL`) as a backend does, holding
        no connection to a node: the message reaches the channel's subscribers on every node.

        Every subscriber of the channel gets it (`tether subscribe`), and the channel's
        history keeps it for those that come back.

        Exits 0 once every message is published; 1 with the reason when the server refuses
        (it lets no client publish there, a bound).

        options:
          --postgres URL      publish to the cluster on this database, as a backend
          --redis URL         publish to the cluster on this Redis server, as a backend
          --json JSON         the content, checked to be JSON
          --text TEXT         the content as it is, UTF-8
          --count N           publish N times, each with the same content (default 1)
          --ttl SECONDS       deliver it for this long: a subscriber that recovers it
                              later from the history skips it
          -h, --help          show this help
        """

    /// The server, or the cluster's database.
    enum Target {
        case server(Endpoint)
        case cluster(PostgresOptions)
        case redis(RedisOptions)
    }

    var target: Target
    var channel: String
    var payload: [UInt8]
    var count = 1
    var timeToLive: Duration?

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        let redis = try RedisOptions.parse(&arguments)
        if let database = try PostgresOptions.parse(&arguments, nodes: false) {
            if redis != nil { throw ArgumentError("--postgres and --redis both name a cluster: give one") }
            target = .cluster(database)
        } else if let redis {
            target = .redis(redis)
        } else {
            target = .server(try Parse.endpoint(try arguments.positional("HOST:PORT")))
        }
        channel = try arguments.positional("CHANNEL")
        if let problem = ChannelConfiguration.problem(withName: channel) { throw ArgumentError(problem) }
        if let ttl = try arguments.option("--ttl") { timeToLive = try Parse.seconds(ttl, option: "--ttl") }
        guard let content = try Parse.content(json: try arguments.option("--json"), text: try arguments.option("--text")) else {
            throw ArgumentError("missing the content: give --json JSON or --text TEXT")
        }
        payload = content
        if let count = try arguments.option("--count") {
            self.count = try Parse.count(count, option: "--count")
            guard self.count <= PushCommand.maximumCount else {
                throw ArgumentError("--count '\(count)' is more than \(PushCommand.maximumCount)")
            }
        }
    }

    func run() async throws -> ExitStatus {
        let endpoint: Endpoint
        switch target {
        case .server(let server):
            endpoint = server
        case .cluster(let database):
            return try await publishAsBackend(postgres: database, redis: nil)
        case .redis(let redis):
            return try await publishAsBackend(postgres: nil, redis: redis)
        }
        var configuration = ConnectionConfiguration()
        configuration.heartbeat = .disabled
        configuration.reconnect.appliesToFirstConnect = false
        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        do {
            for _ in 0..<count {
                Console.out(String(try await connection.publish(payload, to: channel, timeToLive: timeToLive)))
            }
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
        return .success
    }
}

extension PublishCommand {
    /// Publishes through the cluster's engine, as a backend.
    private func publishAsBackend(postgres: PostgresOptions?, redis: RedisOptions?) async throws -> ExitStatus {
        try await BackendPublisher.connect(postgres: postgres, redis: redis).run { publisher in
            for _ in 0..<count {
                Console.out(String(try await publisher.publish(payload, to: channel, timeToLive: timeToLive)))
            }
        }
    }
}

/// `tether presence`: print who is subscribed to a channel.
struct PresenceCommand: Command {
    static let name = "presence"
    static let summary = "print who is subscribed to a channel of a server"
    static let synopsis = """
        tether presence HOST:PORT CHANNEL
        """
    static let help = """
        Prints the subscribers of a channel of the server as one JSON line: how many there
        are, and the first of them (1,000 by default) with the client id of each one that
        identified and the info it gave:

          $ tether presence 127.0.0.1:9000 room-42
          {"channel":"room-42","count":2,"members":[{"clientID":"alice","connection":"peer#3"},{"connection":"peer#4"}]}

        Exits 0 with the line; 1 with the reason when the server refuses (it has no
        channels) or cannot be reached.

        options:
          -h, --help          show this help
        """

    var endpoint: Endpoint
    var channel: String

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
        channel = try arguments.positional("CHANNEL")
    }

    func run() async throws -> ExitStatus {
        var configuration = ConnectionConfiguration()
        configuration.heartbeat = .disabled
        configuration.reconnect.appliesToFirstConnect = false
        let connection = try await Connection.connect(to: endpoint, configuration: configuration)
        let presence: ChannelPresence
        do {
            presence = try await connection.presence(of: channel)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
        let members: [JSONValue] = presence.members.map { member in
            var object: [String: JSONValue] = ["connection": .string(member.connection)]
            if let clientID = member.clientID { object["clientID"] = .string(clientID) }
            if let info = member.info { object["info"] = info }
            return .object(object)
        }
        let line: JSONValue = ["channel": .string(presence.channel), "count": .int(presence.count), "members": .array(members)]
        Console.out(String(decoding: line.encoded, as: UTF8.self))
        return .success
    }
}
