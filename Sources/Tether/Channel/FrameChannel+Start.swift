extension FrameChannel {
    /// A channel over `transport` (the top of a stack a connector or listener made) with the
    /// codec of the settings' profile, started and owned by `owner`.
    ///
    /// - Parameters:
    ///   - transport: The transport, not started; the channel owns it.
    ///   - loop: The loop that drives it; the caller is on its thread.
    ///   - owner: Hears frames and events.
    ///   - settings: Role, profile, limits, TLS handshake bound and drain timeout, shared by
    ///     the channels of one client or server.
    /// - Returns: The started channel.
    /// - Throws: ``TetherError`` when the transport cannot start; it is closed then.
    static func over(
        _ transport: any ByteTransport,
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
}
