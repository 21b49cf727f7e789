import Synchronization

/// One accepted connection of a ``Server``.
///
/// Handlers receive the peer so they can push to it or close it. The actor runs on an
/// event loop, like ``Connection``: frames are decoded and heartbeats acked on the loop
/// thread. A handler that never suspends (``Server/ImmediateHandler``) answers right there;
/// the others run as child tasks that prefer the same loop.
public actor Peer {
    /// Identifies the peer within its server.
    public nonisolated let id: PeerID
    /// Where the peer connects from.
    public nonisolated let remoteAddress: TetherSocketAddress
    nonisolated let loop: EventLoop
    /// The server this peer belongs to, for a handler that acts beyond its own peer: to
    /// push to another client (``Server/push(_:toClient:)``) or to all. `nil` once the
    /// server itself is gone. A handler needs no reference of its own to the server (no
    /// `[weak server]` capture).
    public nonisolated weak let server: Server?
    /// The server's configuration, shared by its peers: an idle peer keeps no copy.
    private let sharedConfiguration: SharedServerConfiguration
    /// The server's configuration.
    var configuration: ServerConfiguration {
        @inline(__always) get { sharedConfiguration.value }
    }
    let handlers: HandlerTable
    /// The server's mailboxes, when it has them: sessions are accepted only then.
    let hub: MailboxHub?
    /// The server's channels, when it has them (``ServerConfiguration/channels``).
    let channels: ChannelHub?
    /// Channels whose history is being written to this peer after a subscription, by the
    /// offset to write next; their live messages wait in the history meanwhile.
    var channelReplays: [String: UInt64] = [:]
    /// The task that waits for the outbound buffer to drain before more history is written.
    var channelReplayTask: Task<Void, Never>?
    /// What waits for the outbound buffer to drain, for the channels' history.
    var channelDrainWaiters: [UnsafeContinuation<Void, Never>] = []
    /// Channel requests of this peer waiting for the server's authorizer.
    var channelAuthorizations = 0
    /// Keyed requests of this peer running now (``SessionWireTypes/keyedRequest``).
    var keyedRequests = 0
    /// The accepted stream and the settings of its port, until ``run()`` attaches it.
    private var pending: Server.Accepted?
    /// The framed channel of this peer.
    typealias Channel = FrameChannel<Peer>

    @exclusivity(unchecked) var channel: Channel?
    /// For profiles without serials on the wire: keeps each type's responses in request order.
    @exclusivity(unchecked) private var sequencer = ResponseSequencer()
    /// Where the peer is: its stage, its session's identity and the server's drain. The
    /// handles below belong to the phases that need them, and the machine's actions release
    /// them as the peer leaves those phases.
    @exclusivity(unchecked) var lifecycle = PeerStateMachine()
    /// Why the peer ended, once it has.
    var closeReason: TetherError? { lifecycle.closeReason }
    /// Set once, as the peer ends; read by the mailbox hub from other threads.
    private let ended = Atomic<Bool>(false)
    /// The client identified on this connection, once its hello was accepted.
    var session: PeerSession?
    /// The session's replay and what it waits for; stopped as the session ends.
    var replayHandles = PeerReplay()
    /// The client id of a hello under way or accepted: what to detach at the end.
    var claimedClientID: String? { lifecycle.clientID }
    /// Requests decoded and not yet handed to a handler task, and the run loop waiting for them.
    @exclusivity(unchecked) var inbox: [Frame] = []
    /// The batch being handled; swapped with ``inbox`` so taking a batch copies nothing.
    @exclusivity(unchecked) var batch: [Frame] = []
    /// Unsafe rather than checked (which allocates per wait): it is set and taken only on
    /// this actor, and resumed exactly once by ``deliver(_:)``, ``slotGranted()`` or
    /// ``end(_:graceful:)``.
    var inboxWaiter: UnsafeContinuation<Bool, Never>?
    /// The server's places for suspending handlers, shared by every peer.
    let slots: HandlerSlots
    /// Handler tasks of this peer that have started and not finished.
    var running = 0
    /// Set while the peer waits in ``slots``' queue for a place: its run loop then leaves
    /// ``inbox`` alone.
    var waitingForSlot = false
    /// Places handed to this peer by another's release, not used yet.
    var grantedSlots = 0
    /// Whether the server drains, and how far: see ``drain(_:)``.
    var drainPhase: PeerDrainPhase { lifecycle.drain }
    /// The check that a frame under way is finished in time; the serving stage's.
    var frameWatch = FrameWatch()
    /// The idle check; every open stage's.
    private var idleWatch = IdleWatch()
    /// This peer's counters; the byte counts are taken from the socket when asked for, and
    /// kept here when the peer ends.
    @exclusivity(unchecked) var counts = PeerMetrics()
    /// ``ServerConfiguration/idleTimeout`` in nanoseconds; `nil` when there is none.
    private let idleNanoseconds: UInt64?
    /// Set from the start until the first complete frame: the handshake stage's.
    private var handshakeTimer: LoopTimer?
    /// What the TLS handshake settled, once it has: version, cipher, ALPN and the client's
    /// certificate, when it sent one. `nil` without ``ServerConfiguration/tls``.
    public private(set) var tlsDetails: TLSDetails?

    /// Runs the actor on its event loop.
    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        loop.serialExecutor.asUnownedSerialExecutor()
    }

    init(id: PeerID, accepted: Server.Accepted, loop: EventLoop, server: Server) {
        self.id = id
        self.remoteAddress = accepted.stream.remoteAddress
        self.loop = loop
        self.server = server
        self.sharedConfiguration = server.sharedConfiguration
        self.handlers = server.handlers
        self.slots = server.handlerSlots
        self.hub = server.hub
        self.channels = server.channelHub
        self.pending = accepted
        self.idleNanoseconds = server.configuration.idleTimeout.map { MonotonicTime.nanoseconds(of: $0) }
    }

    /// Whether the peer has ended; safe to read from any thread.
    nonisolated var hasEnded: Bool { ended.load(ordering: .sequentiallyConsistent) }

    /// Serves the peer until its connection closes or the task is cancelled.
    ///
    /// The task lives as long as the connection, and its async frames are what an idle
    /// peer keeps in the task's allocator: everything that does not wait is done by
    /// synchronous functions, so that these frames stay small and fit, with the rest of
    /// the task's records, in the allocator's first block.
    func run() async {
        guard attach() else { return }
        await serve()
        // Serving ends with the connection, or at a drain's deadline once the handlers
        // cancelled then have answered.
        if lifecycle.isOpen { drainEnded() }
        detach()
    }

    /// Makes the channel over the accepted stream and starts the peer's timers; `false`
    /// when the channel could not be made, which is then reported.
    @inline(never)
    private func attach() -> Bool {
        guard let accepted = pending else { return false }
        pending = nil
        do throws(TetherError) {
            channel = try Channel.over(try accepted.stream.makeTransport(on: loop, reading: .plain), on: loop, owner: self, settings: accepted.settings)
        } catch {
            end(error, graceful: false)
            server?.peerDisconnected(self, reason: error, metrics: counts)
            return false
        }
        perform(lifecycle.handle(.attached(handshakeTimeout: configuration.handshakeTimeout != nil)))
        if let order = server?.peerConnected(self) { drain(order) }
        return true
    }

    /// Takes the requests as they come until the connection ends.
    private func serve() async {
        let owner = server
        await withTaskCancellationHandler {
            // Each wake-up takes every request decoded since the last one. A peer whose
            // requests are all answered at once has no task group: the group, with its
            // frame and queue (more than 1 KB), exists only while handler tasks of the peer
            // run.
            while await nextBatch() {
                if batchStartsTasks() {
                    guard await serveWithHandlerTasks() else { return }
                } else {
                    answerBatch()
                    readMoreIfBelowLimit()
                }
            }
        } onCancel: {
            shutdownAfterListener(of: owner)
        }
    }

    /// Starts the batch's handlers in a task group, and keeps serving in it until no
    /// handler task of this peer runs; `false` once the connection has ended.
    ///
    /// A handler starts at once on this actor and, if it never suspends, answers before the
    /// next request is looked at: no job is queued for it.
    ///
    /// Never inlined: its frame holds the group, and is allocated only while it runs.
    @inline(never)
    private func serveWithHandlerTasks() async -> Bool {
        await withDiscardingTaskGroup { tasks in
            repeat {
                startBatch(in: &tasks)
                readMoreIfBelowLimit()
                // The last handler to finish wakes the wait below, and the group ends.
                guard running > 0 else { return true }
            } while await nextBatch()
            // The connection has ended: nobody is left to answer, so handlers still
            // running are cancelled rather than awaited.
            tasks.cancelAll()
            return false
        }
    }

    /// Whether a request of ``batch`` is handled by a task: a session hello, or a request
    /// whose handler suspends.
    @inline(never)
    private func batchStartsTasks() -> Bool {
        batch.contains { frame in
            if let hub, frame.type == hub.configuration.wireTypes.hello { return true }
            guard let entry = handlers.handler(for: frame.type), case .suspending = entry.kind else { return false }
            return true
        }
    }

    /// Answers the requests of ``batch``, all for immediate handlers, in order.
    @inline(never)
    private func answerBatch() {
        for frame in batch {
            // A handler answered just before may have closed the peer.
            guard lifecycle.isOpen else { return }
            if let entry = handlers.handler(for: frame.type), case .immediate(let handler) = entry.kind {
                answer(frame, with: handler)
            }
        }
    }

    /// Cancelled as the server stops: closes after the server's listener has.
    private nonisolated func shutdownAfterListener(of owner: Server?) {
        let close: @Sendable () -> Void = { [self] in loop.execute { [self] in assumeIsolated { $0.shutdown() } } }
        if let owner { owner.whenListenerClosed(close) } else { close() }
    }

    /// Tells the server the peer has ended, and why.
    @inline(never)
    private func detach() {
        server?.peerDisconnected(self, reason: closeReason ?? TetherError(code: .connectionClosed, message: "\(id) closed"), metrics: counts, clientID: session?.clientID)
    }

    /// This peer's counters now. After the peer has ended they stay as they were then.
    public var metrics: PeerMetrics {
        var metrics = counts
        if let channel {
            metrics.bytesIn = channel.bytesRead
            metrics.bytesOut = channel.bytesWritten
        }
        return metrics
    }

    /// Starts a handler for every request of ``batch``, in order.
    ///
    /// Synchronous, so that its locals live on the thread's stack: written inline in the
    /// `run()` loop they made the async frames every idle peer keeps while it waits larger,
    /// and an idle connection cost the server 7.0 KB instead of 4.7 KB.
    ///
    /// Each task takes one of the server's places (``HandlerSlots``) first; when none is
    /// free, the rest of the batch goes back to the front of ``inbox`` and waits for one.
    @inline(never)
    private func startBatch(in tasks: inout DiscardingTaskGroup) {
        for index in batch.indices {
            // A handler started just before may have closed the peer.
            guard lifecycle.isOpen else { return }
            let frame = batch[index]
            if let hub, frame.type == hub.configuration.wireTypes.hello {
                guard takeSlot() else { return requeue(from: index) }
                running += 1
                tasks.addTaskStartingNow { [self] in
                    await hello(frame, hub: hub)
                    handlerFinished()
                }
                continue
            }
            guard let entry = handlers.handler(for: frame.type) else { continue }
            switch entry.kind {
            case .immediate(let handler):
                answer(frame, with: handler)
            case .suspending(let handler):
                guard takeSlot() else { return requeue(from: index) }
                running += 1
                tasks.addTaskStartingNow { [self] in
                    if let response = await Self.invoke(handler, Request(frame: frame), self) {
                        respond(response, to: frame)
                    } else if case .expired = drainPhase {
                        // Cancelled at the drain's deadline: the client hears why.
                        respond(drainExpiredResponse(to: frame), to: frame)
                    }
                    handlerFinished()
                }
            }
        }
    }

    /// Moves the requests that arrived since the last call into ``batch``; `false` once the
    /// connection has ended. The batch is empty when the last handler task finished.
    ///
    /// The checks happen inside the continuation's body, which runs without interruption on
    /// this actor: the `await` before it is a suspension point at which a handler task may
    /// close the peer, so a check made before it could be stale.
    private func nextBatch() async -> Bool {
        batch.removeAll(keepingCapacity: true)
        let open = await withUnsafeContinuation { continuation in
            if (!inbox.isEmpty && !waitingForSlot) || !lifecycle.isOpen || drainPhase.hasExpired {
                continuation.resume(returning: lifecycle.isOpen && !drainPhase.hasExpired)
            } else {
                inboxWaiter = continuation
            }
        }
        guard open else { return false }
        swap(&batch, &inbox)
        return true
    }

    private func deliver(_ frame: Frame) {
        if drainPhase.hasExpired {
            // Past the drain's deadline nothing more starts.
            respond(drainExpiredResponse(to: frame), to: frame)
            return
        }
        inbox.append(frame)
        if !waitingForSlot, let waiter = inboxWaiter {
            inboxWaiter = nil
            waiter.resume(returning: true)
        }
    }

    /// Runs an immediate handler and writes its answer; a thrown error becomes an error
    /// response.
    private func answer(_ frame: Frame, with handler: Server.ImmediateHandler) {
        if let observer = configuration.observer { return answerObserved(frame, with: handler, observer: observer) }
        let response: Response
        do {
            response = try handler(Request(frame: frame), self)
        } catch {
            response = Self.errorResponse(for: error)
        }
        respond(response, to: frame)
    }

    /// Runs a handler; a thrown error becomes an error response, except the cancellation
    /// of a handler whose peer or server is shutting down: that one answers nothing, and the
    /// client sees its request fail with the lost connection rather than a made-up error.
    static func invoke(_ handler: Server.Handler, _ request: Request, _ peer: isolated Peer) async -> Response? {
        if let observer = peer.configuration.observer { return await invokeObserved(handler, request, peer, observer: observer) }
        do {
            return try await handler(request, peer)
        } catch is CancellationError where Task.isCancelled {
            return nil
        } catch {
            return errorResponse(for: error)
        }
    }

    /// The answer for what a handler threw: a ``TetherError``'s message, or the error's
    /// description.
    static func errorResponse(for error: any Error) -> Response {
        .error((error as? TetherError)?.message ?? String(describing: error))
    }

    func respond(_ response: Response, to request: Frame) {
        guard let channel else { return }
        let inOrder = configuration.profile.correlation.key(for: request.type) != nil
        // Declined: nothing goes out, but where replies are matched by order.
        if response.isNoReply, !inOrder { return }
        var fields = response.fields
        if !request.fields.isEmpty {
            fields = configuration.profile.replyFields(request.fields).merging(response.fields) { _, set in set }
        }
        let frame = Frame(
            type: response.type == 0 ? request.type : response.type,
            serial: response.serial == 0 ? request.serial : response.serial,
            payload: response.payload,
            fields: fields
        )
        do {
            guard let key = configuration.profile.correlation.key(for: request.type) else {
                // Answers matched by serial go out as they are ready, with no array to build.
                try write(frame, on: channel)
                counts.requestsHandled += 1
                return
            }
            for frame in sequencer.complete(key: key, number: request.serial, frame: frame) {
                try write(frame, on: channel)
                counts.requestsHandled += 1
            }
        } catch {
            end(error, graceful: false)
        }
    }

    /// Sends a frame to this peer: a push, usually.
    ///
    /// On a peer whose client sent a session hello, the serial of a push carries its
    /// session sequence, so a push sent here (not through the client's mailbox) goes out with
    /// serial 0, which the client delivers as an unsequenced push.
    ///
    /// - Parameter frame: The frame, sent as is but for that serial.
    /// - Throws: ``TetherError`` when the peer is gone or its outbound buffer is full.
    public func push(_ frame: Frame) throws(TetherError) {
        guard let channel else {
            throw TetherError(code: .notConnected, message: "\(id) at \(remoteAddress) is not connected")
        }
        if lifecycle.hasClientID, frame.serial != 0, configuration.profile.classify(frame.type) == .notification {
            var plain = frame
            plain.serial = 0
            try write(plain, on: channel)
            return
        }
        try write(frame, on: channel)
    }

    /// Closes the connection with this peer after flushing what is queued.
    public func close() {
        end(TetherError(code: .connectionClosed, message: "server closed the connection with \(remoteAddress)"), graceful: true)
    }

    /// Server shutdown: flush and close.
    func shutdown() {
        end(TetherError(code: .connectionClosed, message: "server shut down"), graceful: true)
    }

    func write(_ frame: Frame, on channel: Channel) throws(TetherError) {
        try channel.write(frame)
        counts.framesOut += 1
    }

    func end(_ reason: TetherError, graceful: Bool) {
        guard lifecycle.isOpen else { return }
        let actions = lifecycle.handle(.ended(reason, graceful: graceful))
        ended.store(true, ordering: .sequentiallyConsistent)
        perform(actions)
    }

    /// Carries out what the lifecycle decided that needs no context of the event's.
    func perform(_ actions: [PeerStateMachine.Action]) {
        for action in actions { perform(action) }
    }

    private func perform(_ action: PeerStateMachine.Action) {
        switch action {
        case .armTimers(let handshake):
            startTimers(handshake: handshake)
        case .cancelHandshakeTimer:
            cancelHandshakeTimer()
        case .publishSessionEnded(let clientID):
            server?.publish(ServerEvent(kind: .sessionEnded, address: remoteAddress, peer: id, reason: closeReason, clientID: clientID))
        case .stopReplay:
            stopReplay()
        case .detach(let clientID):
            hub?.detach(clientID, peer: self)
        case .releaseRequests:
            inbox.removeAll()
            leaveSlotQueue()
            if let waiter = inboxWaiter {
                inboxWaiter = nil
                waiter.resume(returning: false)
            }
        case .cancelTimers(let handshake):
            if let timer = idleWatch.timer {
                loop.cancel(timer)
                idleWatch.timer = nil
            }
            if let timer = frameWatch.timer {
                loop.cancel(timer)
                frameWatch.timer = nil
            }
            assert(handshake || handshakeTimer == nil, "\(id) has a handshake timer after its handshake")
            cancelHandshakeTimer()
        case .closeChannel(let graceful):
            wakeChannelDrainWaiters()
            guard let channel else { return }
            counts.bytesIn = channel.bytesRead
            counts.bytesOut = channel.bytesWritten
            self.channel = nil
            if graceful {
                channel.closeAfterFlush()
            } else {
                channel.close()
            }
        case .extendHandshakeTimer, .closeForHandshakeTimeout, .endUnsniffed, .refuseHello, .countHold, .replayHeld,
             .offerChunks, .publishTakeover, .closeForTakeover, .writeDrainNotice, .endIfIdle, .refuseWaitingRequests,
             .stopHandlers:
            preconditionFailure("\(action) is carried out where its event is fed")
        }
    }

    private func cancelHandshakeTimer() {
        guard let handshakeTimer else { return }
        loop.cancel(handshakeTimer)
        self.handshakeTimer = nil
    }
}

