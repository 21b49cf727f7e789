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
            let authorize = channels.configuration.authorize
            if authorize == nil, admit(frame, request, hub: channels) { return true }
            // Authorized first, or read from the cluster's engine first: on a task.
            authorizing(frame, request.channel, "subscription", with: authorize) { peer in
                await peer.admitPreparing(frame, request, hub: channels)
            }
            return true
        }
        if frame.type == types.publish {
            guard let (name, content, timeToLive) = ChannelWire.openPublication(frame.payload) else {
                respond(.error("malformed channel publication: expected the channel name's length, the name, then the content"), to: frame)
                return true
            }
            guard let authorize = channels.configuration.authorizePublish else {
                respond(.error("channel \(name): clients may not publish to channels on this server (ChannelConfiguration.authorizePublish)"), to: frame)
                return true
            }
            authorizing(frame, name, "publication", with: authorize) { peer in
                do {
                    let offset = try await channels.publish(content, to: name, timeToLive: timeToLive)
                    peer.respond(Response(payload: SessionWire.encode(ChannelWire.Published(channel: name, offset: offset))), to: frame)
                } catch {
                    peer.respond(.error("channel \(name): \((error as? TetherError)?.message ?? String(describing: error))"), to: frame)
                }
            }
            return true
        }
        if frame.type == types.presence {
            guard let request = SessionWire.decode(ChannelWire.PresenceRequest.self, from: frame.payload) else {
                respond(.error("malformed presence request: expected {\"channel\": …}"), to: frame)
                return true
            }
            guard channels.engine != nil else {
                respond(Response(payload: SessionWire.encode(channels.localPresence(of: request.channel))), to: frame)
                return true
            }
            // In a cluster the engine knows every node's members: on a task.
            authorizing(frame, request.channel, "presence request", with: nil) { peer in
                do throws(TetherError) {
                    peer.respond(Response(payload: SessionWire.encode(try await channels.presence(of: request.channel))), to: frame)
                } catch {
                    peer.respond(.error(error.message), to: frame)
                }
            }
            return true
        }
        if frame.type == types.unsubscribe {
            guard let request = SessionWire.decode(ChannelWire.Unsubscribe.self, from: frame.payload) else {
                respond(.error("malformed channel unsubscription: expected {\"channel\": …}"), to: frame)
                return true
            }
            channels.unsubscribe(id, from: request.channel)
            channelReplays[request.channel] = nil
            respond(Response(payload: SessionWire.encode(request)), to: frame)
            return true
        }
        return false
    }

    /// Asks the server's authorizer about `frame`'s request for `channel`, if it has one,
    /// then, on this peer, carries it out or answers the refusal. At most
    /// ``ServerConfiguration/maximumRequestsPerPeer`` wait for the authorizer or the
    /// cluster's engine at once: past that the request is refused at once, so a peer cannot
    /// pile up authorizations.
    private func authorizing(
        _ frame: Frame,
        _ channel: String,
        _ what: String,
        with authorize: (@Sendable (ChannelAccess) async throws -> Void)?,
        then carryOut: @escaping @Sendable (isolated Peer) async -> Void
    ) {
        let bound = max(1, configuration.maximumRequestsPerPeer)
        guard channelAuthorizations < bound else {
            respond(.error("channel \(channel): \(bound) channel requests of this connection wait for the server's authorizer already, the most it may (ServerConfiguration.maximumRequestsPerPeer)"), to: frame)
            return
        }
        channelAuthorizations += 1
        let access = ChannelAccess(channel: channel, peer: id, address: remoteAddress, clientID: lifecycle.clientID)
        Task { [self] in
            defer { channelAuthorizations -= 1 }
            do {
                try await authorize?(access)
            } catch {
                let reason = (error as? TetherError)?.message ?? String(describing: error)
                respond(.error("channel \(channel): the server refused the \(what): \(reason)"), to: frame)
                return
            }
            await carryOut(self)
        }
    }

    /// Subscribes as ``admit(_:_:hub:)`` does, reading the channel from the cluster's
    /// engine first when this node does not keep it.
    private func admitPreparing(_ frame: Frame, _ request: ChannelWire.Subscribe, hub: ChannelHub) async {
        // A channel read and then let go before the subscription (maximumChannels, with
        // others being made at once) is read again, a few times.
        for _ in 0..<3 {
            if admit(frame, request, hub: hub) { return }
            do {
                try await hub.prepare(request.channel)
            } catch {
                respond(.error(error.message), to: frame)
                return
            }
        }
        respond(.error("channel \(request.channel): the server could not keep it: other channels took its place (ChannelConfiguration.maximumChannels)"), to: frame)
    }

    /// Subscribes, answers, and writes the history the answer promised, from this job on:
    /// the channel's live messages wait in the history until it is written. `false` when
    /// the channel must be read from the cluster's engine first.
    private func admit(_ frame: Frame, _ request: ChannelWire.Subscribe, hub: ChannelHub) -> Bool {
        guard lifecycle.isOpen, channel != nil else { return true }
        switch hub.subscribe(self, request, clientID: lifecycle.clientID) {
        case .notKept:
            return false
        case .refused(let reason):
            respond(.error(reason), to: frame)
        case .admitted(let answer, let backlog):
            respond(Response(payload: SessionWire.encode(answer)), to: frame)
            guard let first = backlog.first else {
                channelReplays[request.channel] = nil
                return true
            }
            channelReplays[request.channel] = first.offset
            writeChannelHistories(hub)
        }
        return true
    }

    /// Writes the history of every channel being replayed, as far as the outbound buffer's
    /// high-water mark allows; past it, waits for the buffer to drain and goes on.
    func writeChannelHistories(_ hub: ChannelHub) {
        let limit = min(configuration.limits.outboundHighWaterMark, configuration.limits.maximumOutboundBytes / 2)
        for name in Array(channelReplays.keys) {
            while let next = channelReplays[name] {
                guard let channel, lifecycle.isOpen else {
                    channelReplays.removeAll()
                    return
                }
                if channel.pendingOutboundBytes > limit {
                    waitToWriteChannelHistories(hub, on: channel)
                    return
                }
                let page = hub.history(of: name, from: next, limit: 64)
                guard let last = page.last else {
                    // Caught up: what comes next is live. (When the history lost what was
                    // next, the client sees the offset jump and asks again.)
                    channelReplays[name] = nil
                    break
                }
                for entry in page where writeHistoryEntry(entry, of: name, hub: hub) == false {
                    // Full after all: the rest waits for the buffer to drain.
                    channelReplays[name] = entry.offset
                    waitToWriteChannelHistories(hub, on: channel)
                    return
                }
                channelReplays[name] = last.offset + 1
            }
        }
    }

    /// Writes a message of the history, or, when its time to live has passed, the expired
    /// mark of its offset; `false` when it does not fit.
    private func writeHistoryEntry(_ entry: ChannelEntry, of name: String, hub: ChannelHub) -> Bool {
        guard hub.hasExpired(entry) else { return writeBroadcast(entry.encoded) }
        guard let channel else { return false }
        let mark = Frame(type: entry.encoded.frame.type, payload: ChannelWire.envelope(channel: name, offset: entry.offset, content: [], expired: true))
        do {
            try write(mark, on: channel)
            return true
        } catch {
            return false
        }
    }

    private func waitToWriteChannelHistories(_ hub: ChannelHub, on channel: Channel) {
        guard channelReplayTask == nil else { return }
        channelReplayTask = Task(executorPreference: loop.taskExecutor) { [self] in
            await drainThenWriteChannelHistories(hub, on: channel)
        }
    }

    private func drainThenWriteChannelHistories(_ hub: ChannelHub, on channel: Channel) async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            // Half of the lower of the two marks: the write that failed did so at the outbound
            // bound, which may be below the high-water mark.
            let threshold = min(configuration.limits.outboundHighWaterMark, configuration.limits.maximumOutboundBytes) / 2
            // Drained already since the task was made, or ended: nothing to wait for.
            guard self.channel === channel, lifecycle.isOpen, channel.pendingOutboundBytes > threshold else {
                continuation.resume()
                return
            }
            channelDrainWaiters.append(continuation)
            channel.writableThreshold = min(channel.writableThreshold ?? .max, threshold)
        }
        channelReplayTask = nil
        guard lifecycle.isOpen else {
            channelReplays.removeAll()
            return
        }
        writeChannelHistories(hub)
    }

    /// Wakes what waits for the outbound buffer to drain: it has, or the peer ends.
    func wakeChannelDrainWaiters() {
        guard !channelDrainWaiters.isEmpty else { return }
        let waiters = channelDrainWaiters
        channelDrainWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    /// Writes a channel's live message, unless the channel's history is being written to
    /// this peer: the message is in it, and comes in its place. A message that does not fit
    /// (the outbound bound) starts that: the history is written from it as the outbound
    /// buffer drains, so a subscriber misses nothing the history still has, even when no
    /// later message would show it the gap.
    func writeChannelMessage(_ live: LiveChannelMessage) {
        if channelReplays[live.channel] != nil { return }
        guard !writeBroadcast(live.message), let channel, lifecycle.isOpen, live.hub.isSubscribed(id, to: live.channel) else { return }
        channelReplays[live.channel] = live.offset
        waitToWriteChannelHistories(live.hub, on: channel)
    }
}
