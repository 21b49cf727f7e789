import Synchronization

// Broadcasts: a frame encoded once, written to every peer by one job per event loop.

extension Server {
    /// Pushes a frame to every connected peer.
    ///
    /// A peer counts as connected once the server has accepted it and attached its socket,
    /// which can be a moment after the client's ``Connection/connect(to:configuration:)``
    /// returns. To push to a client as soon as it arrives, wait for its
    /// ``ServerEvent/Kind/peerConnected`` event in ``events``.
    ///
    /// The frame is encoded once, and each event loop writes the same bytes to all of its
    /// peers in one pass; their sockets are written at the end of that loop turn. A peer
    /// gets the frame as ``Peer/push(_:)`` would give it, in the same place among the other
    /// frames written to it: a client that identified with a session gets a notification
    /// with serial 0 (its serials carry its mailbox's sequence). A peer whose bytes waiting
    /// to be written would pass ``Limits/maximumOutboundBytes`` misses the frame and stays
    /// connected, so a client that does not read holds at most that much of the server's
    /// memory however many broadcasts are made; it is not counted in the result. A frame
    /// the profile's codec cannot encode (a payload over ``Limits/maximumPayloadLength``)
    /// reaches no peer.
    ///
    /// When the server is a node of a cluster (``MailboxConfiguration/cluster``), the frame
    /// also goes to the peers of every other node, through the cluster, once this server's
    /// peers have it; if the cluster cannot take it, only this server's peers get it, and
    /// ``ServerMetrics/clusterBroadcastsFailed`` counts it.
    ///
    /// - Parameter frame: The notification to send.
    /// - Returns: How many peers of this server it was queued for.
    @discardableResult
    public func broadcast(_ frame: Frame) async -> Int {
        let delivered = await withUnsafeContinuation { continuation in
            fanOut(frame) { continuation.resume(returning: $0) }
        }
        if let cluster = hub?.cluster {
            do {
                try await cluster.broadcast(frame)
            } catch {
                hub?.state.withLock { $0.metrics.clusterBroadcastsFailed += 1 }
            }
        }
        return delivered
    }

    /// Pushes a frame to every connected peer and returns at once, without waiting for the
    /// event loops to write it.
    ///
    /// It does what ``broadcast(_:)`` does, but does not wait. The frame is encoded once.
    /// Each other event loop gets one job that writes it to all of its peers when that
    /// loop next runs. The peers of the loop the caller runs on are written during the
    /// call.
    ///
    /// Each peer gets the frames of successive calls in the order of the calls, since
    /// every loop runs its jobs in order. A loop writes its sockets at the end of its turn.
    /// So frames queued one after another in a burst usually leave in one system call per
    /// peer, rather than one per frame and peer: this is the fastest way to push many
    /// notifications. ``broadcast(_:)`` instead waits for each frame to be written before
    /// the next call.
    ///
    /// The rules of ``broadcast(_:)`` hold:
    /// - a peer whose outbound bytes would pass ``Limits/maximumOutboundBytes`` misses the
    ///   frame and stays connected;
    /// - a client that identified with a session gets serial 0;
    /// - a frame the codec cannot encode reaches no peer.
    ///
    /// No call waits to learn which peers took the frame.
    ///
    /// On a node of a cluster (``MailboxConfiguration/cluster``), the frames also go to the
    /// cluster, in call order, from a task of ``run()``. At most 4,096 frames wait for the
    /// cluster there. A frame beyond that, or one the cluster refuses, is counted in
    /// ``ServerMetrics/clusterBroadcastsFailed``. A ``broadcast(_:)`` made after them goes
    /// to the cluster at once, so other nodes' peers may get it before them.
    ///
    /// - Parameter frame: The notification to send.
    /// - Returns: The number of peers connected when it was called, which is the number
    ///   the frame was queued for; `0` when the codec cannot encode it.
    @discardableResult
    public func queueBroadcast(_ frame: Frame) -> Int {
        let queued = fanOut(frame, then: nil)
        hub?.queueForCluster(frame)
        return queued
    }

    /// Writes `frame` to every peer: encoded once, then one job per event loop that writes
    /// the bytes to all of that loop's peers. The peers of the loop the caller runs on, if
    /// any, are written at once, after the other loops have their jobs.
    ///
    /// - Parameters:
    ///   - frame: The frame.
    ///   - done: Called once with the number of peers it was written to, when every loop
    ///     has written it; on the last loop's thread, or the caller's. `nil` when no one
    ///     waits, which spares the tally.
    /// - Returns: How many peers it was queued for.
    @discardableResult
    func fanOut(_ frame: Frame, then done: (@Sendable (Int) -> Void)?) -> Int {
        let groups = peersByLoop()
        guard !groups.isEmpty, let encoded = encodeForPeers(frame) else {
            done?(0)
            return 0
        }
        let local = groups.first { $0.loop.inLoop }
        // No tally when no one waits for the count.
        let tally = done.map { FanOutTally(jobs: groups.count, done: $0) }
        for group in groups where group !== local {
            group.loop.execute {
                let written = group.write(encoded)
                tally?.finished(written)
            }
        }
        if let local {
            let written = local.write(encoded)
            tally?.finished(written)
        }
        return groups.reduce(0) { $0 + $1.peers.count }
    }

