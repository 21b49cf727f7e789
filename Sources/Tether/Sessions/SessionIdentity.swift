/// Who a session greets the server as: a client id and its credential.
///
/// The fixed form of an identity is ``SessionConfiguration/clientID`` with
/// ``SessionConfiguration/token``; a ``SessionIdentityProvider`` answers with one of these
/// before every hello, and ``Connection/switchSession(to:resumeAfter:resumeEpoch:)-(SessionIdentity,_,_)`` takes
/// one to change users on a live connection.
public struct SessionIdentity: Sendable, Hashable, CustomStringConvertible {
    /// The client's stable identity: its mailbox on the server. 1 to 256 bytes of UTF-8.
    public var clientID: String
    /// A credential for the server's ``Server/authenticate(_:)`` check; `nil` for none.
    public var token: String?

    /// An identity.
    ///
    /// - Parameters:
    ///   - clientID: The client's stable identity.
    ///   - token: A credential for the server to check.
    public init(clientID: String, token: String? = nil) {
        self.clientID = clientID
        self.token = token
    }

    /// The client id, for logs; the token is never printed.
    public var description: String { "client \(clientID)" }
}

/// What a ``SessionIdentityProvider`` is told when it is asked: why, and what went before.
public struct SessionIdentityContext: Sendable, Hashable {
    /// Why the provider is asked.
    public struct Reason: Sendable, Hashable, CustomStringConvertible {
        enum Value: Hashable, Sendable { case connect, reconnect, rejected }
        let value: Value

        /// No hello with an identity of this provider has been accepted yet: the first
        /// connect, its retries, or the first connect after
        /// ``Connection/switchSession(to:resumeAfter:resumeEpoch:)-(SessionIdentity,_,_)``.
        public static let connect = Reason(value: .connect)
        /// The connection came back after it was lost, suspended or told to reconnect.
        public static let reconnect = Reason(value: .reconnect)
        /// The server rejected the last hello for good (``TetherError/Code/sessionRejected``):
        /// ``SessionIdentityContext/rejection`` says why. Answer with a fresh credential;
        /// a second rejection in a row ends the connection.
        public static let rejected = Reason(value: .rejected)

        /// A short textual form, for logs.
        public var description: String { String(describing: value) }
    }

    /// Why the provider is asked.
    public var reason: Reason
    /// The rejection, with ``Reason/rejected``: code ``TetherError/Code/sessionRejected``,
    /// with a message that names the server and the client. `nil` otherwise.
    public var rejection: TetherError?
    /// What the server's ``Server/authenticate(_:)`` check said, with ``Reason/rejected``:
    /// the message of the error it threw, as the server sent it (`"token expired"`). `nil`
    /// otherwise, or when the server gave none.
    public var rejectionReason: String?
    /// The identity the last hello of this provider carried; `nil` before the first.
    public var previous: SessionIdentity?
    /// The attempt this hello belongs to: 0 for one made at once (the first connect,
    /// ``Connection/resume()``, ``Connection/reconnectNow()``, a retry after a rejection),
    /// then 1, 2, … for reconnect attempts after failures.
    public var attempt: Int
    /// The endpoint the connection is greeting.
    public var endpoint: Endpoint

    /// A context, for tests of a provider.
    ///
    /// - Parameters:
    ///   - reason: Why the provider is asked.
    ///   - rejection: The rejection, with ``Reason/rejected``.
    ///   - rejectionReason: What the server's check said, with ``Reason/rejected``.
    ///   - previous: The identity of the last hello.
    ///   - attempt: The attempt number.
    ///   - endpoint: The endpoint being greeted.
    init(
        reason: Reason,
        rejection: TetherError? = nil,
        rejectionReason: String? = nil,
        previous: SessionIdentity? = nil,
        attempt: Int = 0,
        endpoint: Endpoint
    ) {
        self.reason = reason
        self.rejection = rejection
        self.rejectionReason = rejectionReason
        self.previous = previous
        self.attempt = attempt
        self.endpoint = endpoint
    }
}