extension Peer: FrameChannelOwner {
    nonisolated func channelRead(_ channel: Channel) {
        onLoop(loop, self, channel) { (peer: isolated Peer, channel: Channel) in channel.decodeRead(peer) }
    }

    func channelSecured(_ channel: Channel) {
        guard self.channel === channel else { return }
        tlsDetails = channel.tlsDetails
        server?.peerSecured(self, details: tlsDetails)
    }

    func channelWritable(_ channel: Channel) {
        guard self.channel === channel else { return }
        wakeChannelDrainWaiters()
        guard let waiter = replayHandles.writableWaiter else { return }
        replayHandles.writableWaiter = nil
        waiter.resume()
    }

    /// Frames are taken while the peer is below ``ServerConfiguration/maximumRequestsPerPeer``;
    /// at the limit the rest waits, and the socket is not read until handlers finish.
    func channelAcceptsFrames(_ channel: Channel) -> Bool {
        !isAtRequestLimit
    }

    func channel(_ channel: Channel, received frame: Frame) {
        dispatch(frame, on: channel)
    }

    /// The channel ended by itself: the peer closed, its bytes did not decode (the channel
    /// flushed the answer to an HTTP request first), or its TLS handshake timed out.
    func channel(_ channel: Channel, closed error: TetherError) {
        guard self.channel === channel else { return }
        end(error, graceful: false)
    }

