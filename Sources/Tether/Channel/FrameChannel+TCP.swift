extension FrameChannel {
    /// A channel over a connected TCP socket, with TLS layered on it when `tls` is set,
    /// started and owned by `owner`.
    ///
    /// - Parameters:
    ///   - socket: The connected socket; the channel owns it, and closes it on failure.
    ///   - remoteAddress: The peer's address.
    ///   - loop: The loop that drives it; the caller is on its thread.
    ///   - owner: Hears frames and events.
    ///   - profile: The profile whose codec frames the bytes.
    ///   - settings: Role, profile name, outbound bound and drain timeout, shared by the
    ///     channels of one client or server.
    ///   - limits: The payload bound.
    ///   - noDelay: Whether to set `TCP_NODELAY`.
    ///   - tls: TLS settings, or `nil` for plain TCP.
    ///   - serverName: The host a client expects the certificate to name; `nil` on a server.
    /// - Returns: The started channel.
    /// - Throws: ``TetherError`` when the TLS session cannot be made or the socket cannot
    ///   be watched; the socket is closed then.
    static func overTCP(
        _ socket: consuming Socket,
        remoteAddress: SocketAddress,
        loop: EventLoop,
        owner: Owner,
        profile: Profile,
        settings: ChannelSettings,
        limits: Limits,
        noDelay: Bool,
        tls: TLSConfiguration?,
        serverName: String?
    ) throws(TetherError) -> FrameChannel {
        var session: (any TLSSession)?
        if let tls {
            session = try tls.provider.makeSession(host: serverName, remoteAddress: remoteAddress)
        }
        let tcp = TCPTransport(
            socket: socket,
            remoteAddress: remoteAddress,
            loop: loop,
            noDelay: noDelay,
            sealed: session != nil
        )
        let transport: any ByteTransport = session.map { TLSTransport(over: tcp, session: $0, loop: loop) } ?? tcp
        let channel = FrameChannel(
            transport: transport,
            loop: loop,
            codec: profile.makeCodec(limits.maximumPayloadLength),
            settings: settings
        )
        try channel.start(owner: owner, tlsHandshakeTimeout: tls?.handshakeTimeout)
        return channel
    }
}
