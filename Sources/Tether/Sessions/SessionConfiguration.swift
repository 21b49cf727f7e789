/// The frame types a session uses on the wire. Client and server must agree on them.
///
/// In the seed profile the hello is a request (above `0x400`) and the acknowledgement a
/// client-to-server notification (`0x2…0x400`); sequenced pushes are ordinary notifications
/// whose serial carries the sequence.
public struct SessionWireTypes: Sendable, Hashable {
    /// The hello a client sends first on every connection, and the server's answer to it.
    /// Default `0x401`.
    public var hello: UInt32 = 0x401
    /// The acknowledgement a client sends for the pushes it has. Default `0x400`.
    public var acknowledgement: UInt32 = 0x400
    /// A request with an idempotency key (``Connection/request(_:idempotencyKey:timeout:)``),
    /// wrapping the caller's request. Default `0xFE01`.
    public var keyedRequest: UInt32 = 0xFE01

    /// The defaults: hello `0x401`, acknowledgement `0x400`.
    public init() {}

    /// Other types.
    ///
    /// - Parameters:
    ///   - hello: The hello request type.
    ///   - acknowledgement: The acknowledgement type.
    public init(hello: UInt32, acknowledgement: UInt32) {
        self.hello = hello
        self.acknowledgement = acknowledgement
    }
}