    func channelDecoded(_ channel: Channel, decoded: Bool, afterRead: Bool) {
        guard self.channel === channel else { return }
        if drainPhase.closesWhenIdle {
            closeIfDrained()
            guard self.channel === channel else { return }
        }
        if afterRead, idleNanoseconds != nil { idleWatch.lastRead = loop.lastWake }
        if lifecycle.awaitsFirstFrame, counts.framesIn > 0 { perform(lifecycle.handle(.frameReceived)) }
        if isAtRequestLimit {
            if !channel.isReadingPaused {
                channel.pauseReading()
                counts.readPauses += 1
            }
            // The server is not reading: time from now on is not the peer's to account for.
            frameWatch.since = nil
            return
        }
        var readAt = loop.lastWake
        if channel.isReadingPaused {
            channel.resumeReading()
            // Bytes held while the server did not read count from now, for both timeouts.
            readAt = loop.now
            if idleNanoseconds != nil { idleWatch.lastRead = readAt }
        }
        trackPartialFrame(in: channel, afterDecoding: decoded, readAt: readAt)
    }

    /// Ends the peer for a frame it must not send, named for what its bytes are: a Tether
    /// client is told why (``CloseNotice``), an HTTP client gets its answer.
    private func fail(_ error: TetherError, on channel: Channel) {
        let (reason, answered) = channel.undecodable(error)
        if !answered, !channel.holdsForeignBytes { return close(for: reason) }
        end(reason, graceful: answered)
    }

