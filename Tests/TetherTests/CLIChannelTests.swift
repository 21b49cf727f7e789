import Foundation
import Testing
@testable import Tether

/// `tether subscribe` and `tether publish` against `tether serve`, as child processes.
@Suite("tether subscribe and tether publish", .timeLimit(.guarded))
struct CLIChannelTests {
    @Test("publish prints the offsets; subscribe --from 0 prints every message once, in order, those published before it and after it, as JSON lines")
    func publishThenSubscribe() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let address = "127.0.0.1:\(endpoint.port)"
        let first = try tether(["publish", address, "room-42", "--json", #"{"text": "hello"}"#, "--count", "2"])
        defer { first.kill() }
        #expect(try await first.waitForExit(within: eventBound) == 0, "\(first.outputText)")
        #expect(first.outputText == "1\n2\n")

        let subscriber = try tether(["subscribe", address, "room-42", "--from", "0", "--count", "4"])
        defer { subscriber.kill() }
        let second = try tether(["publish", address, "room-42", "--text", "plain words", "--count", "2"])
        defer { second.kill() }
        #expect(try await second.waitForExit(within: eventBound) == 0, "\(second.outputText)")
        #expect(second.outputText == "3\n4\n")
        #expect(try await subscriber.waitForExit(within: eventBound) == 0, "\(subscriber.outputText)")
        let lines = subscriber.outputText.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "\(subscriber.outputText)")
        for (index, line) in lines.enumerated() {
            let value = try JSONValue(parsing: Array(line.utf8))
            #expect(value["channel"] == "room-42")
            #expect(value["offset"] == .int(index + 1))
            if index < 2 {
                #expect(value["content"] == ["text": "hello"], "\(line)")
            } else {
                #expect(value["text"] == "plain words", "\(line)")
            }
        }
    }

    @Test("presence prints the channel's count and members as one JSON line")
    func presence() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        let room = try await connection.subscribe(to: "room-42", info: ["name": "Alice"])
        let process = try tether(["presence", "127.0.0.1:\(endpoint.port)", "room-42"])
        defer { process.kill() }
        #expect(try await process.waitForExit(within: eventBound) == 0, "\(process.outputText)")
        let line = try JSONValue(parsing: Array(process.outputText.utf8))
        #expect(line["channel"] == "room-42")
        #expect(line["count"] == 1)
        #expect(line["members"]?[0]?["info"] == ["name": "Alice"], "\(process.outputText)")
        withExtendedLifetime(room) {}
        await connection.close()
    }

    @Test("subscribe --state starts after the offset and epoch in its file and keeps the last one printed there, so the next run goes on after it; a malformed state file exits 1 saying so")
    func stateFile() async throws {
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let address = "127.0.0.1:\(endpoint.port)"
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tether-channel-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let state = "\(directory)/room.state"
        let publish = try tether(["publish", address, "room", "--text", "m", "--count", "3"])
        defer { publish.kill() }
        #expect(try await publish.waitForExit(within: eventBound) == 0, "\(publish.outputText)")

        let first = try tether(["subscribe", address, "room", "--latest", "3", "--count", "1"])
        defer { first.kill() }
        #expect(try await first.waitForExit(within: eventBound) == 0)
        let epoch = try #require(try JSONValue(parsing: Array(first.outputText.utf8))["epoch"]?.stringValue)
        try "1 \(epoch)\n".write(toFile: state, atomically: true, encoding: .utf8)

        // Starts after offset 1 of the saved epoch, and keeps the last one printed.
        let saving = try tether(["subscribe", address, "room", "--state", state, "--count", "2"])
        defer { saving.kill() }
        #expect(try await saving.waitForExit(within: eventBound) == 0, "\(saving.outputText)")
        #expect(saving.outputText.split(separator: "\n").compactMap { try? JSONValue(parsing: Array($0.utf8))["offset"] } == [2, 3])
        #expect(try String(contentsOfFile: state, encoding: .utf8) == "3 \(epoch)\n")

        let more = try tether(["publish", address, "room", "--text", "n"])
        defer { more.kill() }
        #expect(try await more.waitForExit(within: eventBound) == 0)
        let resumed = try tether(["subscribe", address, "room", "--state", state, "--count", "1"])
        defer { resumed.kill() }
        #expect(try await resumed.waitForExit(within: eventBound) == 0, "\(resumed.outputText)")
        let line = try JSONValue(parsing: Array(resumed.outputText.utf8))
        #expect(line["offset"] == 4, "\(resumed.outputText)")
        #expect(line["text"] == "n")

        try "junk".write(toFile: state, atomically: true, encoding: .utf8)
        let broken = try tether(["subscribe", address, "room", "--state", state])
        defer { broken.kill() }
        #expect(try await broken.waitForExit(within: eventBound) == 1)
        #expect(broken.outputText.contains("the state file \(state) is malformed: expected the last offset and its epoch, found \"junk\"; fix or delete it"), "\(broken.outputText)")
    }

    @Test("usage errors exit 2 saying what is wrong; a refused subscription exits 1 with the reason")
    func errors() async throws {
        for (arguments, message) in [
            (["subscribe", "127.0.0.1:9", "room", "--from", "1", "--latest", "2"], "tether: --from and --latest are two places to start; give one of them"),
            (["subscribe", "127.0.0.1:9", "room", "--epoch", "ab"], "tether: --epoch goes with --from OFFSET"),
            (["publish", "127.0.0.1:9", "room"], "tether: missing the content: give --json JSON or --text TEXT"),
        ] {
            let process = try tether(arguments)
            defer { process.kill() }
            #expect(try await process.waitForExit(within: eventBound) == 2, "\(arguments): \(process.outputText)")
            #expect(process.outputText.contains(message), "\(arguments): \(process.outputText)")
        }
        let (server, endpoint) = try await tetherServe([])
        defer { server.kill() }
        let refused = try tether(["subscribe", "127.0.0.1:\(endpoint.port)", "no spaces"])
        defer { refused.kill() }
        #expect(try await refused.waitForExit(within: eventBound) == 1, "\(refused.outputText)")
        #expect(refused.outputText.contains("channel name 'no spaces' has a character other than ASCII letters, digits and - _ . : / @"), "\(refused.outputText)")
    }
}
