import BenchCore
import Tether
import TetherPostgres
import TetherRedis
import TetherSQLite

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let usage = """
    usage: bench-sessions --case replay|push|channel|claims --store sqlite|memory|postgres|redis|broadcast
                          [--postgres URL | --redis URL] [--nodes N] [--from servers|publisher]
                          [--messages N] [--batch B] [--subscriber-buffer K]
                          [--clients C] [--rounds M] [--ack-delay MS]
                          [--warmup W] [--size BYTES] [--timeout S] [--channels K]
      Sessions and mailboxes, servers and clients in this process on 127.0.0.1.
      --store postgres keeps the mailboxes in the PostgreSQL database at URL, which must
      hold no mailboxes yet (a fresh database for each run); --store redis keeps them on
      the Redis server at URL (redis://HOST:PORT), under a key prefix of the run's own.
      replay  fills a fresh store (a SQLite file in a new temporary directory, memory, or
              PostgreSQL) with N pushes of BYTES for client r through the store's append,
              B a call (default 100,000 and 1,000), then times client r reconnecting until
              its subscriber has all N, in order. The client's subscriber buffer holds K
              pushes (default N; 0 keeps Tether's default, 4,096): the replay does not
              wait for a subscriber, so a smaller buffer drops pushes and fails the run.
              RESULT case=replay store=… messages=N size=… fill_seconds=… fill_aps=… seconds=… nps=…
      push    connects C clients with sessions c0…c{C-1} (default 1,000), then pushes
              W unmeasured rounds (default 5), M rounds with one pusher and M rounds with
              4 pushers at once (default 100) of a BYTES frame (at least 8: the first 8
              carry the time of the push call) to all of them, with push(_:toClients:)
              or, with --store broadcast, the unsequenced broadcast; each phase is timed
              until every client has every push, and every push's latency from the push
              call to its client's subscriber is recorded.
              With --store postgres --nodes N (N ≥ 1), N servers in this process are the
              nodes n1…nN of a cluster (PostgresCluster, MailboxConfiguration.postgres),
              each on its own port; client c<i> connects to node i mod N, and the rounds
              are pushed by the nodes in turn, or with --from publisher by a
              PostgresPublisher. Without --nodes, one server on a PostgresMailboxStore.
              The same with --store redis: RedisCluster, RedisPublisher, RedisMailboxStore.
              --ack-delay sets the clients' acknowledgeDelay (default Tether's, 500 ms;
              they also acknowledge every 64 pushes): fewer acknowledgements for the
              server to store.
              One line per phase:
              RESULT case=push store=… nodes=N from=… clients=C pushers=… rounds=M size=… seconds=… nps=… p50_us=… p99_us=… max_us=…
                     call_p50_us=… call_p99_us=… (the push calls' own time; not for broadcasts)
      channel connects C clients (default 1,000), client i subscribed to channel ch<i mod K>
              (default K = 1), then publishes W unmeasured rounds and M rounds of one
              BYTES message to each channel with server.publish(_:to:), stored once per
              channel; timed until every client has every message, each message's latency
              from the publish call to its subscriber recorded. With --store postgres
              --nodes N, N servers in this process are nodes of a cluster whose channels
              are on the database: client i connects to node i mod N, and channel k is
              published through node k mod N, up to 16 publications at once.
              RESULT case=channel clients=C channels=K rounds=M size=… seconds=… nps=… p50_us=… p99_us=… max_us=…
      claims  C clients with sessions (default 10,000) connect to one node at once, at most
              256 connects under way: timed until every hello is answered, so every client
              claimed (--store postgres or redis with --nodes 1).
              RESULT case=claims store=… clients=C seconds=… cps=…
      A push missing, repeated, out of order or wrong fails the run (exit status 1); a
      phase that has not finished after --timeout seconds (default 30) too.
    """

