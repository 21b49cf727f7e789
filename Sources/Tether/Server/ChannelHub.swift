// A server's channels: each one's epoch, offsets, bounded history and subscribers, under one
// lock. A message is encoded once, kept once in its channel's history, and handed to each
// subscriber's event loop in one job per loop, queued while the lock is held: every
// subscriber gets a channel's messages in offset order, after the answer to its subscription
// and the history that answer promised.

/// A message of a channel's history: its offset, when it was stored, and its frame encoded
/// once for every subscriber.
struct ChannelEntry: Sendable {
    var offset: UInt64
    var storedAt: MailboxTime
    /// When the message's time to live ends; `nil` for none.
    var expiresAt: MailboxTime?
    var encoded: EncodedBroadcast
    /// The content's bytes, which the history bounds count.
    var size: Int
}

final class ChannelHub: Sendable {
    struct Topic {
        var epoch: String
        var latest: UInt64 = 0
        /// Consecutive offsets, oldest first: a message that could not be kept empties it,
        /// so a recovery never skips one.
        var history: [ChannelEntry] = []
        var historyBytes = 0
        var subscribers: [PeerID: Peer] = [:]
        /// Who each subscriber is, for presence.
        var members: [PeerID: ChannelWire.Member] = [:]
        /// The subscribers that take join and leave events.
        var watchers: Set<PeerID> = []
        /// In a cluster: whether the engine is being read for what comes after ``latest``,
        /// and whether a notice came meanwhile, so it is read again.
        var filling = false
        var refill = false

        /// The first offset the history still has; `latest + 1` when it is empty.
        var firstAvailable: UInt64 { history.first?.offset ?? latest + 1 }
    }

    struct State {
        var topics: [String: Topic] = [:]
        /// The channels each peer is subscribed to.
        var memberships: [PeerID: Set<String>] = [:]
        var historyBytes = 0
        /// In a cluster: the joins and leaves not yet told to the engine, the latest of
        /// each member of each channel, and whether a task is telling it.
        var pendingPresence: [PresenceKey: ChannelPresenceChange] = [:]
        var presenceFlushing = false
    }

    struct PresenceKey: Hashable {
        var channel: String
        var peer: PeerID
    }

    /// What a subscription comes to: the answer and the history to write after it.
    enum Admission {
        case admitted(ChannelWire.Subscribed, backlog: [ChannelEntry])
        case refused(String)
        /// In a cluster: the channel is not kept here yet; ``prepare(_:)`` reads it first.
        case notKept
    }

    let configuration: ChannelConfiguration
    let state = Lock(State())
    private let codec: Lock<any FrameCodec>
    /// The cluster's channels, when the server is a node of a cluster that has them: it
    /// numbers the messages, and this hub keeps what it is told of.
    let engine: (any ChannelEngine)?
    /// The node's name in the cluster, which the names of its members' connections begin with.
    let nodeName: String?

    init(configuration: ChannelConfiguration, codec: any FrameCodec, engine: (any ChannelEngine)? = nil, nodeName: String? = nil) {
        self.configuration = configuration
        self.codec = Lock(codec)
        self.engine = engine
        self.nodeName = engine == nil ? nil : nodeName
    }

    /// What the engine keeps of each channel: what this hub keeps.
    var retention: ChannelRetention {
        ChannelRetention(count: configuration.historySize, age: configuration.historyAge)
    }

    private static func newEpoch() -> String {
        String(UInt64.random(in: 1...UInt64.max), radix: 16)
    }

    // MARK: Subscribing

