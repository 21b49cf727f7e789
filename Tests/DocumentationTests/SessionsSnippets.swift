// The code of Documentation.docc/Sessions.md ("No Push Lost"), and a test that runs its gap
// example against a server whose mailboxes overflowed.
import Testing
import Tether
import TetherSQLite

/// The examples' `print`, recorded by the test that runs them (see ``Transcript``).
private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    Transcript.print(items, separator: separator, terminator: terminator)
}

// Stand-ins for the application code the article's examples call.
private func show(_ push: Frame) {}
private func refetchHistory() async {}
private func discardLocalHistory() async {}
private struct Accounts: Sendable {
    func check(_ clientID: String, token: String?) async throws -> Bool { token == "secret" }
}
private let accounts = Accounts()
private struct PushService: Sendable {
    func wake(_ clientID: String) async {}
}
private let apns = PushService()
private struct Auth: Sendable {
    var userID: String { "alice" }
    func refresh() async throws {}
    func accessToken() async throws -> String { "secret" }
}
private let auth = Auth()

// MARK: - Overview

func sessionsClient(
    endpoint: Endpoint,
    token: String,
    saved: (lastSequence: UInt64, epoch: String?)
) async throws -> (lastSequence: UInt64, epoch: String?) {
    var saved = saved
    // Client: who it is, and where it left off last time the app ran.
    var configuration = ConnectionConfiguration()
    configuration.session = SessionConfiguration(clientID: "alice", token: token,
                                                 resumeAfter: saved.lastSequence,
                                                 resumeEpoch: saved.epoch)
    let connection = try await Connection.connect(to: endpoint, configuration: configuration)
    for await push in connection.notifications {
        show(push)
        saved = await connection.sessionPosition
    }
    return saved
}

// MARK: - A client id on two devices

func sessionsTakenOver(endpoint: Endpoint) async throws {
    var configuration = ConnectionConfiguration()
    configuration.session = SessionConfiguration(clientID: "device-7")
    let connection = try await Connection.connect(to: endpoint, configuration: configuration)
    for await state in connection.states where state.isFinal {
        if state.reason?.code == .sessionTakenOver {
            print("signed in elsewhere:", state.reason?.message ?? "")
        }
    }
}

func sessionsServer(body: [UInt8]) async throws {
    // Server: mailboxes in a SQLite file, a check for each hello, a push to a client id.
    var configuration = ServerConfiguration(port: 9000)
    configuration.mailboxes = MailboxConfiguration(store: try SQLiteMailboxStore(path: "/var/lib/chat/mailboxes.sqlite"))
    let server = Server(configuration: configuration)
    server.authenticate { hello in
        guard try await accounts.check(hello.clientID, token: hello.token) else {
            throw TetherError(code: .sessionRejected, message: "bad token")
        }
    }
    server.onOfflinePush { push in
        await apns.wake(push.clientID)        // the client is away: ask the device to come back
    }
    try await server.push(Frame(type: 0x10, payload: body), toClient: "alice")
}

// MARK: - Subscribers

func sessionsSubscribeBeforeConnecting(
    endpoint: Endpoint,
    configuration: ConnectionConfiguration
) async throws -> (Connection, Subscription<Frame>, Subscription<SessionEvent>) {
    let connection = Connection(to: endpoint, configuration: configuration)
    let pushes = connection.notifications
    let events = connection.sessionEvents
    try await connection.connect()
    return (connection, pushes, events)
}

// MARK: - Credentials that expire

func sessionsIdentityProvider(
    endpoint: Endpoint,
    saved: (lastSequence: UInt64, epoch: String?)
) async throws -> Connection {
    var configuration = ConnectionConfiguration()
    configuration.session = SessionConfiguration(identity: SessionIdentityProvider { context in
        if context.reason == .rejected { try await auth.refresh() }    // the server said why: context.rejectionReason
        return SessionIdentity(clientID: auth.userID, token: try await auth.accessToken())
    }, resumeAfter: saved.lastSequence, resumeEpoch: saved.epoch)
    let connection = try await Connection.connect(to: endpoint, configuration: configuration)
    return connection
}

// MARK: - Switching user

func sessionsSwitchUser(
    _ connection: Connection,
    bobToken: String,
    bobSaved: (lastSequence: UInt64, epoch: String?)
) async throws {
    // Alice signs out, Bob signs in: his identity, and where his app left off.
    try await connection.switchSession(to: SessionIdentity(clientID: "bob", token: bobToken),
                                       resumeAfter: bobSaved.lastSequence,
                                       resumeEpoch: bobSaved.epoch)
}

// MARK: - Gaps

func sessionsGaps(_ connection: Connection) async {
    for await event in connection.sessionEvents {
        if event.kind == .gap, let missed = event.missed {
            print("lost \(missed) (\(event.reason!))")   // lost 1...15 (overflow)
            await refetchHistory()
        }
    }
}

// MARK: - When the history is gone

func sessionsHistoryGone(endpoint: Endpoint, saved: (lastSequence: UInt64, epoch: String?)) async throws {
    var configuration = ConnectionConfiguration()
    configuration.session = SessionConfiguration(clientID: "alice", resumeAfter: saved.lastSequence,
                                                 resumeEpoch: saved.epoch)
    let connection = Connection(to: endpoint, configuration: configuration)
    let events = connection.sessionEvents
    try await connection.connect()
    for await event in events where event.kind == .reset {
        await discardLocalHistory()   // the pushes that follow are a new history, from 1
    }
}

// MARK: - Your own store

