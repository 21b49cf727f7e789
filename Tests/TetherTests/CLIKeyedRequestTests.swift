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
}
