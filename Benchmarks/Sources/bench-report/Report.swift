import BenchCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One client run: where it ran and what it printed.
struct Run {
    var scenario: String
    var server: String
    var client: String
    var ok: Bool
    var values: [String: Double]

    /// Parses `RUN key=value … [RESULT key=value …]`; `nil` for any other line.
    init?(line: Substring) {
        guard line.hasPrefix("RUN ") else { return nil }
        var fields: [String: String] = [:]
        for token in line.split(separator: " ") {
            guard let equals = token.firstIndex(of: "=") else { continue }
            fields[String(token[..<equals])] = String(token[token.index(after: equals)...])
        }
        guard let scenario = fields["scenario"], let server = fields["server"], let client = fields["client"] else { return nil }
        self.scenario = scenario
        self.server = server
        self.client = client
        ok = fields["status"] == "ok"
        values = fields.compactMapValues { Double($0) }
    }
}

/// A metric of a scenario: what is compared and which way is better.
struct Metric {
    var key: String
    var title: String
    var higherIsBetter: Bool
    var decimals: Int

    static let rps = Metric(key: "rps", title: "req/s", higherIsBetter: true, decimals: 0)
    static let p50 = Metric(key: "p50_us", title: "p50 µs", higherIsBetter: false, decimals: 1)
    static let p99 = Metric(key: "p99_us", title: "p99 µs", higherIsBetter: false, decimals: 1)
    static let mbps = Metric(key: "mbps", title: "MB/s", higherIsBetter: true, decimals: 0)
    static let bytesPerConnection = Metric(key: "bytes_per_conn", title: "bytes per connection", higherIsBetter: false, decimals: 0)
    static let notifications = Metric(key: "nps", title: "notifications/s", higherIsBetter: true, decimals: 0)
    static let mallocs = Metric(key: "mallocs", title: "allocations per request", higherIsBetter: false, decimals: 0)
    static let appends = Metric(key: "fill_aps", title: "appends/s", higherIsBetter: true, decimals: 0)
}

struct Scenario {
    var id: String
    var title: String
    var metrics: [Metric]

    static let load = [
        Scenario(id: "a", title: "a. 1 conn, 1 in flight, 64 B", metrics: [.p50, .rps]),
        Scenario(id: "b", title: "b. 1 conn, 100 in flight, 64 B", metrics: [.rps, .p99]),
        Scenario(id: "c", title: "c. 100 conns × 10 in flight, 64 B", metrics: [.rps, .p99]),
        Scenario(id: "d", title: "d. 1 conn, 4 in flight, 1 MiB", metrics: [.mbps, .p50]),
    ]
    static let idle = Scenario(id: "e", title: "e. server memory, idle connections", metrics: [.bytesPerConnection])
    static let tls = Scenario(id: "t", title: "t. b over TLS: 1 conn, 100 in flight, 64 B", metrics: [.rps, .p99])
    static let webSocket = Scenario(id: "w", title: "w. b over WebSocket: 1 conn, 100 in flight, 64 B", metrics: [.rps, .p99])
    static let fanOut = Scenario(id: "f", title: "f. push fan-out to 1,000 clients, 64 B", metrics: [.notifications])
}

/// The median and spread of one metric over the repetitions of one cell.
struct Summary {
    var median: Double
    var minimum: Double
    var maximum: Double
    var runs: Int
    var failures: Int

    init?(_ values: [Double], failures: Int) {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        median = sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
        minimum = sorted[0]
        maximum = sorted[sorted.count - 1]
        runs = sorted.count
        self.failures = failures
    }

    func text(_ metric: Metric) -> String {
        var text = number(median, metric.decimals)
        if runs > 1 { text += " (\(number(minimum, metric.decimals))–\(number(maximum, metric.decimals)))" }
        if failures > 0 { text += " ⚠\(failures) failed" }
        return text
    }
}

/// Groups numbers by thousands: 1234567 → 1,234,567.
func number(_ value: Double, _ decimals: Int) -> String {
    let text = format(value, decimals: decimals)
    let parts = text.split(separator: ".", maxSplits: 1)
    var whole = String(parts[0])
    let negative = whole.hasPrefix("-")
    if negative { whole.removeFirst() }
    var grouped = ""
    for (index, character) in whole.reversed().enumerated() {
        if index > 0 && index % 3 == 0 { grouped.append(",") }
        grouped.append(character)
    }
    let result = (negative ? "-" : "") + String(grouped.reversed())
    return parts.count > 1 ? result + "." + parts[1] : result
}

