import Synchronization

// Channel subscriptions of a connection (ServerConfiguration.channels on the server): each
// keeps the epoch and the offset of the last message it delivered, subscribes again on every
// new connection from there, and delivers each offset once, in order, recovering one it
// missed from the channel's history or saying that the history no longer has it.

/// Where a new subscription starts.
public enum ChannelStart: Sendable, Hashable {
    /// With the next message published.
    case now
    /// After the message at `offset` of the channel's history `epoch` (a
    /// ``ChannelMessage``'s), as an app that kept its place asks on its next launch; when
    /// the history no longer reaches back there, or has another epoch, the subscription
    /// starts with a ``ChannelEvent/reset(_:)``. A `nil` epoch takes the offset for one of
    /// the channel's current epoch.
    case after(offset: UInt64, epoch: String?)
    /// With up to `count` of the latest messages still in the channel's history.
    case latest(Int)
}

/// A message of a channel.
public struct ChannelMessage: Sendable, Hashable {
    /// The channel's name.
    public var channel: String
    /// The message's place in the channel: 1, 2, 3, … within an epoch.
    public var offset: UInt64
    /// The history the offset belongs to; a new one begins when the server's channel is
    /// made again (after a restart).
    public var epoch: String
    /// The content, as published.
    public var payload: [UInt8]

    /// The content parsed as JSON, or `nil` when it is not JSON.
    public var json: JSONValue? { try? JSONValue(parsing: payload) }
}

/// The server could not give a subscriber what it missed: the subscription goes on from
/// the channel's latest message.
public struct ChannelReset: Sendable, Hashable {
    /// The channel's name.
    public var channel: String
    /// Why: the history no longer reaches back far enough, or began again.
    public var reason: String
    /// The channel's epoch from now on.
    public var epoch: String
    /// The offset the subscription goes on after.
    public var after: UInt64
}

/// What a channel subscription delivers.
public enum ChannelEvent: Sendable, Hashable {
    /// The channel's next message.
    case message(ChannelMessage)
    /// Messages were lost: the next message is not the one after the last delivered.
    case reset(ChannelReset)
    /// Someone subscribed to the channel; only with `presenceEvents`. Presence events are
    /// not kept in the history: one that comes while the connection is down is not
    /// delivered (ask ``Connection/presence(of:)`` after a reconnect).
    case joined(ChannelMember)
    /// A subscriber left the channel; only with `presenceEvents`.
    case left(ChannelMember)
}

/// The messages of one channel, from ``Connection/subscribe(to:from:info:presenceEvents:)``: an async sequence
/// that ends when the connection closes. Ending the iteration (its task cancelled, or the
/// sequence let go) ends the subscription on the server too.
public struct ChannelSubscription: AsyncSequence, Sendable {
    /// What the subscription delivers: its channel's messages and resets.
    public typealias Element = ChannelEvent
    /// A subscription never throws: it ends when its connection ends.
    public typealias Failure = Never

    /// The channel's name.
    public let channel: String
    private let stream: AsyncStream<ChannelEvent>
    private let gauge: ChannelGauge

    init(channel: String, stream: AsyncStream<ChannelEvent>, gauge: ChannelGauge) {
        self.channel = channel
        self.stream = stream
        self.gauge = gauge
    }

    /// Events dropped because ``ConnectionConfiguration/channelBufferSize`` of them, or
    /// ``Limits/maximumSubscriberBytes`` of their payloads, already waited to be read.
    public var dropped: Int { gauge.dropped }

    /// The iterator.
    ///
    /// - Returns: An iterator over the subscription's events.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator(), gauge: gauge)
    }

    /// Takes the subscription's events one at a time, giving back the bytes each one held.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<ChannelEvent>.AsyncIterator
        let gauge: ChannelGauge

        /// The next event, or `nil` once the subscription has ended.
        ///
        /// - Returns: The event.
        public mutating func next() async -> ChannelEvent? {
            let event = await base.next()
            if let event { gauge.taken(event) }
            return event
        }
    }
}

