/// How far a peer is in its server's drain. One byte in every peer: the deadline itself is
/// the server's (``DrainState/order``).
enum PeerDrainPhase: Hashable, Sendable {
    /// No drain: serving.
    case serving
    /// Draining: handlers finish. `quiet` when the client could not be told (its profile
    /// carries no notice): the server closes the connection as soon as no handler runs.
    /// Otherwise the client closes it once it has its responses.
    case draining(quiet: Bool)
    /// The deadline passed: handlers are cancelled and what they were asked is answered
    /// with an error that names the deadline.
    case expired

    /// Whether the drain's deadline has passed.
    var hasExpired: Bool {
        if case .expired = self { return true }
        return false
    }

    /// Whether requests that arrive now are answered with ``Peer/drainingResponse(to:)``
    /// and not run: once the client has been told to leave, or past the deadline.
    var refusesRequests: Bool {
        switch self {
        case .serving, .draining(quiet: true): false
        case .draining(quiet: false), .expired: true
        }
    }

    /// Whether the server closes the connection once no handler runs.
    var closesWhenIdle: Bool {
        if case .draining(quiet: true) = self { return true }
        return false
    }
}

extension Peer {
    /// The server drains: tell the client (when its profile carries the notice), and keep
    /// serving what it sends until it leaves or the deadline passes; at the deadline, cancel
    /// what runs. Called once when the drain begins, and again at its deadline.
    func drain(_ order: PeerDrainOrder) {
        guard lifecycle.isOpen, let channel else { return }
        let heartbeat = configuration.profile.heartbeatType
        for action in lifecycle.handle(.drainBegan(notifies: order.notice != nil && heartbeat != nil)) {
            switch action {
            case .writeDrainNotice:
                guard let notice = order.notice, let heartbeat else { continue }
                do {
                    try write(notice.frame(heartbeatType: heartbeat), on: channel)
                } catch {
                    end(error, graceful: false)
                    return
                }
            case .endIfIdle:
                closeIfDrained()
            default:
                perform([action])
            }
        }
        if order.deadlinePassed { drainDeadlinePassed() }
    }

    /// Closes the connection of a client that cannot be told, once none of its requests is
    /// being handled or waits to be.
    func closeIfDrained() {
        guard lifecycle.isOpen, running == 0, inbox.isEmpty, !waitingForSlot else { return }
        for action in lifecycle.handle(.handlersIdle) {
            if case .endIfIdle = action { drainEnded() } else { perform([action]) }
        }
    }

    /// The deadline passed: requests not started are answered with an error now, handlers
    /// still running are cancelled (each of their requests gets the same error as it ends),
    /// and the connection closes once none runs.
    private func drainDeadlinePassed() {
        guard lifecycle.isOpen else { return }
        for action in lifecycle.handle(.drainDeadlinePassed) {
            switch action {
            case .refuseWaitingRequests:
                let waiting = inbox
                inbox.removeAll()
                leaveSlotQueue()
                for frame in waiting { respond(drainExpiredResponse(to: frame), to: frame) }
            case .stopHandlers:
                guard lifecycle.isOpen else { return }
                if running == 0 {
                    drainEnded()
                    return
                }
                // The run loop sees the deadline and cancels the handler tasks.
                if let waiter = inboxWaiter {
                    inboxWaiter = nil
                    waiter.resume(returning: false)
                }
            default:
                perform([action])
            }
        }
    }

    /// The answer to a request whose handler the drain's deadline cancelled, or that had not
    /// started by then. A session hello gets a refusal the client may retry elsewhere.
    func drainExpiredResponse(to frame: Frame) -> Response {
        let deadline = server?.drainDeadline.map(describe) ?? "its"
        let message = "the server shut down before answering request \(hex(frame.type)): it was still being handled at the \(deadline) drain deadline"
        if let hub, frame.type == hub.configuration.wireTypes.hello {
            return Response(payload: SessionWire.encode(SessionWire.Refusal(error: message, rejected: false)))
        }
        return .error(message)
    }

    /// The answer to a request that arrived after the client was told to leave (or after
    /// the deadline): not run, so safe to send again elsewhere. `{"error": …, "code":
    /// "serverDraining"}`, which a ``Connection`` that read the notice reports as a
    /// ``TetherError/Code/serverDraining`` error. A session hello gets a refusal the client
    /// may retry elsewhere.
    func drainingResponse(to frame: Frame) -> Response {
        let message = "the server is draining and did not run request \(hex(frame.type)) serial \(frame.serial), which arrived after it told the client to leave: send it again elsewhere"
        if let hub, frame.type == hub.configuration.wireTypes.hello {
            return Response(payload: SessionWire.encode(SessionWire.Refusal(error: message, rejected: false)))
        }
        return Response(json: ["error": .string(message), "code": .string(TetherError.Code.serverDraining.description)])
    }

    /// The drain is over for this peer: flush and close. At the deadline the client is told
    /// why (``CloseNotice``), where its profile carries that.
    func drainEnded() {
        guard drainPhase.hasExpired else {
            end(TetherError(code: .connectionClosed, message: "the server drained and closed the connection with \(remoteAddress)"), graceful: true)
            return
        }
        let deadline = server?.drainDeadline.map(describe) ?? "its"
        close(for: TetherError(code: .serverDraining, message: "the server drained and closed the connection with \(remoteAddress) at its \(deadline) drain deadline"))
    }
}
