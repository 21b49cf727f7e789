@testable import Tether

/// Runs `body` with a manual clock and a group of one event loop on it, then shuts the
/// group down.
///
/// One loop serves both sides when a test puts a client and a server on the group: then
/// every timer of both fires in one deadline order as the test advances the clock.
func withManualLoop<T: Sendable>(
    _ body: (ManualClock, TetherEventLoopGroup) async throws -> T
) async throws -> T {
    let clock = ManualClock()
    let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
    defer { group.shutdown() }
    return try await body(clock, group)
}

extension RawSocket {
    /// Sets `TCP_NODELAY`, so each small write goes out at once instead of waiting for the
    /// peer's acknowledgement of the one before, which the peer's kernel may delay by tens
    /// of milliseconds of real time: a test that trickles bytes on a manual clock must not
    /// depend on it.
    func sendingAtOnce() throws -> RawSocket {
        try Syscall.setOption(fd, level: SocketOptions.tcpLevel, name: SocketOptions.noDelay, value: 1)
        return self
    }
}