/// What one channel subscription holds unread, in payload bytes, and what it dropped.
final class ChannelGauge: Sendable {
    private let bytes = Atomic<Int>(0)
    private let drops = Atomic<Int>(0)
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    var dropped: Int { drops.load(ordering: .relaxed) }

    /// Counts `event`'s bytes as held, unless they would pass the limit: then `false`,
    /// and the event is counted as dropped.
    func hold(_ event: ChannelEvent) -> Bool {
        let size = Self.size(of: event)
        let held = bytes.add(size, ordering: .relaxed).newValue
        guard size == 0 || held <= limit || held == size else {
            bytes.subtract(size, ordering: .relaxed)
            drop()
            return false
        }
        return true
    }

    /// `event` was not taken after all (the buffer was full), or has been read.
    func taken(_ event: ChannelEvent) {
        bytes.subtract(Self.size(of: event), ordering: .relaxed)
    }

    func drop() {
        drops.add(1, ordering: .relaxed)
    }

    private static func size(of event: ChannelEvent) -> Int {
        if case .message(let message) = event { return message.payload.count }
        return 0
    }
}

/// One subscription's state, confined to its connection.
final class ClientChannel {
    let name: String
    let continuation: AsyncStream<ChannelEvent>.Continuation
    let gauge: ChannelGauge
    var epoch: String?
    /// The offset of the last message delivered, or asked to start after.
    var last: UInt64?
    /// Counts the subscription requests sent; only the latest one's answer counts.
    var attempt = 0
    /// Whether an answer is awaited: messages wait in ``pending`` until it comes.
    var awaiting = false
    /// Whether the latest request was lost with its connection, so the next one resends it.
    var needsResend = false
    /// How the first request asks to start.
    var start: ChannelStart
    /// What the subscriber tells about itself, and whether it takes presence events.
    var info: JSONValue?
    var presenceEvents = false
    var pending: [(offset: UInt64, payload: [UInt8], expired: Bool)] = []
    /// The payload bytes of ``pending``.
    var pendingBytes = 0
    /// The caller of ``Connection/subscribe(to:from:info:presenceEvents:)`` until the first answer.
    var firstAnswer: CheckedContinuation<Void, any Error>?

    init(name: String, start: ChannelStart, continuation: AsyncStream<ChannelEvent>.Continuation, gauge: ChannelGauge) {
        self.name = name
        self.start = start
        self.continuation = continuation
        self.gauge = gauge
        if case .after(let offset, let epoch) = start {
            last = offset
            self.epoch = epoch
        }
    }

    func yield(_ event: ChannelEvent) {
        guard gauge.hold(event) else { return }
        if case .dropped = continuation.yield(event) {
            gauge.taken(event)
            gauge.drop()
        }
    }
}

