/// Where a connection's session takes the identity of each hello from, and what it knows
/// of the last one.
struct ConnectionIdentity {
    /// The identity switched to, with the position its session starts from, until the state
    /// machine has the actor take it (``ConnectionStateMachine/Action/resetSession``).
    struct Switch {
        var source: SessionIdentitySource
        var resumeAfter: UInt64
        var epoch: String?
    }

    /// The fixed identity, or the provider to ask.
    var source: SessionIdentitySource
    /// The identity of the last hello (for a fixed identity, from the start).
    var current: SessionIdentity?
    /// Whether a hello of this source was accepted: later asks are reconnects.
    var accepted = false
    /// What the server's check said in its last rejection for good.
    var rejectionReason: String?
    /// The provider's answer awaited for the attempt of the token.
    var asking: (token: ConnectionStateMachine.Token, task: Task<Void, Never>)?
    /// A switch made but not yet taken.
    var pending: Switch?

    init(_ settings: SessionConfiguration?) {
        source = settings.map(SessionIdentitySource.init) ?? .fixed(SessionIdentity(clientID: ""))
        if case .fixed(let fixed) = source { current = fixed }
    }
}

extension Connection {
    // MARK: Switching user

    /// Makes the connection the session of another user: a new identity, and that user's
    /// mailbox from `resumeAfter` on. Returns once the server accepted the new hello.
    ///
    /// The socket of the earlier user is closed gracefully, after the pushes delivered to
    /// subscribers are acknowledged (with ``SessionConfiguration/acknowledgesAutomatically``),
    /// and the connection dials again at once (the server takes one identity per socket).
    /// Requests and frames sent before the call fail: those in flight with
    /// ``TetherError/Code/connectionLost``, those waiting for a connection with
    /// ``TetherError/Code/notConnected``; those made after it wait for the new session.
    /// The session starts anew: ``lastSequence``, ``sessionEpoch`` and the pushes held for a
    /// subscriber to come (which stay in the earlier user's mailbox, unacknowledged) are the
    /// new user's. Subscriptions keep running: ``sessionEvents`` gets a
    /// ``SessionEvent/Kind/switched`` event, and every push published after it, on
    /// ``notifications`` too, is the new user's.
    ///
    /// A rejection of the new identity fails the call with
    /// ``TetherError/Code/sessionRejected`` and ends the connection, as on any hello (with a
    /// ``SessionIdentityProvider``, after one retry with its fresh answer). Failed attempts
    /// (a server that is down) are retried by ``ConnectionConfiguration/reconnect`` while the
    /// call waits. Before ``connect()``, the identity replaces the configured one and the
    /// call returns at once.
    ///
    /// - Parameters:
    ///   - newIdentity: The user to greet the server as from now on.
    ///   - resumeAfter: The last sequence the app already has of that user's mailbox; 0 for
    ///     none.
    ///   - resumeEpoch: The epoch that sequence belongs to; `nil` for none known.
    /// - Throws: ``TetherError/Code/sessionRejected`` when the server rejects the new
    ///   identity; ``TetherError/Code/notConnected`` when the connection ends or is
    ///   suspended first; ``TetherError/Code/invalidArgument`` without a
    ///   ``ConnectionConfiguration/session``; `CancellationError` when the calling task is
    ///   cancelled (the switch goes on).
    public func switchSession(to newIdentity: SessionIdentity, resumeAfter: UInt64 = 0, resumeEpoch: String? = nil) async throws {
        try await switchSession(.fixed(newIdentity), resumeAfter: resumeAfter, epoch: resumeEpoch)
    }

    /// Makes the connection the session of the user that `provider` names from now on;
    /// see ``switchSession(to:resumeAfter:resumeEpoch:)-(SessionIdentity,_,_)``. The provider is asked before
    /// every hello, first with ``SessionIdentityContext/Reason/connect``.
    ///
    /// - Parameters:
    ///   - provider: Asked for the identity before every hello.
    ///   - resumeAfter: The last sequence the app already has of that user's mailbox; 0 for
    ///     none.
    ///   - resumeEpoch: The epoch that sequence belongs to; `nil` for none known.
    /// - Throws: As ``switchSession(to:resumeAfter:resumeEpoch:)-(SessionIdentity,_,_)``.
    public func switchSession(to provider: SessionIdentityProvider, resumeAfter: UInt64 = 0, resumeEpoch: String? = nil) async throws {
        try await switchSession(.provided(provider), resumeAfter: resumeAfter, epoch: resumeEpoch)
    }

