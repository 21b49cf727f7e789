/// Where the sessions of several servers live and how pushes reach them: the seam between a
/// ``Server`` and a cluster engine.
///
/// A server alone keeps its clients' sessions to itself: its mailbox store numbers and keeps
/// each client's pushes, and a push reaches the client only if it is connected to that
/// server. Several servers that share one engine form one service instead. Each server is a
/// *node* with a name; a client may land on any node, and:
///
/// - the engine's ``store`` is the mailbox store every node shares, so a push stored by any
///   node (or by a backend that holds no connection) has one sequence for its client;
/// - the node a client identifies on **claims** it (``claim(_:limits:now:)``): the engine
///   records that this node holds the client now and tells the node that held it before to
///   close its stale connection (``ClusterNode/takenOver(clientID:generation:by:)``);
/// - a push stored anywhere **wakes** the node that holds its client
///   (``ClusterNode/deliver(_:)`` with the push, or ``ClusterNode/wake(clientID:through:)``
///   to read it from the store), and that node writes it;
/// - a broadcast reaches the peers of every node (``broadcast(_:)`` and
///   ``ClusterNode/broadcastLocally(_:)``).
///
/// The store is the truth and a wake-up is only a hint: a node writes a client's pushes in
/// sequence order, reading what it was not handed from the store, and writes none twice, so
/// wake-ups that come late, twice, out of order or with a gap never lose a push or deliver
/// one twice. One that never comes only delays delivery until the next one; an engine that
/// may have missed wake-ups (it lost its connection to its broker) calls
/// ``ClusterNode/wake(clientID:through:)`` for every client in ``ClusterNode/sessions``, or
/// closes them (``ClusterNode/closeSessions(reason:)``) when it cannot tell what they missed.
///
/// `TetherPostgres` implements this on PostgreSQL. An engine on another broker (Redis,
/// NATS) implements the same requirements; the server needs nothing else.
public protocol SessionCluster: Sendable {
    /// The mailbox store every node of the cluster shares.
    var store: any MailboxStore { get }

    /// This node's name, unique in the cluster.
    var nodeName: String { get }

    /// Joins the cluster as `node`: from now on the engine delivers to it. A server calls it
    /// once, before it accepts connections; ``Server/run()`` fails with the error thrown.
    ///
    /// - Parameter node: How the engine reaches this server.
    /// - Throws: When the engine cannot be reached.
    func join(_ node: ClusterNode) async throws

    /// Leaves the cluster: the server has stopped, and holds no client any more.
    func leave() async

    /// Records that this node holds `clientID` now, prepares its mailbox for a resume (as
    /// ``MailboxStore/openMailbox(for:limits:now:)``), and tells the node that held it before,
    /// if any, to close its connection.
    ///
    /// A push stored after the claim wakes this node; one stored before it is in the
    /// returned summary, and replayed from the store.
    ///
    /// - Parameters:
    ///   - clientID: The client that identified on this node.
    ///   - limits: The bounds of the mailbox and of the whole store.
    ///   - now: The time to judge ages by.
    /// - Returns: The mailbox's summary, and the claim's generation: higher than every
    ///   earlier claim of the client, on any node.
    /// - Throws: When the claim cannot be recorded; ``TetherError/Code/mailboxesFull`` as
    ///   ``MailboxStore/openMailbox(for:limits:now:)``.
    func claim(_ clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> ClusterClaim

    /// Records that the connection of the claim `generation` of `clientID` on this node has
    /// ended; a later claim, on any node, stays.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - generation: The generation of the claim that ended.
    func release(_ clientID: String, generation: UInt64) async

    /// Pushes this node stored through ``store``: wake the nodes that hold their clients.
    /// An engine whose store wakes them as part of the append (as `TetherPostgres` does, in
    /// the same transaction) does nothing here.
    ///
    /// - Parameter pushes: The pushes, as stored.
    func stored(_ pushes: [MailboxMessage]) async

    /// Sends a frame to the peers of every other node; the caller writes it to its own.
    ///
    /// - Parameter frame: The frame.
    /// - Throws: When the frame could not be handed to the engine.
    func broadcast(_ frame: Frame) async throws

    /// The engine's channels, if it has them: with them, a node's channels
    /// (``ServerConfiguration/channels``) are the cluster's, one order of messages per channel
    /// on every node. Without them, the default, each node's channels are its own.
    var channels: (any ChannelEngine)? { get }
}

extension SessionCluster {
    /// No channels: each node's channels are its own.
    public var channels: (any ChannelEngine)? { nil }
}

/// What a node gets for claiming a client: its mailbox, and the claim's place in the order
/// of the client's claims.
public struct ClusterClaim: Sendable, Hashable {
    /// What the client's mailbox holds, as ``MailboxStore/openMailbox(for:limits:now:)`` says.
    public var summary: MailboxSummary
    /// Higher than every earlier claim of the client, on any node.
    public var generation: UInt64

