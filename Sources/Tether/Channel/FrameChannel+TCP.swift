extension FrameChannel {
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
        guard let profile = settings.profile else { preconditionFailure("a channel over TCP needs settings made with a profile") }
        var session: (any TLSSession)?
        if let tls = settings.tls {
            session = try tls.provider.makeSession(host: serverName, remoteAddress: remoteAddress)
        }
        let tcp = TCPTransport(
            socket: socket,
            remoteAddress: remoteAddress,
            loop: loop,
            noDelay: settings.noDelay,
            sealed: session != nil
        )
        let transport: any ByteTransport = session.map { TLSTransport(over: tcp, session: $0, loop: loop) } ?? tcp
        let channel = FrameChannel(
            transport: transport,
            loop: loop,
            codec: profile.makeCodec(settings.limits.maximumPayloadLength),
            settings: settings
        )
        try channel.start(owner: owner, tlsHandshakeTimeout: settings.tls?.handshakeTimeout)
        return channel
    }
}