    /// Subscribes `peer` to the channel of `request` (again, when it is already: a recovery),
    /// and says where its messages start.
    func subscribe(_ peer: Peer, _ request: ChannelWire.Subscribe, clientID: String?) -> Admission {
        if let problem = ChannelWire.nameProblem(request.channel, limit: configuration.maximumNameLength) {
            return .refused(problem)
        }
        if let info = request.info, info.encoded.count > configuration.maximumPresenceInfoBytes {
            return .refused("channel \(request.channel): the subscriber's info of \(info.encoded.count) bytes is more than \(configuration.maximumPresenceInfoBytes) (ChannelConfiguration.maximumPresenceInfoBytes)")
        }
        let now = configuration.clock()
        return state.withLock { state -> Admission in
            let already = state.memberships[peer.id]?.contains(request.channel) ?? false
            if !already, (state.memberships[peer.id]?.count ?? 0) >= configuration.maximumChannelsPerPeer {
                return .refused("channel \(request.channel): this connection is subscribed to \(configuration.maximumChannelsPerPeer) channels already, the most it may (ChannelConfiguration.maximumChannelsPerPeer)")
            }
            if engine != nil, state.topics[request.channel] == nil { return .notKept }
            guard var topic = topic(request.channel, in: &state, now: now) else {
                return .refused("channel \(request.channel): the server has \(configuration.maximumChannels) channels already, the most it keeps (ChannelConfiguration.maximumChannels)")
            }
            if !already, topic.subscribers.count >= configuration.maximumSubscribersPerChannel {
                return .refused("channel \(request.channel) has \(configuration.maximumSubscribersPerChannel) subscribers already, the most it may (ChannelConfiguration.maximumSubscribersPerChannel)")
            }
            Self.expire(&topic, total: &state.historyBytes, now: now, age: configuration.historyAge)
            topic.subscribers[peer.id] = peer
            state.memberships[peer.id, default: []].insert(request.channel)
            if request.presence == true { topic.watchers.insert(peer.id) } else { topic.watchers.remove(peer.id) }
            if !already {
                let connection = nodeName.map { "\($0)/\(peer.id)" } ?? peer.id.description
                let member = ChannelWire.Member(connection: connection, clientID: clientID, info: request.info)
                topic.members[peer.id] = member
                sendPresence(ChannelWire.PresenceChange(joined: member), in: request.channel, of: topic, except: peer.id)
                tellEngine(ChannelPresenceChange(channel: request.channel, member: ChannelMember(member), joined: true), of: peer.id, in: &state)
            }
            let answer = Self.start(of: request, in: topic)
            let backlog = topic.history.filter { $0.offset > answer.after }
            state.topics[request.channel] = topic
            return .admitted(answer, backlog: backlog)
        }
    }

    /// Where the messages of a subscription start, and whether that is where it asked.
    private static func start(of request: ChannelWire.Subscribe, in topic: Topic) -> ChannelWire.Subscribed {
        func answer(after: UInt64, recovered: Bool = true, _ reason: String? = nil) -> ChannelWire.Subscribed {
            ChannelWire.Subscribed(channel: request.channel, epoch: topic.epoch, after: after, recovered: recovered, reason: reason)
        }
        if let after = request.after {
            if let epoch = request.epoch, epoch != topic.epoch {
                return answer(after: topic.latest, recovered: false, "the history of channel \(request.channel) began again (epoch \(epoch) is gone, \(topic.epoch) is current)")
            }
            if after > topic.latest {
                return answer(after: topic.latest, recovered: false, "offset \(after) is past the latest message of channel \(request.channel), \(topic.latest)")
            }
            if after + 1 < topic.firstAvailable {
                return answer(after: topic.latest, recovered: false, "the history of channel \(request.channel) no longer reaches back to offset \(after + 1): it begins at \(topic.firstAvailable)")
            }
            return answer(after: after)
        }
        if let last = request.last, last > 0 {
            let wanted = topic.latest > UInt64(last) ? topic.latest - UInt64(last) : 0
            return answer(after: max(wanted, topic.firstAvailable - 1))
        }
        return answer(after: topic.latest)
    }

    /// Ends `peer`'s subscription to `channel`; whether it had one.
    @discardableResult
    func unsubscribe(_ peer: PeerID, from channel: String) -> Bool {
        state.withLock { state in
            guard state.memberships[peer]?.remove(channel) != nil else { return false }
            if state.memberships[peer]?.isEmpty == true { state.memberships[peer] = nil }
            leave(peer, channel, in: &state)
            return true
        }
    }

