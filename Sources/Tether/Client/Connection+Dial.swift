extension Connection {
    /// A dialed stream and how the attempt that opened it went.
    struct Dialed {
        var stream: any OpenedStream
        var report: ConnectReport
    }

    /// Connects to `endpoint` with the stack of connectors its scheme and the configuration
    /// ask for, within the connect timeout.
    func dial(_ endpoint: Endpoint) async -> Result<Dialed, TetherError> {
        let context = ConnectContext(
            loop: loop,
            began: loop.now,
            timeout: configuration.connectTimeout,
            attemptDelay: configuration.connectionAttemptDelay,
            resolver: configuration.resolver,
            noDelay: configuration.noDelay
        )
        return await connector(for: endpoint).connect(to: endpoint, in: context, isolation: self).map {
            Dialed(stream: $0.stream, report: $0.report)
        }
    }

    /// The connectors that reach `endpoint`, bottom first: the network's transport for the
    /// endpoint (TCP, a Unix domain socket, the in-memory network), the HTTP proxy of a
    /// WebSocket endpoint when one is configured, TLS when configured, and WebSocket for a
    /// `ws://` or `wss://` endpoint.
    func connector(for endpoint: Endpoint) -> any StreamConnector {
        let network = configuration.network
        var connector: any StreamConnector
        if endpoint.webSocketPath != nil, let proxy = configuration.webSocket.proxy {
            connector = ProxyConnector(below: network.connector(for: proxy.endpoint), proxy: proxy)
        } else {
            connector = network.connector(for: endpoint)
        }
        if let tls = configuration.tls { connector = TLSConnector(over: connector, tls: tls) }
        if endpoint.webSocketPath != nil {
            connector = WebSocketConnector(below: connector, configuration: configuration.webSocket, drainTimeout: configuration.drainTimeout)
        }
        return connector
    }
}
