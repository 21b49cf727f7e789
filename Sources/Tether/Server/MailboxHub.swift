import Synchronization

/// The server side of sessions: orders every mailbox write, and routes each stored push to
/// the peer its client is connected on, if any.
///
/// Appends, resumes and acknowledgements go through one queue, worked off by one task
/// (``run(timersOn:)``) in order, consecutive appends in one store call. That order is what makes
/// delivery exact: a push is written live only after it is stored, a resume is registered
/// at a point in the queue (pushes before it are replayed from the store, pushes after it
/// are written live), and both kinds reach a peer through its event loop, in queue order.
///
/// On a node of a cluster (``MailboxConfiguration/cluster``) a resume is a claim
/// (``SessionCluster/claim(_:limits:now:)``), an ended peer's claim is released in queue
/// order, and pushes stored elsewhere arrive through the ``ClusterNode``: with their content
/// or as a wake-up, handed to the client's peer, which writes them in sequence order and
/// reads from the store what it was not handed.
///
/// Every call to the store goes through ``callStore(_:)``, which runs it on the
/// ``StoreExecutor``'s threads, never on an event loop: peers read their replays through
/// ``messages(for:after:limit:)`` and the server lists clients through ``clientIDs()``.
final class MailboxHub: Sendable {
    typealias Authenticator = @Sendable (ClientHello) async throws -> Void
    typealias OfflineCallback = @Sendable (OfflinePush) async -> Void

    /// A session hello accepted by the authenticator, to register in queue order.
    struct Resume {
        var clientID: String
        var peer: Peer
        var lastSequence: UInt64
        var acknowledged: UInt64
        var helloSerial: UInt32
        /// The epoch of the history `lastSequence` belongs to, when the client knows it.
        var epoch: String? = nil
        /// The hello's place in the order this server read hellos in
        /// (``helloTicket()``): of two connections of one client, the later hello is the
        /// newer connection, whichever claim finishes first.
        var ticket: UInt64 = 0
    }

    enum Operation {
        case append([MailboxMessage.Draft], CheckedContinuation<[UInt64], any Error>)
        case resume(Resume, CheckedContinuation<Void, any Error>)
        case acknowledge(clientID: String, through: UInt64)
        case release(clientID: String, generation: UInt64)
        case expire
    }

    /// What one expiry pass did: the time it judged ages by, and the mailboxes it removed
    /// (or why it failed).
    struct Expiry: Sendable {
        var now: MailboxTime
        var removed: Result<[String], TetherError>
    }

    struct State {
        /// The keyed requests running on this server, by client and key, with the
        /// repeats that wait for them.
        var keyed: [KeyedID: [CheckedContinuation<KeyedOutcome?, Never>]] = [:]
        var queue: [Operation] = []
        var waiter: CheckedContinuation<Void, Never>?
        var running = false
        var stopped = false
        /// The loop whose clock paces the hub's timers, once it runs.
        var timerLoop: EventLoop?
        /// The peer each connected client is on.
        var peers: [String: Peer] = [:]
        /// In a cluster, the generation of the claim each connected client's peer holds:
        /// the newest this node made for the client, whichever of its connections here
        /// the claim was made for.
        var generations: [String: UInt64] = [:]
        /// The hello ticket of the peer each connected client is on.
        var tickets: [String: UInt64] = [:]
        /// The last hello ticket handed out.
        var lastTicket: UInt64 = 0
        /// In a cluster, the clients whose claims are under way here, and the newest claim
        /// by another node heard of meanwhile: a notice can come before its claim is
        /// registered here, and then closes the peer as it registers.
        var claiming: [String: (generation: UInt64, node: String)?] = [:]
        /// Writes a broadcast from another node to the server's peers.
        var localBroadcast: (@Sendable (Frame) -> Void)?
        /// The live pushes on their way to each event loop's peers.
        var outboxes: [ObjectIdentifier: LiveOutbox] = [:]
        var authenticator: Authenticator?
        var offlineCallback: OfflineCallback?
        var metrics = Counts()
    }

