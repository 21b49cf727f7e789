/// How a server drains when it is asked to stop gracefully (``Server/drain(deadline:reconnectAfter:)``).
///
/// ```swift
/// var configuration = ServerConfiguration(port: 9000)
/// configuration.drain.deadline = .seconds(10)
/// ```
public struct DrainConfiguration: Sendable, Hashable {
    /// How long handlers in flight have to finish, and clients to take their responses and
    /// leave, before the server cancels what still runs and closes every connection.
    /// Default 30 s.
    public var deadline: Duration = .seconds(30)
    /// How long clients are asked to wait before they reconnect (the notice's hint): for a
    /// server about to come back on the same address. A client waits at most its
    /// ``ReconnectPolicy/maximumDelay``. Default 0: at once.
    public var reconnectAfter: Duration = .zero

    /// The defaults: a 30 s deadline, clients asked to reconnect at once.
    public init() {}

    /// A drain with another deadline and hint.
    ///
    /// - Parameters:
    ///   - deadline: How long handlers in flight have to finish.
    ///   - reconnectAfter: How long clients are asked to wait before they reconnect.
    public init(deadline: Duration, reconnectAfter: Duration = .zero) {
        self.deadline = deadline
        self.reconnectAfter = reconnectAfter
    }
}

/// What a peer is told when the server drains: the notice for its client (when the profile
/// carries one), and whether the deadline has passed already.
struct PeerDrainOrder: Sendable {
    /// The notice, or `nil` when the profile cannot carry it.
    var notice: DrainNotice?
    /// The drain's deadline, for the error a request still running at it gets.
    var deadline: Duration
    /// Whether the deadline has passed: what still runs is cancelled at once.
    var deadlinePassed: Bool
}

/// Where a server's drain stands; part of the server's locked state.
struct DrainState {
    /// The order every peer gets, once a drain has begun.
    var order: PeerDrainOrder?
    /// Stops the listeners and ends the accept loop of ``Server/run()``; set once it listens.
    var stopAccepting: (@Sendable () -> Void)?
    /// The loop the deadline timer runs on: the accept loop.
    var loop: EventLoop?
    /// ``Server/run()`` waiting for every admitted peer to end.
    var peersEnded: CheckedContinuation<Void, Never>?
    /// Callers of ``Server/drain(deadline:reconnectAfter:)`` waiting for `run()` to return.
    var waiters: [CheckedContinuation<Void, Never>] = []
    /// Set as `run()` returns.
    var finished = false
}