/// Who a client is, and where it left off: sent to the server first on every connection.
///
/// With a session, a ``Connection`` sends a hello (its ``clientID``, its ``token`` and the
/// last push sequence it has) as the first frame of every connection, reconnects included,
/// and holds every request until the server accepts it. The server replays the pushes the
/// client missed, in order, then continues live; the connection drops duplicates, so each
/// subscriber of ``Connection/notifications`` sees every sequenced push exactly once, in
/// order, across any number of disconnects.
///
/// ```swift
/// var configuration = ConnectionConfiguration()
/// configuration.session = SessionConfiguration(clientID: "alice", token: savedToken,
///                                              resumeAfter: savedSequence,
///                                              resumeEpoch: savedEpoch)
/// ```
public struct SessionConfiguration: Sendable, Hashable {
    /// The client's stable identity: its mailbox on the server. At most 256 bytes of UTF-8.
    public var clientID: String
    /// A credential for the server's ``Server/authenticate(_:)`` check.
    public var token: String?
    /// Asked for the client id and token before every hello, instead of sending
    /// ``clientID`` and ``token``: for credentials that expire. With it, a hello the server
    /// rejects for good is retried once at once with what the provider answers then. Default
    /// `nil`: the fixed ``clientID`` and ``token`` on every hello, and a rejection ends the
    /// connection.
    ///
    /// See ``SessionIdentityProvider``. With a provider, ``clientID`` and ``token`` are not
    /// sent.
    public var identityProvider: SessionIdentityProvider?
    /// The last sequence the app had already processed before this connection was made,
    /// for example one saved from ``Connection/lastSequence`` before the app was last
    /// stopped; pushes up to it are not replayed. Default 0: everything the mailbox holds.
    public var resumeAfter: UInt64 = 0
    /// The epoch of the server's mailbox history that ``resumeAfter`` belongs to, saved from
    /// ``Connection/sessionEpoch`` with it. When the server's history is another one by now
    /// (the mailbox was removed as idle, or the store wiped or replaced), the connection
    /// publishes a ``SessionEvent/Kind/reset`` and takes the new history from its start:
    /// none of its pushes is taken for one already seen. `nil`, the default, resumes after
    /// ``resumeAfter`` in whatever history the server has.
    public var resumeEpoch: String?
    /// The frame types of hello and acknowledgement.
    public var wireTypes = SessionWireTypes()
    /// How long after its first attempt a request with an idempotency key
    /// (``Connection/request(_:idempotencyKey:timeout:)``) is still repeated on a new
    /// connection; past it the call throws ``TetherError/Code/outcomeUnknown`` instead. Keep
    /// it no longer than the server's ``MailboxLimits/requestWindow``, which forgets the
    /// record. Default 10 minutes, as that.
    public var requestWindow: Duration = .seconds(600)
    /// Whether the connection acknowledges pushes by itself as it delivers them to
    /// subscribers, which lets the server delete them. Set it to `false` to acknowledge
    /// with ``Connection/acknowledge(through:)`` once the app has stored what it received.
    /// Default `true`.
    public var acknowledgesAutomatically: Bool = true
    /// An automatic acknowledgement goes out once this many pushes are unacknowledged.
    /// Default 64.
    public var acknowledgeEvery: Int = 64
    /// ... or this long after the first unacknowledged push, whichever comes first. Default 500 ms.
    public var acknowledgeDelay: Duration = .milliseconds(500)
    /// How long the server may take to answer the hello before the attempt counts as
    /// failed; `nil` uses ``ConnectionConfiguration/connectTimeout``. Default `nil`.
    ///
    /// With an ``identityProvider``, the provider has this long to answer first, and the
    /// server then has this long again.
    public var helloTimeout: Duration?
    /// The most pushes the connection holds for a subscriber that has yet to come. Default
    /// 10,000, as many as a mailbox keeps by default (``MailboxLimits/maximumMessages``), so
    /// a whole replay fits before the app subscribes.
    ///
    /// A sequenced push counts as delivered (it moves ``Connection/lastSequence`` and may be
    /// acknowledged) only once a subscriber whose filter accepts it has it in its buffer.
    /// Until then it is held, for the first subscription made later that accepts it. When
    /// this many are held, the connection takes no more sequenced pushes until it next
    /// connects: they stay unacknowledged in the server's mailbox, which sends them again
    /// then.
    public var maximumHeldPushes: Int = 10_000
    /// The most pushes the slowest subscription to ``Connection/notifications`` (or
    /// ``Connection/notifications(ofType:)``) may have waiting before the server is asked to
    /// hold the client's pushes. Default 4,096.
    ///
    /// With a session no push is dropped once a subscription has it, so a subscription that
    /// stops reading would make the connection hold every push that comes. Instead, when the
    /// slowest one has more than this many waiting, the connection asks the server to keep
    /// the client's pushes in its mailbox, and to send them again once that subscription is
    /// down to half as many. The connection goes on reading: responses and heartbeat acks
    /// get through.
    ///
    /// Pushes already on their way still arrive. If the backlog reaches twice this bound (a
    /// server that does not hold pushes, or pushes sent outside the mailbox), the connection
    /// stops reading its socket until the subscription is down to half the bound; then
    /// responses and heartbeat acks wait too (a heartbeat missed meanwhile does not count).
    public var maximumPendingPushes: Int = 4_096
    /// Whether the connection reconnects, by its ``ReconnectPolicy``, after the server
    /// closed it because a newer connection with the same client id took the session over.
    /// Default `false`: it closes for good, with ``TetherError/Code/sessionTakenOver`` as the
    /// reason of its ``ConnectionState/Phase/closed`` state.
    ///
    /// Two processes that run as the same client would otherwise take the session from each
    /// other for as long as both run, each seeing pushes the other saw too. Set it for a
    /// client that must win (the newest process is not the one to keep), or make a new
    /// ``Connection`` when the app decides to take the session back.
    public var reconnectsWhenTakenOver = false

    /// A session for `clientID`.
    ///
    /// - Parameters:
    ///   - clientID: The client's stable identity.
    ///   - token: A credential for the server to check.
    ///   - resumeAfter: The last sequence the app already has; 0 for none.
    ///   - resumeEpoch: The epoch that sequence belongs to, from ``Connection/sessionEpoch``;
    ///     `nil` for none known.
    public init(clientID: String, token: String? = nil, resumeAfter: UInt64 = 0, resumeEpoch: String? = nil) {
        self.clientID = clientID
        self.token = token
        self.resumeAfter = resumeAfter
        self.resumeEpoch = resumeEpoch
    }

