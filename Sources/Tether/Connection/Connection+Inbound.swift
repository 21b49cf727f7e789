extension Connection: ChannelDelegate {
    nonisolated func channelRead(_ channel: SocketChannel) {
        onLoop(loop, self, channel, Connection.decodeFrames)
    }

    nonisolated func channelClosed(_ channel: SocketChannel, error: TetherError) {
        assumeIsolated { $0.channelEnded(channel, error: error) }
    }

    nonisolated func channelSecured(_ channel: SocketChannel) {
        assumeIsolated { $0.secured(channel) }
    }

    nonisolated func channelWritable(_ channel: SocketChannel) {
        onLoop(loop, self, channel, Connection.pumpIfCurrent)
    }

    private static func pumpIfCurrent(_ connection: isolated Connection, _ channel: SocketChannel) {
        if connection.channel === channel { connection.pump() }
    }

    private static func decodeFrames(_ connection: isolated Connection, _ channel: SocketChannel) {
        connection.decodeFrames(from: channel)
    }

    private func decodeFrames(from channel: SocketChannel) {
        do {
            while self.channel === channel, let frame = try codec.decode(&channel.inbound) {
                if !lifecycle.isHealthy, let refusal = ConnectionRefusal(frame) {
                    // The server will not serve this connection (at its connection limit).
                    connectionLost(refusal.error(from: channel.remoteAddress.description))
                    return
                }
                dispatch(frame)
                // Valid, after the handshakes (with a session, the hello's acceptance is the
                // first such frame): a Tether peer answers on this socket.
                if !lifecycle.isHealthy, self.channel === channel, !handshaking { handle(.provedHealthy) }
            }
            if session != nil, self.channel === channel { acknowledgeIfDue() }
        } catch {
            connectionLost(undecodable(error, on: channel))
        }
    }

    /// A decode failure on `channel`, named for what the bytes really are when they are
    /// HTTP or TLS.
    private func undecodable(_ error: TetherError, on channel: SocketChannel, underlying: TetherError? = nil) -> TetherError {
        .decoding(error, bytes: channel.inbound.readableBytesView, peer: channel.remoteAddress, underlying: underlying) { foreign in
            foreign.clientExplanation(peer: channel.remoteAddress.description, profile: configuration.profile.name, secured: channel.tls != nil)
        }
    }

    private func channelEnded(_ channel: SocketChannel, error: TetherError) {
        guard self.channel === channel else { return }
        var reason = error
        if error.code == .peerClosed {
            do {
                while self.channel === channel, let frame = try codec.decodeLast(&channel.inbound) {
                    dispatch(frame)
                }
            } catch let truncated {
                reason = undecodable(truncated, on: channel, underlying: error)
            }
        } else if let foreign = ForeignProtocol.recognize(channel.inbound.readableBytesView) {
            // Reset after an answer in another protocol (a TLS alert, an HTTP error page).
            let explanation = foreign.clientExplanation(
                peer: channel.remoteAddress.description,
                profile: configuration.profile.name,
                secured: channel.tls != nil
            )
            reason = TetherError(code: .protocolError, message: explanation, underlying: error)
        }
        connectionLost(reason)
    }

    private func protocolFailure(_ error: TetherError, from channel: SocketChannel) {
        connectionLost(TetherError(code: error.code, message: "\(error.message) from \(channel.remoteAddress)", underlying: error))
    }

    private func dispatch(_ frame: Frame) {
        counters.framesIn += 1
        frameFeed.publish(frame)
        switch configuration.profile.classify(frame.type) {
        case .message:
            if lifecycle.isGreeting, frame.type == configuration.session?.wireTypes.hello {
                helloAnswered(frame)
                return
            }
            completeRequest(with: frame)
        case .notification:
            counters.notificationsReceived += 1
            guard session != nil else {
                notificationFeed.publish(frame)
                return
            }
            if frame.serial != 0, !lifecycle.isGreeting {
                deliverSequenced(frame)
                return
            }
            // Outside the session. Before the welcome nothing is sequenced: the server wrote
            // the push before it read the hello, so its serial is not a sequence, and it is
            // delivered with serial 0 like every plain push.
            var plain = frame
            plain.serial = 0
            notificationFeed.publish(plain)
        case .heartbeat:
            heartbeatAcked(frame)
        default:
            if let channel {
                protocolFailure(
                    TetherError(code: .protocolError, message: "frame type \(hex(frame.type)) is not valid in the \(configuration.profile.name) profile"),
                    from: channel
                )
            }
        }
    }
}
