import Synchronization
import Testing
import TetherTesting
@testable import Tether

/// An in-memory store whose appends can be held at a gate, and which records each batch of
/// acknowledgements it is handed.
private final class GatedAcknowledgementStore: MailboxStore {
    struct State {
        var holding = false
        var held: CheckedContinuation<Void, Never>?
        var entered: CheckedContinuation<Void, Never>?
        var batches: [[String: UInt64]] = []
        var single = 0
        var batchWaiter: CheckedContinuation<Void, Never>?
    }

    let base = InMemoryMailboxStore()
    let state = Mutex(State())

    func holdAppends() {
        state.withLock { $0.holding = true }
    }

    /// Returns once an append waits at the gate.
    func appendWaiting() async {
        await withCheckedContinuation { continuation in
            let waiting = state.withLock { state -> Bool in
                if state.held != nil { return true }
                state.entered = continuation
                return false
            }
            if waiting { continuation.resume() }
        }
    }

    func openGate() {
        let held = state.withLock { state in
            state.holding = false
            defer { state.held = nil }
            return state.held
        }
        held?.resume()
    }

    /// Returns once a batch of acknowledgements came.
    func batchArrived() async {
        await withCheckedContinuation { continuation in
            let arrived = state.withLock { state -> Bool in
                if !state.batches.isEmpty { return true }
                state.batchWaiter = continuation
                return false
            }
            if arrived { continuation.resume() }
        }
    }

    func append(_ messages: [MailboxMessage.Draft], limits: MailboxLimits, now: MailboxTime) async throws -> [UInt64] {
        await withCheckedContinuation { continuation in
            let entered = state.withLock { state -> CheckedContinuation<Void, Never>?? in
                guard state.holding else { return .none }
                state.held = continuation
                defer { state.entered = nil }
                return .some(state.entered)
            }
            switch entered {
            case .none: continuation.resume()
            case .some(let waiter): waiter?.resume()
            }
        }
        return try await base.append(messages, limits: limits, now: now)
    }

    func openMailbox(for clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> MailboxSummary {
        try await base.openMailbox(for: clientID, limits: limits, now: now)
    }

    func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage] {
        try await base.messages(for: clientID, after: sequence, limit: limit)
    }

    func acknowledge(_ clientID: String, through sequence: UInt64) async throws {
        state.withLock { $0.single += 1 }
        try await base.acknowledge(clientID, through: sequence)
    }

    func acknowledge(_ positions: [String: UInt64]) async throws {
        for (clientID, sequence) in positions { try await base.acknowledge(clientID, through: sequence) }
        let waiter = state.withLock { state in
            state.batches.append(positions)
            defer { state.batchWaiter = nil }
            return state.batchWaiter
        }
        waiter?.resume()
    }

    func clientIDs() async throws -> [String] {
        try await base.clientIDs()
    }
}

@Suite("Acknowledgements in batches", .timeLimit(.guarded))
struct AcknowledgementBatchTests {
    @Test("acknowledgements that queue behind a slow append reach the store in one call, after it, and the push they queued behind is not held up by them")
    func oneCallPerBatch() async throws {
        let store = GatedAcknowledgementStore()
        try await withTestNetwork { network in
            try await withNetworkServer(on: network, configure: { $0.mailboxes = MailboxConfiguration(store: store) }) { server, _ in
                let clients = (0..<20).map { "c\($0)" }
                #expect(try await server.push(indexed(0), toClients: clients) == Array(repeating: 1, count: 20))
                store.holdAppends()
                let pushing = Task { try await server.push(indexed(1), toClient: "c0") }
                try await bounded("the push to wait at the gate") { await store.appendWaiting() }
                let hub = try #require(server.hub)
                for client in clients { hub.acknowledge(client, through: 1) }
                hub.acknowledge("c3", through: 1)
                store.openGate()
                #expect(try await bounded("the held push") { try await pushing.value } == 2)
                try await bounded("the acknowledgements") { await store.batchArrived() }
                let (batches, single) = store.state.withLock { ($0.batches, $0.single) }
                #expect(batches == [Dictionary(uniqueKeysWithValues: clients.map { ($0, UInt64(1)) })])
                #expect(single == 0)
                #expect(try await store.base.messages(for: "c1", after: 0, limit: 10).isEmpty)
                #expect(try await store.base.messages(for: "c0", after: 0, limit: 10).map(\.sequence) == [2])
            }
        }
    }
}