    private func leave(_ peer: PeerID, _ channel: String, in state: inout State) {
        guard var topic = state.topics[channel] else { return }
        topic.subscribers[peer] = nil
        topic.watchers.remove(peer)
        if let member = topic.members.removeValue(forKey: peer) {
            sendPresence(ChannelWire.PresenceChange(left: member), in: channel, of: topic, except: peer)
            tellEngine(ChannelPresenceChange(channel: channel, member: ChannelMember(member), joined: false), of: peer, in: &state)
        }
        state.topics[channel] = topic
    }

    /// In a cluster: queues a join or leave for the engine, replacing the one of the same
    /// member of the channel not yet told; called with the lock held. One task tells the
    /// engine, in batches, while there are changes.
    private func tellEngine(_ change: ChannelPresenceChange, of peer: PeerID, in state: inout State) {
        guard engine != nil else { return }
        state.pendingPresence[PresenceKey(channel: change.channel, peer: peer)] = change
        guard !state.presenceFlushing else { return }
        state.presenceFlushing = true
        Task { await flushPresence() }
    }

    private func flushPresence() async {
        guard let engine else { return }
        var failures = 0
        while true {
            let batch = state.withLock { state -> [PresenceKey: ChannelPresenceChange]? in
                guard !state.pendingPresence.isEmpty else {
                    state.presenceFlushing = false
                    return nil
                }
                defer { state.pendingPresence.removeAll() }
                return state.pendingPresence
            }
            guard let batch else { return }
            do {
                try await engine.presenceChanged(Array(batch.values))
                failures = 0
            } catch {
                failures += 1
                // What no newer change replaced is told again, a few times: past that the
                // engine's view of this node waits for the node to join again.
                state.withLock { state in
                    guard failures < 10 else { return }
                    for (key, change) in batch where state.pendingPresence[key] == nil { state.pendingPresence[key] = change }
                }
                try? await Task.sleep(for: .milliseconds(50 << min(failures, 6)))
            }
        }
    }

    /// A join or leave on another node: to the channel's watchers here.
    func remotePresence(_ change: ChannelPresenceChange) {
        let member = ChannelWire.Member(connection: change.member.connection, clientID: change.member.clientID, info: change.member.info)
        state.withLock { state in
            guard let topic = state.topics[change.channel] else { return }
            let event = change.joined ? ChannelWire.PresenceChange(joined: member) : ChannelWire.PresenceChange(left: member)
            sendPresence(event, in: change.channel, of: topic, except: nil)
        }
    }

    /// Who is subscribed to `channel`: every one counted, the first
    /// ``ChannelConfiguration/maximumPresenceMembers`` listed.
    func presence(of channel: String) async throws(TetherError) -> ChannelWire.Presence {
        guard let engine else { return localPresence(of: channel) }
        do {
            let presence = try await engine.presence(of: channel, limit: configuration.maximumPresenceMembers)
            return ChannelWire.Presence(channel: channel, count: presence.count, members: presence.members.map {
                ChannelWire.Member(connection: $0.connection, clientID: $0.clientID, info: $0.info)
            })
        } catch {
            let reason = (error as? TetherError)?.message ?? String(describing: error)
            throw TetherError(code: .storeFailed, message: "channel \(channel): its presence could not be read: \(reason)", underlying: error as? TetherError)
        }
    }

    /// Who is subscribed to `channel` on this server.
    func localPresence(of channel: String) -> ChannelWire.Presence {
        state.withLock { state in
            let members = state.topics[channel]?.members.values.sorted {
                ($0.clientID ?? "", $0.connection) < ($1.clientID ?? "", $1.connection)
            } ?? []
            return ChannelWire.Presence(channel: channel, count: members.count, members: Array(members.prefix(configuration.maximumPresenceMembers)))
        }
    }