    struct Counts {
        var stored = 0
        var offline = 0
        var resumed = 0
        var rejected = 0
        var callbacksDropped = 0
        var mailboxesRemoved = 0
        var clusterBroadcastsFailed = 0
    }

    let configuration: MailboxConfiguration
    /// The cluster this server is a node of, if any.
    let cluster: (any SessionCluster)?
    /// Whether the store works on threads of its own (``SelfThreadedMailboxStore``).
    private let storeHasOwnThreads: Bool
    let state = Lock(State())
    private let offlineFeed: AsyncStream<(OfflineCallback, OfflinePush)>
    private let offlineSink: AsyncStream<(OfflineCallback, OfflinePush)>.Continuation
    /// Each expiry pass, as it ends: the newest few, for whoever watches (tests do).
    let expiries: AsyncStream<Expiry>
    private let expirySink: AsyncStream<Expiry>.Continuation
    /// Frames of ``Server/queueBroadcast(_:)`` on their way to the cluster, in call order.
    private let clusterFeed: AsyncStream<Frame>
    private let clusterSink: AsyncStream<Frame>.Continuation
    /// How many frames of ``Server/queueBroadcast(_:)`` may wait for the cluster; more are
    /// counted in ``ServerMetrics/clusterBroadcastsFailed`` and dropped.
    static let clusterBacklog = 4096
    /// The server's channels, which the cluster's channel notices go to.
    let channels: ChannelHub?
    /// The push receipts not yet settled.
    let receipts = Lock(ReceiptTable())

    init(configuration: MailboxConfiguration, channels: ChannelHub? = nil) {
        self.configuration = configuration
        self.channels = channels
        cluster = configuration.cluster
        storeHasOwnThreads = configuration.store is any SelfThreadedMailboxStore
        (offlineFeed, offlineSink) = AsyncStream.makeStream(
            bufferingPolicy: .bufferingOldest(max(1, configuration.offlineCallbackBufferSize))
        )
        (expiries, expirySink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(8))
        (clusterFeed, clusterSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(Self.clusterBacklog))
    }

    private var store: any MailboxStore { configuration.store }

    // MARK: Calls to the store

    /// Runs `call` with the store on the ``StoreExecutor``, whatever executor the caller
    /// prefers (a peer's task prefers its event loop), and returns to the caller's once it
    /// is done: a store that blocks its thread never blocks a loop. A store that works on
    /// threads of its own, and so blocks no caller, is called directly.
    func callStoreForKeyed<T: Sendable>(_ call: @Sendable (any MailboxStore) async throws -> T) async throws -> T {
        try await callStore(call)
    }

    private func callStore<T: Sendable>(_ call: @Sendable (any MailboxStore) async throws -> T) async throws -> T {
        let store = store
        if storeHasOwnThreads { return try await call(store) }
        return try await withTaskExecutorPreference(configuration.storeExecutor) {
            try await call(store)
        }
    }

    /// The stored pushes of a client after `sequence`, oldest first, at most `limit`:
    /// a page of a peer's replay.
    func messages(for clientID: String, after sequence: UInt64, limit: Int) async throws -> [MailboxMessage] {
        try await callStore { try await $0.messages(for: clientID, after: sequence, limit: limit) }
    }

    /// Every client id the store knows.
    func clientIDs() async throws -> [String] {
        try await callStore { try await $0.clientIDs() }
    }

    // MARK: Requests from the server and its peers

    /// Stores pushes and delivers them; returns their sequences once they are stored.
    func append(_ drafts: [MailboxMessage.Draft]) async throws -> [UInt64] {
        guard !drafts.isEmpty else { return [] }
        return try await withCheckedThrowingContinuation { continuation in
            enqueue(.append(drafts, continuation))
        }
    }

