import BenchCore
import Synchronization
import Tether

/// Replay of a full mailbox to one resuming client.
///
/// The client `r` connects once to the server while its mailbox is empty, subscribes to
/// its notifications and suspends (a `Connection` exists only once connected, so this is
/// how a subscriber can be in place before the first replayed push arrives). The store is
/// then filled through its own `append`, `batch` messages a call, bypassing the server, as
/// a server that ran earlier would have left it. The clock starts when the client
/// reconnects (`resume()`: connect, hello, replay) and stops when the subscriber has
/// received every push, which it checks to be 1…N by serial.
enum Replay {
    struct Result {
        var fillSeconds: Double
        var replaySeconds: Double
        var replayed: Int
    }

    static func run(store: any MailboxStore, messages count: Int, size: Int, batch: Int, subscriberBuffer: Int?, timeout: Double) async throws -> Result {
        var mailboxes = MailboxConfiguration(store: store)
        mailboxes.limits = MailboxLimits(maximumMessages: count, maximumAge: nil)
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.mailboxes = mailboxes
        let server = Server(configuration: configuration)
        let (serverTask, endpoint) = try await start(server)

        var client = sessionConfiguration("r")
        if let subscriberBuffer { client.limits.subscriberBufferSize = subscriberBuffer }
        let connection = try await Connection.connect(to: endpoint, configuration: client)
        let notifications = connection.notifications
        await connection.suspend()
        let deadline = monotonicNanoseconds() + 10_000_000_000
        while server.peer(forClient: "r") != nil {
            if monotonicNanoseconds() > deadline { fail("the server still sees client r connected 10 s after it suspended") }
            try await Task.sleep(for: .milliseconds(1))
        }

        let payload = [UInt8](repeating: 0x68, count: size)
        let draft = MailboxMessage.Draft(clientID: "r", type: 0x10, payload: payload)
        let fillStart = monotonicNanoseconds()
        var stored = 0
        while stored < count {
            let drafts = [MailboxMessage.Draft](repeating: draft, count: min(batch, count - stored))
            let sequences = try await store.append(drafts, limits: mailboxes.limits, now: MailboxTime.now())
            guard sequences.first == UInt64(stored + 1), sequences.last == UInt64(stored + drafts.count) else {
                fail("the store gave sequences \(sequences.first ?? 0)…\(sequences.last ?? 0) to messages \(stored + 1)…\(stored + drafts.count)")
            }
            stored += drafts.count
        }
        let fillSeconds = seconds(from: fillStart, to: monotonicNanoseconds())

        let tally = Tally()
        let subscriber = Task {
            var expected: UInt32 = 1
            for await frame in notifications {
                if frame.serial != expected {
                    tally.error("push \(expected) expected, serial \(frame.serial) received")
                    expected = frame.serial
                }
                if frame.payload.count != size {
                    tally.error("push \(frame.serial) has \(frame.payload.count) bytes, not \(size)")
                }
                expected &+= 1
                tally.add()
                if tally.value >= count { return monotonicNanoseconds() }
            }
            return monotonicNanoseconds()
        }
        let replayStart = monotonicNanoseconds()
        await connection.resume()
        await tally.wait(until: count, timeout: timeout) {
            let replayed = await server.metrics().notificationsReplayed
            let dropped = await connection.metrics.droppedElements
            return "the server replayed \(replayed); the subscriber's buffer dropped \(dropped)"
        }
        if let failure = tally.failure {
            let metrics = await connection.metrics
            fail("push out of order or wrong after \(tally.value) received: \(failure.first); the subscriber's buffer (\(client.limits.subscriberBufferSize)) dropped \(metrics.droppedElements) so far")
        }
        let replayEnd = await subscriber.value
        let metrics = await server.metrics()
        await connection.close()
        serverTask.cancel()
        await serverTask.value
        return Result(fillSeconds: fillSeconds, replaySeconds: seconds(from: replayStart, to: replayEnd), replayed: metrics.notificationsReplayed)
    }
}