    private func dispatch(_ frame: Frame, on channel: Channel) {
        counts.framesIn += 1
        let kind = configuration.profile.classify(frame.type)
        switch kind {
        case .heartbeat:
            do {
                try write(frame, on: channel)
                counts.heartbeatsAcked += 1
            } catch {
                // An ack that does not fit is dropped: the peer's heartbeat misses it.
            }
        case .message, .notification:
            var frame = frame
            if let key = configuration.profile.correlation.key(for: frame.type) {
                // Numbered as they come, so the responses go out in the same order.
                frame.serial = sequencer.assign(key: key)
            }
            if kind == .message, drainPhase.refusesRequests, frame.type != hub?.configuration.wireTypes.acknowledgement {
                // Sent before the client read the drain notice: not run, and said so.
                respond(drainingResponse(to: frame), to: frame)
                return
            }
            if let hub, frame.type == hub.configuration.wireTypes.acknowledgement {
                acknowledged(frame, hub: hub)
            } else if frame.type == hub?.configuration.wireTypes.hello {
                deliver(frame)
            } else if let hub, frame.type == hub.configuration.wireTypes.keyedRequest {
                keyedRequest(frame, hub: hub)
            } else if let channels, channelRequest(frame, hub: channels) {
                // Answered by the channels.
            } else if let entry = handlers.handler(for: frame.type) {
                // An immediate handler answers here unless earlier requests still wait to
                // be started: then it takes its turn after them.
                if inbox.isEmpty, case .immediate(let handler) = entry.kind {
                    answer(frame, with: handler)
                } else {
                    deliver(frame)
                }
            } else {
                respond(.error("unknown type \(hex(frame.type))"), to: frame)
            }
        default:
            fail(TetherError(code: .protocolError, message: "frame type \(hex(frame.type)) is not valid in the \(configuration.profile.name) profile"), on: channel)
        }
    }
}

