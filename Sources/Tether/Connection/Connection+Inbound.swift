extension Connection: ChannelDelegate {
    nonisolated func channelRead(_ channel: SocketChannel) {
        assumeIsolated { $0.decodeFrames(from: channel) }
    }

    nonisolated func channelClosed(_ channel: SocketChannel, error: TetherError) {
        assumeIsolated { $0.channelEnded(channel, error: error) }
    }

    private func decodeFrames(from channel: SocketChannel) {
        do {
            while self.channel === channel, let frame = try codec.decode(&channel.inbound) {
                dispatch(frame)
            }
        } catch {
            protocolFailure(error, from: channel)
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
                reason = TetherError(
                    code: truncated.code,
                    message: "\(truncated.message) from \(channel.remoteAddress)",
                    underlying: error
                )
            }
        }
        finish(reason, graceful: false)
    }

    private func protocolFailure(_ error: TetherError, from channel: SocketChannel) {
        finish(TetherError(code: error.code, message: "\(error.message) from \(channel.remoteAddress)", underlying: error), graceful: false)
    }

    private func dispatch(_ frame: Frame) {
        frameFeed.publish(frame)
        switch configuration.profile.classify(frame.type) {
        case .message:
            completeRequest(with: frame)
        case .notification:
            counters.notificationsReceived += 1
            notificationFeed.publish(frame)
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
