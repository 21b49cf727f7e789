import Foundation
import Testing
@testable import Tether

/// `tether request --idempotency-key` against `tether serve`'s counting request, as child
/// processes.
@Suite("tether request --idempotency-key", .timeLimit(.guarded))
struct CLIKeyedRequestTests {
    @Test("serve's 0x407 counts its runs; a repeated key is answered without a run, a new key or no key runs it again; usage errors exit 2")
    func countingRequest() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let address = "127.0.0.1:\(endpoint.port)"
        func run(_ options: [String]) async throws -> (status: Int32, output: String) {
            let process = try tether(["request", address, "--type", "0x407"] + options)
            defer { process.kill() }
            let status = try await process.waitForExit(within: eventBound)
            return (status, process.outputText)
        }
        let keyed = ["--client-id", "kim", "--idempotency-key", "order-1"]
        #expect(try await run(keyed) == (0, "{\"runs\":1}\n"))
        #expect(try await run(keyed) == (0, "{\"runs\":1}\n"))
        #expect(try await run(["--client-id", "kim", "--idempotency-key", "order-2"]) == (0, "{\"runs\":2}\n"))
        #expect(try await run([]) == (0, "{\"runs\":3}\n"))
        #expect(try await run(keyed) == (0, "{\"runs\":1}\n"))

        let noClient = try await run(["--idempotency-key", "order-3"])
        #expect(noClient.status == 2)
        #expect(noClient.output.contains("--idempotency-key needs --client-id"), "\(noClient.output)")
        let badKey = try await run(["--client-id", "kim", "--idempotency-key", "has space"])
        #expect(badKey.status == 2, "\(badKey.output)")
    }

    @Test("two serve --postgres nodes: a keyed request answered by the first, which is then killed with SIGKILL, is answered by the second from the record, without a run there; on Redis the same")
    func nodeKilled() async throws {
        let postgres = try await PostgresFixture.freshDatabase()
        let redis = try await RedisInstance.start()
        for cluster in [["--postgres", postgres], ["--redis", redis.url]] {
            var nodes: [ChildProcess] = []
            var addresses: [String] = []
            defer { for node in nodes { node.kill() } }
            for name in ["k1", "k2"] {
                let node = try tether(["serve", "--port", "0", "--node", name] + cluster)
                nodes.append(node)
                let port = try await node.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
                    listeningPort(in: String(decoding: output, as: UTF8.self), suffix: " (")
                }
                addresses.append("127.0.0.1:\(port)")
            }
            func run(_ address: String, _ key: String) async throws -> (status: Int32, output: String) {
                let process = try tether(["request", address, "--type", "0x407", "--client-id", "kim", "--idempotency-key", key])
                defer { process.kill() }
                let status = try await process.waitForExit(within: eventBound)
                return (status, process.outputText)
            }
            #expect(try await run(addresses[0], "order-1") == (0, "{\"runs\":1}\n"), "\(cluster[0])")
            #expect(try await run(addresses[0], "order-2") == (0, "{\"runs\":2}\n"), "\(cluster[0])")
            nodes[0].kill()
            // The second node never ran either: it answers both from the records, and its
            // own counter starts at 1 with a new key.
            #expect(try await run(addresses[1], "order-1") == (0, "{\"runs\":1}\n"), "\(cluster[0])")
            #expect(try await run(addresses[1], "order-2") == (0, "{\"runs\":2}\n"), "\(cluster[0])")
            #expect(try await run(addresses[1], "order-3") == (0, "{\"runs\":1}\n"), "\(cluster[0])")
        }
    }
}