    /// Registers `peer` as where `clientID` is connected, and has the peer begin its
    /// replay from the store, in queue order.
    func resume(_ request: Resume) async throws {
        try await withCheckedThrowingContinuation { continuation in
            enqueue(.resume(request, continuation))
        }
    }

    /// Queues an acknowledgement; once the server has stopped it is dropped, which only
    /// leaves those messages to be replayed again.
    func acknowledge(_ clientID: String, through sequence: UInt64) {
        enqueue(.acknowledge(clientID: clientID, through: sequence))
    }

    /// The next place in the order of hellos: a peer takes one as it reads its hello,
    /// before anything awaits.
    func helloTicket() -> UInt64 {
        state.withLock { state in
            state.lastTicket += 1
            return state.lastTicket
        }
    }

    /// `peer` ended: pushes for its client go to the mailbox only from now on.
    func detach(_ clientID: String, peer: Peer) {
        let released = state.withLock { state -> UInt64? in
            guard state.peers[clientID] === peer else { return nil }
            state.peers.removeValue(forKey: clientID)
            state.tickets.removeValue(forKey: clientID)
            return state.generations.removeValue(forKey: clientID)
        }
        if let released, cluster != nil {
            enqueue(.release(clientID: clientID, generation: released))
        }
    }

    func peer(for clientID: String) -> Peer? {
        state.withLock { $0.peers[clientID] }
    }

    var authenticator: Authenticator? { state.withLock { $0.authenticator } }

    private func enqueue(_ operation: Operation) {
        let outcome = state.withLock { state -> Result<CheckedContinuation<Void, Never>?, TetherError> in
            guard state.running, !state.stopped else {
                return .failure(TetherError(
                    code: .notConnected,
                    message: state.stopped ? "the server has stopped" : "the server is not running; call run() first"
                ))
            }
            state.queue.append(operation)
            defer { state.waiter = nil }
            return .success(state.waiter)
        }
        switch outcome {
        case .success(let waiter):
            waiter?.resume()
        case .failure(let error):
            Self.fail(operation, error)
        }
    }

    private static func fail(_ operation: Operation, _ error: any Error) {
        switch operation {
        case .append(_, let continuation): continuation.resume(throwing: error)
        case .resume(_, let continuation): continuation.resume(throwing: error)
        case .acknowledge, .release, .expire: break
        }
    }

    // MARK: The queue's task

    /// Marks the hub running; call before ``run(timersOn:)`` so pushes made meanwhile queue.
    func start() {
        state.withLock { $0.running = true }
    }

    /// Works off the queue until ``stop()``, then finishes what was queued and returns.
    ///
    /// - Parameter loop: Whose clock and timers pace the expiry passes: one every
    ///   ``MailboxConfiguration/expiryInterval`` of its time.
    /// Hands a frame of ``Server/queueBroadcast(_:)`` to the cluster, after those before it.
    func queueForCluster(_ frame: Frame) {
        if case .dropped = clusterSink.yield(frame) {
            state.withLock { $0.metrics.clusterBroadcastsFailed += 1 }
        }
    }

    func run(timersOn loop: EventLoop) async {
        state.withLock { $0.timerLoop = loop }
        await withDiscardingTaskGroup { group in
            group.addTask { [offlineFeed] in
                for await (callback, push) in offlineFeed { await callback(push) }
            }
            if let cluster {
                group.addTask { [clusterFeed, state] in
                    for await frame in clusterFeed {
                        do {
                            try await cluster.broadcast(frame)
                        } catch {
                            state.withLock { $0.metrics.clusterBroadcastsFailed += 1 }
                        }
                    }
                }
            }
            await withDiscardingTaskGroup { timer in
                if let interval = configuration.expiryInterval {
                    let start = loop.now
                    timer.addTask { [self] in
                        var tick = start
                        while (try? await loop.sleep(until: tick &+ MonotonicTime.nanoseconds(of: interval))) != nil {
                            tick &+= MonotonicTime.nanoseconds(of: interval)
                            enqueue(.expire)
                        }
                    }
                }
                while let batch = await nextBatch() {
                    await process(batch)
                }
                timer.cancelAll()
            }
            offlineSink.finish()
            expirySink.finish()
            clusterSink.finish()
        }
    }