struct NotYetWritten: Error {}

final class DatabaseMailboxStore: MailboxStore {
    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits,
                now: MailboxTime) async throws -> [UInt64] {
        // One transaction: for each message, UPDATE clients SET last = last + 1
        // RETURNING last; INSERT the message with that sequence; then drop what
        // the limits no longer allow from the clients touched, raising lost_through.
        throw NotYetWritten()
    }
    func openMailbox(for clientID: String, limits: MailboxLimits,
                     now: MailboxTime) async throws -> MailboxSummary {
        // INSERT the client if it is new, drop what the limits no longer allow,
        // and SELECT its last sequence, acknowledged, lost_through and count.
        throw NotYetWritten()
    }
    func messages(for clientID: String, after sequence: UInt64,
                  limit: Int) async throws -> [MailboxMessage] {
        // SELECT … WHERE client = $1 AND sequence > $2 ORDER BY sequence LIMIT $3.
        throw NotYetWritten()
    }
    func acknowledge(_ clientID: String, through sequence: UInt64) async throws {
        // UPDATE clients SET acknowledged = $2; DELETE the messages up to it.
        throw NotYetWritten()
    }
    func clientIDs() async throws -> [String] {
        // SELECT client FROM clients.
        throw NotYetWritten()
    }
}

// MARK: - Tests

@Suite struct SessionsTests {
    /// A server whose mailboxes hold five pushes each, and twenty pushes sent to alice while
    /// she was away: she missed 1...15 and finds 16...20 in her mailbox.
    private func overflowingServer() -> Server {
        var configuration = ServerConfiguration.localTest
        var mailboxes = MailboxConfiguration(store: InMemoryMailboxStore())
        mailboxes.limits = MailboxLimits(maximumMessages: 5, maximumAge: nil)
        configuration.mailboxes = mailboxes
        return Server(configuration: configuration)
    }

    private func pushTwentyWhileAway(_ server: Server) async throws {
        for n in 1...20 {
            try await server.push(Frame(type: 0x10, payload: Array("push \(n)".utf8)), toClient: "alice")
        }
    }

    private func aliceConfiguration() -> ConnectionConfiguration {
        var configuration = quietConfiguration()
        configuration.session = SessionConfiguration(clientID: "alice")
        return configuration
    }

    @Test func subscribingBeforeConnectingSeesTheReplayAndTheFirstEvent() async throws {
        let server = overflowingServer()
        try await whileServing(server) { address in
            try await pushTwentyWhileAway(server)
            let (connection, pushes, events) = try await bounded("connect") {
                try await sessionsSubscribeBeforeConnecting(
                    endpoint: Endpoint(host: "127.0.0.1", port: address.port),
                    configuration: aliceConfiguration()
                )
            }
            let replayed = try await bounded("the replay") {
                var texts: [String] = []
                for await push in pushes {
                    texts.append(String(decoding: push.payload, as: UTF8.self))
                    if texts.count == 5 { break }
                }
                return texts
            }
            #expect(replayed == (16...20).map { "push \($0)" })
            #expect(await connection.lastSequence == 20)

            let first = try await bounded("the first session event") {
                var iterator = events.makeAsyncIterator()
                return await iterator.next()
            }
            #expect(first?.kind == .gap)
            #expect(first?.missed == 1...15)
            await connection.close()
        }
    }

    @available(macOS 26, iOS 26, *)  // Task.immediate
    @Test func aGapIsReportedWithTheRangeAndTheReason() async throws {
        let server = overflowingServer()
        try await whileServing(server) { address in
            try await pushTwentyWhileAway(server)
            let connection = Connection(to: Endpoint(host: "127.0.0.1", port: address.port),
                                        configuration: aliceConfiguration())
            let transcript = Transcript()
            // Runs up to its first suspension at once, so the example has subscribed to the
            // session events before the connection says hello.
            let watching = Task.immediate {
                await Transcript.$current.withValue(transcript) { await sessionsGaps(connection) }
            }
            try await bounded("connect") { try await connection.connect() }
            let lines = try await transcript.waitForLines(1)
            #expect(lines == ["lost 1...15 (overflow)"])
            await connection.close()
            try await bounded("the example to end with the connection") { await watching.value }
        }
    }
}

private struct LoginRefused: Error {
    var reason: String
}

/// The Sessions article's preparation: a login on every new connection.
func sessionsPrepareConfiguration() -> ConnectionConfiguration {
    var configuration = ConnectionConfiguration()
    configuration.session = SessionConfiguration(clientID: "alice")
    configuration.prepare = { connection in
        let answer = try await connection.request(Request(type: 0x410, json: ["user": "alice"]))
        if let reason = answer.errorMessage { throw LoginRefused(reason: reason) }
    }
    return configuration
}

// "Pushes that expire".
func sessionsTimeToLive(server: Server, offer: [UInt8]) async throws {
    try await server.push(Frame(type: 0x10, payload: offer), toClient: "alice", timeToLive: .seconds(3600))
}

private func markDelivered(_ sequence: UInt64) {}
private func sendByMail(_ message: [UInt8]) {}

// "Receipts for pushes".
func sessionsReceipt(server: Server, message: [UInt8]) async throws {
    let receipt = try await server.pushWithReceipt(Frame(type: 0x10, payload: message), toClient: "alice", timeToLive: .seconds(600))
    switch await receipt.outcome() {
    case .delivered: markDelivered(receipt.sequence)
    case .expired: sendByMail(message)
    case .dropped(let reason): print("not known: \(reason)")
    }
}
