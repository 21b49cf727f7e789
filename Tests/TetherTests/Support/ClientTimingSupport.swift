import Synchronization
import TetherTesting
@testable import Tether

/// A gate that server handlers pass while it is open and wait at while it is closed: a
/// server that stalls on demand, with no real time involved.
///
/// A handler waiting at the gate goes on when the gate opens, or returns when its task is
/// cancelled (its peer or server stopping), so nothing is left waiting after a test.
final class HandlerGate: Sendable {
    private struct State {
        var isOpen: Bool
        var waiters: [AsyncStream<Void>.Continuation] = []
    }

    private let state: Mutex<State>

    /// A gate, open or closed.
    init(open: Bool = true) {
        state = Mutex(State(isOpen: open))
    }

    /// Waits while the gate is closed; returns at once when it is open.
    func pass() async {
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        let waits = state.withLock { state -> Bool in
            guard !state.isOpen else { return false }
            state.waiters.append(continuation)
            return true
        }
        guard waits else { return }
        // Ends when the gate opens (the stream finishes) or the task is cancelled.
        for await _ in stream {}
    }

    /// Makes later arrivals wait.
    func close() {
        state.withLock { $0.isOpen = false }
    }

    /// Lets everyone waiting go on, and later arrivals pass.
    func open() {
        let waiting = state.withLock { state -> [AsyncStream<Void>.Continuation] in
            state.isOpen = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiting { waiter.finish() }
    }
}

/// Waits until the calling task is cancelled, then throws `CancellationError`: for a
/// handler that never answers. Thrown, not returned, so the server answers nothing for it
/// as it shuts the peer down.
func untilCancelledByServer() async throws {
    await HandlerGate(open: false).pass()
    throw CancellationError()
}

extension Connection {
    /// Starts `request` in a task, and returns once the request is in flight or queued:
    /// the task starts on the connection's loop, and `clock` waits until its loops are idle,
    /// with no waiting in real time.
    nonisolated func startRequest(_ request: Request, timeout: RequestTimeout = .configured, settlingOn clock: TestClock) async -> Task<Response, any Error> {
        await startRequest(request, timeout: timeout, settlingOn: clock.manual)
    }

    /// ``startRequest(_:timeout:settlingOn:)`` for a loop on a ``ManualClock``.
    nonisolated func startRequest(_ request: Request, timeout: RequestTimeout = .configured, settlingOn clock: ManualClock) async -> Task<Response, any Error> {
        let task = await requestTask(request, timeout: timeout)
        await clock.settle()
        return task
    }

    /// A task that makes `request`, enqueued on the connection's loop while the connection
    /// runs there: a settle of the loop's clock runs it up to the queue or the wire.
    private func requestTask(_ request: Request, timeout: RequestTimeout) -> Task<Response, any Error> {
        Task(executorPreference: loop.taskExecutor) { [self] in try await self.request(request, timeout: timeout) }
    }
}

/// The seed profile with heartbeats (type `0x1`) taken for requests: a server speaking it
/// answers a heartbeat only through a handler for type `0x1`, which can be made to stall.
var heartbeatsAsRequests: Profile {
    var profile = Profile.seed
    profile.classify = { type in type == 0x1 ? .message : Profile.seedKind(of: type) }
    return profile
}

/// Heartbeat events of a connection, collected from before it connects.
actor HeartbeatLog {
    private var iterator: Subscription<Heartbeat>.AsyncIterator
    private(set) var seen: [Heartbeat] = []

    init(_ connection: Connection) {
        iterator = connection.heartbeats.makeAsyncIterator()
    }

    /// Consumes `count` more events, within the bound.
    func take(_ count: Int) async throws -> [Heartbeat] {
        try await bounded("\(count) heartbeat events") { [self] in await consume(count) }
    }

    private func consume(_ count: Int) async -> [Heartbeat] {
        var local = iterator
        var taken: [Heartbeat] = []
        while taken.count < count, let event = await local.next(isolation: self) {
            taken.append(event)
        }
        seen += taken
        return taken
    }
}

/// A server on `network` that takes heartbeats for requests and never answers them, while
/// `body` runs; `body` gets the serials of the heartbeats as they reach the server.
func withSilentHeartbeatServer<T: Sendable>(
    on network: TestNetwork,
    _ body: (_ heartbeatsReceived: AsyncStream<UInt32>, _ endpoint: Endpoint) async throws -> T
) async throws -> T {
    let (reached, arrival) = AsyncStream<UInt32>.makeStream()
    return try await withNetworkServer(on: network, configure: { $0.profile = heartbeatsAsRequests }, handlers: { server in
        server.handle(type: 0x1) { request, _ in
            arrival.yield(request.serial)
            try await untilCancelledByServer()
            return Response()
        }
    }) { _, endpoint in
        try await body(reached, endpoint)
    }
}
