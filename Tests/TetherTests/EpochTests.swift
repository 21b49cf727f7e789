import Testing
@testable import Tether
import TetherTesting

/// Epochs end to end: a client whose saved sequence belongs to a history the server no
/// longer has is told so, and takes the new history from its start.
@Suite("Mailbox epochs", .timeLimit(.guarded))
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

    @Test("an app that saved its sequence and epoch and starts again: against the same history it resumes after its sequence; against a fresh store it is told reset and gets everything; without a saved epoch it resumes after its sequence as before")
    func savedEpochAcrossAppRestarts() async throws {
        var configuration = TestServer.defaultConfiguration
        configuration.mailboxes = .inMemory
        let server = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await server.start()
        // The first run: five pushes, then the app saves where it is and stops.
        let first = try await Connection.connect(to: server.endpoint, configuration: sessionConfiguration("olaf"))
        let firstPushes = first.notifications
        try await awaitClient("olaf", on: server.server)
        for number in 0..<5 { try await server.server.push(indexed(number), toClient: "olaf") }
        #expect(try await collect(5, from: firstPushes, "the first run's pushes").map(\.serial) == [1, 2, 3, 4, 5])
        let saved = (sequence: await first.lastSequence, epoch: await first.sessionEpoch)
        #expect(saved.sequence == 5)
        let epoch = try #require(saved.epoch)
        await first.close()
        for number in 5..<8 { try await server.server.push(indexed(number), toClient: "olaf") }

        // The same history: replay after 5, no reset.
        let sameHistory = try await runAgain("olaf", after: saved.sequence, epoch: epoch, on: server.endpoint)
        #expect(sameHistory.pushes.map(\.serial) == [6, 7, 8])
        #expect(sameHistory.pushes.map(index(of:)) == [5, 6, 7])
        #expect(sameHistory.events == [SessionEvent(kind: .resumed, lastSequence: 5, serverSequence: 8)])
        #expect(sameHistory.epoch == epoch)

        // The server comes back with a fresh store holding 8 pushes of a new history.
        await server.stop()
        configuration.port = server.port
        configuration.mailboxes = .inMemory
        let replacement = try TestServer(configuration: configuration, handlers: echoHandlers)
        try await replacement.start()
        for number in 100..<108 { try await replacement.server.push(indexed(number), toClient: "olaf") }

        // With the saved epoch: told reset, it gets the new history from 1. Its hello's
        // acknowledgement of 5 is of the old history, and deletes none of the new one.
        let aware = try await runAgain("olaf", after: saved.sequence, epoch: epoch, on: replacement.endpoint)
        #expect(aware.pushes.map(\.serial) == Array(1...8))
        #expect(aware.pushes.map(index(of:)) == Array(100..<108))
        #expect(aware.events == [
            SessionEvent(kind: .reset, lastSequence: 0, serverSequence: 8),
            SessionEvent(kind: .resumed, lastSequence: 0, serverSequence: 8),
        ])
        let newEpoch = try #require(aware.epoch)
        #expect(newEpoch != epoch)

        // Without a saved epoch the connection cannot tell: it resumes after 5, as before
        // epochs, and learns the new epoch.
        let unaware = try await runAgain("olaf", after: saved.sequence, epoch: nil, on: replacement.endpoint)
        #expect(unaware.pushes.map(\.serial) == [6, 7, 8])
        #expect(unaware.events == [SessionEvent(kind: .resumed, lastSequence: 5, serverSequence: 8)])
        #expect(unaware.epoch == newEpoch)
        await replacement.stop()
    }

    /// Starts a client again as an app would, from a saved sequence and epoch, with manual
    /// acknowledgement so it leaves the mailbox as it is; returns the pushes the server had
    /// for it, the session events, and the epoch it would save.
    private func runAgain(_ clientID: String, after sequence: UInt64, epoch: String?, on endpoint: Endpoint) async throws -> (pushes: [Frame], events: [SessionEvent], epoch: String?) {
        let connection = Connection(to: endpoint, configuration: sessionConfiguration(clientID) {
            $0.session?.resumeAfter = sequence
            $0.session?.resumeEpoch = epoch
            $0.session?.acknowledgesAutomatically = false
        })
        let pushes = connection.notifications
        let events = connection.sessionEvents
        try await connection.connect()
        // The welcome's events, up to the resume, which says how many pushes follow.
        let seen = try await bounded("the events of the welcome to \(clientID)") { () -> [SessionEvent] in
            var seen: [SessionEvent] = []
            for await event in events {
                seen.append(event)
                if event.kind == .resumed { break }
            }
            return seen
        }
        let resumed = try #require(seen.last)
        let waiting = (resumed.serverSequence ?? 0) - resumed.lastSequence
        let frames = try await collect(Int(waiting), from: pushes, "the \(waiting) pushes after \(resumed.lastSequence) for \(clientID)")
        let saved = await connection.sessionEpoch
        await connection.close()
        return (frames, seen, saved)
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