    /// Ends ``run(timersOn:)`` once the queue is empty; later requests fail.
    func stop() {
        dropReceipts("the server stopped before the client acknowledged it")
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.stopped = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    private func nextBatch() async -> [Operation]? {
        while true {
            let taken = state.withLock { state -> [Operation]?? in
                if !state.queue.isEmpty {
                    defer { state.queue.removeAll(keepingCapacity: true) }
                    return .some(state.queue)
                }
                return state.stopped ? .some(nil) : nil
            }
            if let taken { return taken }
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Bool in
                    if !state.queue.isEmpty || state.stopped { return true }
                    state.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        }
    }

    private func process(_ batch: [Operation]) async {
        // Acknowledgements only free space, so they may move past the other operations:
        // the batch's go to the store in one call, after the rest. A push waits behind no
        // acknowledgement, and a database commits them once, not once per client.
        var acknowledged: [String: UInt64] = [:]
        for case .acknowledge(let clientID, let sequence) in batch {
            acknowledged[clientID] = max(acknowledged[clientID] ?? 0, sequence)
        }
        var index = 0
        while index < batch.count {
            switch batch[index] {
            case .append:
                var drafts: [MailboxMessage.Draft] = []
                var waiters: [(CheckedContinuation<[UInt64], any Error>, Int)] = []
                while index < batch.count, case .append(let more, let continuation) = batch[index] {
                    waiters.append((continuation, more.count))
                    drafts += more
                    index += 1
                }
                await store(drafts, waiters)
            case .resume(let request, let continuation):
                index += 1
                await begin(request, continuation)
            case .acknowledge:
                index += 1
            case .release(let clientID, let generation):
                index += 1
                await cluster?.release(clientID, generation: generation)
            case .expire:
                // Passes queued while one ran add nothing: one does for all.
                while index < batch.count, case .expire = batch[index] { index += 1 }
                await expire()
            }
        }
        if !acknowledged.isEmpty {
            settleReceipts(acknowledged)
            // A failed acknowledgement only leaves messages to be replayed again.
            try? await callStore { [acknowledged] in try await $0.acknowledge(acknowledged) }
        }
    }

    /// Drops expired messages and removes idle mailboxes, keeping those of connected clients.
    private func expire() async {
        let connected = state.withLock { Set($0.peers.keys) }
        let now = configuration.clock()
        let removed: Result<[String], TetherError>
        do {
            let limits = configuration.limits
            let clientIDs = try await callStore { try await $0.removeExpired(limits: limits, now: now, keeping: connected) }
            state.withLock { $0.metrics.mailboxesRemoved += clientIDs.count }
            dropReceipts(of: clientIDs, "the client's mailbox was removed as idle before it acknowledged the push")
            removed = .success(clientIDs)
        } catch {
            // A failed pass only leaves the work to the next one.
            removed = .failure(error as? TetherError ?? TetherError(code: .storeFailed, message: "expiring mailboxes failed: \(TetherError.reason(of: error))"))
        }
        expirySink.yield(Expiry(now: now, removed: removed))
    }

    /// Stores the pushes of several callers in one append, then delivers them. When that
    /// append fails and holds more than one caller's pushes, each caller's are tried on their
    /// own, in order, so one caller's failure (a full store, a bad message) is not another's.
    private func store(_ drafts: [MailboxMessage.Draft], _ waiters: [(CheckedContinuation<[UInt64], any Error>, Int)]) async {
        let sequences: [UInt64]
        let (limits, now) = (configuration.limits, configuration.clock())
        do {
            sequences = try await callStore { try await $0.append(drafts, limits: limits, now: now) }
        } catch {
            guard waiters.count == 1 else {
                var start = 0
                for (waiter, count) in waiters {
                    await store(Array(drafts[start..<start + count]), [(waiter, count)])
                    start += count
                }
                return
            }
            let failure: TetherError
            if let error = error as? TetherError, error.code == .mailboxesFull {
                failure = error
            } else {
                failure = TetherError(code: .storeFailed, message: "pushes could not be stored: \(TetherError.reason(of: error))", underlying: error as? TetherError)
            }
            for (waiter, _) in waiters { waiter.resume(throwing: failure) }
            return
        }
        if let cluster {
            await cluster.stored(zip(drafts, sequences).map { draft, sequence in
                MailboxMessage(clientID: draft.clientID, sequence: sequence, type: draft.type, payload: draft.payload, storedAt: now)
            })
        }
        let (peers, callback) = state.withLock { state in
            state.metrics.stored += drafts.count
            return (drafts.map { state.peers[$0.clientID] }, state.offlineCallback)
        }
        var offline = 0
        // Each event loop's outbox writes, in order, every push for the peers on it, a part
        // of them a turn.
        var deliveries: [ObjectIdentifier: [LiveOutbox.Push]] = [:]
        var loops: [EventLoop] = []
        for (position, draft) in drafts.enumerated() {
            let sequence = sequences[position]
            let frame = Frame(type: draft.type, serial: UInt32(truncatingIfNeeded: sequence), payload: draft.payload)
            if let peer = peers[position] {
                let key = ObjectIdentifier(peer.loop)
                if deliveries[key] == nil { loops.append(peer.loop) }
                deliveries[key, default: []].append((peer, frame, sequence, draft.clientID))
            } else {
                offline += 1
                if let callback, case .dropped = offlineSink.yield((callback, OfflinePush(clientID: draft.clientID, sequence: sequence, frame: frame))) {
                    state.withLock { $0.metrics.callbacksDropped += 1 }
                }
            }
        }
        for loop in loops {
            outbox(for: loop).post(deliveries[ObjectIdentifier(loop)]!)
        }
        if offline > 0 { state.withLock { $0.metrics.offline += offline } }
        var start = 0
        for (waiter, count) in waiters {
            waiter.resume(returning: Array(sequences[start..<start + count]))
            start += count
        }
    }

    private func begin(_ request: Resume, _ continuation: CheckedContinuation<Void, any Error>) async {
        let (clientID, peer, helloSerial) = (request.clientID, request.peer, request.helloSerial)
        let summary: MailboxSummary
        var generation: UInt64?
        let (limits, now) = (configuration.limits, configuration.clock())
        do {
            if let cluster {
                state.withLock { $0.claiming[clientID] = .some(nil) }
                do {
                    let claim = try await cluster.claim(clientID, limits: limits, now: now)
                    (summary, generation) = (claim.summary, claim.generation)
                } catch {
                    state.withLock { _ = $0.claiming.removeValue(forKey: clientID) }
                    throw error
                }
            } else {
                summary = try await callStore { try await $0.openMailbox(for: clientID, limits: limits, now: now) }
            }
        } catch let error as TetherError where error.code == .mailboxesFull {
            continuation.resume(throwing: error)
            return
        } catch {
            continuation.resume(throwing: TetherError(code: .storeFailed, message: "the mailbox of \(clientID) could not be opened: \(TetherError.reason(of: error))", underlying: error as? TetherError))
            return
        }
        let plan = ResumePlan(clientSequence: request.lastSequence, clientEpoch: request.epoch, summary: summary)
        let acknowledged = plan.acknowledgement(request.acknowledged, clientSequence: request.lastSequence)
        if acknowledged > 0 { settleReceipts([clientID: acknowledged]) }
        if acknowledged > summary.acknowledged {
            // Only frees space: a failure leaves those messages to be acknowledged later.
            try? await callStore { try await $0.acknowledge(clientID, through: acknowledged) }
        }
        // A connection of the client here whose hello was read after this one's is the
        // newer, unless its client has already closed it and the server has not read the
        // end yet (two hellos back to back on two loops can be read in either order):
        // reading what waits on its socket first ends it then, and this one is kept.
        //
        // The other way round: this hello was read after that of the connection here, but
        // its client may have closed this one already (it was read first, on another loop),
        // and a connection its client closed must not take the client from the one still
        // open. Reading what waits on this socket ends it then.
        let judgedNewer = state.withLock { state -> Peer? in
            guard let current = state.peers[clientID], current !== peer else { return nil }
            return (state.tickets[clientID] ?? 0) > request.ticket ? current : peer
        }
        if let judgedNewer, !judgedNewer.hasEnded { await judgedNewer.readWhatWaits() }
        let outcome = state.withLock { state -> Registration in
            let newer = state.claiming.removeValue(forKey: clientID) ?? nil
            if let generation, let newer, newer.generation > generation {
                // Another node claimed the client after this claim, and said so before it
                // was registered: this peer is already stale (and so is any peer here
                // before it, which the notice closed).
                return .superseded(byNode: newer.node)
            }
            let current = state.peers[clientID].flatMap { $0 === peer ? nil : $0 }
            if let current, peer.hasEnded || (state.tickets[clientID] ?? 0) > request.ticket {
                // Another connection of the client is here, and it is the client's
                // connection now (this one ended, or the other's hello was read later):
                // the claim just made names this node, so the connection that is here
                // holds it. Giving it back would leave that connection with no claim.
                if let generation { state.generations[clientID] = max(state.generations[clientID] ?? 0, generation) }
                return peer.hasEnded ? .dropped : .stale(newer: current.remoteAddress)
            }
            // A peer that ended before this point has already detached: do not attach it.
            guard !peer.hasEnded else { return .unclaimed }
            state.metrics.resumed += 1
            state.peers[clientID] = peer
            state.tickets[clientID] = request.ticket
            if let generation { state.generations[clientID] = max(state.generations[clientID] ?? 0, generation) }
            return .attached(replacing: current)
        }
        switch outcome {
        case .superseded(let node):
            peer.loop.execute {
                peer.assumeIsolated { $0.replaced(clientID: clientID, byNode: node) }
            }
            continuation.resume()
            return
        case .stale(let address):
            peer.loop.execute {
                peer.assumeIsolated { $0.replaced(clientID: clientID, by: address) }
            }
            continuation.resume()
            return
        case .dropped:
            continuation.resume()
            return
        case .unclaimed:
            if let generation, let cluster {
                // Its claim was recorded and no connection of the client is here: give it
                // back, unless a later one replaced it.
                await cluster.release(clientID, generation: generation)
            }
            continuation.resume()
            return
        case .attached(let replaced):
            if let replaced {
                let address = peer.remoteAddress
                replaced.loop.execute {
                    replaced.assumeIsolated { $0.replaced(clientID: clientID, by: address) }
                }
            }
        }
        peer.loop.execute {
            peer.assumeIsolated { $0.beginSession(clientID: clientID, plan: plan, helloSerial: helloSerial, resuming: request.lastSequence > 0) }
        }
        continuation.resume()
    }

    /// What registering a claimed hello came to.
    private enum Registration {
        /// Another node claimed the client after this hello's claim.
        case superseded(byNode: String)
        /// A newer connection of the client is here, from `newer`; this one is closed.
        case stale(newer: TetherSocketAddress)
        /// This peer ended; a newer connection of the client is here and holds the claim.
        case dropped
        /// This peer ended and no connection of the client is here.
        case unclaimed
        /// This peer is the client's connection here now, in place of `replacing`.
        case attached(replacing: Peer?)
    }

    /// The outbox of `loop`'s peers, made on first use.
    func outbox(for loop: EventLoop) -> LiveOutbox {
        state.withLock { state in
            if let outbox = state.outboxes[ObjectIdentifier(loop)] { return outbox }
            let outbox = LiveOutbox(loop: loop)
            state.outboxes[ObjectIdentifier(loop)] = outbox
            return outbox
        }
    }

    func rejected() {
        state.withLock { $0.metrics.rejected += 1 }
    }

    var counts: Counts { state.withLock { $0.metrics } }
}

/// A client's hello, as ``Server/authenticate(_:)`` sees it.
public struct ClientHello: Sendable, Hashable {
    /// The identity the client claims.
    public var clientID: String
    /// Its credential, if it sent one.
    public var token: String?
    /// The last push sequence it says it has.
    public var lastSequence: UInt64
    /// The connection it came on.
    public var peer: PeerID
    /// Where that connection comes from.
    public var address: TetherSocketAddress
}

/// A push stored for a client that is not connected: what ``Server/onOfflinePush(_:)`` gets.
public struct OfflinePush: Sendable, Hashable {
    /// The client it is for.
    public var clientID: String
    /// Its sequence in the client's mailbox.
    public var sequence: UInt64
    /// The push as it will be written when the client comes back.
    public var frame: Frame
}

// MARK: - As a node of a cluster

extension MailboxHub {
    /// Joins the cluster, if the server is a node of one.
    func join() async throws {
        guard let cluster else { return }
        try await cluster.join(ClusterNode(hub: self))
    }

