#if canImport(Glibc)
import Glibc
#endif
import XCTest
@testable import Tether

/// Heartbeats of other clients while 2,000 sessions take pushes into a store that fills, in
/// XCTest so that it runs alone (see ``FlowControlLoadTests``): its pushes keep both cores
/// busy for seconds.
final class HeartbeatLoadTests: XCTestCase {
    /// 2,000 identified clients on raw sockets, pushed to at 20,000 pushes a second in
    /// batches of 20,000 (what the hub stores in one call after it fell a second behind),
    /// into an in-memory store that fills after a few seconds and then refuses them; four
    /// other clients send heartbeats meanwhile and time their acks. No event loop writes
    /// more than ``LiveOutbox/pushesPerTurn`` pushes in one turn, so a heartbeat waits for
    /// that many at most. The round trips are printed, not asserted: a busy machine can
    /// exceed any latency.
    func testHeartbeatsOfOtherClientsWhileStoreFills() async throws {
        let sessions = 2_000
        let perClient = 10
        var mailboxes = MailboxConfiguration.inMemory
        mailboxes.limits.maximumStoredBytes = 16 << 20
        let configure: (inout ServerConfiguration) -> Void = { $0.mailboxes = mailboxes }
        try await withServer(configure: configure, handlers: echoHandlers) { server, endpoint in
            let ids = (0..<sessions).map { "s\($0)" }
            let clients = try await offThread {
                try ids.map { id -> RawSocket in
                    let socket = try RawSocket.connect(to: endpoint)
                    let hello = SessionWire.encode(SessionWire.Hello(clientID: id, lastSequence: 0))
                    try socket.write(seedBytes(type: 0x401, serial: 1, payload: hello))
                    return socket
                }
            }
            try await bounded("every session to be identified", .seconds(60)) {
                while await server.metrics().sessionsResumed < sessions {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            let probes = try await offThread { try (0..<4).map { _ in try RawSocket.connect(to: endpoint) } }
            let stop = Lock(false)
            let pusher = Task {
                var (stored, refused) = (0, 0)
                let payload = Array(#"{"seq": 1, "time": "2026-01-01T00:00:00Z"}"#.utf8)
                let batch = Array((0..<perClient).map { _ in ids }.joined())
                let start = ContinuousClock.now
                var second = 0
                while !stop.withLock({ $0 }) {
                    second += 1
                    do {
                        try await server.push(Frame(type: 0x10, serial: 0, payload: payload), toClients: batch)
                        stored += batch.count
                    } catch {
                        refused += batch.count
                    }
                    // Pacing the load, not waiting for an event.
                    try? await Task.sleep(until: start + .seconds(second), clock: .continuous)
                }
                return (stored, refused)
            }
            let samples = try await withThrowingTaskGroup(of: [UInt64].self) { group in
                for probe in probes {
                    group.addTask {
                        try await offThread {
                            var rtts: [UInt64] = []
                            let end = MonotonicTime.now() + 12_000_000_000
                            var serial: UInt32 = 0
                            while MonotonicTime.now() < end {
                                serial += 1
                                let sent = MonotonicTime.now()
                                try probe.write(seedBytes(type: 0x1, serial: serial))
                                // The ack, past any push (a peer that never identified gets none here).
                                while true {
                                    guard let frame = try probe.readFrameBlocking(timeout: eventBound) else { throw TimedOut(what: "a heartbeat ack") }
                                    if frame.type == 0x1, frame.serial == serial { break }
                                }
                                rtts.append(MonotonicTime.now() - sent)
                                usleep(20_000)
                            }
                            return rtts
                        }
                    }
                }
                var all: [UInt64] = []
                for try await part in group { all += part }
                return all.sorted()
            }
            stop.withLock { $0 = true }
            let (stored, refused) = await pusher.value
            func ms(_ nanoseconds: UInt64) -> String { String(Double(nanoseconds / 10_000) / 100) }
            let turns = server.peers.map(\.loop).reduce(into: [ObjectIdentifier: EventLoop]()) { $0[ObjectIdentifier($1)] = $1 }
                .values.map { server.hub!.outbox(for: $0).turnsForTesting }
            print("heartbeats while the store fills: \(stored) pushes stored, \(refused) refused; \(samples.count) round trips p50 \(ms(samples[samples.count / 2])) ms, p99 \(ms(samples[samples.count * 99 / 100])) ms, max \(ms(samples.last!)) ms; largest turn \(turns.map(\.largest).max() ?? 0) pushes in \(turns.map(\.turns).reduce(0, +)) turns")
            XCTAssertGreaterThan(stored, 0)
            XCTAssertGreaterThan(refused, 0, "the store never filled")
            XCTAssertEqual(samples.count > 0, true)
            for (largest, _) in turns {
                XCTAssertLessThanOrEqual(largest, LiveOutbox.pushesPerTurn)
            }
            withExtendedLifetime(clients) {}
        }
    }
}
