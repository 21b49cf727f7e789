import Foundation
import Testing
@testable import Tether

/// `tether serve` with mailboxes for strangers: a required token and store-wide bounds, run
/// as a child process the way a user runs it.
@Suite("tether serve: token and mailbox bounds", .serialized, .timeLimit(.guarded))
struct CLIServeMailboxTests {
    private func hello(_ clientID: String, token: String?, to endpoint: Endpoint) async throws -> Frame? {
        let raw = try RawSocket.connect(to: endpoint)
        defer { raw.close() }
        let hello = SessionWire.encode(SessionWire.Hello(clientID: clientID, token: token, lastSequence: 0))
        try raw.write(seedBytes(type: 0x401, serial: 1, payload: hello))
        return withoutEpoch(try await raw.readFrame())
    }

    @Test("--help-all lists the token, the store-wide bounds and the expiry, with their defaults")
    func help() async throws {
        let help = try tether(["serve", "--help-all"])
        defer { help.kill() }
        #expect(try await help.waitForExit(within: eventBound) == 0)
        let text = help.outputText
        for line in [
            "--token SECRET                accept only session hellos with this token",
            "--max-mailboxes N             the most mailboxes in all",
            "(default 100000)",
            "--max-stored-bytes N          the most bytes stored in all mailboxes",
            "(default 67108864)",
            "--mailbox-expiry SECONDS      this often, drop expired pushes",
        ] {
            #expect(text.contains(line), "\(line) in \(text)")
        }
    }

    @Test("with --token a hello without it or with another is rejected for good and logged; with it, welcomed")
    func token() async throws {
        let (server, endpoint) = try await tetherServe(["--token", "s3cret"])
        defer { server.kill() }
        let reason = "this server requires a token (tether listen --token)"
        let refusal = SessionWire.Refusal(error: reason, rejected: true, reason: reason)
        #expect(try await hello("mallory", token: nil, to: endpoint)?.payload == SessionWire.encode(refusal))
        #expect(try await hello("mallory", token: "guess", to: endpoint)?.payload == SessionWire.encode(refusal))
        #expect(try await hello("alice", token: "s3cret", to: endpoint)?.payload == SessionWire.encode(SessionWire.Welcome(accepted: true, clientID: "alice", lastSequence: 0, resumeAfter: 0)))
        _ = try await server.waitForOutput(containing: "rejected as client mallory: wrong token", within: eventBound)
        #expect(server.outputText.contains("rejected as client mallory: no token"))
    }

    @Test("past --max-mailboxes a new client's hello is refused for now, saying why")
    func maxMailboxes() async throws {
        let (server, endpoint) = try await tetherServe(["--max-mailboxes", "1"])
        defer { server.kill() }
        #expect(try await hello("alice", token: nil, to: endpoint)?.payload == SessionWire.encode(SessionWire.Welcome(accepted: true, clientID: "alice", lastSequence: 0, resumeAfter: 0)))
        let refusal = "the mailbox store holds its maximum of 1 mailbox: none for new client \"bob\" until idle ones expire"
        #expect(try await hello("bob", token: nil, to: endpoint)?.payload == SessionWire.encode(SessionWire.Refusal(error: refusal, rejected: false)))
    }

    @Test("the mailbox options are refused in a profile without sessions")
    func needsSessions() async throws {
        let serve = try tether(["serve", "--profile", "lines", "--token", "x"])
        defer { serve.kill() }
        #expect(try await serve.waitForExit(within: eventBound) == 2)
        #expect(serve.outputText.contains("--token sets up mailboxes, and the lines profile has no sessions"), "\(serve.outputText)")
    }
}