    /// Leaves the cluster, if the server is a node of one.
    func leave() async {
        await cluster?.leave()
    }

    /// Where broadcasts from other nodes go: a write to the server's peers.
    func broadcast(with write: @escaping @Sendable (Frame) -> Void) {
        state.withLock { $0.localBroadcast = write }
    }

    /// The clients held here, with their claims' generations; not those with a claim under
    /// way, which settles their claim as it registers.
    func heldSessions() -> [ClusterSession] {
        state.withLock { state in
            state.generations.compactMap { clientID, generation in
                state.claiming[clientID] == nil ? ClusterSession(clientID: clientID, generation: generation) : nil
            }
        }
    }

    /// The engine claimed `clientID` for this node again, as `generation`, because its
    /// record named no holder or a claim this node's connection does not hold: the
    /// connection here, if any, holds that claim from now on and writes what it missed
    /// through `sequence`. Returns whether there is such a connection.
    func reclaimed(_ clientID: String, generation: UInt64, through sequence: UInt64) -> Bool {
        let peer = state.withLock { state -> Peer? in
            guard let peer = state.peers[clientID], let held = state.generations[clientID] else { return nil }
            state.generations[clientID] = max(held, generation)
            return peer
        }
        guard let peer else { return false }
        peer.loop.execute {
            peer.assumeIsolated { $0.catchUp(through: sequence, for: clientID) }
        }
        return true
    }

