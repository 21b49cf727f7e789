extension Server {
    /// Pushes a frame to an identified client, connected or not.
    ///
    /// The push gets the next number of the client's sequence and is stored in its mailbox
    /// (``ServerConfiguration/mailboxes``) before this call returns. When the client is
    /// connected it is written at once, with the sequence in its serial; otherwise it waits
    /// in the mailbox, and ``onOfflinePush(_:)`` hears of it. A client that comes back gets
    /// what it missed, in order, then live pushes; it acknowledges what it has, and the
    /// mailbox deletes it.
    ///
    /// - Parameters:
    ///   - frame: The notification; its type and payload are kept, its serial is replaced.
    ///   - clientID: The client.
    /// - Returns: The push's sequence number in the client's mailbox.
    /// When the push cannot be stored the call throws, and nothing of it was stored or
    /// written to any peer: a connected client does not get it, and keeps getting the pushes
    /// after it that are stored, with no gap in its sequence (a failed push uses no number).
    /// Pushes made by other callers at the same moment are stored or refused on their own.
    ///
    /// - Throws: ``TetherError`` with ``TetherError/Code/invalidArgument`` when the server
    ///   has no mailboxes, ``TetherError/Code/notConnected`` when it is not running,
    ///   ``TetherError/Code/mailboxesFull`` when the client is new and the store holds
    ///   ``MailboxLimits/maximumMailboxes`` already, or the push would pass
    ///   ``MailboxLimits/maximumStoredBytes``, and ``TetherError/Code/storeFailed`` when the
    ///   store failed (a full disk, for example). In every case nothing was stored.
    @discardableResult
    public func push(_ frame: Frame, toClient clientID: String) async throws(TetherError) -> UInt64 {
        try await push(frame, toClients: [clientID])[0]
    }

    /// Pushes a frame to several identified clients, in one write to the store.
    ///
    /// Each client gets the frame with its own next sequence number; see
    /// ``push(_:toClient:)``.
    ///
    /// - Parameters:
    ///   - frame: The notification; its type and payload are kept, its serial is replaced.
    ///   - clientIDs: The clients.
    /// - Returns: The sequence number given to each client, in the same order.
    /// - Throws: ``TetherError``, as ``push(_:toClient:)``; then none of the clients got it.
    @discardableResult
    public func push(_ frame: Frame, toClients clientIDs: [String]) async throws(TetherError) -> [UInt64] {
        try await push(frame, toClients: clientIDs, timeToLive: nil)
    }

    /// Pushes a frame to an identified client, as ``push(_:toClient:)`` does, for a time:
    /// a client connected now gets it at once, and one that resumes later gets it only if
    /// `timeToLive` has not passed by then. An expired push is skipped, not written: the
    /// client sees its sequence jump, a ``SessionEvent/Kind/gap``.
    ///
    /// - Parameters:
    ///   - frame: The notification; its type and payload are kept, its serial is replaced.
    ///   - clientID: The client.
    ///   - timeToLive: How long the push may be delivered; `nil` for as long as the
    ///     mailbox keeps it.
    /// - Returns: The push's sequence number in the client's mailbox.
    /// - Throws: ``TetherError``, as ``push(_:toClient:)``.
    @discardableResult
    public func push(_ frame: Frame, toClient clientID: String, timeToLive: Duration?) async throws(TetherError) -> UInt64 {
        try await push(frame, toClients: [clientID], timeToLive: timeToLive)[0]
    }

    /// Pushes a frame to several identified clients, in one write to the store, each for
    /// `timeToLive` (see ``push(_:toClient:timeToLive:)``).
    ///
    /// - Parameters:
    ///   - frame: The notification.
    ///   - clientIDs: The clients.
    ///   - timeToLive: How long the push may be delivered; `nil` for as long as the
    ///     mailbox keeps it.
    /// - Returns: The sequence number given to each client, in the same order.
    /// - Throws: ``TetherError``, as ``push(_:toClient:)``; then none of the clients got it.
    @discardableResult
    public func push(_ frame: Frame, toClients clientIDs: [String], timeToLive: Duration?) async throws(TetherError) -> [UInt64] {
        let hub = try requireMailboxes()
        let expiresAt = timeToLive.map { hub.configuration.clock().adding($0) }
        let drafts = clientIDs.map { MailboxMessage.Draft(clientID: $0, type: frame.type, payload: frame.payload, expiresAt: expiresAt) }
        do {
            return try await hub.append(drafts)
        } catch let error as TetherError {
            throw error
        } catch {
            throw TetherError(code: .storeFailed, message: "pushes could not be stored: \(TetherError.reason(of: error))", underlying: error as? TetherError)
        }
    }

    /// Every client id the mailbox store knows: clients that identified or were pushed to,
    /// and whose mailboxes were not removed since for being idle
    /// (``MailboxConfiguration/expiryInterval``).
    ///
    /// - Returns: The client ids, sorted.
    /// - Throws: ``TetherError`` when the server has no mailboxes or the store fails.
    public func clientIDs() async throws(TetherError) -> [String] {
        let hub = try requireMailboxes()
        do {
            return try await hub.clientIDs().sorted()
        } catch {
            throw TetherError(code: .storeFailed, message: "the client ids could not be read: \(error)", underlying: error as? TetherError)
        }
    }

    /// The peer an identified client is connected on now, if any.
    ///
    /// - Parameter clientID: The client.
    /// - Returns: Its peer's id, or `nil` when it is not connected.
    public func peer(forClient clientID: String) -> PeerID? {
        hub?.peer(for: clientID)?.id
    }

    /// Sets the check every session hello must pass, replacing any earlier one.
    ///
    /// The check runs before the client's mailbox is touched. Throwing rejects the hello:
    /// the client gets the error's message, stops reconnecting, and its connection closes.
    /// A client with a ``SessionIdentityProvider`` first asks it once more, with the
    /// message (``SessionIdentityContext/rejectionReason``), and tries once more with its
    /// answer: throw an error whose message says what to fix (`"token expired"`).
    /// Without a check every client id is accepted, and gets a mailbox: a server reachable
    /// by strangers should set one, or anyone can make up client ids until the store is at
    /// ``MailboxLimits/maximumMailboxes`` and hellos from real new clients are refused
    /// until idle mailboxes expire.
    ///
    /// ```swift
    /// server.authenticate { hello in
    ///     guard tokens[hello.clientID] == hello.token else {
    ///         throw TetherError(code: .sessionRejected, message: "bad token")
    ///     }
    /// }
    /// ```
    ///
    /// - Parameter check: Accepts a hello by returning, rejects it by throwing.
    public func authenticate(_ check: @escaping @Sendable (ClientHello) async throws -> Void) {
        hub?.state.withLock { $0.authenticator = check }
    }

    /// Sets what runs when a push is stored for a client that is not connected: the place
    /// to ask a push service (APNs, FCM) to wake the client's device.
    ///
    /// Calls run one at a time, in order, apart from the pushes themselves: a slow callback
    /// delays the next callback, never a push. Up to
    /// ``MailboxConfiguration/offlineCallbackBufferSize`` may wait.
    ///
    /// - Parameter callback: Runs once per offline push.
    public func onOfflinePush(_ callback: @escaping @Sendable (OfflinePush) async -> Void) {
        hub?.state.withLock { $0.offlineCallback = callback }
    }

    func requireMailboxes() throws(TetherError) -> MailboxHub {
        guard let hub else {
            throw TetherError(code: .invalidArgument, message: "this server has no mailboxes: set ServerConfiguration.mailboxes to push to client ids")
        }
        return hub
    }
}

extension Server {
    /// Publishes a peer's event on ``events``.
    func publish(_ event: ServerEvent) {
        eventFeed.publish(event)
    }
}
