// How a framed channel explains bytes it cannot use: the peer's address always, and what
// the bytes are when they belong to HTTP or TLS.

extension FrameChannel {
    /// The error for a decode failure, with the inbound bytes from the failing frame on:
    /// the codec's error with the peer's address, or, for bytes of HTTP or TLS, a
    /// ``TetherError/Code/protocolError`` that says what they are. A server also answers an
    /// HTTP request with a `400` that says what the port speaks, written to the outbound
    /// buffer for a graceful close to flush.
    ///
    /// - Parameters:
    ///   - error: What the codec (or the owner, for a frame it cannot use) threw.
    ///   - underlying: The cause to keep when the bytes are not recognised; `error` if `nil`.
    /// - Returns: The error, and whether an answer waits to be flushed.
    func undecodable(_ error: TetherError, underlying: TetherError? = nil) -> (error: TetherError, answered: Bool) {
        let bytes = buffers.inbound.readableBytesView
        let peer = remoteAddress.description
        let secured = isSecured
        let reason = TetherError.decoding(error, bytes: bytes, peer: remoteAddress, underlying: underlying) { [role, profileName] foreign in
            switch role {
            case .client: foreign.clientExplanation(peer: peer, profile: profileName, secured: secured)
            case .server: foreign.serverExplanation(peer: peer, profile: profileName, secured: secured)
            }
        }
        guard role == .server, transport.isOpen, case .httpRequest = ForeignProtocol.recognize(bytes) else { return (reason, false) }
        buffers.outbound.writeBytes(ForeignProtocol.httpAnswer(profile: profileName))
        return (reason, true)
    }

    /// Whether the inbound bytes belong to another protocol (HTTP, TLS): their sender would
    /// not read a Tether frame.
    var holdsForeignBytes: Bool { ForeignProtocol.recognize(buffers.inbound.readableBytesView) != nil }

    /// Whether a ``CloseNotice`` can go out on this channel: `profile` carries it, the TLS
    /// handshake (if any) is done, and a main port shared with WebSocket knows which of the
    /// two it serves.
    ///
    /// - Parameter profile: The server's profile; `nil` for a channel with a codec of its own.
    /// - Returns: Whether the client can be told why the server closes.
    func canWriteCloseNotice(in profile: Profile?) -> Bool {
        guard isOpen, let profile, CloseNotice.carried(by: profile) else { return false }
        if let security = transport.security, !security.isEstablished { return false }
        return !(transport is ProtocolSniffer)
    }

    /// On a server, for bytes of the peer that do not decode: writes the ``CloseNotice``
    /// that tells a Tether client why it is closed, when the channel can carry one and the
    /// bytes are not another protocol's.
    ///
    /// - Parameter reason: The decode failure.
    /// - Returns: Whether the notice waits to be flushed.
    func writeCloseNotice(for reason: TetherError) -> Bool {
        guard role == .server, canWriteCloseNotice(in: settings.profile), !holdsForeignBytes else { return false }
        return (try? write(CloseNotice(reason).frame)) != nil
    }

    /// `error` as a protocol failure of the peer: its message ends with the peer's address.
    ///
    /// - Parameter error: What the peer did wrong.
    /// - Returns: The error to end the connection with.
    func fromPeer(_ error: TetherError) -> TetherError {
        TetherError(code: error.code, message: "\(error.message) from \(remoteAddress)", underlying: error)
    }
}

extension TetherError {
    /// The error of a decode failure on a connection's socket: the codec's error with the
    /// peer's address, or, when the offending bytes belong to HTTP or TLS, a
    /// ``TetherError/Code/protocolError`` that says so, with the codec's error underneath.
    ///
    /// - Parameters:
    ///   - error: What the codec threw.
    ///   - bytes: The bytes from where the failing frame starts.
    ///   - peer: The peer's address.
    ///   - underlying: The cause to keep when the bytes are not recognised; `error` if `nil`.
    ///   - explain: The sentence for a recognised protocol.
    /// - Returns: The error to end the connection with.
    static func decoding(
        _ error: TetherError,
        bytes: ArraySlice<UInt8>,
        peer: TetherSocketAddress,
        underlying: TetherError? = nil,
        explain: (ForeignProtocol) -> String
    ) -> TetherError {
        if let foreign = ForeignProtocol.recognize(bytes) {
            return TetherError(code: .protocolError, message: explain(foreign), underlying: error)
        }
        return TetherError(code: error.code, message: "\(error.message) from \(peer)", underlying: underlying ?? error)
    }
}