// MARK: Dead-peer detection

extension Peer: TimerTarget {
    /// The idle check or the handshake timeout fired: `tag` says which.
    nonisolated func timerFired(tag: UInt64, detail: UInt32) {
        assumeIsolated { peer in
            if tag == Self.idleTag {
                peer.idleCheck()
            } else if tag == Self.frameTag {
                peer.frameExpired(extended: detail != 0)
            } else {
                peer.handshakeExpired(windowStartBytes: Int(detail))
            }
        }
    }

    private static let idleTag: UInt64 = 1
    private static let handshakeTag: UInt64 = 2
    static let frameTag: UInt64 = 4

    /// Arms the idle check, and the handshake timeout when `handshake`, as the socket is
    /// attached.
    private func startTimers(handshake: Bool) {
        let now = loop.now
        idleWatch.lastRead = now
        if let idleNanoseconds {
            idleWatch.timer = loop.schedule(at: now &+ idleNanoseconds, target: self, tag: Self.idleTag, detail: 0)
        }
        if handshake, let timeout = configuration.handshakeTimeout {
            handshakeTimer = loop.schedule(at: now &+ MonotonicTime.nanoseconds(of: timeout), target: self, tag: Self.handshakeTag, detail: 0)
        }
    }

    /// Reads do not touch the timer: they only record their time. When the timer fires, a
    /// peer that read since it was armed gets a new one for its last read plus the timeout,
    /// so a busy peer costs one timer per timeout and a quiet one is closed on time.
    private func idleCheck() {
        idleWatch.timer = nil
        guard let channel, let idleNanoseconds else { return }
        // Bytes that arrived after this turn's readiness check are activity too. Reading
        // them stamps the turn's wake, which may be a turn or more before they arrived when
        // the loop runs late: they count from now.
        let readBefore = channel.bytesRead
        channel.readPending()
        guard self.channel === channel else { return }
        if channel.bytesRead != readBefore { idleWatch.lastRead = loop.now }
        if let stalled = stalledWrites(on: channel, within: idleNanoseconds) {
            end(stalled, graceful: false)
            return
        }
        if channel.isReadingPaused {
            // The server stopped reading the peer, which may well be sending: not idle.
            idleWatch.timer = loop.schedule(at: loop.now &+ idleNanoseconds, target: self, tag: Self.idleTag, detail: 0)
            return
        }
        let deadline = idleWatch.lastRead &+ idleNanoseconds
        if deadline > loop.now {
            idleWatch.timer = loop.schedule(at: deadline, target: self, tag: Self.idleTag, detail: 0)
            return
        }
        let timeout = configuration.idleTimeout.map(describe) ?? "its idle timeout"
        close(for: TetherError(
            code: .idleTimeout,
            message: "peer \(channel.remoteAddress) sent nothing for \(timeout)"
        ))
    }