    /// Queues a join or leave event for the channel's watchers but `peer`; called with the
    /// lock held, so the events of a channel keep their order. Events are not kept: a
    /// watcher whose outbound bound is full misses it.
    private func sendPresence(_ change: ChannelWire.PresenceChange, in channel: String, of topic: Topic, except peer: PeerID?) {
        let watchers = topic.watchers.filter { $0 != peer }.compactMap { topic.subscribers[$0] }
        guard !watchers.isEmpty else { return }
        let frame = Frame(type: configuration.wireTypes.message, payload: ChannelWire.envelope(channel: channel, offset: 0, content: SessionWire.encode(change), presence: true))
        var buffer = FrameBuffer()
        let encoded = codec.withLock { codec -> Bool in (try? codec.encode(frame, into: &buffer)) != nil }
        guard encoded else { return }
        let message = EncodedBroadcast(frame: frame, bytes: Array(buffer.readableBytesView), plain: nil)
        Self.queue(message, for: watchers) { peer, message in _ = peer.writeBroadcast(message) }
    }

    /// Whether `peer` is subscribed to `channel`.
    func isSubscribed(_ peer: PeerID, to channel: String) -> Bool {
        state.withLock { $0.memberships[peer]?.contains(channel) ?? false }
    }

    /// Ends every subscription of a peer that has gone.
    func leaveAll(_ peer: PeerID) {
        state.withLock { state in
            guard let channels = state.memberships.removeValue(forKey: peer) else { return }
            for channel in channels { leave(peer, channel, in: &state) }
        }
    }

    /// Whether `entry`'s time to live has passed.
    func hasExpired(_ entry: ChannelEntry) -> Bool {
        guard let expiresAt = entry.expiresAt else { return false }
        return expiresAt < configuration.clock() || expiresAt == configuration.clock()
    }

    /// Up to `limit` messages of `channel`'s history from `offset` on.
    func history(of channel: String, from offset: UInt64, limit: Int) -> [ChannelEntry] {
        state.withLock { state in
            guard let topic = state.topics[channel], let first = topic.history.first, offset <= topic.latest else { return [] }
            let start = offset > first.offset ? Int(offset - first.offset) : 0
            guard start < topic.history.count else { return [] }
            return Array(topic.history[start..<min(topic.history.count, start + limit)])
        }
    }

    // MARK: Publishing

    /// Publishes `content` to `channel`: the next offset, kept in the history as far as the
    /// bounds allow, and queued for every subscriber. In a cluster the engine gives the
    /// offset and tells every node; this one writes it at once.
    func publish(_ content: [UInt8], to channel: String, timeToLive: Duration? = nil) async throws(TetherError) -> UInt64 {
        guard let engine else { return try publishHere(content, to: channel, timeToLive: timeToLive) }
        if let problem = ChannelWire.nameProblem(channel, limit: configuration.maximumNameLength) {
            throw TetherError(code: .invalidArgument, message: problem)
        }
        // What cannot be written is not stored.
        _ = try encode(content, channel: channel, offset: 0)
        let now = configuration.clock()
        let record: ChannelRecord
        do {
            record = try await engine.publish(content, to: channel, expiresAt: timeToLive.map { now.adding($0) }, now: now, retention: retention)
        } catch {
            let reason = (error as? TetherError)?.message ?? String(describing: error)
            throw TetherError(code: .storeFailed, message: "channel \(channel): the message could not be stored: \(reason)", underlying: error as? TetherError)
        }
        received(record)
        return record.offset
    }

    /// Publishes on a server that numbers its channels itself.
    private func publishHere(_ content: [UInt8], to channel: String, timeToLive: Duration?) throws(TetherError) -> UInt64 {
        if let problem = ChannelWire.nameProblem(channel, limit: configuration.maximumNameLength) {
            throw TetherError(code: .invalidArgument, message: problem)
        }
        let now = configuration.clock()
        return try state.withLock { state throws(TetherError) -> UInt64 in
            guard var topic = topic(channel, in: &state, now: now) else {
                throw TetherError(code: .invalidArgument, message: "channel \(channel) cannot be made: the server has \(configuration.maximumChannels) channels already, the most it keeps (ChannelConfiguration.maximumChannels)")
            }
            let offset = topic.latest + 1
            let encoded = try encode(content, channel: channel, offset: offset)
            topic.latest = offset
            let entry = ChannelEntry(offset: offset, storedAt: now, expiresAt: timeToLive.map { now.adding($0) }, encoded: encoded, size: content.count)
            add(entry, to: &topic, named: channel, in: &state, now: now)
            state.topics[channel] = topic
            return offset
        }
    }