    private func switchSession(_ source: SessionIdentitySource, resumeAfter: UInt64, epoch: String?) async throws {
        guard configuration.session != nil else {
            throw TetherError(code: .invalidArgument, message: "switchSession needs a session: the connection to \(endpoint) has no ConnectionConfiguration.session")
        }
        let from = identity.current.map { "client \($0.clientID)" } ?? "the provider's client"
        let to = if case .fixed(let fixed) = source { "client \(fixed.clientID)" } else { "a provider's client" }
        let reason = TetherError(code: .connectionLost, message: "the session switched from \(from) to \(to)")
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if let earlier = switchWaiter {
                    switchWaiter = nil
                    earlier.resume(throwing: TetherError(code: .notConnected, message: "the switch to another session was replaced by the switch to \(to)"))
                }
                switchWaiter = continuation
                identity.pending = ConnectionIdentity.Switch(source: source, resumeAfter: resumeAfter, epoch: epoch)
                handle(.switchSession(reason, asksIdentity: source.provider != nil))
            }
        } onCancel: {
            loop.execute { [self] in assumeIsolated { _ = $0.handle(.switchCancelled) } }
        }
    }

    /// Takes the identity of the switch: the session starts anew for it, what is held for
    /// subscribers of the earlier user is dropped, and the switch is published.
    func resetSession() {
        guard let change = identity.pending else { return }
        identity.pending = nil
        stopAskingIdentity()
        identity.source = change.source
        identity.accepted = false
        identity.rejectionReason = nil
        identity.current = nil
        var clientID: String?
        if case .fixed(let fixed) = change.source {
            identity.current = fixed
            clientID = fixed.clientID
        }
        session = ClientSessionState(resumeAfter: change.resumeAfter, epoch: change.epoch)
        notificationFeed.dropHeld()
        sessionFeed.publish(SessionEvent(kind: .switched, lastSequence: change.resumeAfter, clientID: clientID))
    }

    /// Answers the caller of ``switchSession(to:resumeAfter:resumeEpoch:)-(SessionIdentity,_,_)``.
    func answerSwitcher(_ failure: ConnectionStateMachine.OpenerFailure?) {
        guard let waiter = switchWaiter else { return }
        switchWaiter = nil
        switch failure {
        case nil: waiter.resume()
        case .cancelled: waiter.resume(throwing: CancellationError())
        case .notConnected: waiter.resume(throwing: notConnected())
        case .error(let error): waiter.resume(throwing: error)
        }
    }

    // MARK: Greeting

    /// Greets on the new connection of attempt `token`: with the fixed identity at once, or
    /// with what the provider answers, asked off the loop within the hello timeout.
    func greet(on channel: Channel, token: ConnectionStateMachine.Token) {
        guard let settings = configuration.session else { return }
        guard let provider = identity.source.provider else {
            if let current = identity.current { sendHello(on: channel, token: token, as: current) }
            return
        }
        stopAskingIdentity()
        let context = SessionIdentityContext(
            reason: lifecycle.rejection != nil ? .rejected : identity.accepted ? .reconnect : .connect,
            rejection: lifecycle.rejection,
            rejectionReason: lifecycle.rejection != nil ? identity.rejectionReason : nil,
            previous: identity.current,
            attempt: lifecycle.attempt,
            endpoint: currentEndpoint
        )
        let timeout = settings.helloTimeout ?? configuration.connectTimeout
        attemptHandles.helloTimer = loop.schedule(after: timeout) { [self] in
            assumeIsolated { connection in
                connection.attemptHandles.helloTimer = nil
                connection.handle(.helloTimedOut(token, TetherError(
                    code: .timedOut,
                    message: "the session identity provider did not answer within \(describe(timeout)) (greeting \(connection.currentEndpoint))"
                )))
            }
        }
        let task = Task { [self] in
            let answer = await Self.ask(provider, context)
            identityAnswered(answer, token: token)
        }
        identity.asking = (token, task)
    }

    /// Asks `provider`, off the connection's loop: it may do slow I/O.
    @concurrent
    private nonisolated static func ask(_ provider: SessionIdentityProvider, _ context: SessionIdentityContext) async -> Result<SessionIdentity, TetherError> {
        do {
            return .success(try await provider.identity(for: context))
        } catch {
            return .failure(TetherError(
                code: .identityUnavailable,
                message: "the session identity provider failed (\(context.reason), greeting \(context.endpoint)): \(TetherError.reason(of: error))",
                underlying: error
            ))
        }
    }

    /// The provider answered for the attempt of `token`: greet with it, unless the attempt
    /// was abandoned meanwhile.
    private func identityAnswered(_ answer: Result<SessionIdentity, TetherError>, token: ConnectionStateMachine.Token) {
        guard identity.asking?.token == token else { return }
        identity.asking = nil
        guard lifecycle.phase == .greeting(token), let channel else { return }
        if let timer = attemptHandles.helloTimer { loop.cancel(timer) }
        attemptHandles.helloTimer = nil
        switch answer {
        case .success(let given):
            guard !given.clientID.isEmpty, given.clientID.utf8.count <= SessionWire.maximumClientIDLength else {
                handle(.identityFailed(token, TetherError(
                    code: .identityUnavailable,
                    message: "the session identity provider answered with a client id of \(given.clientID.utf8.count) bytes; client ids are 1 to \(SessionWire.maximumClientIDLength) bytes"
                )))
                return
            }
            sendHello(on: channel, token: token, as: given)
        case .failure(let error):
            handle(.identityFailed(token, error))
        }
    }

    /// Stops waiting for the provider: its answer, when it comes, is dropped.
    func stopAskingIdentity() {
        identity.asking?.task.cancel()
        identity.asking = nil
    }
}
