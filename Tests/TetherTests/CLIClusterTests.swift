import Foundation
import Testing
@testable import Tether
@testable import TetherPostgres
import TetherTesting

/// Starts `tether serve --port 0 --postgres URL` with `options` and waits for its listening
/// line, which names the node and the database.
///
/// - Returns: The server process (the caller kills it), its endpoint, and the line.
func clusterServe(_ url: String, _ options: [String] = []) async throws -> (process: ChildProcess, endpoint: Endpoint, line: String) {
    let server = try tether(["serve", "--port", "0", "--postgres", url] + options)
    do {
        let port = try await server.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            listeningPort(in: String(decoding: output, as: UTF8.self), suffix: " (")
        }
        let line = server.outputText.split(separator: "\n").first { $0.hasPrefix("listening on ") } ?? ""
        return (server, Endpoint(host: "127.0.0.1", port: port), String(line))
    } catch {
        server.kill()
        throw error
    }
}

/// Runs `tether arguments` to its end.
///
/// - Returns: Its exit status and its output (stdout and stderr merged).
private func runTether(_ arguments: [String]) async throws -> (status: Int32, output: String) {
    let process = try tether(arguments)
    defer { process.kill() }
    let status = try await process.waitForExit(within: .seconds(30))
    return (status, process.outputText)
}

/// The JSON lines `tether listen` printed: the pushes.
private func printedPushes(_ output: String) -> [String] {
    output.split(separator: "\n").filter { $0.hasPrefix("{") }.map(String.init)
}

/// `tether serve --postgres` and `tether push` as a user runs them, as child processes, on
/// a fresh database of the test PostgreSQL server.
@Suite("tether serve --postgres and tether push", .serialized, .timeLimit(.guarded))
struct CLIClusterTests {
    @Test("tether push to offline clients prints their sequences; tether listen and a Connection on two serve --postgres nodes get them, and a listener that moves takes its client over")
    func pushThenListen() async throws {
        let url = try await PostgresFixture.freshDatabase()
        let database = PostgresDatabase.endpoint(of: url)
        let (n1, first, line1) = try await clusterServe(url, ["--node", "n1"])
        defer { n1.kill() }
        let (n2, second, line2) = try await clusterServe(url)
        defer { n2.kill() }
        #expect(line1 == "listening on 127.0.0.1:\(first.port) (node n1, PostgreSQL \(database))")
        // Without --node, the name is the host name and, with --port 0, the process id.
        let name2 = try #require(line2.split(separator: "(node ").last?.split(separator: ",").first.map(String.init))
        #expect(name2.hasSuffix("-p\(n2.pid)"), "\(line2)")
        #expect(line2 == "listening on 127.0.0.1:\(second.port) (node \(name2), PostgreSQL \(database))")

        let pushed = try await runTether([
            "push", "--postgres", url, "--client-id", "alice", "--client-id", "bob", "--json", #"{"n": 1}"#, "--count", "2",
        ])
        #expect(pushed.status == 0, "\(pushed.output)")
        #expect(pushed.output == "alice 1\nbob 1\nalice 2\nbob 2\n")

        // bob, on n2, gets his two.
        let bob = try await clusterClient("bob", second)
        let bobs = try await TetherTesting.collect(2, from: bob.notifications, within: eventBound)
        #expect(bobs.map(\.serial) == [1, 2])
        #expect(bobs.map(\.type) == [0x2, 0x2])
        #expect(bobs.map { String(decoding: $0.payload, as: UTF8.self) } == [#"{"n": 1}"#, #"{"n": 1}"#])
        await bob.close()

        // alice listens on n1: her two are replayed, a third comes live.
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let state = directory.file("alice.state")
        let listenOn1 = try tether(["listen", "\(first)", "--client-id", "alice", "--state", state, "--max-attempts", "0"])
        defer { listenOn1.kill() }
        _ = try await listenOn1.waitForOutput(containing: #""serial":2,"#, within: eventBound)
        let live = try await runTether(["push", "--postgres", url, "--client-id", "alice", "--text", "live"])
        #expect(live.status == 0 && live.output == "alice 3\n", "\(live.output)")
        _ = try await listenOn1.waitForOutput(containing: #""serial":3,"#, within: eventBound)
        #expect(printedPushes(listenOn1.outputText) == [
            #"{"type":2,"serial":1,"content":{"n":1}}"#,
            #"{"type":2,"serial":2,"content":{"n":1}}"#,
            #"{"type":2,"serial":3,"content":"live"}"#,
        ])
        _ = try await n1.waitForOutput(containing: "identified as client alice, resuming after 0", within: eventBound)

        // alice listens on n2 too: n2 takes her over, n1 closes its connection and says
        // why, and the first listener (no reconnects) ends.
        let listenOn2 = try tether(["listen", "\(second)", "--client-id", "alice", "--state", state, "--count", "1"])
        defer { listenOn2.kill() }
        _ = try await n1.waitForOutput(containing: "(client alice) disconnected: client alice connected again on node \(name2);", within: eventBound)
        _ = try await n2.waitForOutput(containing: "identified as client alice, resuming after 3", within: eventBound)
        #expect(try await listenOn1.waitForExit(within: eventBound) == 1)
        let moved = try await runTether(["push", "--postgres", url, "--client-id", "alice", "--json", "4"])
        #expect(moved.status == 0 && moved.output == "alice 4\n", "\(moved.output)")
        #expect(try await listenOn2.waitForExit(within: eventBound) == 0, "\(listenOn2.outputText)")
        #expect(printedPushes(listenOn2.outputText) == [#"{"type":2,"serial":4,"content":4}"#])
    }