    /// The message frame of `content` at `offset`, encoded once for every subscriber.
    private func encode(_ content: [UInt8], channel: String, offset: UInt64) throws(TetherError) -> EncodedBroadcast {
        let frame = Frame(type: configuration.wireTypes.message, payload: ChannelWire.envelope(channel: channel, offset: offset, content: content))
        var buffer = FrameBuffer()
        let failure = codec.withLock { codec -> TetherError? in
            do {
                try codec.encode(frame, into: &buffer)
                return nil
            } catch {
                return (error as? TetherError) ?? TetherError(code: .encodingFailed, message: String(describing: error))
            }
        }
        if let failure {
            throw TetherError(code: .invalidArgument, message: "a message for channel \(channel) cannot be encoded: \(failure.message)", underlying: failure)
        }
        return EncodedBroadcast(frame: frame, bytes: Array(buffer.readableBytesView), plain: nil)
    }

    /// Adds the next message to the channel's history, as far as the bounds allow, and
    /// queues it for every subscriber; called with the lock held.
    private func add(_ entry: ChannelEntry, to topic: inout Topic, named channel: String, in state: inout State, now: MailboxTime) {
        Self.expire(&topic, total: &state.historyBytes, now: now, age: configuration.historyAge)
        keep(entry, in: &topic, total: &state.historyBytes)
        Self.send(entry.encoded, channel: channel, offset: entry.offset, hub: self, to: topic.subscribers.values)
    }

    // MARK: In a cluster

    /// How many messages one read of the engine brings at most.
    static let fillPage = 256

    /// Whether this hub must read `channel` from the engine before it can subscribe anyone.
    func needsPreparing(_ channel: String) -> Bool {
        engine != nil && state.withLock { $0.topics[channel] == nil }
    }

    /// Reads `channel` from the engine and keeps it here, unless it is kept already; then
    /// reads again what was published while it was read.
    func prepare(_ channel: String) async throws(TetherError) {
        guard let engine, needsPreparing(channel) else { return }
        let history: ChannelHistory
        do {
            history = try await engine.history(of: channel, after: 0, limit: max(1, configuration.historySize))
        } catch {
            let reason = (error as? TetherError)?.message ?? String(describing: error)
            throw TetherError(code: .storeFailed, message: "channel \(channel): its history could not be read: \(reason)", underlying: error as? TetherError)
        }
        let now = configuration.clock()
        let kept = try state.withLock { state throws(TetherError) -> Bool in
            guard state.topics[channel] == nil else { return false }
            guard var topic = topic(channel, in: &state, now: now, epoch: history.epoch) else {
                throw TetherError(code: .invalidArgument, message: "channel \(channel): the server has \(configuration.maximumChannels) channels already, the most it keeps (ChannelConfiguration.maximumChannels)")
            }
            topic.latest = (history.messages.first?.offset ?? history.latest + 1) - 1
            for record in history.messages where record.offset == topic.latest + 1 {
                take(record, into: &topic, in: &state, now: now)
            }
            topic.latest = max(topic.latest, history.latest)
            topic.filling = true
            state.topics[channel] = topic
            return true
        }
        if kept { startFilling(channel) }
    }

    /// A message the engine stored: written if it is the next; a gap is read from the
    /// engine first; one written already, or of a channel not kept here, is left.
    func received(_ record: ChannelRecord) {
        let now = configuration.clock()
        let fill = state.withLock { state -> Bool in
            guard var topic = state.topics[record.channel] else { return false }
            defer { state.topics[record.channel] = topic }
            if topic.epoch == record.epoch, record.offset <= topic.latest { return false }
            if topic.filling {
                topic.refill = true
                return false
            }
            guard topic.epoch == record.epoch, record.offset == topic.latest + 1 else {
                topic.filling = true
                return true
            }
            take(record, into: &topic, in: &state, now: now)
            return false
        }
        if fill { startFilling(record.channel) }
    }

