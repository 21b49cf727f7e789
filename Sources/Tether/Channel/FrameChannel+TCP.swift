/// What a channel is made over: a connected socket, or one end of an in-memory link.
enum ChannelBase: Sendable {
    case socket(SocketBox)
    case memory(InMemoryTransport)
    /// A connected socket that carries WebSocket, set up by the options.
    case webSocket(SocketBox, WebSocketLayerOptions)
    /// A connected socket accepted on a server's main port shared with WebSocket: its first
    /// bytes (after TLS, when the settings have it) decide between Tether frames and a
    /// WebSocket upgrade answered with the options (``ProtocolSniffer``).
    case sniffed(SocketBox, WebSocketLayerOptions)

    /// Whether it carries WebSocket.
    var isWebSocket: Bool {
        if case .webSocket = self { return true }
        return false
    }
}

extension FrameChannel {
    /// A channel over `base`: a socket as ``overTCP(_:to:on:owner:settings:serverName:)``
    /// makes it, or an in-memory end, with TLS layered on either when `settings` say so.
    ///
    /// - Parameters:
    ///   - base: The connected socket or in-memory end; the channel owns it.
    ///   - remoteAddress: The peer's address.
    ///   - loop: The loop that drives it; the caller is on its thread.
    ///   - owner: Hears frames and events.
    ///   - settings: Shared by the channels of one client or server.
    ///   - serverName: The host a client expects the certificate to name; `nil` on a server.
    /// - Returns: The started channel.
    /// - Throws: ``TetherError`` when the TLS session cannot be made or the transport
    ///   cannot start; the base is closed then.
    static func over(
        _ base: ChannelBase,
        to remoteAddress: SocketAddress,
        on loop: EventLoop,
        owner: Owner,
        settings: ChannelSettings,
        serverName: String?
    ) throws(TetherError) -> FrameChannel {
        switch base {
        case .socket(let box):
            return try overTCP(box.take(), to: remoteAddress, on: loop, owner: owner, settings: settings, serverName: serverName)
        case .webSocket(let box, let options):
            // TCP, then TLS when the settings have it (wss://), then WebSocket.
            let below = try securedTCP(box.take(), to: remoteAddress, on: loop, settings: settings, serverName: serverName, sealedWithoutTLS: true)
            let transport = WebSocketTransport(over: below, options: options, loop: loop)
            return try started(over: transport, on: loop, owner: owner, settings: settings)
        case .sniffed(let box, let options):
            // TCP, then TLS when the settings have it, then the first bytes decide.
            let below = try securedTCP(box.take(), to: remoteAddress, on: loop, settings: settings, serverName: serverName, sealedWithoutTLS: false)
            let transport = ProtocolSniffer(over: below, webSocket: options, loop: loop)
            return try started(over: transport, on: loop, owner: owner, settings: settings)
        case .memory(let end):
            let transport: any ByteTransport
            if let tls = settings.tls {
                do throws(TetherError) {
                    let session = try tls.provider.makeSession(host: serverName, remoteAddress: remoteAddress)
                    transport = TLSTransport(over: end, session: session, loop: loop)
                } catch {
                    end.close()
                    throw error
                }
            } else {
                transport = end
            }
            return try started(over: transport, on: loop, owner: owner, settings: settings)
        }
    }

    /// A channel over `transport` with the codec of the settings' profile, started.
    private static func started(
        over transport: any ByteTransport,
        on loop: EventLoop,
        owner: Owner,
        settings: ChannelSettings
    ) throws(TetherError) -> FrameChannel {
        guard let profile = settings.profile else { preconditionFailure("a channel needs settings made with a profile") }
        let channel = FrameChannel(
            transport: transport,
            loop: loop,
            codec: profile.makeCodec(settings.limits.maximumPayloadLength),
            settings: settings
        )
        try channel.start(owner: owner, tlsHandshakeTimeout: settings.tls?.handshakeTimeout)
        return channel
    }

    /// A TCP transport over `socket`, with TLS over it when the settings have it: what a
    /// WebSocket layer or a protocol sniffer goes over.
    ///
    /// - Parameters:
    ///   - socket: The connected socket; closed when the TLS session cannot be made.
    ///   - remoteAddress: The peer's address.
    ///   - loop: The loop that drives it.
    ///   - settings: `TCP_NODELAY` and TLS.
    ///   - serverName: The host a client expects the certificate to name; `nil` on a server.
    ///   - sealedWithoutTLS: Whether a socket without TLS lends the loop's second read
    ///     buffer (under a WebSocket layer) rather than the plain one (under a sniffer,
    ///     which may hand the socket to frames directly).
    /// - Returns: The transport, not started.
    /// - Throws: ``TetherError`` when the TLS session cannot be made.
    private static func securedTCP(
        _ socket: consuming Socket,
        to remoteAddress: SocketAddress,
        on loop: EventLoop,
        settings: ChannelSettings,
        serverName: String?,
        sealedWithoutTLS: Bool
    ) throws(TetherError) -> any ByteTransport {
        var session: (any TLSSession)?
        if let tls = settings.tls {
            // On failure the socket, dropped, closes.
            session = try tls.provider.makeSession(host: serverName, remoteAddress: remoteAddress)
        }
        let tcp = TCPTransport(socket: socket, remoteAddress: remoteAddress, loop: loop, noDelay: settings.noDelay, sealed: session != nil || sealedWithoutTLS)
        return session.map { TLSTransport(over: tcp, session: $0, loop: loop) } ?? tcp
    }

    /// A channel over a connected TCP socket, with TLS layered on it when `tls` is set,
    /// started and owned by `owner`.
    ///
    /// - Parameters:
    ///   - socket: The connected socket; the channel owns it, and closes it on failure.
    ///   - remoteAddress: The peer's address.
    ///   - loop: The loop that drives it; the caller is on its thread.
    ///   - owner: Hears frames and events.
    ///   - settings: Role, profile, limits, `TCP_NODELAY`, TLS and drain timeout, shared by
    ///     the channels of one client or server.
    ///   - serverName: The host a client expects the certificate to name; `nil` on a server.
    /// - Returns: The started channel.
    /// - Throws: ``TetherError`` when the TLS session cannot be made or the socket cannot
    ///   be watched; the socket is closed then.
    static func overTCP(
        _ socket: consuming Socket,
        to remoteAddress: SocketAddress,
        on loop: EventLoop,
        owner: Owner,
        settings: ChannelSettings,
        serverName: String?
    ) throws(TetherError) -> FrameChannel {
        let transport = try securedTCP(socket, to: remoteAddress, on: loop, settings: settings, serverName: serverName, sealedWithoutTLS: false)
        return try started(over: transport, on: loop, owner: owner, settings: settings)
    }
}