struct Report {
    var runs: [Run]

    /// A side of a comparison: a server and a client.
    struct Pair {
        var server: String
        var client: String
        var title: String
    }

    func summary(_ scenario: String, _ pair: Pair, _ metric: Metric) -> Summary? {
        let cell = runs.filter { $0.scenario == scenario && $0.server == pair.server && $0.client == pair.client }
        let values = cell.filter(\.ok).compactMap { $0.values[metric.key] }
        if values.isEmpty && !cell.isEmpty { return Summary([.nan], failures: cell.count) }
        return Summary(values, failures: cell.count - values.count)
    }

    /// A table of `tether` against `peers` per scenario and metric, with Tether's ratios.
    func comparison(heading: String, note: String, scenarios: [Scenario] = Scenario.load, tether: Pair, peers: [Pair]) -> String? {
        // Only the runs of these scenarios: scenario w runs tether ↔ tether over TCP too.
        let ids = Set(scenarios.map(\.id))
        let runs = runs.filter { ids.contains($0.scenario) }
        let present = peers.filter { peer in runs.contains { $0.server == peer.server && $0.client == peer.client } }
        guard runs.contains(where: { $0.server == tether.server && $0.client == tether.client }), !present.isEmpty else { return nil }
        var lines = ["### \(heading)", "", note, ""]
        var header = "| scenario | metric | \(tether.title) |"
        var rule = "|---|---|---:|"
        for peer in present {
            header += " \(peer.title) |"
            rule += "---:|"
        }
        for peer in present {
            header += " Tether ÷ \(peer.title) |"
            rule += "---:|"
        }
        lines += [header, rule]
        for scenario in scenarios where runs.contains(where: { $0.scenario == scenario.id && $0.server == tether.server && $0.client == tether.client }) {
            for metric in scenario.metrics {
                let mine = summary(scenario.id, tether, metric)
                var row = "| \(scenario.title) | \(metric.title) | \(mine?.text(metric) ?? "–") |"
                for peer in present {
                    row += " \(summary(scenario.id, peer, metric)?.text(metric) ?? "–") |"
                }
                for peer in present {
                    row += " \(ratio(mine, summary(scenario.id, peer, metric), metric)) |"
                }
                lines.append(row)
            }
        }
        return lines.joined(separator: "\n")
    }

    func ratio(_ mine: Summary?, _ theirs: Summary?, _ metric: Metric) -> String {
        guard let mine, let theirs, mine.median.isFinite, theirs.median.isFinite, theirs.median > 0 else { return "–" }
        let value = mine.median / theirs.median
        let better = metric.higherIsBetter ? value >= 1 : value <= 1
        return "\(format(value, decimals: 2))×" + (better ? "" : " ✗")
    }

    /// Scenario w against b over plain TCP in the same repetitions: what WebSocket costs
    /// each stack (its client against its own server).
    func webSocketCost() -> String? {
        let stacks = [
            (title: "Tether ↔ Tether", tcp: Pair(server: "tether", client: "tether", title: ""), ws: Pair(server: "tether-ws", client: "tether", title: "")),
            (title: "NIO handler ↔ NIO", tcp: Pair(server: "nio", client: "nio-handler", title: ""), ws: Pair(server: "nio-ws", client: "nio-handler", title: "")),
        ]
        var rows: [String] = []
        for stack in stacks {
            guard runs.contains(where: { $0.scenario == "w" && $0.server == stack.ws.server && $0.client == stack.ws.client }) else { continue }
            for metric in Scenario.webSocket.metrics {
                let tcp = summary("w", stack.tcp, metric)
                let ws = summary("w", stack.ws, metric)
                rows.append("| \(stack.title) | \(metric.title) | \(tcp?.text(metric) ?? "–") | \(ws?.text(metric) ?? "–") | \(plainRatio(ws, tcp)) |")
            }
        }
        guard !rows.isEmpty else { return nil }
        return ([
            "### WebSocket against TCP",
            "",
            "Scenario b over plain TCP and over WebSocket, in the same repetitions (runs interleaved). The ratio is WebSocket's median over TCP's.",
            "",
            "| client ↔ server | metric | over TCP | over WebSocket | WebSocket ÷ TCP |",
            "|---|---|---:|---:|---:|",
        ] + rows).joined(separator: "\n")
    }

    /// `mine ÷ theirs` with no judgement of which way is better.
    func plainRatio(_ mine: Summary?, _ theirs: Summary?) -> String {
        guard let mine, let theirs, mine.median.isFinite, theirs.median.isFinite, theirs.median > 0 else { return "–" }
        return "\(format(mine.median / theirs.median, decimals: 2))×"
    }

