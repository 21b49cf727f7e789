/// Mailboxes for identified clients: where a server keeps their pushes, and for how long.
///
/// With mailboxes a server accepts session hellos (``SessionConfiguration``), numbers each
/// push to a client id, stores it, writes it at once when the client is connected, and
/// replays what a client missed when it comes back. Here they are kept in a SQLite file
/// (``TetherSQLite/SQLiteMailboxStore``, from the module `TetherSQLite`):
///
/// ```swift
/// import TetherSQLite
///
/// var configuration = ServerConfiguration(port: 9000)
/// configuration.mailboxes = try .sqlite(path: "/var/lib/chat/mailboxes.sqlite")
/// let server = Server(configuration: configuration)
/// try await server.push(Frame(type: 0x10, payload: body), toClient: "alice")
/// ```
public struct MailboxConfiguration: Sendable {
    /// Where the mailboxes are kept.
    public var store: any MailboxStore
    /// The bounds of each client's mailbox and of all mailboxes together. Default 10,000
    /// messages and 7 days per mailbox, 100,000 mailboxes, 64 MiB stored.
    public var limits = MailboxLimits()
    /// How often the server drops expired messages from every mailbox and removes the
    /// mailboxes of clients idle for longer than ``MailboxLimits/maximumAge``
    /// (``MailboxStore/removeExpired(limits:now:keeping:)``), so clients that never come back
    /// do not keep their mailboxes. `nil` turns it off: messages then expire only when their
    /// mailbox is opened or written, and no mailbox is removed. Default 60 seconds.
    public var expiryInterval: Duration? = .seconds(60)
    /// The frame types of hello and acknowledgement; must match the clients'.
    public var wireTypes = SessionWireTypes()
    /// How many stored pushes a resuming peer reads from the store at a time. Default 256.
    public var replayBatchSize: Int = 256
    /// The threads store calls run on: those every server shares, unless a test gives its
    /// own.
    var storeExecutor: StoreExecutor = .shared
    /// How many offline-push callbacks (``Server/onOfflinePush(_:)``) may wait to run;
    /// beyond it they are dropped and counted in ``ServerMetrics/offlineCallbacksDropped``.
    /// Default 65,536.
    public var offlineCallbackBufferSize: Int = 65_536
    /// The most push receipts (``Server/pushWithReceipt(_:toClient:timeToLive:)``) not yet
    /// settled at once; past it such a push is refused before it is stored. Default 10,000.
    public var maximumReceipts: Int = 10_000
    /// The wall clock that stamps and ages messages. Default the system's, or, for a server
    /// whose ``ServerConfiguration/eventLoopGroup`` runs on a test clock (`TetherTesting`),
    /// that clock, whatever order the configuration was set in; tests may set their own.
    public var clock: @Sendable () -> MailboxTime {
        get { chosenClock ?? { MailboxTime.now() } }
        set { chosenClock = newValue }
    }
    /// The clock set, if one was: `nil` follows the server's loops.
    var chosenClock: (@Sendable () -> MailboxTime)?

    /// The cluster this server is a node of, if any: it shares ``store`` with the other
    /// nodes, and routes pushes and takeovers between them (``SessionCluster``). `nil`, the
    /// default, for a server on its own.
    public var cluster: (any SessionCluster)?

    /// Mailboxes in `store`.
    ///
    /// - Parameter store: Where the mailboxes are kept.
    public init(store: any MailboxStore) {
        self.store = store
    }

    /// Mailboxes shared by the nodes of `cluster`, in its store: the server becomes one of
    /// its nodes when it runs.
    ///
    /// - Parameter cluster: The cluster engine.
    public init(cluster: any SessionCluster) {
        self.store = cluster.store
        self.cluster = cluster
    }

    /// Mailboxes in memory, lost when the process ends.
    public static var inMemory: MailboxConfiguration {
        MailboxConfiguration(store: InMemoryMailboxStore())
    }
}