    /// The engine stored messages of `channel` through `offset`: what this hub does not
    /// have is read.
    func received(channel: String, epoch: String, through offset: UInt64) {
        let fill = state.withLock { state -> Bool in
            guard var topic = state.topics[channel], topic.epoch != epoch || offset > topic.latest else { return false }
            defer { state.topics[channel] = topic }
            if topic.filling {
                topic.refill = true
                return false
            }
            topic.filling = true
            return true
        }
        if fill { startFilling(channel) }
    }

    /// Reads every kept channel again past its latest offset: notices may have been lost.
    func refreshAll() {
        let channels = state.withLock { state -> [String] in
            var started: [String] = []
            for (name, var topic) in state.topics {
                if topic.filling {
                    topic.refill = true
                } else {
                    topic.filling = true
                    started.append(name)
                }
                state.topics[name] = topic
            }
            return started
        }
        for channel in channels { startFilling(channel) }
    }

    /// Adds a record the engine stored as the channel's next message; called with the lock
    /// held. A record this server's codec cannot encode moves the offset on but is not
    /// kept, so a subscriber that misses it is told its recovery failed.
    private func take(_ record: ChannelRecord, into topic: inout Topic, in state: inout State, now: MailboxTime) {
        topic.latest = record.offset
        guard let encoded = try? encode(record.content, channel: record.channel, offset: record.offset) else {
            Self.clear(&topic, total: &state.historyBytes)
            return
        }
        let entry = ChannelEntry(offset: record.offset, storedAt: record.storedAt, expiresAt: record.expiresAt, encoded: encoded, size: record.content.count)
        add(entry, to: &topic, named: record.channel, in: &state, now: now)
    }

    private func startFilling(_ channel: String) {
        Task { await fill(channel) }
    }

    /// Reads from the engine what comes after the channel's latest offset here, page by
    /// page, until nothing more is there and no notice came meanwhile. A read that fails is
    /// tried a few times; then the next notice starts again.
    private func fill(_ channel: String) async {
        guard let engine else { return }
        var failures = 0
        while true {
            let after = state.withLock { state -> UInt64? in
                guard var topic = state.topics[channel] else { return nil }
                topic.refill = false
                state.topics[channel] = topic
                return topic.latest
            }
            guard let after else { return }
            let history: ChannelHistory
            do {
                history = try await engine.history(of: channel, after: after, limit: Self.fillPage)
                failures = 0
            } catch {
                failures += 1
                guard failures < 5 else {
                    state.withLock { state in state.topics[channel]?.filling = false }
                    return
                }
                try? await Task.sleep(for: .milliseconds(50 * failures))
                continue
            }
            guard apply(history, to: channel) else { return }
        }
    }

    /// Adds what the engine read to the channel; whether to read again.
    private func apply(_ history: ChannelHistory, to channel: String) -> Bool {
        let now = configuration.clock()
        return state.withLock { state -> Bool in
            guard var topic = state.topics[channel] else { return false }
            defer { state.topics[channel] = topic }
            if history.epoch != topic.epoch {
                // The channel began again: what this hub kept belongs to the old epoch.
                // Subscribers that come back are told; new ones start from here.
                Self.clear(&topic, total: &state.historyBytes)
                topic.epoch = history.epoch
                topic.latest = history.latest
                topic.filling = false
                return false
            }
            for record in history.messages where record.offset > topic.latest {
                if record.offset != topic.latest + 1 {
                    // The engine no longer has what came between: the history here stays
                    // consecutive, and a subscriber sees the offset jump.
                    Self.clear(&topic, total: &state.historyBytes)
                }
                take(record, into: &topic, in: &state, now: now)
            }
            if history.latest > topic.latest, history.messages.count < Self.fillPage {
                // Stored, but no longer kept by the engine: nothing to write.
                Self.clear(&topic, total: &state.historyBytes)
                topic.latest = history.latest
            }
            let again = topic.refill || history.latest > topic.latest
            if !again { topic.filling = false }
            return again
        }
    }