    /// The peers grouped by event loop, in the order they connected.
    private func peersByLoop() -> [LoopPeers] {
        state.withLock { state in
            if let groups = state.peersByLoop { return groups }
            var loops: [EventLoop] = []
            var members: [ObjectIdentifier: [Peer]] = [:]
            for (_, peer) in state.peers.sorted(by: { $0.key < $1.key }) {
                let key = ObjectIdentifier(peer.loop)
                if members[key] == nil { loops.append(peer.loop) }
                members[key, default: []].append(peer)
            }
            let groups = loops.map { LoopPeers(loop: $0, peers: members[ObjectIdentifier($0)]!) }
            state.peersByLoop = groups
            return groups
        }
    }

    /// The bytes of `frame` for every peer, or `nil` when the codec cannot encode it.
    private func encodeForPeers(_ frame: Frame) -> EncodedBroadcast? {
        guard let bytes = encode(frame) else { return nil }
        var plain: [UInt8]?
        // As Peer.push(_:) sends a notification to a client that identified.
        if hub != nil, frame.serial != 0, configuration.profile.classify(frame.type) == .notification {
            var unsequenced = frame
            unsequenced.serial = 0
            guard let bytes = encode(unsequenced) else { return nil }
            plain = bytes
        }
        return EncodedBroadcast(frame: frame, bytes: bytes, plain: plain)
    }

    private func encode(_ frame: Frame) -> [UInt8]? {
        var buffer = FrameBuffer()
        do {
            try broadcastCodec.encode(frame, into: &buffer)
        } catch {
            return nil
        }
        return Array(buffer.readableBytesView)
    }
}

/// A broadcast's frame as the peers' codec writes it.
final class EncodedBroadcast: Sendable {
    /// The frame, for a peer that sends it in chunks or behind chunks (``FrameChunk``).
    let frame: Frame
    /// The frame as given.
    let bytes: [UInt8]
    /// The frame with serial 0, for clients that identified; `nil` when they get ``bytes``.
    let plain: [UInt8]?
    /// The payload's length, which the outbound bound counts.
    let payloadCount: Int

    init(frame: Frame, bytes: [UInt8], plain: [UInt8]?) {
        self.frame = frame
        self.bytes = bytes
        self.plain = plain
        self.payloadCount = frame.payload.count
    }
}

/// The peers of one event loop, in the order they connected.
final class LoopPeers: Sendable {
    let loop: EventLoop
    let peers: [Peer]

    init(loop: EventLoop, peers: [Peer]) {
        self.loop = loop
        self.peers = peers
    }

    /// Writes the broadcast to each peer; on the loop's thread, in a job of its own.
    ///
    /// - Returns: How many peers took it.
    func write(_ broadcast: EncodedBroadcast) -> Int {
        var written = 0
        for peer in peers {
            let took = callOnLoop(loop, peer, broadcast) { (peer: isolated Peer, broadcast: EncodedBroadcast) in
                peer.writeBroadcast(broadcast)
            }
            if took { written += 1 }
        }
        return written
    }
}

/// Adds up what each loop's job wrote and reports the sum when the last one is done.
final class FanOutTally: Sendable {
    private let remaining: Atomic<Int>
    private let written = Atomic<Int>(0)
    private let done: @Sendable (Int) -> Void

    init(jobs: Int, done: @escaping @Sendable (Int) -> Void) {
        remaining = Atomic(jobs)
        self.done = done
    }

    /// One loop wrote to `count` peers.
    func finished(_ count: Int) {
        written.add(count, ordering: .relaxed)
        // The last job's acquire sees every other job's count.
        guard remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        done(written.load(ordering: .relaxed))
    }
}

extension Peer {
    /// Writes a broadcast's bytes, as ``push(_:)`` writes a frame.
    ///
    /// - Returns: Whether they were written: `false` when the peer is closed or its
    ///   outbound buffer has no room.
    func writeBroadcast(_ broadcast: EncodedBroadcast) -> Bool {
        guard let channel else { return false }
        let plain = lifecycle.hasClientID && broadcast.plain != nil
        do {
            if let sender = channel.chunkSender, channel.waitsForChunks(broadcast.frame, sender) {
                // Large, or a push behind chunks still under way: through the chunk queue.
                var frame = broadcast.frame
                if plain { frame.serial = 0 }
                try channel.write(frame)
            } else {
                try channel.writeEncoded(plain ? broadcast.plain! : broadcast.bytes, payloadCount: broadcast.payloadCount)
            }
        } catch {
            return false
        }
        counts.framesOut += 1
        return true
    }
}
