extension Connection: FrameChannelOwner {
    nonisolated func channelRead(_ channel: Channel) {
        onLoop(loop, self, channel) { (connection: isolated Connection, channel: Channel) in channel.decodeRead(connection) }
    }

    /// Frames wait in the buffer while a subscriber is too far behind: with a session, a
    /// subscriber to notifications past ``SessionConfiguration/maximumPendingPushes``; any
    /// subscriber to frames or notifications past ``Limits/maximumSubscriberBytes``.
    func channelAcceptsFrames(_ channel: Channel) -> Bool {
        !holdsBackFrames
    }

    func channel(_ channel: Channel, received frame: Frame) {
        if frame.type == CloseNotice.frameType, let notice = CloseNotice(frame) {
            // The server closes this connection, or will not serve it, and says why.
            let reason = notice.error(from: channel.remoteAddress.description)
            handle(reason.code == .sessionTakenOver ? .takenOver(reason) : .lost(reason))
            return
        }
        dispatch(frame)
        // Valid, after the handshakes (with a session, the hello's acceptance is the first
        // such frame): a Tether peer answers on this socket.
        if !lifecycle.isHealthy, self.channel === channel, !handshaking { handle(.provedHealthy) }
    }

    func channelDecoded(_ channel: Channel, decoded: Bool, afterRead: Bool) {
        guard self.channel === channel else { return }
        if session != nil { acknowledgeIfDue() }
        regulateReading(channel)
    }

    func channel(_ channel: Channel, closed error: TetherError) {
        guard self.channel === channel else { return }
        connectionLost(error)
    }

    func channel(_ channel: Channel, progress: TransferProgress) {
        if self.channel === channel { transferFeed.publish(progress) }
    }

    func channelSecured(_ channel: Channel) {
        secured(channel)
    }

    func channelWritable(_ channel: Channel) {
        if self.channel === channel { pump() }
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
            if !channelTable.isEmpty, frame.type == configuration.channelWireTypes.message, channelFrame(frame) { return }
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
            if !frame.payload.isEmpty, let notice = DrainNotice(frame) {
                departureAnnounced(notice)
                return
            }
            heartbeatAcked(frame)
        default:
            if let channel {
                connectionLost(channel.fromPeer(
                    TetherError(code: .protocolError, message: "frame type \(hex(frame.type)) is not valid in the \(configuration.profile.name) profile")
                ))
            }
        }
    }
}