let options = Options(
    Array(CommandLine.arguments.dropFirst()),
    known: ["case", "store", "channels", "postgres", "redis", "nodes", "from", "ack-delay", "messages", "batch", "subscriber-buffer", "clients", "rounds", "warmup", "size", "timeout"],
    usage: usage
)
let scenario = options.string("case", allowed: ["replay", "push", "channel", "claims"])
let storeName = options.string("store", default: scenario == "channel" ? "memory" : nil, allowed: ["sqlite", "memory", "postgres", "redis", "broadcast"])
let size = options.int("size", default: 64)
let timeout = options.double("timeout", default: 30)
let postgresURL = storeName == "postgres" ? options.string("postgres") : nil
let redisURL = storeName == "redis" ? options.string("redis") : nil
/// A key prefix of this run's own, so runs share a Redis server without seeing each other.
let redisPrefix = "bench\(UInt32.random(in: 0...UInt32.max)):"
let nodeCount = options.int("nodes", default: 0)
let from = options.string("from", default: "servers", allowed: ["servers", "publisher"])
if scenario == "replay" && storeName == "broadcast" {
    Options.fail("replay takes --store sqlite, memory or postgres", usage: usage)
}
if nodeCount != 0 && (!["postgres", "redis"].contains(storeName) || scenario == "replay") {
    Options.fail("--nodes is for --case push or channel with --store postgres or redis", usage: usage)
}
if nodeCount < 0 || nodeCount > 16 {
    Options.fail("--nodes takes 1 to 16, not \(nodeCount)", usage: usage)
}
if from == "publisher" && nodeCount == 0 {
    Options.fail("--from publisher needs --nodes: it pushes through a cluster's database", usage: usage)
}
if scenario == "claims" && nodeCount != 1 {
    Options.fail("claims takes --store postgres or redis with --nodes 1", usage: usage)
}
if scenario != "replay" && size < 8 {
    Options.fail("push needs --size 8 or more: the first 8 bytes carry the time of the push call", usage: usage)
}

raiseOpenFileLimit()
let directory = storeName == "sqlite" ? TemporaryDirectory() : nil
let databaseFile = "mailboxes.sqlite"
/// The mailboxes of each node: one, or a cluster's.
var nodes: [MailboxConfiguration] = []
var clusters: [PostgresCluster] = []
var postgresStore: PostgresMailboxStore?
var publisher: PostgresPublisher?
var redisClusters: [RedisCluster] = []
var redisStore: RedisMailboxStore?
var redisPublisher: RedisPublisher?
do {
    if let directory {
        nodes = [MailboxConfiguration(store: try SQLiteMailboxStore(path: "\(directory.path)/\(databaseFile)"))]
    } else if let postgresURL, nodeCount > 0 {
        for number in 1...nodeCount {
            let cluster = try await PostgresCluster(url: postgresURL, node: "n\(number)")
            clusters.append(cluster)
            nodes.append(.postgres(cluster))
        }
        if from == "publisher" { publisher = try await PostgresPublisher(url: postgresURL) }
    } else if let redisURL {
        var redis = try RedisConfiguration(url: redisURL)
        redis.keyPrefix = redisPrefix
        if nodeCount > 0 {
            for number in 1...nodeCount {
                let cluster = try await RedisCluster(configuration: RedisClusterConfiguration(redis: redis, node: "n\(number)"))
                redisClusters.append(cluster)
                nodes.append(.redis(cluster))
            }
            if from == "publisher" { redisPublisher = try await RedisPublisher(configuration: redis) }
        } else {
            let store = try await RedisMailboxStore(configuration: redis)
            redisStore = store
            nodes = [MailboxConfiguration(store: store)]
        }
    } else if let postgresURL {
        let store = try await PostgresMailboxStore(url: postgresURL)
        postgresStore = store
        nodes = [MailboxConfiguration(store: store)]
    } else {
        nodes = [MailboxConfiguration(store: InMemoryMailboxStore())]
    }
} catch {
    fail("cannot open the store: \(error)")
}
if let postgresURL {
    let existing: [String]
    do {
        existing = try await nodes[0].store.clientIDs()
    } catch {
        fail("cannot read the mailboxes of \(postgresURL): \(error)")
    }
    if !existing.isEmpty {
        fail("the database \(postgresURL) already holds \(existing.count) mailboxes (\(existing.prefix(3).joined(separator: ", "))…): give each run a fresh database")
    }
}

