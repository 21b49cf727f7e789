import BenchCore
import Tether
import TetherSQLite

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let usage = """
    usage: bench-sessions --case replay|push --store sqlite|memory|broadcast
                          [--messages N] [--batch B] [--subscriber-buffer K]
                          [--clients C] [--rounds M]
                          [--warmup W] [--size BYTES] [--timeout S]
      Sessions and mailboxes, server and clients in this process on 127.0.0.1.
      replay  fills a fresh store (a SQLite file in a new temporary directory, or memory)
              with N pushes of BYTES for client r through the store's append, B a call
              (default 200,000 and 1,000), then times client r reconnecting until its
              subscriber has all N, in order. The client's subscriber buffer holds K
              pushes (default N; 0 keeps Tether's default, 4,096): the replay does not
              wait for a subscriber, so a smaller buffer drops pushes and fails the run.
              RESULT case=replay store=… messages=N size=… fill_seconds=… fill_aps=… seconds=… nps=…
      push    connects C clients with sessions c0…c{C-1} (default 1,000), then pushes
              W unmeasured rounds (default 5), M rounds with one pusher and M rounds with
              4 pushers at once (default 100) of a BYTES frame to all of them, with
              push(_:toClients:) or, with --store broadcast, the unsequenced broadcast;
              each phase is timed until every client has every push. One line per phase:
              RESULT case=push store=… clients=C pushers=… rounds=M size=… seconds=… nps=…
      A push missing, repeated, out of order or wrong fails the run (exit status 1); a
      phase that has not finished after --timeout seconds (default 30) too.
    """

let options = Options(
    Array(CommandLine.arguments.dropFirst()),
    known: ["case", "store", "messages", "batch", "subscriber-buffer", "clients", "rounds", "warmup", "size", "timeout"],
    usage: usage
)
let scenario = options.string("case", allowed: ["replay", "push"])
let storeName = options.string("store", allowed: ["sqlite", "memory", "broadcast"])
let size = options.int("size", default: 64)
let timeout = options.double("timeout", default: 30)
if scenario == "replay" && storeName == "broadcast" {
    Options.fail("replay takes --store sqlite or memory", usage: usage)
}

raiseOpenFileLimit()
let directory = storeName == "sqlite" ? TemporaryDirectory() : nil
let databaseFile = "mailboxes.sqlite"
let store: any MailboxStore
do {
    if let directory {
        store = try SQLiteMailboxStore(path: "\(directory.path)/\(databaseFile)")
    } else {
        store = InMemoryMailboxStore()
    }
} catch {
    fail("cannot open the store: \(error)")
}

do {
    switch scenario {
    case "replay":
        let messages = max(1, options.int("messages", default: 200_000))
        let subscriberBuffer = options.int("subscriber-buffer", default: messages)
        let result = try await Replay.run(
            store: store,
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
    default:
        let clients = max(1, options.int("clients", default: 1_000))
        let phases = try await PushFanOut.run(
            mode: PushFanOut.Mode(rawValue: storeName)!,
            store: store,
            clients: clients,
            rounds: max(1, options.int("rounds", default: 100)),
            warmup: options.int("warmup", default: 5),
            size: size,
            timeout: timeout
        )
        for phase in phases {
            printNow(
                "RESULT case=push store=\(storeName) clients=\(clients) pushers=\(phase.pushers) rounds=\(phase.rounds) size=\(size)"
                    + " seconds=\(format(phase.seconds, decimals: 3)) nps=\(format(Double(clients * phase.rounds) / phase.seconds, decimals: 0))"
            )
        }
    }
} catch {
    fail("\(error)")
}
directory?.remove([databaseFile, databaseFile + "-wal", databaseFile + "-shm"])
exit(0)