    /// A session whose client id and token are asked of `provider` before every hello.
    ///
    /// - Parameters:
    ///   - provider: Answers with the identity to greet with.
    ///   - resumeAfter: The last sequence the app already has; 0 for none.
    ///   - resumeEpoch: The epoch that sequence belongs to, from ``Connection/sessionEpoch``;
    ///     `nil` for none known.
    public init(identity provider: SessionIdentityProvider, resumeAfter: UInt64 = 0, resumeEpoch: String? = nil) {
        self.clientID = ""
        self.identityProvider = provider
        self.resumeAfter = resumeAfter
        self.resumeEpoch = resumeEpoch
    }
}

/// Something that happened to a client's session: it was resumed, pushes were lost, or
/// the history the client resumed from is gone.
public struct SessionEvent: Sendable, Hashable, CustomStringConvertible {
    /// What happened.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        enum Value: Hashable, Sendable { case resumed, gap, reset, switched }
        let value: Value

        /// The server accepted the hello; it replays what follows ``SessionEvent/lastSequence``
        /// up to ``SessionEvent/serverSequence`` (except pushes this connection already holds
        /// for a subscriber), then continues live.
        ///
        /// It says the session is (re)established on a new connection: it comes once per
        /// accepted hello, on the first connect and after every reconnect, after the
        /// ``reset`` or ``gap`` that hello reveals and before the
        /// ``ConnectionState/Phase/connected`` state, the replayed pushes and the requests
        /// that waited for the connection. It is the moment to send again what the server
        /// keeps per connection (a login made with a request, subscriptions);
        /// ``Connection/sessionClientID`` names the client it was established for.
        public static let resumed = Kind(value: .resumed)
        /// Pushes ``SessionEvent/missed`` can no longer be delivered: the mailbox dropped
        /// them (``SessionEvent/reason`` says why). The next push delivered follows them.
        public static let gap = Kind(value: .gap)
        /// The history this client resumed from is gone: the server knows fewer pushes than
        /// it had seen, or its mailbox's epoch is another than the one the client's sequence
        /// belongs to (``Connection/sessionEpoch``): the mailbox was removed, or the store
        /// wiped or replaced. The client's sequence restarts at ``SessionEvent/lastSequence``,
        /// and the new history's pushes after it follow.
        public static let reset = Kind(value: .reset)
        /// ``Connection/switchSession(to:resumeAfter:resumeEpoch:)-(SessionIdentity,_,_)`` changed the user: every
        /// push of the earlier user was published before this event, and every push published
        /// after it is the new user's (``SessionEvent/clientID``, when known), whose sequence
        /// starts after ``SessionEvent/lastSequence``.
        public static let switched = Kind(value: .switched)

        /// A short textual form, for logs and messages.
        public var description: String { String(describing: value) }
    }

    /// What happened.
    public var kind: Kind
    /// The client's last sequence after the event.
    public var lastSequence: UInt64
    /// The server's last sequence for this client, for ``Kind/resumed`` and ``Kind/reset``.
    public var serverSequence: UInt64?
    /// The sequences lost, for ``Kind/gap``.
    public var missed: ClosedRange<UInt64>?
    /// Why they were lost, for ``Kind/gap``: `nil` when the server did not say (a jump the
    /// client saw by itself).
    public var reason: MailboxLossReason?
    /// The client the session now belongs to, for ``Kind/switched``: the new identity's
    /// client id, or `nil` when a provider will name it.
    public var clientID: String?

    /// A short textual form, for logs and messages.
    public var description: String {
        switch kind.value {
        case .resumed:
            let server = serverSequence ?? lastSequence
            let waiting = server > lastSequence ? server - lastSequence : 0
            return "resumed after \(lastSequence); \(waiting) waiting"
        case .gap:
            let range = missed.map { "\($0.lowerBound)…\($0.upperBound)" } ?? "?"
            return "lost \(range)" + (reason.map { " (\($0))" } ?? "")
        case .reset:
            return "the server's history was replaced (its sequence is at \(serverSequence ?? 0)); restarting after \(lastSequence)"
        case .switched:
            return "switched to \(clientID.map { "client \($0)" } ?? "the provider's client"), after \(lastSequence)"
        }
    }
}
