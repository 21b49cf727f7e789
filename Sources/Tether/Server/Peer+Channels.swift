// A peer's side of channels: its subscriptions are asked for and ended by requests of the
// channel wire types, checked by the server's authorizer, and answered before the history
// they promise; the hub writes every later message.

extension Peer {
    /// Handles a request of a channel type; whether `frame` was one.
    func channelRequest(_ frame: Frame, hub channels: ChannelHub) -> Bool {
        let types = channels.configuration.wireTypes
        if frame.type == types.subscribe {
            guard let request = SessionWire.decode(ChannelWire.Subscribe.self, from: frame.payload) else {
                respond(.error("malformed channel subscription: expected {\"channel\": …} with \"after\" and \"epoch\", or \"last\""), to: frame)
                return true
            }
            if let authorize = channels.configuration.authorize {
                let subscriber = ChannelSubscriber(channel: request.channel, peer: id, address: remoteAddress, clientID: lifecycle.clientID)
                Task { [self] in
                    do {
                        try await authorize(subscriber)
                    } catch {
                        let reason = (error as? TetherError)?.message ?? String(describing: error)
                        channels.state.withLock { $0.refused += 1 }
                        self.refuseSubscription(frame, "channel \(request.channel): the server refused the subscription: \(reason)")
                        return
                    }
                    self.admit(frame, request, hub: channels)
                }
            } else {
                admit(frame, request, hub: channels)
            }
            return true
        }
        if frame.type == types.unsubscribe {
            guard let request = SessionWire.decode(ChannelWire.Unsubscribe.self, from: frame.payload) else {
                respond(.error("malformed channel unsubscription: expected {\"channel\": …}"), to: frame)
                return true
            }
            channels.unsubscribe(id, from: request.channel)
            respond(Response(payload: SessionWire.encode(request)), to: frame)
            return true
        }
        return false
    }

    private func refuseSubscription(_ frame: Frame, _ reason: String) {
        respond(.error(reason), to: frame)
    }

    /// Subscribes, answers, and writes the history the answer promised, in this one job:
    /// the channel's next message is queued behind it.
    private func admit(_ frame: Frame, _ request: ChannelWire.Subscribe, hub: ChannelHub) {
        guard lifecycle.isOpen, channel != nil else { return }
        switch hub.subscribe(self, request) {
        case .refused(let reason):
            refuseSubscription(frame, reason)
        case .admitted(let answer, let backlog):
            respond(Response(payload: SessionWire.encode(answer)), to: frame)
            for entry in backlog {
                guard writeChannelMessage(entry.encoded) else { break }
            }
        }
    }

    /// Writes a channel's message; `false` when it does not fit (the outbound bound) or
    /// the peer is gone. The client finds the offset it missed and recovers it.
    @discardableResult
    func writeChannelMessage(_ message: EncodedBroadcast) -> Bool {
        writeBroadcast(message)
    }
}
