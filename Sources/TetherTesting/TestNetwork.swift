public import Tether

/// A network inside the test process: a ``Tether/Server`` listens on it and ``Tether/Connection``s dial
/// it, with no sockets, no ports and no kernel in between, on a ``TestClock``.
///
/// The server and the connections are the same types an app uses, with the same handlers,
/// profiles, sessions, heartbeats and reconnects; only their configuration says where they
/// live (``Tether/ServerConfiguration/testing(on:host:port:)``,
/// ``Tether/ConnectionConfiguration/testing(on:)``):
///
/// ```swift
/// try await withTestNetwork { network in
///     try await withTestServer(configuration: .testing(on: network), handlers: { server in
///         server.handle(type: 0x410) { _, _ in Response(json: ["price": 101.5]) }
///     }) { server in
///         try await Connection.withConnection(to: server.endpoint, configuration: .testing(on: network)) { connection in
///             let reply = try await connection.request(Request(type: 0x410))
///             …
///         }
///     }
/// }
/// ```
///
/// Hosts are names: a server listens on its configuration's host and port, and a client
/// dials the same name and port; a dial where nothing listens is refused at once. Each
/// connection is a link (``TestLink``) whose bytes a test can break on purpose, and
/// whole endpoints can refuse or swallow dials (``refuseConnections(to:)``,
/// ``blackHole(_:)``).
///
/// Every client and server of the network runs on its one event loop, and its time is
/// ``clock``: nothing waits in real time, and an advance fires every timer of both sides
/// in one deadline order.
public final class TestNetwork: Sendable {
    /// The time of everything on the network.
    public let clock: TestClock
    /// The group of one event loop that every client and server on the network runs on;
    /// ``Tether/ConnectionConfiguration/use(_:)`` and ``Tether/ServerConfiguration/use(_:)`` set it.
    public let eventLoopGroup: TetherEventLoopGroup
    package let memory: MemoryNetwork
    /// The network path its connections see: usable, until the test changes it;
    /// ``Tether/ConnectionConfiguration/use(_:)`` sets it as their
    /// ``Tether/ConnectionConfiguration/pathMonitor``.
    public let pathMonitor = TestPathMonitor()

    /// A network with nothing on it yet.
    ///
    /// - Parameter clock: Its time; a new clock by default. Share one clock between a
    ///   network and a group of real sockets (``TestClock/makeEventLoopGroup(loopCount:)``)
    ///   to have both follow one time.
    public init(clock: TestClock = TestClock()) {
        self.clock = clock
        eventLoopGroup = TetherEventLoopGroup(loopCount: 1, clock: clock.manual)
        memory = MemoryNetwork(loop: eventLoopGroup.loops[0])
    }

    /// Moves the network's time forward; see ``TestClock/advance(by:)``.
    ///
    /// - Parameter duration: How far to move.
    public func advance(by duration: Duration) async {
        await clock.advance(by: duration)
    }

    /// Waits until everything due now has run; see ``TestClock/runUntilIdle()``.
    public func runUntilIdle() async {
        await clock.runUntilIdle()
    }

    /// Whether a server listens on `endpoint` now.
    ///
    /// - Parameter endpoint: A host name and port on this network.
    /// - Returns: `true` from when the server's ``Tether/Server/listeningAddress()`` returns
    ///   until its ``Tether/Server/run()`` has ended.
    public func isListening(on endpoint: Endpoint) -> Bool {
        memory.isListening(endpoint)
    }

    // MARK: Dialing faults

    /// Refuses every dial to `endpoint`, as a host that has nothing on the port does
    /// (``Tether/TetherError/Code/connectionRefused``), until ``restoreConnections(to:)``; links
    /// already made stay up.
    ///
    /// - Parameter endpoint: The host name and port.
    public func refuseConnections(to endpoint: Endpoint) {
        memory.setRule(.refuse, for: endpoint)
    }

    /// Answers no dial to `endpoint`: each waits for its connect timeout, on the clock,
    /// and fails with ``Tether/TetherError/Code/connectTimedOut``, as a dial into a network that
    /// drops packets does; until ``restoreConnections(to:)``.
    ///
    /// - Parameter endpoint: The host name and port.
    public func blackHole(_ endpoint: Endpoint) {
        memory.setRule(.blackHole, for: endpoint)
    }

    /// Lets dials to `endpoint` reach its server again after ``refuseConnections(to:)`` or
    /// ``blackHole(_:)``.
    ///
    /// - Parameter endpoint: The host name and port.
    public func restoreConnections(to endpoint: Endpoint) {
        memory.clearRule(for: endpoint)
    }

    // MARK: Links

    /// Every link made so far (one per connection a client made), oldest first, open or
    /// not.
    public var links: [TestLink] {
        memory.links.map(TestLink.init)
    }

    /// Link number `number` (from 1, in the order clients connected), once it is made.
    ///
    /// Waits for the link when fewer have been made so far; bound the wait with
    /// ``withTimeLimit(_:_:_:)`` when the dial might never happen.
    ///
    /// - Parameter number: The link's number, from 1.
    /// - Returns: The link.
    public func link(_ number: Int) async -> TestLink {
        precondition(number >= 1, "links are numbered from 1")
        await memory.waitForLinks(number)
        return TestLink(memory.links[number - 1])
    }

    /// The faults every new link starts with; none by default. Links already made keep
    /// theirs.
    public var defaultFaults: LinkFaults {
        get { LinkFaults(memory.defaultFaults) }
        set { memory.defaultFaults = newValue.memoryFaults }
    }

    // MARK: Ending

    /// Stops the network's event loop, and the loops of groups its clock made. Call it
    /// once its servers have stopped and its connections closed; ``withTestNetwork(clock:isolation:_:)``
    /// calls it for you.
    public func shutdown() {
        eventLoopGroup.shutdown()
        clock.shutdown()
    }
}

/// Runs `body` with a new ``TestNetwork``, then shuts the network down, however `body`
/// ends.
///
/// Stop the servers and close the connections of the network inside `body`.
///
/// - Parameters:
///   - clock: The network's time; a new clock by default.
///   - isolation: The caller's actor; `body` runs there.
///   - body: The test.
/// - Returns: What `body` returns.
/// - Throws: What `body` throws.
@discardableResult
public func withTestNetwork<Result>(
    clock: TestClock = TestClock(),
    isolation: isolated (any Actor)? = #isolation,
    _ body: (TestNetwork) async throws -> sending Result
) async throws -> sending Result {
    let network = TestNetwork(clock: clock)
    defer { network.shutdown() }
    return try await body(network)
}