    func allocations() -> String? {
        let sides = [
            ("client", "client: Connection ↔ raw socket echo, caller on the global executor"),
            ("client-loop", "client: the same, caller on the connection's loop (`taskExecutor`)"),
            ("server", "server: raw socket client ↔ Server"),
            ("both", "client ↔ server, both Tether, one process"),
        ]
        let rows = sides.compactMap { side, title -> String? in
            guard let summary = summary("g", Pair(server: "tether", client: side, title: ""), .mallocs) else { return nil }
            return "| \(title) | \(summary.text(.mallocs)) |"
        }
        guard !rows.isEmpty else { return nil }
        return ([
            "### Heap allocations per request",
            "",
            "package-benchmark's `mallocCountTotal` per 64-byte request round trip over loopback, one request in flight (`Benchmarks/Benchmarks/TetherBenchmarks`). The raw-socket sides allocate nothing, so each count is Tether's own.",
            "",
            "| round trip | allocations per request |",
            "|---|---:|",
        ] + rows).joined(separator: "\n")
    }

    /// Scenario h: mailbox fill and replay, and sequenced pushes against broadcast, for
    /// every store side by side.
    func sessions() -> String? {
        let cells = runs.filter { $0.scenario == "h" }
        guard !cells.isEmpty else { return nil }
        func value(_ key: String) -> String {
            guard let value = cells.lazy.compactMap({ $0.values[key] }).first else { return "?" }
            return number(value, 0)
        }
        let columns = [
            ("sqlite", "SQLite"),
            ("memory", "in-memory"),
            ("postgres", "PostgreSQL"),
            ("postgres-3", "PostgreSQL, 3 nodes"),
            ("postgres-3-pub", "PostgreSQL, 3 nodes, publisher"),
            ("redis", "Redis"),
            ("redis-3", "Redis, 3 nodes"),
            ("redis-3-pub", "Redis, 3 nodes, publisher"),
            ("broadcast", "broadcast"),
            ("1", "1 channel"),
            ("100", "100 channels"),
            ("postgres-3-ch1", "1 channel, 3 nodes"),
            ("postgres-3-ch100", "100 channels, 3 nodes"),
            ("redis-3-ch1", "1 channel, 3 Redis nodes"),
            ("redis-3-ch100", "100 channels, 3 Redis nodes"),
        ].filter { column in cells.contains { $0.server == column.0 } }
        let seconds = Metric(key: "seconds", title: "seconds", higherIsBetter: false, decimals: 2)
        let latency = Metric(key: "p99_us", title: "p99 µs, push call → client", higherIsBetter: false, decimals: 0)
        let call = Metric(key: "call_p99_us", title: "p99 µs, push call's own time", higherIsBetter: false, decimals: 0)
        let rows: [(client: String, title: String, metric: Metric)] = [
            ("replay", "fill, \(value("messages")) pushes for 1 client, 1,000 per append", .appends),
            ("replay", "replay \(value("messages")) to 1 resuming client", .notifications),
            ("replay", "replay \(value("messages")) to 1 resuming client", seconds),
            ("push1", "push to \(value("clients")) clients, 1 pusher", .notifications),
            ("push1", "push to \(value("clients")) clients, 1 pusher", latency),
            ("push1", "push to \(value("clients")) clients, 1 pusher", call),
            ("push4", "push to \(value("clients")) clients, 4 pushers at once", .notifications),
            ("push4", "push to \(value("clients")) clients, 4 pushers at once", latency),
            ("push4", "push to \(value("clients")) clients, 4 pushers at once", call),
            ("channel", "publish to the channels of \(value("clients")) clients", .notifications),
            ("channel", "publish to the channels of \(value("clients")) clients", latency),
        ]
        var lines = [
            "### Sessions and mailboxes",
            "",
            "Servers and clients in one process over loopback, 64-byte pushes, medians of the repetitions (min–max). "
                + "Fill and replay: the store's own `append` fills client r's mailbox while r is suspended; the replay is timed from its reconnect until "
                + "its subscriber (its buffer raised to N: a replay does not wait for subscribers) has every push, checked 1…N by serial. "
                + "Push: each round is one frame to every connected, identified client, with `push(_:toClients:)` (one store transaction a round; "
                + "the server merges pushes that wait at once) or, for reference, the unsequenced `broadcast`; timed until every client has "
                + "every push, each checking its serials are consecutive; the latency runs from the push call to the client's subscriber "
                + "(a timestamp in the payload). PostgreSQL: one server on a `PostgresMailboxStore`; 3 nodes: three servers in the process, "
                + "each a `PostgresCluster` node on its own port, the clients spread over them, the rounds pushed by the nodes in turn "
                + "or by a `PostgresPublisher` that holds no connection; each run on a fresh database. Redis: the same with a "
                + "`RedisMailboxStore`, `RedisCluster` nodes and a `RedisPublisher`, on a redis-server whose append-only file is synced "
                + "on every write (each run under a key prefix of its own). Channels: the same clients "
                + "subscribed to one channel, or 10 to each of 100, each round one message per channel with `publish(_:to:)` "
                + "(stored once per channel), published without waiting; timed until every client has every message, in offset order. "
                + "Channels on 3 nodes: the clients spread over three cluster nodes whose channels are on the database, channel k "
                + "published through node k mod 3, up to 16 publications at once, each waiting for its commit.",
            "",
            "| h. sessions | metric |" + columns.map { " \($0.1) |" }.joined(),
            "|---|---|" + String(repeating: "---:|", count: columns.count),
        ]
        for row in rows where cells.contains(where: { $0.client == row.client }) {
            var line = "| \(row.title) | \(row.metric.title) |"
            for column in columns {
                // A metric the runs of this column do not measure (a broadcast makes no
                // push call to time): no figure, rather than a failure.
                let cell = cells.filter { $0.server == column.0 && $0.client == row.client }
                if !cell.isEmpty, cell.allSatisfy({ $0.ok && $0.values[row.metric.key] == nil }) {
                    line += " – |"
                    continue
                }
                let summary = summary("h", Pair(server: column.0, client: row.client, title: ""), row.metric)
                line += " \(summary?.text(row.metric) ?? "–") |"
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }

    func matrix() -> String? {
        let servers = ["tether", "nio", "c"]
        let clients = ["tether", "tether-pipeline", "nio-handler", "nio-async", "c"]
        let pairs = servers.flatMap { server in clients.map { Pair(server: server, client: $0, title: "") } }
            .filter { pair in runs.contains { $0.server == pair.server && $0.client == pair.client } }
        guard pairs.count > 3 else { return nil }
        var lines = [
            "### Every server × client",
            "",
            "Medians (min–max) of the repetitions.",
            "",
            "| scenario | server | client | req/s | MB/s | p50 µs | p99 µs |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        for scenario in Scenario.load where runs.contains(where: { $0.scenario == scenario.id }) {
            for pair in pairs where runs.contains(where: { $0.scenario == scenario.id && $0.server == pair.server && $0.client == pair.client }) {
                let cells = [Metric.rps, .mbps, .p50, .p99].map { summary(scenario.id, pair, $0)?.text($0) ?? "–" }
                lines.append("| \(scenario.id) | \(pair.server) | \(pair.client) | " + cells.joined(separator: " | ") + " |")
            }
        }
        return lines.joined(separator: "\n")
    }

    func markdown() -> String {
        let tether = Pair(server: "tether", client: "tether", title: "Tether")
        let sections = [
            comparison(
                heading: "Tether against its peers, each side its own client and server",
                note: "Medians of the repetitions (min–max). Ratios are Tether's median over the peer's: above 1× is better for req/s and MB/s, below 1× for latency; ✗ marks where Tether is behind.",
                tether: tether,
                peers: [
                    Pair(server: "nio", client: "nio-handler", title: "NIO handler"),
                    Pair(server: "nio", client: "nio-async", title: "NIO async"),
                    Pair(server: "c", client: "c", title: "C epoll"),
                ]
            ),
            comparison(
                heading: "Servers, driven by the C load generator",
                note: "The same C client against each server: the differences are the servers'.",
                tether: Pair(server: "tether", client: "c", title: "Tether server"),
                peers: [
                    Pair(server: "nio", client: "c", title: "NIO server"),
                    Pair(server: "c", client: "c", title: "C server"),
                ]
            ),
            comparison(
                heading: "Clients, against the C echo server",
                note: "Each client against the same C server: the differences are the clients'.",
                tether: Pair(server: "c", client: "tether", title: "Tether client"),
                peers: [
                    Pair(server: "c", client: "nio-handler", title: "NIO handler client"),
                    Pair(server: "c", client: "nio-async", title: "NIO async client"),
                    Pair(server: "c", client: "c", title: "C client"),
                ]
            ),
            comparison(
                heading: "Pipelined requests (`Connection.pipeline`), against the C echo server",
                note: "One task per connection writes K requests at once with `Connection.pipeline` and is woken once for all K outcomes, then sends the next K; the peers keep K in flight request by request. Same C server for all.",
                scenarios: Scenario.load.filter { $0.id == "b" || $0.id == "c" },
                tether: Pair(server: "c", client: "tether-pipeline", title: "Tether pipeline client"),
                peers: [
                    Pair(server: "c", client: "nio-handler", title: "NIO handler client"),
                    Pair(server: "c", client: "tether", title: "Tether client"),
                ]
            ),
            comparison(
                heading: "Over TLS",
                note: "Scenario b over TLS 1.3: Tether's TetherTLS (OpenSSL) and NIO's NIOSSL (BoringSSL), each client against its own server.",
                scenarios: [Scenario.tls],
                tether: Pair(server: "tether-tls", client: "tether", title: "Tether"),
                peers: [Pair(server: "nio-tls", client: "nio-handler", title: "NIO handler")]
            ),
            comparison(
                heading: "Over TLS, clients against NIO's TLS server",
                note: "Each client against the same NIOSSL server: the differences are the clients'.",
                scenarios: [Scenario.tls],
                tether: Pair(server: "nio-tls", client: "tether", title: "Tether client"),
                peers: [Pair(server: "nio-tls", client: "nio-handler", title: "NIO handler client")]
            ),
            comparison(
                heading: "Over TLS, servers driven by NIO's handler client",
                note: "The same NIOSSL client against each server: the differences are the servers'.",
                scenarios: [Scenario.tls],
                tether: Pair(server: "tether-tls", client: "nio-handler", title: "Tether server"),
                peers: [Pair(server: "nio-tls", client: "nio-handler", title: "NIO server")]
            ),
            comparison(
                heading: "Over WebSocket",
                note: "Scenario b over WebSocket: the seed frames ride in binary messages, the client's masked with a random key. Tether: `Endpoint(webSocket:)` and `ServerConfiguration.webSocket`; NIO: NIOWebSocket behind an HTTP/1.1 upgrade, each read burst's answers in one message. Each client against its own server.",
                scenarios: [Scenario.webSocket],
                tether: Pair(server: "tether-ws", client: "tether", title: "Tether"),
                peers: [Pair(server: "nio-ws", client: "nio-handler", title: "NIO handler")]
            ),
            comparison(
                heading: "Over WebSocket, clients against NIO's WebSocket server",
                note: "Each client against the same NIOWebSocket server: the differences are the clients'.",
                scenarios: [Scenario.webSocket],
                tether: Pair(server: "nio-ws", client: "tether", title: "Tether client"),
                peers: [Pair(server: "nio-ws", client: "nio-handler", title: "NIO handler client")]
            ),
            comparison(
                heading: "Over WebSocket, servers driven by NIO's WebSocket client",
                note: "The same NIOWebSocket client against each server: the differences are the servers'.",
                scenarios: [Scenario.webSocket],
                tether: Pair(server: "tether-ws", client: "nio-handler", title: "Tether server"),
                peers: [Pair(server: "nio-ws", client: "nio-handler", title: "NIO server")]
            ),
            webSocketCost(),
            comparison(
                heading: "Server memory per idle connection",
                note: "Growth of the server's resident memory (VmRSS) from a warm idle server to one holding the idle connections, each having served one request, divided by their number.",
                scenarios: [Scenario.idle],
                tether: Pair(server: "tether", client: "idle", title: "Tether server"),
                peers: [
                    Pair(server: "nio", client: "idle", title: "NIO server"),
                    Pair(server: "c", client: "idle", title: "C server"),
                ]
            ),
            comparison(
                heading: "Push fan-out",
                note: "Notifications per second received by 1,000 connected C clients; one of them asks for 10 broadcast rounds at a time and asks again once every notification of the batch has arrived.",
                scenarios: [Scenario.fanOut],
                tether: Pair(server: "tether", client: "fanout", title: "Tether server"),
                peers: [Pair(server: "nio", client: "fanout", title: "NIO server")]
            ),
            allocations(),
            sessions(),
            matrix(),
        ]
        return sections.compactMap { $0 }.joined(separator: "\n\n")
    }
}

/// The contents of a text file, or `nil` when it cannot be read.
func readFile(_ path: String) -> String? {
    guard let file = fopen(path, "r") else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
        if count == 0 { break }
        bytes += chunk[0..<count]
    }
    return String(decoding: bytes, as: UTF8.self)
}