    /// A push stored elsewhere for `clientID`: to its peer here, if it has one.
    func deliver(_ frame: Frame, sequence: UInt64, to clientID: String) {
        guard let peer = peer(for: clientID) else { return }
        peer.loop.execute {
            peer.assumeIsolated { $0.deliverSequenced(frame, sequence: sequence, for: clientID) }
        }
    }

    /// Pushes stored elsewhere for `clientID` through `sequence`: its peer here, if any,
    /// reads what it has not written from the store.
    func wake(_ clientID: String, through sequence: UInt64) {
        guard let peer = peer(for: clientID) else { return }
        peer.loop.execute {
            peer.assumeIsolated { $0.catchUp(through: sequence, for: clientID) }
        }
    }

    /// Another node claimed `clientID`: the peer here goes if its claim is older.
    func takenOver(_ clientID: String, generation: UInt64, by node: String) {
        let stale = state.withLock { state -> Peer? in
            if let pending = state.claiming[clientID], (pending?.generation ?? 0) < generation {
                // A claim of this node is under way: its peer is closed as it registers, if
                // its claim is older.
                state.claiming[clientID] = (generation, node)
            }
            guard let held = state.generations[clientID], held < generation, let peer = state.peers[clientID] else { return nil }
            state.peers.removeValue(forKey: clientID)
            state.generations.removeValue(forKey: clientID)
            state.tickets.removeValue(forKey: clientID)
            return peer
        }
        guard let stale else { return }
        stale.loop.execute {
            stale.assumeIsolated { $0.replaced(clientID: clientID, byNode: node) }
        }
    }

