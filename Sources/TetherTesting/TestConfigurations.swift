public import Tether

extension ConnectionConfiguration {
    /// For tests against a local or in-memory server: quick to fail, quick to come back, no
    /// heartbeats.
    ///
    /// The defaults, with:
    /// - ``connectTimeout`` and ``requestTimeout``: 2 s;
    /// - ``heartbeat``: disabled (turn it on in the tests about heartbeats);
    /// - ``reconnect``: a backoff from 20 ms, growing 1.6 times an attempt, without jitter
    ///   (so each delay is exact: 20 ms, 32 ms, 51.2 ms, …), at most 5 failed attempts in
    ///   a row.
    public static var testing: ConnectionConfiguration {
        var configuration = ConnectionConfiguration()
        configuration.connectTimeout = .seconds(2)
        configuration.requestTimeout = .seconds(2)
        configuration.heartbeat = .disabled
        configuration.reconnect = .backoff(initialDelay: .milliseconds(20), jitter: 0, maximumAttempts: 5)
        return configuration
    }

    /// ``testing`` on `network`: the connection dials the network's servers, and its time
    /// is the network's clock.
    ///
    /// - Parameter network: The in-memory network.
    /// - Returns: The configuration.
    public static func testing(on network: TestNetwork) -> ConnectionConfiguration {
        var configuration = ConnectionConfiguration.testing
        configuration.use(network)
        return configuration
    }

    /// Makes the connection dial `network` instead of the system's sockets, on the
    /// network's event loop and clock, and follow the network's
    /// ``TetherTesting/TestNetwork/pathMonitor`` instead of the system's; the rest of the
    /// configuration stays.
    ///
    /// - Parameter network: The in-memory network.
    public mutating func use(_ network: TestNetwork) {
        eventLoopGroup = network.eventLoopGroup
        self.network = network.memory
        pathMonitor = network.pathMonitor
    }
}

extension ServerConfiguration {
    /// A server on `network`, at `host` and `port`.
    ///
    /// - Parameters:
    ///   - network: The in-memory network.
    ///   - host: The name clients dial; `"server"` by default.
    ///   - port: The port; 9000 by default, 0 to have the network pick one.
    /// - Returns: The configuration.
    public static func testing(on network: TestNetwork, host: String = "server", port: Int = 9000) -> ServerConfiguration {
        var configuration = ServerConfiguration(host: host, port: port)
        configuration.use(network)
        return configuration
    }

    /// Makes the server listen on `network` instead of the system's sockets, on the
    /// network's event loop and clock. Its mailboxes, set before or after, follow the
    /// network's clock too, unless their ``Tether/MailboxConfiguration/clock`` is set.
    ///
    /// - Parameter network: The in-memory network.
    public mutating func use(_ network: TestNetwork) {
        eventLoopGroup = network.eventLoopGroup
        self.network = network.memory
    }
}