    /// Keeps `entry` within the history bounds: the channel's oldest messages go first; when
    /// it still does not fit, nothing of the channel's history is kept, so the history
    /// stays consecutive.
    private func keep(_ entry: ChannelEntry, in topic: inout Topic, total: inout Int) {
        func dropOldest() {
            let gone = topic.history.removeFirst()
            topic.historyBytes -= gone.size
            total -= gone.size
        }
        guard configuration.historySize > 0, entry.size <= configuration.maximumHistoryBytesPerChannel else {
            Self.clear(&topic, total: &total)
            return
        }
        while !topic.history.isEmpty,
              topic.history.count >= configuration.historySize
                || topic.historyBytes + entry.size > configuration.maximumHistoryBytesPerChannel
                || total + entry.size > configuration.maximumHistoryBytes {
            dropOldest()
        }
        guard total + entry.size <= configuration.maximumHistoryBytes else {
            Self.clear(&topic, total: &total)
            return
        }
        topic.history.append(entry)
        topic.historyBytes += entry.size
        total += entry.size
    }

    private static func clear(_ topic: inout Topic, total: inout Int) {
        total -= topic.historyBytes
        topic.history.removeAll()
        topic.historyBytes = 0
    }

    /// Drops the messages older than `age`.
    private static func expire(_ topic: inout Topic, total: inout Int, now: MailboxTime, age: Duration?) {
        guard let age, let first = topic.history.first, first.storedAt.adding(age) < now else { return }
        let keep = topic.history.firstIndex { !($0.storedAt.adding(age) < now) } ?? topic.history.endIndex
        let gone = topic.history[..<keep].reduce(0) { $0 + $1.size }
        topic.history.removeFirst(keep)
        topic.historyBytes -= gone
        total -= gone
    }

    /// The channel `name`, made if it is new and there is room: a channel with no
    /// subscriber and nothing left in its history is let go to make it.
    private func topic(_ name: String, in state: inout State, now: MailboxTime, epoch: String? = nil) -> Topic? {
        if let topic = state.topics[name] { return topic }
        if state.topics.count >= configuration.maximumChannels {
            let age = configuration.historyAge
            let idle = state.topics.first { _, topic in
                guard topic.subscribers.isEmpty else { return false }
                guard let last = topic.history.last else { return true }
                return age.map { last.storedAt.adding($0) < now } ?? false
            }
            guard let (idleName, idleTopic) = idle else { return nil }
            state.historyBytes -= idleTopic.historyBytes
            state.topics[idleName] = nil
        }
        return Topic(epoch: epoch ?? Self.newEpoch())
    }

    /// Queues `message` for `subscribers`: one job per event loop, written in the loop's
    /// next turn. Called with the lock held, so every loop gets a channel's messages in
    /// offset order.
    private static func send(_ message: EncodedBroadcast, channel: String, offset: UInt64, hub: ChannelHub, to subscribers: Dictionary<PeerID, Peer>.Values) {
        let live = LiveChannelMessage(message: message, channel: channel, offset: offset, hub: hub)
        queue(live, for: subscribers) { peer, live in peer.writeChannelMessage(live) }
    }

    /// Hands `argument` to `write` on each peer's event loop: one job per loop, in the order
    /// of the calls.
    private static func queue<Argument: Sendable>(
        _ argument: Argument,
        for peers: some Sequence<Peer>,
        _ write: @escaping @Sendable (isolated Peer, Argument) -> Void
    ) {
        var byLoop: [ObjectIdentifier: (EventLoop, [Peer])] = [:]
        for peer in peers {
            byLoop[ObjectIdentifier(peer.loop), default: (peer.loop, [])].1.append(peer)
        }
        for (loop, members) in byLoop.values {
            loop.execute {
                for peer in members { callOnLoop(loop, peer, argument, write) }
            }
        }
    }
}

/// A message on its way to a subscriber's loop: what the peer needs to write it, or to
/// write it from the history later when it does not fit now.
struct LiveChannelMessage: Sendable {
    var message: EncodedBroadcast
    var channel: String
    var offset: UInt64
    var hub: ChannelHub
}