    /// A peer that keeps sending (pings, heartbeats, requests) but takes none of what waits
    /// for it is not idle by its reads, and holds what the server writes for it: it is
    /// closed once it has taken nothing for the idle timeout. Judged at each idle check,
    /// which comes at least once per timeout, so such a peer is closed between one and two
    /// timeouts after it stopped reading. Returns the reason to close, or `nil`.
    private func stalledWrites(on channel: Channel, within timeout: UInt64) -> TetherError? {
        let pending = channel.pendingOutboundBytes
        guard pending > 0 else {
            idleWatch.writesStalledSince = .max
            return nil
        }
        let written = channel.bytesWritten
        guard idleWatch.writesStalledSince != .max, written == idleWatch.writtenAtStall else {
            idleWatch.writesStalledSince = loop.now
            idleWatch.writtenAtStall = written
            return nil
        }
        guard loop.now &- idleWatch.writesStalledSince >= timeout else { return nil }
        let limit = configuration.idleTimeout.map(describe) ?? "its idle timeout"
        return TetherError(
            code: .idleTimeout,
            message: "peer \(channel.remoteAddress) took none of the \(pending) bytes waiting to be written to it for \(limit), though it kept sending"
        )
    }

    /// The handshake timeout fired: closes a peer that has sent no complete frame, unless
    /// its first frame is under way and arrived at ``ServerConfiguration/minimumFrameRate``
    /// or faster since `windowStartBytes` (the socket's bytes read when this timeout's
    /// window began): a large first request on a slow link gets another timeout.
    private func handshakeExpired(windowStartBytes: Int) {
        handshakeTimer = nil
        guard let channel, counts.framesIn == 0 else { return }
        // Bytes that arrived after this turn's readiness check may complete the first frame.
        channel.readPending()
        guard self.channel === channel, counts.framesIn == 0 else { return }
        let sniffer = channel.transport as? ProtocolSniffer
        let timeout = configuration.handshakeTimeout
        let progressing = sniffer == nil && timeout != nil && channel.holdsPartialInput
            && progressing(channel, since: loop.now &- MonotonicTime.nanoseconds(of: timeout ?? .zero), from: windowStartBytes)
        let described = timeout.map(describe) ?? "its handshake timeout"
        for action in lifecycle.handle(.handshakeExpired(sniffing: sniffer != nil, progressing: progressing)) {
            switch action {
            case .extendHandshakeTimer:
                let bytes = UInt32(clamping: channel.bytesRead)
                handshakeTimer = loop.schedule(at: loop.now &+ MonotonicTime.nanoseconds(of: timeout ?? .zero), target: self, tag: Self.handshakeTag, detail: bytes)
            case .endUnsniffed:
                // On a main port shared with WebSocket, still waiting for the first four bytes.
                end(TetherError(
                    code: .handshakeTimeout,
                    message: "peer \(channel.remoteAddress) sent \(sniffer?.bytesWaiting ?? 0) of the 4 bytes that tell Tether frames from a WebSocket upgrade within \(described) of connecting"
                ), graceful: false)
            case .closeForHandshakeTimeout:
                close(for: TetherError(
                    code: .handshakeTimeout,
                    message: "peer \(channel.remoteAddress) sent no complete frame within \(described) of connecting"
                ))
            default:
                perform(action)
            }
        }
    }
}