    @Test("three serve --postgres processes, a client on the third, which is killed with SIGKILL mid-stream: the client comes back on another node and gets every push exactly once, in order")
    func nodeKilled() async throws {
        let url = try await PostgresFixture.freshDatabase()
        var nodes: [ChildProcess] = []
        var endpoints: [Endpoint] = []
        defer { for node in nodes { node.kill() } }
        for name in ["n1", "n2", "n3"] {
            let (process, endpoint, _) = try await clusterServe(url, ["--node", name])
            nodes.append(process)
            endpoints.append(endpoint)
        }
        let publisher = try await PostgresPublisher(url: url)
        let client = try await clusterClient("carol", endpoints[2], alternates: [endpoints[0], endpoints[1]])
        let everything = client.notifications
        let firstPart = client.notifications
        let received = Task { try await TetherTesting.collect(60, from: everything, within: .seconds(60)) }
        _ = try await nodes[2].waitForOutput(containing: "identified as client carol, resuming after 0", within: eventBound)

        for push in 0..<20 {
            #expect(try await publisher.push(indexed(push), toClient: "carol") == UInt64(push + 1))
        }
        #expect(try await TetherTesting.collect(20, from: firstPart, within: eventBound).map(index(of:)) == Array(0..<20))
        for push in 20..<30 {
            #expect(try await publisher.push(indexed(push), toClient: "carol") == UInt64(push + 1))
        }
        // n3 dies as in a crash, with pushes on their way; more are stored while carol has
        // no node, and after she is back on n1.
        nodes[2].kill()
        for push in 30..<60 {
            #expect(try await publisher.push(indexed(push), toClient: "carol") == UInt64(push + 1))
        }
        let frames = try await received.value
        #expect(frames.map(index(of:)) == Array(0..<60))
        #expect(frames.map(\.serial) == Array(1...60))
        #expect(nodes[0].outputText.contains("identified as client carol, resuming after "), "\(nodes[0].outputText)")
        #expect(!nodes[1].outputText.contains("client carol"), "\(nodes[1].outputText)")
        await client.close()
        await publisher.close()
    }

    @Test("channels across three serve --postgres processes: subscribers on the third, which is killed with SIGKILL mid-stream, come back on another node and get every message of tether publish --postgres and a backend once, in order; tether subscribe on the first gets them too")
    func channelNodeKilled() async throws {
        let url = try await PostgresFixture.freshDatabase()
        var nodes: [ChildProcess] = []
        var endpoints: [Endpoint] = []
        defer { for node in nodes { node.kill() } }
        for name in ["n1", "n2", "n3"] {
            let (process, endpoint, _) = try await clusterServe(url, ["--node", name])
            nodes.append(process)
            endpoints.append(endpoint)
        }
        let cli = try tether(["subscribe", "\(endpoints[0].host):\(endpoints[0].port)", "room", "--count", "60", "--from", "0"])
        defer { cli.kill() }
        var subscriptions: [ChannelSubscription] = []
        var clients: [Connection] = []
        for number in 0..<5 {
            let client = try await clusterClient("member-\(number)", endpoints[2], alternates: [endpoints[0], endpoints[1]])
            clients.append(client)
            subscriptions.append(try await client.subscribe(to: "room"))
        }
        let published = try await runTether(["publish", "--postgres", url, "room", "--text", "m0", "--count", "1"])
        #expect(published.status == 0, "\(published.output)")
        #expect(published.output.split(separator: "\n").last == "1", "\(published.output)")
        let publisher = try await PostgresPublisher(url: url)
        for n in 1..<30 { try await publisher.publish(Array("m\(n)".utf8), to: "room") }
        // n3 dies as in a crash, with messages on their way; more are published while its
        // subscribers have no node, and after they are back.
        nodes[2].kill()
        for n in 30..<60 { try await publisher.publish(Array("m\(n)".utf8), to: "room") }
        let expected = (0..<60).map { "m\($0)" }
        for subscription in subscriptions {
            let events = try await TetherTesting.collect(60, from: subscription, within: .seconds(60))
            let texts = events.compactMap { if case .message(let message) = $0 { String(decoding: message.payload, as: UTF8.self) } else { nil } }
            #expect(texts == expected)
        }
        #expect(try await cli.waitForExit(within: .seconds(60)) == 0, "\(cli.outputText)")
        let lines = cli.outputText.split(separator: "\n").filter { $0.hasPrefix("{") }
        #expect(lines.count == 60, "\(cli.outputText)")
        #expect(lines.first?.contains("\"offset\":1,") == true && lines.first?.contains("\"text\":\"m0\"") == true, "\(cli.outputText)")
        for client in clients { await client.close() }
        await publisher.close()
    }

