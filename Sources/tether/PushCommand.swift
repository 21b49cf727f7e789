import Tether
import TetherPostgres
import TetherRedis

/// `tether push`: store pushes for identified clients in a cluster's database, as a backend
/// that holds no connection does, and print their sequence numbers.
struct PushCommand: Command {
    static let name = "push"
    static let summary = "push to client ids of a cluster on PostgreSQL or Redis, as a backend does"
    static let synopsis = """
        tether push (--postgres URL | --redis URL) --client-id ID [--client-id ID]... [--type TYPE] (--json JSON | --text TEXT) \
        [--count N] [--ttl SECONDS] [--mailbox-limit N] [--mailbox-age SECONDS] [--max-mailboxes N] [--max-stored-bytes N]
        """
    static let help = """
        Stores a push for each client id in the mailboxes of the cluster whose database is
        given with --postgres (the nodes are `tether serve --postgres URL`), or on the Redis
        server given with --redis (`tether serve --redis URL`), and prints the
        sequence number each one got in its client's mailbox, one line per client and push:

          $ tether push --postgres postgresql://tether@127.0.0.1:5432/tether \\
              --client-id alice --client-id bob --json '{"hello": "world"}' --count 2
          alice 1
          bob 1
          alice 2
          bob 2

        It holds no connection to a node: the push wakes the node the client is connected
        to, which writes it at once; an offline client gets it when it comes back, on any
        node (`tether listen --client-id ID`). A round's pushes are stored together or not.

        Exits 0 once every push is stored, 1 with the reason when the database cannot be
        reached or refuses a push (past a bound); those printed before it are stored.

        options:
          --postgres URL             the cluster's database (postgresql://USER@HOST:PORT/DB)
          --redis URL                the cluster's Redis server (redis://HOST:PORT/DB)
          --client-id ID             push to this client (1 to 256 bytes); repeatable
          --type TYPE                the push's type, 0x2…0x400 (default 0x2)
          --json JSON                the content, checked to be JSON
          --text TEXT                the content as it is, UTF-8
          --count N                  push N times, each with the same content (default 1)
          --ttl SECONDS              deliver it this long; a client back later skips it
          --mailbox-limit N          the most pushes one mailbox keeps; give the servers'
                                     own (default 10000)
          --mailbox-age SECONDS      drop pushes older than this; 0 or off keeps them
                                     until the limit (default 604800, 7 days)
          --max-mailboxes N          the most mailboxes in all (default 100000)
          --max-stored-bytes N       the most bytes stored in all mailboxes, 64 counted
                                     per push beyond its content (default 67108864)
          -h, --help                 show this help
        """

    var database: PostgresOptions?
    var redis: RedisOptions?
    var clientIDs: [String]
    var type = SeedService.pushType
    var payload: [UInt8]
    var count = 1
    var timeToLive: Duration?
    var limits = MailboxLimits()

    /// The most pushes one run stores for each client.
    static let maximumCount = 1_000_000

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        redis = try RedisOptions.parse(&arguments)
        database = try PostgresOptions.parse(&arguments, nodes: false)
        if database == nil, redis == nil {
            throw ArgumentError("missing --postgres or --redis: the cluster to push to")
        }
        if database != nil, redis != nil { throw ArgumentError("--postgres and --redis both name a cluster: give one") }
        clientIDs = try arguments.options("--client-id")
        guard !clientIDs.isEmpty else { throw ArgumentError("missing --client-id: the client to push to") }
        for clientID in clientIDs where !(1...ListenCommand.maximumClientIDLength).contains(clientID.utf8.count) {
            throw ArgumentError("--client-id must be 1 to \(ListenCommand.maximumClientIDLength) bytes")
        }
        if let type = try arguments.option("--type") {
            let value = try Parse.frameType(type, option: "--type")
            guard Profile.seed.kind(of: value) == .notification else {
                throw ArgumentError("--type \(hex(value)) is not a push type (\(Profile.seed.typeList(of: .notification) ?? "none"))")
            }
            self.type = value
        }
        guard let content = try Parse.content(json: try arguments.option("--json"), text: try arguments.option("--text")) else {
            throw ArgumentError("missing the content: give --json JSON or --text TEXT")
        }
        payload = content
        if let count = try arguments.option("--count") {
            self.count = try Parse.count(count, option: "--count")
            guard self.count <= Self.maximumCount else {
                throw ArgumentError("--count '\(count)' is more than \(Self.maximumCount)")
            }
        }
        if let ttl = try arguments.option("--ttl") { timeToLive = try Parse.seconds(ttl, option: "--ttl") }
        if let limit = try arguments.option("--mailbox-limit") {
            limits.maximumMessages = try Parse.count(limit, option: "--mailbox-limit")
        }
        if let age = try arguments.option("--mailbox-age") {
            limits.maximumAge = try Parse.secondsOrOff(age, option: "--mailbox-age", maximum: ServeCommand.maximumMailboxAge)
        }
        if let count = try arguments.option("--max-mailboxes") {
            limits.maximumMailboxes = try Parse.count(count, option: "--max-mailboxes")
        }
        if let bytes = try arguments.option("--max-stored-bytes") {
            limits.maximumStoredBytes = try Parse.count(bytes, option: "--max-stored-bytes")
        }
    }

    func run() async throws -> ExitStatus {
        let frame = Frame(type: type, payload: payload)
        return try await BackendPublisher.connect(postgres: database, redis: redis, limits: limits).run { publisher in
            for _ in 0..<count {
                let sequences = try await publisher.push(frame, toClients: clientIDs, timeToLive: timeToLive)
                for (clientID, sequence) in zip(clientIDs, sequences) {
                    Console.out("\(clientID) \(sequence)")
                }
            }
        }
    }
}
