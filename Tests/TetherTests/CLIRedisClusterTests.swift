import Foundation
import Testing
@testable import Tether
@testable import TetherRedis
import TetherTesting

/// Starts `tether serve --port 0 --redis URL` with `options` and waits for its listening line.
private func redisServe(_ url: String, _ options: [String] = []) async throws -> (process: ChildProcess, endpoint: Endpoint, line: String) {
    let server = try tether(["serve", "--port", "0", "--redis", url] + options)
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

/// `tether serve --redis` and `tether push --redis` as a user runs them, as child
/// processes, on a Redis server of the test's own.
@Suite("tether serve --redis and tether push --redis", .serialized, .timeLimit(.guarded))
struct CLIRedisClusterTests {
    @Test("three serve --redis processes, a client on the third, which is killed with SIGKILL mid-stream: the client comes back on another node and gets every push of a publisher and of tether push --redis exactly once, in order")
    func nodeKilled() async throws {
        let redis = try await RedisInstance.start()
        var nodes: [ChildProcess] = []
        var endpoints: [Endpoint] = []
        defer { for node in nodes { node.kill() } }
        for name in ["n1", "n2", "n3"] {
            let (process, endpoint, line) = try await redisServe(redis.url, ["--node", name])
            #expect(line.contains("(node \(name), Redis 127.0.0.1:\(redis.port))"), "\(line)")
            nodes.append(process)
            endpoints.append(endpoint)
        }
        let publisher = try await RedisPublisher(url: redis.url)
        let client = try await clusterClient("carol", endpoints[2], alternates: [endpoints[0], endpoints[1]])
        let everything = client.notifications
        let firstPart = client.notifications
        let received = Task { try await TetherTesting.collect(62, from: everything, within: .seconds(60)) }
        _ = try await nodes[2].waitForOutput(containing: "identified as client carol, resuming after 0", within: eventBound)

        for push in 0..<20 {
            #expect(try await publisher.push(indexed(push), toClient: "carol") == UInt64(push + 1))
        }
        #expect(try await TetherTesting.collect(20, from: firstPart, within: eventBound).map(index(of:)) == Array(0..<20))
        for push in 20..<30 {
            #expect(try await publisher.push(indexed(push), toClient: "carol") == UInt64(push + 1))
        }
        nodes[2].kill()
        for push in 30..<60 {
            #expect(try await publisher.push(indexed(push), toClient: "carol") == UInt64(push + 1))
        }
        let push = try tether(["push", "--redis", redis.url, "--client-id", "carol", "--text", "60", "--count", "2"])
        defer { push.kill() }
        #expect(try await push.waitForExit(within: .seconds(30)) == 0)
        #expect(push.outputText.split(separator: "\n").filter { $0.hasPrefix("carol ") } == ["carol 61", "carol 62"], "\(push.outputText)")
        let frames = try await received.value
        #expect(frames.map(index(of:)) == Array(0..<60) + [60, 60])
        #expect(frames.map(\.serial) == Array(1...62))
        #expect(nodes[0].outputText.contains("identified as client carol, resuming after "), "\(nodes[0].outputText)")

        // Channels are the cluster's too: tether publish --redis reaches a subscriber on n2.
        let subscriber = try await Connection.connect(to: endpoints[1], configuration: testConfiguration())
        let room = try await subscriber.subscribe(to: "room")
        let publish = try tether(["publish", "--redis", redis.url, "room", "--text", "hi", "--count", "2"])
        defer { publish.kill() }
        #expect(try await publish.waitForExit(within: .seconds(30)) == 0)
        #expect(publish.outputText.split(separator: "\n") == ["1", "2"], "\(publish.outputText)")
        let events = try await TetherTesting.collect(2, from: room.filter { if case .message = $0 { true } else { false } }, within: eventBound)
        #expect(events.compactMap { if case .message(let message) = $0 { message.offset } else { nil } } == [UInt64(1), 2])
        await subscriber.close()
        await client.close()
        await publisher.close()
    }

    @Test("usage errors exit 2 saying what is wrong: --redis with --postgres or --store, a URL that is not redis://; an unreachable Redis ends serve with exit 1 and one line")
    func errors() async throws {
        for (arguments, expected) in [
            (["serve", "--redis", "redis://127.0.0.1:1", "--postgres", "postgresql://x@127.0.0.1/db"], "--postgres and --redis both name a cluster"),
            (["serve", "--redis", "redis://127.0.0.1:1", "--store", "/tmp/x.sqlite"], "--store and --redis both say where the mailboxes live"),
            (["serve", "--redis", "http://127.0.0.1:1"], "is not a redis:// URL"),
            (["push", "--redis", "redis://127.0.0.1:1", "--postgres", "postgresql://x@127.0.0.1/db", "--client-id", "a", "--text", "x"], "--postgres and --redis both name a cluster"),
        ] {
            let process = try tether(arguments)
            defer { process.kill() }
            #expect(try await process.waitForExit(within: .seconds(30)) == 2, "\(arguments)")
            #expect(process.outputText.contains(expected), "\(process.outputText)")
        }
        let port = try PostgresInstance.freePort()
        let serve = try tether(["serve", "--port", "0", "--redis", "redis://127.0.0.1:\(port)"])
        defer { serve.kill() }
        #expect(try await serve.waitForExit(within: .seconds(30)) == 1)
        #expect(serve.outputText.contains("Redis at 127.0.0.1:\(port)"), "\(serve.outputText)")
    }
}