    @Test("serve --postgres logs when its database stops answering and when it answers again; past the grace it closes its clients, which come back, and pushes reach them")
    func databaseRestarted() async throws {
        let instance = try await PostgresInstance.start()
        let url = instance.url()
        let database = PostgresDatabase.endpoint(of: url)
        let (node, endpoint, _) = try await clusterServe(url, ["--node", "n1"])
        defer { node.kill() }
        let client = try await clusterClient("dave", endpoint)
        let notifications = client.notifications
        _ = try await node.waitForOutput(containing: "identified as client dave, resuming after 0", within: eventBound)
        try await instance.stop()
        _ = try await node.waitForOutput(containing: "lost PostgreSQL at \(database): ", within: eventBound)
        _ = try await node.waitForOutput(containing: "(client dave) disconnected: node n1 lost its connection to PostgreSQL at \(database)", within: .seconds(20))
        try await instance.restart()
        _ = try await node.waitForOutput(containing: "PostgreSQL at \(database) answers again", within: eventBound)
        let pushed = try await runTether(["push", "--postgres", url, "--client-id", "dave", "--text", "back"])
        #expect(pushed.status == 0 && pushed.output == "dave 1\n", "\(pushed.output)")
        let frames = try await TetherTesting.collect(1, from: notifications, within: .seconds(30))
        #expect(frames.map(\.serial) == [1])
        #expect(frames.map { String(decoding: $0.payload, as: UTF8.self) } == ["back"])
        #expect(node.outputText.components(separatedBy: "lost PostgreSQL at").count == 2, "\(node.outputText)")
        await client.close()
    }

    @Test("usage errors exit 2 saying what is wrong; an unreachable database ends serve and push with exit 1 and one line")
    func errors() async throws {
        let url = "postgresql://tether@127.0.0.1:\(try PostgresInstance.freePort())/tether"
        for (arguments, message) in [
            (["serve", "--store", "m.sqlite", "--postgres", url], "tether: --store and --postgres both say where the mailboxes live: give one"),
            (["serve", "--postgres", url, "--node", "no spaces"], "tether: --node 'no spaces' cannot name a node: use 1 to 48 letters, digits, '.', '-' or '_'"),
            (["serve", "--postgres", url, "--node", String(repeating: "n", count: 49)], "cannot name a node"),
            (["serve", "--node", "n1"], "tether: --node names this server in a cluster: it needs --postgres"),
            (["serve", "--profile", "lines", "--postgres", url], "tether: --postgres sets up mailboxes, and the lines profile has no sessions"),
            (["push", "--client-id", "a", "--text", "x"], "tether: missing --postgres"),
            (["push", "--postgres", url, "--text", "x"], "tether: missing --client-id"),
            (["push", "--postgres", url, "--client-id", "a"], "tether: missing the content: give --json JSON or --text TEXT"),
            (["push", "--postgres", url, "--client-id", "a", "--json", "{oops"], "tether: --json is not valid JSON: {oops"),
            (["push", "--postgres", url, "--client-id", "a", "--json", "1", "--text", "1"], "tether: --json and --text are two ways to give the content"),
            (["push", "--postgres", url, "--client-id", "a", "--text", "x", "--type", "0x402"], "tether: --type 0x402 is not a push type"),
        ] {
            let (status, output) = try await runTether(arguments)
            #expect(status == 2, "\(arguments): \(output)")
            #expect(output.contains(message), "\(arguments): \(output)")
        }
        for arguments in [["serve", "--port", "0", "--postgres", url, "--node", "n1"], ["push", "--postgres", url, "--client-id", "a", "--text", "x"]] {
            let (status, output) = try await runTether(arguments)
            #expect(status == 1, "\(arguments): \(output)")
            let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(lines.count == 2 && lines[1].isEmpty, "\(arguments): \(output)")
            #expect(output.hasPrefix("tether: "), "\(arguments): \(output)")
            #expect(output.contains("PostgreSQL at \(PostgresDatabase.endpoint(of: url)) is unreachable"), "\(arguments): \(output)")
        }
    }

    @Test("serve --help-all describes --postgres, --redis and --node; the command list has push")
    func help() async throws {
        let serve = try await runTether(["serve", "--help-all"])
        #expect(serve.status == 0)
        for text in ["[--store FILE | --postgres URL [--node NAME] | --redis URL [--node NAME]]", "--postgres URL                join the cluster", "--redis URL                   join the cluster on this Redis", "--node NAME                   this server's name"] {
            #expect(serve.output.contains(text), "\(text) in \(serve.output)")
        }
        let all = try await runTether(["--help"])
        #expect(all.output.contains("  push       push to client ids of a cluster on PostgreSQL"), "\(all.output)")
    }
}
