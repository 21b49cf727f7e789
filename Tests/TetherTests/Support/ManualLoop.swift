@testable import Tether

/// Runs `body` with a manual clock and a group of one event loop on it, then shuts the
/// group down.
///
/// One loop serves both sides when a test puts a client and a server on the group: then
/// every timer of both fires in one deadline order as the test advances the clock.
func withManualLoop<T: Sendable>(
    _ body: (ManualClock, EventLoopGroup) async throws -> T
) async throws -> T {
    let clock = ManualClock()
    let group = EventLoopGroup(loopCount: 1, clock: clock)
    defer { group.shutdown() }
    return try await body(clock, group)
}