    /// Creates a claim.
    ///
    /// - Parameters:
    ///   - summary: The client's mailbox.
    ///   - generation: The claim's generation.
    public init(summary: MailboxSummary, generation: UInt64) {
        self.summary = summary
        self.generation = generation
    }
}

/// A client held by a node: its id and the generation of the claim its connection holds.
public struct ClusterSession: Sendable, Hashable {
    /// The client.
    public var clientID: String
    /// The generation of the claim (``ClusterClaim/generation``).
    public var generation: UInt64
}

/// How a cluster engine reaches one server: what it calls when a push, a takeover or a
/// broadcast arrives from elsewhere.
///
/// Every method returns at once: the work runs on the event loop of the peer concerned. A
/// call about a client this node does not hold does nothing.
public final class ClusterNode: Sendable {
    private unowned let hub: MailboxHub

    init(hub: MailboxHub) {
        self.hub = hub
    }

    /// The server's name in the cluster.
    public var name: String { hub.cluster?.nodeName ?? "" }

    /// The clients this node holds now: those connected here, with the generation of this
    /// node's newest claim of each. A client whose claim is under way is left out until it
    /// registers.
    public var sessions: [ClusterSession] { hub.heldSessions() }

    /// The engine claimed `clientID` for this node again, with `generation`, because the
    /// cluster's record named no holder, or a claim of this node other than the one in
    /// ``sessions``, while the client is connected here: the connection here holds that
    /// claim from now on, and writes what it missed through `sequence`, reading it from the
    /// store.
    ///
    /// An engine calls it when it finds a live session whose record another step cleared
    /// (a release that lost a race, a repair by hand); the record must name this node.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - generation: The generation of the claim that names this node now.
    ///   - sequence: The highest sequence stored for the client.
    /// - Returns: Whether the client is still connected here. When it is not, the engine
    ///   releases the claim (``SessionCluster/release(_:generation:)``).
    public func reclaimed(clientID: String, generation: UInt64, through sequence: UInt64) -> Bool {
        hub.reclaimed(clientID, generation: generation, through: sequence)
    }

    /// A push stored for `push.clientID`, with its content: written if the client is
    /// connected here and it is the next of its sequence; otherwise what comes before it is
    /// read from the store first, and a push already written is skipped.
    ///
    /// - Parameter push: The stored push.
    public func deliver(_ push: MailboxMessage) {
        let frame = Frame(type: push.type, serial: UInt32(truncatingIfNeeded: push.sequence), payload: push.payload)
        hub.deliver(frame, sequence: push.sequence, to: push.clientID)
    }

    /// Pushes were stored for `clientID` up to `sequence`: if the client is connected here,
    /// whatever it has not been written through `sequence` is read from the store and
    /// written.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - sequence: The highest sequence stored.
    public func wake(clientID: String, through sequence: UInt64) {
        hub.wake(clientID, through: sequence)
    }

    /// Another node claimed `clientID` with `generation`: the connection here, if its
    /// claim is older, is closed with a message that names `node`.
    ///
    /// - Parameters:
    ///   - clientID: The client.
    ///   - generation: The generation of the new claim.
    ///   - node: The name of the node that claimed it.
    public func takenOver(clientID: String, generation: UInt64, by node: String) {
        hub.takenOver(clientID, generation: generation, by: node)
    }

    /// Writes a frame to every peer of this server: a broadcast from another node.
    ///
    /// - Parameter frame: The frame.
    public func broadcastLocally(_ frame: Frame) {
        hub.broadcastLocally(frame)
    }

    /// A message stored in a channel (``ChannelEngine``), with its content: written to the
    /// channel's subscribers here if it is the next of the channel's offsets; otherwise
    /// what comes before it is read from the engine first, and a message written already is
    /// skipped. A channel nobody here subscribes to is left alone.
    ///
    /// - Parameter record: The stored message.
    public func published(_ record: ChannelRecord) {
        hub.channels?.received(record)
    }

    /// Messages were stored in `channel` up to `offset`: if this node keeps the channel,
    /// what it does not have through `offset` is read from the engine and written.
    ///
    /// - Parameters:
    ///   - channel: The channel.
    ///   - epoch: The channel's epoch.
    ///   - offset: The highest offset stored.
    public func published(channel: String, epoch: String, through offset: UInt64) {
        hub.channels?.received(channel: channel, epoch: epoch, through: offset)
    }

    /// A member joined or left a channel on another node: the channel's subscribers here
    /// that take presence events get it.
    ///
    /// - Parameter change: The change.
    public func presenceChanged(_ change: ChannelPresenceChange) {
        hub.channels?.remotePresence(change)
    }

    /// Notices of channel messages may have been lost (the engine lost its connection to
    /// its broker): every channel this node keeps is read from the engine again past the
    /// latest offset it has.
    public func channelsMayHaveMissed() {
        hub.channels?.refreshAll()
    }

    /// Closes the connection of every client this node holds, with `reason`, so they come
    /// back (on this node or another) and resume from the store: for an engine that can no
    /// longer tell which pushes they miss.
    ///
    /// - Parameter reason: What the clients and the server's events are told.
    public func closeSessions(reason: String) {
        hub.closeSessions(reason: reason)
    }
}
