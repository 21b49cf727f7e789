import Testing
@testable import Tether
import TetherTesting

/// Epochs end to end: a client whose saved sequence belongs to a history the server no
/// longer has is told so, and takes the new history from its start.
@Suite("Mailbox epochs", .timeLimit(.minutes(1)))
struct EpochTests {
    @Test("a client at 5 whose server restarted with a fresh in-memory store that then took 8 pushes: told reset, it gets all 8 in order")
    func freshStoreWithMorePushes() async throws {
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = .inMemory
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        let connection = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("nora"))
        let watcher = StateWatcher(connection)
        let notifications = connection.notifications
        let events = connection.sessionEvents
        try await watcher.next(.connected)
        try await awaitClient("nora", on: server.server)
        for number in 0..<5 { try await server.server.push(indexed(number), toClient: "nora") }
        #expect(try await collect(5, from: notifications, "the pushes of the first history").map(\.serial) == [1, 2, 3, 4, 5])
        #expect(await connection.lastSequence == 5)

        // The client goes away; the server comes back on the same port with a new, empty
        // store, which takes more pushes than the client had seen before it returns.
        await connection.suspend()
        try await watcher.next(.suspended)
        await server.stop()
        configuration.port = server.port
        configuration.mailboxes = .inMemory
        let replacement = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await replacement.start()
        for number in 100..<108 { try await replacement.server.push(indexed(number), toClient: "nora") }
        await connection.resume()
        try await watcher.next(.connected)

        let first = try await collect(3, from: notifications, "the start of the new history")
        try #require(first.map(\.serial) == [1, 2, 3], "the new history's first pushes must not be taken for ones already seen")
        let rest = try await collect(5, from: notifications, "the rest of the new history")
        #expect((first + rest).map(index(of:)) == Array(100..<108))
        #expect((first + rest).map(\.serial) == Array(1...8))
        #expect(try await collect(2, from: events, "the events of the second welcome") == [
            SessionEvent(kind: .reset, lastSequence: 0, serverSequence: 8),
            SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 8),
        ])
        #expect(await connection.lastSequence == 8)
        #expect(await connection.metrics.duplicateNotifications == 0)
        await connection.close()
        await replacement.stop()
    }
}

/// A welcome's payload without its epoch, which stores make at random, so the rest can be
/// compared byte for byte; any other payload as it is.
func withoutEpoch(_ payload: [UInt8]) -> [UInt8] {
    guard var welcome = SessionWire.decode(SessionWire.Welcome.self, from: payload), welcome.epoch != nil else { return payload }
    welcome.epoch = nil
    return SessionWire.encode(welcome)
}

/// A frame whose payload is a welcome, without the welcome's epoch; any other frame as it is.
func withoutEpoch(_ frame: Frame?) -> Frame? {
    guard var frame else { return nil }
    frame.payload = withoutEpoch(frame.payload)
    return frame
}