/// What the idle check of a peer keeps (``ServerConfiguration/idleTimeout``).
struct IdleWatch {
    /// When the socket last read something (monotonic nanoseconds); kept only with an idle
    /// timeout, once per read, not per frame.
    var lastRead: UInt64 = 0
    /// When the idle check first found bytes waiting for the peer that it had taken none of
    /// since (``UInt64/max`` while none wait), and how many bytes the socket had written then.
    var writesStalledSince: UInt64 = .max
    var writtenAtStall = 0
    /// Set while the idle check is scheduled. The loop recycles these timer objects: each is
    /// dropped as soon as it fires or is cancelled.
    var timer: LoopTimer?
}

/// What the frame completion check of a peer keeps (``ServerConfiguration/frameCompletionTimeout``).
struct FrameWatch {
    /// When the first bytes of the frame being received arrived (monotonic nanoseconds);
    /// `nil` between frames and while the socket is not read.
    var since: UInt64?
    /// The socket's bytes read when ``since`` was set: what arrived since is the frame's
    /// progress (``ServerConfiguration/minimumFrameRate``).
    var bytes = 0
    /// Set while the check is scheduled.
    var timer: LoopTimer?
}

/// A session's replay of stored pushes.
struct PeerReplay {
    /// The task replaying, while one runs.
    var task: Task<Void, Never>?
    /// The replay waiting for the outbound buffer to drain.
    var writableWaiter: UnsafeContinuation<Void, Never>?
}
