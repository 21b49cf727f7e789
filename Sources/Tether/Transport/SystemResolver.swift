/// The system's resolver for connections: `getaddrinfo` for one address family at a time,
/// each lookup on a thread of its own, which a waiter can leave at once.
///
/// `getaddrinfo` cannot be interrupted: a lookup against a DNS server that never answers
/// blocks its thread for the resolver's retries, whatever the caller's timeout. So a waiter
/// that is cancelled (its connect timed out, or its task was cancelled) returns at once with
/// `CancellationError`, and the lookup goes on without it; its answer goes to the waiters
/// still there, or nowhere.
///
/// Lookups are shared: there is at most one thread per host, port and family in flight, and
/// every waiter for the same question waits on it. A connection that reconnects again and
/// again against a silent DNS server therefore joins the lookup it left, instead of
/// starting threads faster than they end.
package final class SystemResolver: NameResolver {
    /// The blocking lookup: `Resolver.lookup` for the system's resolver.
    package typealias Lookup = @Sendable (Endpoint, AddressFamily) -> Result<[TetherSocketAddress], TetherError>

    /// One question: what a lookup asks, and what waiters share.
    private struct Question: Hashable {
        var host: String
        var port: Int
        var family: AddressFamily
    }

    private struct State {
        /// The waiters of each lookup in flight, by waiter number.
        var inFlight: [Question: [UInt64: Waiter]] = [:]
        var nextWaiter: UInt64 = 0
    }

    /// The resolver every connection uses unless its configuration names another.
    package static let shared = SystemResolver()

    private let lookup: Lookup
    private let state = Lock(State())

    /// A resolver that runs `lookup` on a thread of its own for each question in flight.
    ///
    /// - Parameter lookup: The blocking lookup; the default is `getaddrinfo`.
    package init(lookup: @escaping Lookup = { Resolver.lookup($0, family: $1) }) {
        self.lookup = lookup
    }

    /// How many lookups are in flight (and so how many of its threads are running).
    package var lookupsInFlight: Int {
        state.withLock { $0.inFlight.count }
    }

    /// How many tasks wait for the lookups in flight.
    package var waiting: Int {
        state.withLock { $0.inFlight.values.reduce(0) { $0 + $1.count } }
    }

    /// The addresses of `endpoint` in `family`, from a lookup in flight for the same
    /// question or a new one.
    ///
    /// - Throws: ``TetherError/Code/resolutionFailed`` when the host has no address in
    ///   `family`; `CancellationError` (as the underlying error of a
    ///   ``TetherError/Code/connectFailed``) at once when the task is cancelled.
    package func addresses(of endpoint: Endpoint, family: AddressFamily) async throws(TetherError) -> [TetherSocketAddress] {
        let question = Question(host: endpoint.host, port: endpoint.port, family: family)
        let waiter = Waiter()
        let id = state.withLock { state -> UInt64 in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                guard waiter.start(continuation) else { return }
                let starts = state.withLock { state -> Bool in
                    let starts = state.inFlight[question] == nil
                    state.inFlight[question, default: [:]][id] = waiter
                    return starts
                }
                if starts {
                    BlockingThread.run { [self, lookup] in
                        finish(question, with: lookup(endpoint, question.family))
                    }
                }
            }
        } onCancel: {
            waiter.resume(returning: .failure(TetherError(code: .connectFailed, message: "resolving \(endpoint.host) was cancelled", underlying: CancellationError())))
        }
        // A waiter that left stays in the table until its lookup ends; it is resumed already.
        state.withLock { _ = $0.inFlight[question]?.removeValue(forKey: id) }
        return try result.get()
    }

    /// Ends the lookup for `question`: its waiters get `result`, and a later question
    /// starts a lookup of its own.
    private func finish(_ question: Question, with result: Result<[TetherSocketAddress], TetherError>) {
        let waiters = state.withLock { $0.inFlight.removeValue(forKey: question) } ?? [:]
        for waiter in waiters.values {
            waiter.resume(returning: result)
        }
    }
}

/// One task waiting for a lookup: resumed exactly once, by the lookup's answer or by the
/// task's cancellation, whichever comes first.
private final class Waiter: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Result<[TetherSocketAddress], TetherError>, Never>?
        /// What the waiter was resumed with, once it was (or was cancelled before it started).
        var result: Result<[TetherSocketAddress], TetherError>?
        var resumed = false
    }

    private let state = Lock(State())

    /// Takes the continuation; returns `false` (having resumed it) when the waiter was
    /// cancelled before it started.
    func start(_ continuation: CheckedContinuation<Result<[TetherSocketAddress], TetherError>, Never>) -> Bool {
        let early = state.withLock { state -> Result<[TetherSocketAddress], TetherError>? in
            if let result = state.result { return result }
            state.continuation = continuation
            return nil
        }
        guard let early else { return true }
        continuation.resume(returning: early)
        return false
    }

    /// Resumes the waiter with `result` unless it was resumed already.
    func resume(returning result: Result<[TetherSocketAddress], TetherError>) {
        let continuation = state.withLock { state -> CheckedContinuation<Result<[TetherSocketAddress], TetherError>, Never>? in
            guard !state.resumed else { return nil }
            state.resumed = true
            state.result = result
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: result)
    }
}