do {
    switch scenario {
    case "replay":
        let messages = max(1, options.int("messages", default: 100_000))
        let subscriberBuffer = options.int("subscriber-buffer", default: messages)
        let result = try await Replay.run(
            store: nodes[0].store,
            messages: messages,
            size: size,
            batch: max(1, options.int("batch", default: 1_000)),
            subscriberBuffer: subscriberBuffer == 0 ? nil : subscriberBuffer,
            timeout: timeout
        )
        if result.replayed != messages {
            fail("the server counts \(result.replayed) notifications replayed, not \(messages)")
        }
        printNow(
            "RESULT case=replay store=\(storeName) messages=\(messages) size=\(size)"
                + " fill_seconds=\(format(result.fillSeconds, decimals: 3)) fill_aps=\(format(Double(messages) / result.fillSeconds, decimals: 0))"
                + " seconds=\(format(result.replaySeconds, decimals: 3)) nps=\(format(Double(messages) / result.replaySeconds, decimals: 0))"
        )
    case "claims":
        let clients = max(1, options.int("clients", default: 10_000))
        let elapsed = try await Claims.run(node: nodes[0], clients: clients, concurrency: 256, timeout: timeout)
        printNow("RESULT case=claims store=\(storeName) clients=\(clients) seconds=\(format(elapsed, decimals: 3)) cps=\(format(Double(clients) / elapsed, decimals: 0))")
    case "channel":
        let clients = max(1, options.int("clients", default: 1_000))
        let channels = max(1, options.int("channels", default: 1))
        let phases = try await ChannelFanOut.run(
            nodes: clusters.isEmpty && redisClusters.isEmpty ? [] : nodes,
            clients: clients,
            channels: channels,
            rounds: max(1, options.int("rounds", default: 100)),
            warmup: options.int("warmup", default: 5),
            size: size,
            timeout: timeout
        )
        for phase in phases {
            func us(_ nanoseconds: UInt64) -> String { format(Double(nanoseconds) / 1000, decimals: 0) }
            printNow(
                "RESULT case=channel nodes=\(max(1, clusters.count + redisClusters.count)) clients=\(clients) channels=\(channels) rounds=\(phase.rounds) size=\(size)"
                    + " seconds=\(format(phase.seconds, decimals: 3)) nps=\(format(Double(clients * phase.rounds) / phase.seconds, decimals: 0))"
                    + " p50_us=\(us(phase.latencies.value(atQuantile: 0.5))) p99_us=\(us(phase.latencies.value(atQuantile: 0.99)))"
                    + " max_us=\(us(phase.latencies.maximum))"
            )
        }
    default:
        let clients = max(1, options.int("clients", default: 1_000))
        let source: PushFanOut.Source
        if storeName == "broadcast" {
            source = .broadcast
        } else if let publisher {
            source = .publisher(publisher)
        } else if let redisPublisher {
            source = .redisPublisher(redisPublisher)
        } else {
            source = .servers
        }
        let phases = try await PushFanOut.run(
            nodes: nodes,
            source: source,
            clients: clients,
            rounds: max(1, options.int("rounds", default: 100)),
            warmup: options.int("warmup", default: 5),
            size: size,
            acknowledgeDelay: options.int("ack-delay", default: 0) > 0 ? .milliseconds(options.int("ack-delay", default: 0)) : nil,
            timeout: timeout
        )
        for phase in phases {
            func us(_ nanoseconds: UInt64) -> String { format(Double(nanoseconds) / 1000, decimals: 0) }
            printNow(
                "RESULT case=push store=\(storeName) nodes=\(nodes.count) from=\(storeName == "broadcast" ? "broadcast" : from)"
                    + " clients=\(clients) pushers=\(phase.pushers) rounds=\(phase.rounds) size=\(size)"
                    + " seconds=\(format(phase.seconds, decimals: 3)) nps=\(format(Double(clients * phase.rounds) / phase.seconds, decimals: 0))"
                    + " p50_us=\(us(phase.latencies.value(atQuantile: 0.5))) p99_us=\(us(phase.latencies.value(atQuantile: 0.99)))"
                    + " max_us=\(us(phase.latencies.maximum))"
                    + (phase.calls.count == 0 ? "" : " call_p50_us=\(us(phase.calls.value(atQuantile: 0.5))) call_p99_us=\(us(phase.calls.value(atQuantile: 0.99)))")
            )
        }
    }
} catch {
    fail("\(error)")
}
await publisher?.close()
for cluster in clusters { await cluster.close() }
await postgresStore?.close()
await redisPublisher?.close()
for cluster in redisClusters { await cluster.close() }
await redisStore?.close()
directory?.remove([databaseFile, databaseFile + "-wal", databaseFile + "-shm"])
exit(0)