/// Asked for the client id and token before every session hello: for credentials that
/// expire and must be refreshed (an OAuth access token, a signed ticket).
///
/// ```swift
/// var configuration = ConnectionConfiguration()
/// configuration.session = SessionConfiguration(identity: SessionIdentityProvider { context in
///     if context.reason == .rejected { try await auth.refresh() }
///     return SessionIdentity(clientID: auth.userID, token: try await auth.accessToken())
/// })
/// ```
///
/// The connection asks it after TCP (and TLS) connected and before it writes the hello,
/// on every attempt that gets that far: the first connect, each reconnect, and once more at
/// once when the server rejects a hello for good (``SessionIdentityContext/Reason/rejected``).
/// It runs off the connection's event loop, so it may do slow I/O; its time counts against
/// ``SessionConfiguration/helloTimeout`` (or ``ConnectionConfiguration/connectTimeout``),
/// after which the attempt fails and its answer, when it comes, is dropped. An answer for an
/// attempt abandoned meanwhile (``Connection/close()``, ``Connection/suspend()``, a lost
/// socket) is dropped too.
///
/// Throwing fails that attempt, like a refused connect, with
/// ``TetherError/Code/identityUnavailable`` and the thrown error as
/// ``TetherError/underlying``: the connection tries again by its ``ReconnectPolicy`` and
/// asks again. Call ``Connection/close()`` to stop (when the user signed out, say).
///
/// Two providers are equal only when they are the same one: copies of one value are equal,
/// and every provider made with ``init(_:)`` is distinct, so ``SessionConfiguration`` stays
/// `Hashable`.
public struct SessionIdentityProvider: Sendable, Hashable {
    private let box: Box
    /// The closure, in a class so that equality can be identity.
    private final class Box: Sendable {
        let answer: @Sendable (SessionIdentityContext) async throws -> SessionIdentity
        init(_ answer: @escaping @Sendable (SessionIdentityContext) async throws -> SessionIdentity) {
            self.answer = answer
        }
    }

    /// A provider that answers with `answer`.
    ///
    /// - Parameter answer: Called before every hello with why it is asked; returns the
    ///   identity to send, or throws to fail that attempt.
    public init(_ answer: @escaping @Sendable (SessionIdentityContext) async throws -> SessionIdentity) {
        box = Box(answer)
    }

    /// Asks the provider.
    ///
    /// - Parameter context: Why it is asked.
    /// - Returns: The identity to greet with.
    /// - Throws: What the provider throws.
    public func identity(for context: SessionIdentityContext) async throws -> SessionIdentity {
        try await box.answer(context)
    }

    /// Whether two providers are the same one.
    ///
    /// - Parameters:
    ///   - lhs: A provider.
    ///   - rhs: Another provider.
    /// - Returns: Whether both are copies of the same provider.
    public static func == (lhs: SessionIdentityProvider, rhs: SessionIdentityProvider) -> Bool {
        lhs.box === rhs.box
    }

    /// Hashes the provider's identity.
    ///
    /// - Parameter hasher: The hasher to feed.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(box))
    }
}

/// Where a connection's session takes its identity from.
enum SessionIdentitySource: Sendable, Hashable {
    /// The same client id and token on every hello.
    case fixed(SessionIdentity)
    /// Asked before every hello.
    case provided(SessionIdentityProvider)

    /// The source a session configuration names.
    init(_ settings: SessionConfiguration) {
        if let provider = settings.identityProvider {
            self = .provided(provider)
        } else {
            self = .fixed(SessionIdentity(clientID: settings.clientID, token: settings.token))
        }
    }

    /// The provider, if the identity is asked for.
    var provider: SessionIdentityProvider? {
        if case .provided(let provider) = self { return provider }
        return nil
    }
}
