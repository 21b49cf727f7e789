extension Server {
    /// What a server's listener handed over: the stream, and the settings the channels of
    /// its port share.
    struct Accepted: Sendable {
        let stream: any OpenedStream
        let settings: ChannelSettings
    }

    /// One port of the server, listening.
    struct BoundPort: Sendable {
        enum Kind: Sendable {
            /// ``ServerConfiguration/host`` and ``ServerConfiguration/port``.
            case main
            /// The WebSocket port of its own.
            case webSocket
            /// ``ServerConfiguration/unixSocket``.
            case unix
        }

        let kind: Kind
        let port: any ListeningPort
    }

    /// A port to listen on: the stack of listeners, and the settings its channels share.
    private struct Plan {
        let kind: BoundPort.Kind
        let listener: any StreamListener
        let settings: ChannelSettings
    }

    /// What must hold before anything listens: a profile that sessions can use, and TLS
    /// that loads.
    func checkConfiguration() throws(TetherError) {
        if hub != nil, configuration.profile.correlation != .bySerial {
            throw TetherError(
                code: .invalidArgument,
                message: "mailboxes need a profile that matches responses by serial; the \(configuration.profile.name) profile has no serial"
            )
        }
        try configuration.tls?.provider.prepare()
        if let webSocket = configuration.webSocket, !webSocket.sharesMainPort {
            try webSocket.tls?.provider.prepare()
        }
        if configuration.unixSocket?.replacesPort == true, configuration.webSocket?.sharesMainPort == true {
            throw TetherError(code: .invalidArgument, message: "WebSocket cannot share the main port when the server listens on its Unix domain socket only")
        }
    }

    /// The ports the configuration asks for, each a stack of listeners: the network's
    /// transport, TLS when configured, then WebSocket on a port of its own or a sniffer on
    /// a port shared with it.
    private func plans() -> [Plan] {
        let network = configuration.network
        var plans: [Plan] = []
        if configuration.unixSocket?.replacesPort != true {
            var main = network.listener(for: Endpoint(host: configuration.host, port: configuration.port))
            if let tls = configuration.tls { main = main.secured(with: tls) }
            if let webSocket = configuration.webSocket, webSocket.sharesMainPort { main = main.sniffingWebSocket(webSocketOptions(webSocket)) }
            plans.append(Plan(kind: .main, listener: main, settings: channelSettings))
        }
        if let webSocket = configuration.webSocket, !webSocket.sharesMainPort {
            var port = network.listener(for: Endpoint(host: webSocket.host ?? configuration.host, port: webSocket.port))
            if let tls = webSocket.tls { port = port.secured(with: tls) }
            plans.append(Plan(kind: .webSocket, listener: port.carryingWebSocket(webSocketOptions(webSocket)), settings: webSocketChannelSettings))
        }
        if let unix = configuration.unixSocket {
            var socket: any StreamListener = UnixListener(path: unix.path, permissions: unix.permissions)
            if let tls = configuration.tls { socket = socket.secured(with: tls) }
            plans.append(Plan(kind: .unix, listener: socket, settings: channelSettings))
        }
        return plans
    }

    /// Binds every port of the configuration, each handing what it accepts to `accept`
    /// with its settings; when one cannot listen, those already listening are closed.
    ///
    /// - Returns: The ports, listening; the main port first.
    func listen(on acceptLoop: EventLoop, accept: @escaping @Sendable (Accepted) -> Void) async throws(TetherError) -> [BoundPort] {
        let context = ListenContext(
            acceptLoop: acceptLoop,
            group: configuration.eventLoopGroup,
            backlog: configuration.backlog,
            noDelay: configuration.noDelay
        )
        var bound: [BoundPort] = []
        for plan in plans() {
            do throws(TetherError) {
                let settings = plan.settings
                let port = try await plan.listener.listen(in: context) { accept(Accepted(stream: $0, settings: settings)) }
                bound.append(BoundPort(kind: plan.kind, port: port))
            } catch {
                let opened = bound
                try? await acceptLoop.submit { for each in opened { each.port.close() } }
                throw error
            }
        }
        return bound
    }

    /// The layer options of a peer accepted on the WebSocket port.
    func webSocketOptions(_ webSocket: WebSocketServerConfiguration) -> WebSocketLayerOptions {
        WebSocketLayerOptions(
            role: .server(path: webSocket.path, allowedOrigins: webSocket.allowedOrigins),
            maximumMessageSize: webSocket.maximumMessageSize,
            maximumHeadSize: webSocket.maximumRequestHeadSize,
            handshakeTimeout: nil,
            drainTimeout: configuration.drainTimeout
        )
    }
}