    /// A broadcast from another node: to every peer here, as a local broadcast writes it.
    func broadcastLocally(_ frame: Frame) {
        state.withLock { $0.localBroadcast }?(frame)
    }

    /// Closes every session peer here with `reason`; each releases its claim as it ends.
    func closeSessions(reason: String) {
        let peers = state.withLock { Array($0.peers.values) }
        for peer in peers {
            peer.loop.execute {
                peer.assumeIsolated { $0.end(TetherError(code: .connectionClosed, message: reason), graceful: true) }
            }
        }
    }
}

/// The live pushes on their way to the peers of one event loop: written in the order they
/// were stored, at most ``pushesPerTurn`` in one turn of the loop.
///
/// One store call can hold every push queued while the one before it ran (``MailboxHub``
/// stores consecutive appends together), so a batch for one loop has no bound of its own:
/// the store was slow or full for a second at 20,000 pushes a second, and the next batch
/// holds 20,000. Written in one job, they would keep the loop from every other connection
/// on it, heartbeats included, for as long as writing them all takes. Cut into parts with
/// a look at the loop's descriptors and timers between them, a heartbeat waits for one
/// part at most.
final class LiveOutbox: Sendable {
    typealias Push = (peer: Peer, frame: Frame, sequence: UInt64, clientID: String)