extension Connection {
    /// Subscribes to a channel of the server (``ServerConfiguration/channels``) and returns
    /// its messages.
    ///
    /// ```swift
    /// let room = try await connection.subscribe(to: "room-42")
    /// for await event in room {
    ///     if case .message(let message) = event { show(message.payload) }
    /// }
    /// ```
    ///
    /// The subscription lives as long as the connection: on every new connection it
    /// subscribes again after the last message it delivered, and the server writes what it
    /// missed from the channel's history first. Each offset is delivered once, in order. A
    /// message missed on the way (the server's outbound bound) is recovered the same way.
    /// When the history no longer has what was missed, or the server's channel began again,
    /// a ``ChannelEvent/reset(_:)`` says so and the messages go on from the latest.
    ///
    /// - Parameters:
    ///   - channel: The channel's name: 1 to 200 bytes of ASCII letters, digits and
    ///     `- _ . : / @` (``ChannelConfiguration/maximumNameLength``).
    ///   - start: Where to start; with the next message by default.
    ///   - info: What the channel's other members see about this subscriber in its
    ///     presence (``ChannelMember/info``); at most
    ///     ``ChannelConfiguration/maximumPresenceInfoBytes`` as JSON.
    ///   - presenceEvents: Whether to deliver ``ChannelEvent/joined(_:)`` and
    ///     ``ChannelEvent/left(_:)`` when others subscribe and leave. Default `false`.
    /// - Returns: The channel's events.
    /// - Throws: ``TetherError/Code/channelRefused`` when the server refuses (it has no
    ///   channels, a bound, its authorizer), with the channel and the reason;
    ///   ``TetherError/Code/invalidArgument`` for a name that is not a channel name, a
    ///   channel this connection is subscribed to already, or a profile whose types cannot
    ///   carry channels; what a request throws when the connection closes or fails first.
    public func subscribe(to channel: String, from start: ChannelStart = .now, info: JSONValue? = nil, presenceEvents: Bool = false) async throws -> ChannelSubscription {
        if let problem = ChannelWire.nameProblem(channel, limit: ChannelWire.nameLimit) {
            throw TetherError(code: .invalidArgument, message: problem)
        }
        let types = configuration.channelWireTypes
        guard configuration.profile.classify(types.subscribe) == .message, configuration.profile.classify(types.message) == .notification else {
            throw TetherError(code: .invalidArgument, message: "profile \(configuration.profile.name) cannot carry channels: ChannelWireTypes' subscribe type must be a request and its message type a push")
        }
        guard channelTable[channel] == nil else {
            throw TetherError(code: .invalidArgument, message: "this connection is subscribed to channel \(channel) already")
        }
        let gauge = ChannelGauge(limit: configuration.limits.maximumSubscriberBytes)
        let (stream, continuation) = AsyncStream<ChannelEvent>.makeStream(bufferingPolicy: .bufferingOldest(max(1, configuration.channelBufferSize)))
        let entry = ClientChannel(name: channel, start: start, continuation: continuation, gauge: gauge)
        entry.info = info
        entry.presenceEvents = presenceEvents
        channelTable[channel] = entry
        let token = ObjectIdentifier(entry)
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            Task { await self.subscriptionEnded(channel, token) }
        }
        try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<Void, any Error>) in
            entry.firstAnswer = waiter
            sendSubscription(entry)
        }
        return ChannelSubscription(channel: channel, stream: stream, gauge: gauge)
    }

    /// Publishes `content` to a channel of the server, when its
    /// ``ChannelConfiguration/authorizePublish`` lets this client: every subscriber gets it,
    /// as it gets what the server publishes (``Server/publish(_:to:timeToLive:)``).
    ///
    /// - Parameters:
    ///   - content: The message's bytes.
    ///   - channel: The channel's name.
    ///   - timeToLive: How long the message may be delivered: a subscriber that recovers
    ///     it from the history later gets its offset skipped instead; `nil`, the default,
    ///     for as long as the history keeps it.
    /// - Returns: The message's offset in the channel.
    /// - Throws: ``TetherError/Code/channelRefused`` when the server refuses (clients
    ///   may not publish there, its authorizer, a bound), with the channel and the reason;
    ///   ``TetherError/Code/invalidArgument`` for a name that is not a channel name; what
    ///   ``request(_:timeout:)`` throws.
    @discardableResult
    public func publish(_ content: [UInt8], to channel: String, timeToLive: Duration? = nil) async throws -> UInt64 {
        if let problem = ChannelWire.nameProblem(channel, limit: ChannelWire.nameLimit) {
            throw TetherError(code: .invalidArgument, message: problem)
        }
        let request = Request(type: configuration.channelWireTypes.publish, payload: ChannelWire.publication(channel: channel, content: content, timeToLive: timeToLive))
        let response = try await self.request(request)
        if let refusal = response.errorMessage { throw Self.channelRefusal(refusal, of: "publication", to: channel) }
        guard let published = SessionWire.decode(ChannelWire.Published.self, from: response.payload) else {
            throw TetherError(code: .protocolError, message: "the answer to a publication to channel \(channel) is not a channel answer: \(response.text)")
        }
        return published.offset
    }

    /// Who is subscribed to a channel of the server now.
    ///
    /// - Parameter channel: The channel's name.
    /// - Returns: How many subscribers it has, and the first
    ///   ``ChannelConfiguration/maximumPresenceMembers`` of them.
    /// - Throws: ``TetherError/Code/channelRefused`` when the server has no channels;
    ///   ``TetherError/Code/invalidArgument`` for a name that is not a channel name; what
    ///   ``request(_:timeout:)`` throws.
    public func presence(of channel: String) async throws -> ChannelPresence {
        if let problem = ChannelWire.nameProblem(channel, limit: ChannelWire.nameLimit) {
            throw TetherError(code: .invalidArgument, message: problem)
        }
        let response = try await request(Request(type: configuration.channelWireTypes.presence, payload: SessionWire.encode(ChannelWire.PresenceRequest(channel: channel))))
        if let refusal = response.errorMessage { throw Self.channelRefusal(refusal, of: "presence request", to: channel) }
        guard let presence = SessionWire.decode(ChannelWire.Presence.self, from: response.payload) else {
            throw TetherError(code: .protocolError, message: "the answer to the presence request of channel \(channel) is not a presence answer: \(response.text)")
        }
        return ChannelPresence(presence)
    }

    /// The error for a server's refusal of a channel request: its own refusals name the
    /// channel; another answer (a server without channels) is said to be about it.
    private static func channelRefusal(_ refusal: String, of what: String, to channel: String) -> TetherError {
        let message = refusal.hasPrefix("channel \(channel)") ? refusal : "channel \(channel): the server refused the \(what): \(refusal)"
        return TetherError(code: .channelRefused, message: message)
    }

    /// Asks the server for `entry`'s channel from where it stands.
    func sendSubscription(_ entry: ClientChannel) {
        entry.attempt += 1
        entry.awaiting = true
        entry.needsResend = false
        let attempt = entry.attempt
        var body = ChannelWire.Subscribe(channel: entry.name, info: entry.info, presence: entry.presenceEvents ? true : nil)
        if let last = entry.last {
            body.after = last
            body.epoch = entry.epoch
        } else if case .latest(let count) = entry.start {
            body.last = count
        }
        let request = Request(type: configuration.channelWireTypes.subscribe, payload: SessionWire.encode(body))
        let name = entry.name
        Task { [self] in
            do {
                let response = try await self.request(request)
                self.subscriptionAnswered(name, attempt: attempt, response)
            } catch {
                self.subscriptionFailed(name, attempt: attempt, error)
            }
        }
    }

    private func subscriptionAnswered(_ name: String, attempt: Int, _ response: Response) {
        guard let entry = channelTable[name], attempt == entry.attempt else { return }
        if let refusal = response.errorMessage {
            let error = Self.channelRefusal(refusal, of: "subscription", to: name)
            channelTable[entry.name] = nil
            if let waiter = entry.firstAnswer {
                entry.firstAnswer = nil
                waiter.resume(throwing: error)
            }
            entry.continuation.finish()
            return
        }
        guard let answer = SessionWire.decode(ChannelWire.Subscribed.self, from: response.payload) else {
            subscriptionFailed(name, attempt: attempt, TetherError(code: .protocolError, message: "the answer to the subscription of channel \(entry.name) is not a channel answer"))
            return
        }
        if !answer.recovered, entry.last != nil {
            entry.yield(.reset(ChannelReset(channel: entry.name, reason: answer.reason ?? "messages were lost", epoch: answer.epoch, after: answer.after)))
        }
        if answer.recovered, answer.epoch == entry.epoch, let last = entry.last {
            entry.last = max(last, answer.after)
        } else {
            entry.last = answer.after
        }
        entry.epoch = answer.epoch
        entry.awaiting = false
        if let waiter = entry.firstAnswer {
            entry.firstAnswer = nil
            waiter.resume()
        }
        let waiting = entry.pending.sorted { $0.offset < $1.offset }
        entry.pending.removeAll()
        entry.pendingBytes = 0
        for message in waiting {
            channelMessage(entry, offset: message.offset, payload: message.payload, expired: message.expired)
        }
    }

    private func subscriptionFailed(_ name: String, attempt: Int, _ error: any Error) {
        guard let entry = channelTable[name], attempt == entry.attempt else { return }
        if let waiter = entry.firstAnswer {
            // The first answer never came: the caller gets the error, and nothing stays.
            entry.firstAnswer = nil
            channelTable[entry.name] = nil
            entry.continuation.finish()
            waiter.resume(throwing: error)
            return
        }
        // Unanswered on a connection still up: asked again at once. Lost with its
        // connection: the next connection asks again.
        if (error as? TetherError)?.code == .timedOut, state.phase == .connected {
            sendSubscription(entry)
            return
        }
        entry.needsResend = true
    }

    /// A connection is up: every subscription asks again from where it stands.
    func resubscribeChannels() {
        for entry in channelTable.values where entry.firstAnswer == nil || entry.needsResend {
            sendSubscription(entry)
        }
    }

    private func subscriptionEnded(_ name: String, _ token: ObjectIdentifier) {
        guard let entry = channelTable[name], ObjectIdentifier(entry) == token else { return }
        channelTable[name] = nil
        guard state.phase == .connected else { return }
        let request = Request(type: configuration.channelWireTypes.unsubscribe, payload: SessionWire.encode(ChannelWire.Unsubscribe(channel: entry.name)))
        Task { [self] in _ = try? await self.request(request) }
    }

    /// Ends every subscription: the connection has closed or failed.
    func endChannels() {
        let entries = channelTable.values
        channelTable.removeAll()
        for entry in entries {
            if let waiter = entry.firstAnswer {
                entry.firstAnswer = nil
                waiter.resume(throwing: TetherError(code: .connectionClosed, message: "the connection ended before the server answered the subscription of channel \(entry.name)"))
            }
            entry.continuation.finish()
        }
    }

    /// A frame of the channel message type; whether it was one for a subscription.
    func channelFrame(_ frame: Frame) -> Bool {
        guard let (name, offset, payload, expired, presence) = ChannelWire.open(frame.payload) else {
            if let channel {
                connectionLost(channel.fromPeer(TetherError(code: .protocolError, message: "a channel message of \(frame.payload.count) bytes is too short for its channel name and offset")))
            }
            return true
        }
        guard let entry = channelTable[name] else { return true }
        if presence {
            // Outside the offsets: delivered as it comes.
            guard entry.presenceEvents, let change = SessionWire.decode(ChannelWire.PresenceChange.self, from: payload) else { return true }
            if let member = change.joined { entry.yield(.joined(ChannelMember(member))) }
            if let member = change.left { entry.yield(.left(ChannelMember(member))) }
            return true
        }
        channelMessage(entry, offset: offset, payload: payload, expired: expired)
        return true
    }

    /// Delivers the message at `offset` if it is the next, drops one already delivered, and
    /// asks for what was missed before a later one.
    private func channelMessage(_ entry: ClientChannel, offset: UInt64, payload: [UInt8], expired: Bool) {
        if entry.awaiting {
            // Within the subscription's bounds, in count and bytes. One that does not fit
            // is written before the answer, so the history the answer promises has it.
            if entry.pending.count < max(1, configuration.channelBufferSize),
               entry.pending.isEmpty || entry.pendingBytes + payload.count <= entry.gauge.limit {
                entry.pending.append((offset, payload, expired))
                entry.pendingBytes += payload.count
            }
            return
        }
        guard let last = entry.last, let epoch = entry.epoch else { return }
        if offset <= last { return }
        if offset == last + 1 {
            entry.last = offset
            // A message whose time to live passed holds its place, and is not delivered.
            if expired { return }
            entry.yield(.message(ChannelMessage(channel: entry.name, offset: offset, epoch: epoch, payload: payload)))
            return
        }
        // A gap: the messages between are asked for again, and this one waits for them.
        entry.pending.append((offset, payload, expired))
        entry.pendingBytes += payload.count
        sendSubscription(entry)
    }
}
