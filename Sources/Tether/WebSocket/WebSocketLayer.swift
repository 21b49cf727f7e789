/// A stream that carries WebSocket: the upgrade, then binary messages, set up by the
/// options when it becomes a transport.
struct WebSocketStream: LayeredStream {
    let below: any OpenedStream
    let options: WebSocketLayerOptions

    var keepsBytes: Bool { false }

    func makeTransport(on loop: EventLoop, reading use: ReadBufferUse) throws(TetherError) -> any ByteTransport {
        WebSocketTransport(over: try below.makeTransport(on: loop, reading: .sealed), options: options, loop: loop)
    }
}

/// A stream accepted on a port shared with WebSocket: its first bytes (after TLS, when the
/// stream has it) decide between Tether frames and a WebSocket upgrade answered with the
/// options (``ProtocolSniffer``).
struct SniffedStream: LayeredStream {
    let below: any OpenedStream
    let options: WebSocketLayerOptions

    /// Until the first bytes are read, the peer may be a Tether client, which reads the
    /// notice as it is.
    var keepsBytes: Bool { true }

    func makeTransport(on loop: EventLoop, reading use: ReadBufferUse) throws(TetherError) -> any ByteTransport {
        ProtocolSniffer(over: try below.makeTransport(on: loop, reading: .plain), webSocket: options, loop: loop)
    }
}

/// Connects with another connector, then speaks WebSocket over the stream: the upgrade
/// request for the endpoint's path, and binary messages after it.
struct WebSocketConnector: StreamConnector {
    let below: any StreamConnector
    let configuration: WebSocketClientConfiguration
    let drainTimeout: Duration

    func connect(to endpoint: Endpoint, in context: ConnectContext, isolation: isolated any Actor) async -> Result<ConnectedStream, TetherError> {
        let options = WebSocketLayerOptions(
            role: .client(path: endpoint.webSocketPath ?? "/", host: endpoint.hostHeader, headers: configuration.headers),
            maximumMessageSize: configuration.maximumMessageSize,
            maximumHeadSize: configuration.maximumResponseHeadSize,
            handshakeTimeout: configuration.handshakeTimeout,
            drainTimeout: drainTimeout
        )
        return await below.connect(to: endpoint, in: context, isolation: isolation).map { connected in
            var connected = connected
            connected.stream = WebSocketStream(below: connected.stream, options: options)
            return connected
        }
    }
}

/// Reaches an endpoint through an HTTP proxy: connects to the proxy with another connector,
/// then asks it for a tunnel (`CONNECT`) within what is left of the timeout.
struct ProxyConnector: StreamConnector {
    let below: any StreamConnector
    let proxy: HTTPProxy

    func connect(to endpoint: Endpoint, in context: ConnectContext, isolation: isolated any Actor) async -> Result<ConnectedStream, TetherError> {
        switch await below.connect(to: proxy.endpoint, in: context, isolation: isolation) {
        case .failure(let error):
            return .failure(TetherError(code: error.code, message: "cannot reach \(endpoint) through the proxy \(proxy): \(error.message)", underlying: error))
        case .success(var connected):
            let loop = context.loop
            switch await ProxyTunnel.open(connected.stream, through: proxy, to: endpoint, timeout: context.remaining, on: loop, isolation: isolation) {
            case .failure(let error):
                return .failure(error)
            case .success(let tunnel):
                connected.stream = tunnel
                connected.report.endpoint = endpoint
                connected.report.connectTime = MonotonicTime.duration(nanoseconds: loop.now &- context.began)
                return .success(connected)
            }
        }
    }
}

extension StreamListener {
    /// This listener with WebSocket over each stream it accepts (a port of its own).
    ///
    /// - Parameter options: The server's side of the upgrade and its bounds.
    /// - Returns: The layered listener.
    func carryingWebSocket(_ options: WebSocketLayerOptions) -> any StreamListener {
        LayeringListener(over: self) { WebSocketStream(below: $0, options: options) }
    }

    /// This listener with a sniffer over each stream it accepts: Tether frames or a
    /// WebSocket upgrade, by the first bytes (a port shared with WebSocket).
    ///
    /// - Parameter options: The server's side of the upgrade and its bounds.
    /// - Returns: The layered listener.
    func sniffingWebSocket(_ options: WebSocketLayerOptions) -> any StreamListener {
        LayeringListener(over: self) { SniffedStream(below: $0, options: options) }
    }
}