    /// The most pushes one turn of the loop writes: 256.
    static let pushesPerTurn = 256

    private struct Queue {
        var pending: [Push] = []
        var head = 0
        /// A job to write the pending pushes is queued on the loop.
        var scheduled = false
        /// The most pushes one turn wrote so far, for tests.
        var largestTurn = 0
        /// How many turns wrote pushes, for tests.
        var turns = 0
    }

    let loop: EventLoop
    private let queue = Lock(Queue())

    init(loop: EventLoop) {
        self.loop = loop
    }

    /// Queues pushes behind those waiting, and has the loop write them.
    func post(_ pushes: [Push]) {
        guard !pushes.isEmpty else { return }
        let schedule = queue.withLock { queue -> Bool in
            queue.pending += pushes
            defer { queue.scheduled = true }
            return !queue.scheduled
        }
        if schedule { loop.execute { [self] in writeTurn() } }
    }

    /// Hands the next part of the pending pushes to their peers; on the loop's thread, in a
    /// job of its own. What is left waits for the next turn.
    private func writeTurn() {
        let (part, more) = queue.withLock { queue -> (ArraySlice<Push>, Bool) in
            let end = min(queue.pending.count, queue.head + Self.pushesPerTurn)
            let part = queue.pending[queue.head..<end]
            queue.head = end
            queue.turns += 1
            queue.largestTurn = max(queue.largestTurn, part.count)
            if queue.head == queue.pending.count {
                queue.pending.removeAll(keepingCapacity: queue.pending.count <= 4 * Self.pushesPerTurn)
                queue.head = 0
                queue.scheduled = false
                return (part, false)
            }
            if queue.head >= 4 * Self.pushesPerTurn, queue.head * 2 >= queue.pending.count {
                queue.pending.removeFirst(queue.head)
                queue.head = 0
            }
            return (part, true)
        }
        for push in part {
            onLoop(loop, push.peer, push) { (peer: isolated Peer, push: Push) in
                peer.deliverSequenced(push.frame, sequence: push.sequence, for: push.clientID)
            }
        }
        if more { loop.executeNextTurn { [self] in writeTurn() } }
    }

    /// The most pushes one turn has written, and in how many turns, for tests.
    var turnsForTesting: (largest: Int, turns: Int) {
        queue.withLock { ($0.largestTurn, $0.turns) }
    }
}
