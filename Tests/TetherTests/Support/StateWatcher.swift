@testable import Tether

/// Follows a connection's states from the moment it is made, so a test can await the next
/// state that matches and then assert the exact sequence seen.
actor StateWatcher {
    private var iterator: Subscription<ConnectionState>.AsyncIterator
    /// Every state consumed so far, in order.
    private(set) var seen: [ConnectionState] = []

    init(_ connection: Connection) {
        iterator = connection.states.makeAsyncIterator()
    }

    /// Consumes states until one matches, within the bound; fails the test on timeout or
    /// when the sequence ends first.
    @discardableResult
    func next(
        _ what: String,
        within limit: Duration = eventBound,
        where matches: @escaping @Sendable (ConnectionState) -> Bool
    ) async throws -> ConnectionState {
        let found = try await bounded(what, limit) { [self] in await consume(until: matches) }
        guard let found else { throw TimedOut(what: "\(what) (the states ended first: \(seen))") }
        return found
    }

    /// Waits for the next state in `phase`.
    @discardableResult
    func next(_ phase: ConnectionState.Phase, within limit: Duration = eventBound) async throws -> ConnectionState {
        try await next("state \(phase)", within: limit) { $0.phase == phase }
    }

    private func consume(until matches: (ConnectionState) -> Bool) async -> ConnectionState? {
        // The iterator shares its stream's state, so a copy consumes the same elements.
        var local = iterator
        while let state = await local.next(isolation: self) {
            seen.append(state)
            if matches(state) { return state }
        }
        return nil
    }

    /// The phases seen so far.
    var phases: [ConnectionState.Phase] { seen.map(\.phase) }
}

extension ConnectionState {
    /// Connected, as the state machine publishes it: the connection adds the endpoint in use.
    static let connectedUnnamed = ConnectionState(phase: .connected)
}