extension Server {
    /// Stops the server gracefully, and returns once ``run()`` has returned.
    ///
    /// In order:
    /// 1. The listeners close (TCP and the WebSocket port): new connections are refused.
    /// 2. Every connected client is told to reconnect elsewhere or later, with a notice its
    ///    ``Connection`` understands in the profiles that carry one (seed, seed-extended,
    ///    compact): it takes the responses to what it sent, sends nothing more, closes, and
    ///    reconnects as planned (no failure counted, no backoff spent) after `reconnectAfter`,
    ///    on its next endpoint when it has ``ConnectionConfiguration/alternateEndpoints``.
    ///    A peer whose profile has no notice (marker, lines) is closed as soon as none of
    ///    its handlers runs.
    /// 3. Handlers in flight finish and their responses are written; requests that arrive
    ///    meanwhile (sent before the client read the notice) are handled too.
    /// 4. At the deadline, handlers still running are cancelled, and each of their requests,
    ///    and every request not started yet, is answered with an error response that says
    ///    so; every connection still open is flushed and closed.
    ///
    /// Then ``run()`` returns. Pushes to client ids (``push(_:toClient:)``) are stored until
    /// the last peer has ended. Cancelling the task of ``run()`` meanwhile stops at once, as
    /// it does without a drain. A second call waits for the first drain; a call made after
    /// ``run()`` started but before it listens drains as soon as it does; a call before
    /// ``run()`` or after it returned does nothing.
    ///
    /// - Parameters:
    ///   - deadline: How long handlers in flight have to finish; `nil` uses
    ///     ``ServerConfiguration/drain``'s ``DrainConfiguration/deadline`` (30 s by default).
    ///   - reconnectAfter: How long clients are asked to wait before they reconnect; `nil`
    ///     uses ``ServerConfiguration/drain``'s ``DrainConfiguration/reconnectAfter`` (0 by
    ///     default).
    public func drain(deadline: Duration? = nil, reconnectAfter: Duration? = nil) async {
        let deadline = max(.zero, deadline ?? configuration.drain.deadline)
        let delay = max(.zero, reconnectAfter ?? configuration.drain.reconnectAfter)
        let notice = DrainNotice.carried(by: configuration.profile)
            ? DrainNotice(reconnectAfter: delay, message: "the server is shutting down: finish, then reconnect")
            : nil
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            enum Step {
                case done
                case wait
                case begin(stop: (@Sendable () -> Void)?, loop: EventLoop?, peers: [Peer], order: PeerDrainOrder)
            }
            let step = state.withLock { state -> Step in
                // Never run, or returned already: nothing to drain.
                guard state.running, !state.drain.finished else { return .done }
                state.drain.waiters.append(continuation)
                guard state.drain.order == nil else { return .wait }
                let order = PeerDrainOrder(notice: notice, deadline: deadline, deadlinePassed: false)
                state.drain.order = order
                return .begin(stop: state.drain.stopAccepting, loop: state.drain.loop, peers: Array(state.peers.values), order: order)
            }
            switch step {
            case .done: continuation.resume()
            case .wait: break
            case .begin(let stop, let loop, let peers, let order): begin(order, stop: stop, loop: loop, peers: peers)
            }
        }
    }

    /// Starts a drain: stops accepting, tells every attached peer, arms the deadline.
    ///
    /// The peers are told from a job on the accepting loop queued after the one that closes
    /// the listeners, so a client that reads the notice and connects again is refused, not
    /// taken into a backlog that is then reset.
    private func begin(_ order: PeerDrainOrder, stop: (@Sendable () -> Void)?, loop: EventLoop?, peers: [Peer]) {
        stop?()
        guard let loop else {
            for peer in peers { Self.tell(peer, order) }
            return
        }
        loop.execute { for peer in peers { Self.tell(peer, order) } }
        armDeadline(order.deadline, on: loop)
    }

    /// Arms the drain's deadline timer on `loop`. It is never cancelled: once the server
    /// has stopped it finds nothing to do.
    private func armDeadline(_ deadline: Duration, on loop: EventLoop) {
        loop.execute { [self] in
            _ = loop.schedule(after: deadline) { [self] in drainDeadlinePassed() }
        }
    }

    /// The deadline passed: every peer still attached cancels what runs and closes.
    private func drainDeadlinePassed() {
        let (peers, order) = state.withLock { state -> ([Peer], PeerDrainOrder?) in
            guard !state.drain.finished else { return ([], nil) }
            state.drain.order?.deadlinePassed = true
            return (Array(state.peers.values), state.drain.order)
        }
        guard let order else { return }
        for peer in peers { Self.tell(peer, order) }
    }

    /// Hands `order` to `peer`, on its loop.
    private static func tell(_ peer: Peer, _ order: PeerDrainOrder) {
        peer.loop.execute { peer.assumeIsolated { $0.drain(order) } }
    }

    /// Called by ``run()`` once it listens: how to stop accepting, for a drain. A drain asked
    /// for before starts now.
    func listeningForDrain(on loop: EventLoop, stopAccepting: @escaping @Sendable () -> Void) {
        let early = state.withLock { state -> PeerDrainOrder? in
            state.drain.stopAccepting = stopAccepting
            state.drain.loop = loop
            return state.drain.order
        }
        guard let early else { return }
        stopAccepting()
        armDeadline(early.deadline, on: loop)
    }

    /// The deadline of the drain under way, if one is.
    var drainDeadline: Duration? { state.withLock { $0.drain.order?.deadline } }

    /// Whether a drain has begun: ``run()`` then waits for its peers instead of closing them.
    var isDraining: Bool { state.withLock { $0.drain.order != nil } }

    /// Waits until every admitted peer has ended, or the calling task is cancelled.
    func peersEnded() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.admitted == 0 || Task.isCancelled { return true }
                    state.drain.peersEnded = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { state in
                defer { state.drain.peersEnded = nil }
                return state.drain.peersEnded
            }?.resume()
        }
    }

    /// The order for a peer that attaches now, while a drain runs. Under the state lock.
    static func drainOrder(in state: inout State) -> PeerDrainOrder? {
        state.drain.order
    }

    /// A peer ended; when it was the last one a drain waited for, ``run()`` goes on. Under
    /// the state lock: returns what to resume.
    static func peerEndedDuringDrain(in state: inout State) -> CheckedContinuation<Void, Never>? {
        guard state.admitted == 0 else { return nil }
        defer { state.drain.peersEnded = nil }
        return state.drain.peersEnded
    }

    /// ``run()`` is returning: drains waiting are answered.
    func drainFinished() {
        let waiters = state.withLock { state in
            state.drain.finished = true
            defer { state.drain.waiters.removeAll() }
            return state.drain.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}
