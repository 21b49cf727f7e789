/// Connects over TCP: resolves the endpoint and races connections to its addresses (Happy
/// Eyeballs, RFC 8305) within the connect timeout, resolving included; the first that
/// connects wins.
struct TCPConnector: StreamConnector {
    /// Resolves `endpoint` and races connections to its addresses, from the context's
    /// start, within its timeout: resolving is part of it.
    func connect(to endpoint: Endpoint, in context: ConnectContext, isolation: isolated any Actor) async -> Result<ConnectedStream, TetherError> {
        let loop = context.loop
        let began = context.began
        do throws(TetherError) {
            try Resolver.checkPort(of: endpoint)
        } catch {
            return .failure(error)
        }
        let outcome = await race(endpoint, in: context, isolation: isolation)
        switch outcome {
        case .connected(let box, let address, let resolved, let attempts):
            let report = ConnectReport(
                endpoint: endpoint,
                address: address,
                resolutionTime: MonotonicTime.duration(nanoseconds: resolved &- began),
                connectTime: MonotonicTime.duration(nanoseconds: loop.now &- began),
                attempts: attempts.map { $0.relative(to: resolved) }
            )
            return .success(ConnectedStream(stream: SocketStream(box, remoteAddress: address, noDelay: context.noDelay), report: report))
        case .failed(let failures, let resolution):
            if Task.isCancelled {
                return .failure(TetherError(code: .connectFailed, message: "connecting to \(endpoint) was cancelled"))
            }
            switch resolution {
            case .unfinished:
                return .failure(TetherError(
                    code: .connectTimedOut,
                    message: "resolving \(endpoint.host) did not finish within \(describe(context.timeout))"
                ))
            case .failed(let error):
                return .failure(error)
            case .resolved:
                if failures.isEmpty {
                    return .failure(TetherError(code: .connectTimedOut, message: "connecting to \(endpoint) timed out after \(describe(context.timeout))"))
                }
                return .failure(Self.combine(failures, endpoint: endpoint))
            }
        }
    }

    /// One attempt of a race, on the loop's clock.
    private struct AttemptRecord {
        var index: Int
        var address: TetherSocketAddress
        var started: UInt64
        var ended: UInt64?
        var outcome: ConnectReport.Attempt.Outcome

        func relative(to origin: UInt64) -> ConnectReport.Attempt {
            ConnectReport.Attempt(
                address: address,
                startedAfter: MonotonicTime.duration(nanoseconds: started &- origin),
                outcome: outcome,
                duration: ended.map { MonotonicTime.duration(nanoseconds: $0 &- started) }
            )
        }
    }

    /// How far resolving got in a race that connected nowhere.
    private enum ResolutionOutcome {
        /// Addresses came, and were tried.
        case resolved
        /// Both questions failed.
        case failed(TetherError)
        /// No address came before the deadline (or the cancellation).
        case unfinished
    }

    /// How a connection race ended.
    private enum RaceOutcome {
        /// The socket that connected, its address, when connecting began (the loop's clock),
        /// and every attempt started, in order.
        case connected(SocketBox, TetherSocketAddress, UInt64, [AttemptRecord])
        /// Every attempt failed: their failures, in the order they were started; and how
        /// far resolving got.
        case failed([TetherError], ResolutionOutcome)
    }

    /// What a child of the connection race reports.
    private enum RaceEvent: Sendable {
        /// The question for this family was answered.
        case resolved(AddressFamily, Result<[TetherSocketAddress], TetherError>)
        /// The resolution delay after an A answer has passed.
        case resolutionDelayPassed
        /// Attempt `index` ended.
        case attempt(Int, Result<SocketBox, TetherError>)
        /// The attempt delay after attempt `index` started has passed.
        case delayPassed(Int)
        /// The connect timeout has passed.
        case deadlinePassed
    }

    /// Resolves `endpoint` and races connection attempts to its addresses until `deadline`.
    ///
    /// Both address families are asked at once; ``ResolutionStateMachine`` says when their
    /// addresses go to the race. Attempts start in order: each when the one before it failed
    /// or has been pending for the attempt delay, or at once when addresses come while none
    /// is pending. Addresses that come later join the ones not yet tried, the families
    /// interleaved. Returns the first socket that connects (everything else is cancelled:
    /// attempts, whose sockets are closed, and questions still waiting), or every failure.
    private func race(_ endpoint: Endpoint, in context: ConnectContext, isolation: isolated any Actor) async -> RaceOutcome {
        let loop = context.loop
        let deadline = context.deadline
        let resolver: any NameResolver = context.resolver ?? SystemResolver.shared
        let known = context.resolver == nil ? Resolver.immediateAddresses(of: endpoint) : nil
        let delay = MonotonicTime.nanoseconds(of: context.attemptDelay)
        let resolutionDelay = MonotonicTime.nanoseconds(of: ResolutionStateMachine.resolutionDelay)
        let connectTimeout = context.timeout
        // Every child prefers the loop, so the answers of a resolver that answers at once and
        // every timer are work a manual clock sees.
        let executor = loop.taskExecutor
        return await withTaskGroup(of: RaceEvent.self) { group in
            var resolution = known.map { ResolutionStateMachine(known: $0) } ?? ResolutionStateMachine()
            var resolutionFailure: TetherError?
            var untried: [TetherSocketAddress] = []
            var tried: [TetherSocketAddress] = []
            var connectingSince: UInt64?
            var running = 0
            var delayElapsed = true
            var deadlinePassed = false
            var failures: [(Int, TetherError)] = []
            var records: [AttemptRecord] = []
            func start(_ group: inout TaskGroup<RaceEvent>) {
                let index = tried.count
                let address = untried.removeFirst()
                tried.append(address)
                let now = loop.now
                guard now < deadline else {
                    failures.append((index, TetherError(code: .connectTimedOut, message: "connecting to \(address) timed out after \(describe(connectTimeout))")))
                    return
                }
                running += 1
                delayElapsed = false
                records.append(AttemptRecord(index: index, address: address, started: now, outcome: .abandoned))
                let remaining = MonotonicTime.duration(nanoseconds: deadline - now)
                group.addTask(executorPreference: executor) {
                    .attempt(index, await ConnectAttempt.connect(to: address, timeout: remaining, on: loop, isolation: isolation))
                }
                group.addTask(executorPreference: executor) { [loop] in
                    try? await loop.sleep(until: now &+ delay)
                    return .delayPassed(index)
                }
            }
            /// Adds `addresses` to the ones not yet tried, starting with the family other
            /// than the last tried, and starts one when none is pending.
            func arrived(_ addresses: [TetherSocketAddress], _ group: inout TaskGroup<RaceEvent>) {
                if connectingSince == nil { connectingSince = loop.now }
                let fresh = addresses.filter { !tried.contains($0) && !untried.contains($0) }
                if let last = tried.last {
                    untried = AddressRace.interleaved(untried + fresh, preferring: AddressFamily(of: last) == .ipv6 ? .ipv4 : .ipv6)
                } else {
                    untried += fresh
                }
                if !untried.isEmpty, !Task.isCancelled, running == 0 || delayElapsed {
                    start(&group)
                }
            }
            func act(_ action: ResolutionStateMachine.Action, _ group: inout TaskGroup<RaceEvent>) {
                switch action {
                case .none:
                    break
                case .startResolutionDelay:
                    let now = loop.now
                    group.addTask(executorPreference: executor) { [loop] in
                        try? await loop.sleep(until: now &+ resolutionDelay)
                        return .resolutionDelayPassed
                    }
                case .connect(let addresses):
                    arrived(addresses, &group)
                case .fail(let error):
                    resolutionFailure = error
                }
            }
            func ended(_ index: Int, _ outcome: ConnectReport.Attempt.Outcome) {
                guard let position = records.firstIndex(where: { $0.index == index }) else { return }
                records[position].ended = loop.now
                records[position].outcome = outcome
            }
            /// Whether nothing can connect any more: no attempt pending, no address left,
            /// and no answer to wait for (or no time to wait in).
            var exhausted: Bool {
                running == 0 && (untried.isEmpty || Task.isCancelled) && (!resolution.isResolving || deadlinePassed || Task.isCancelled)
            }
            func failed() -> RaceOutcome {
                group.cancelAll()
                let lost = failures.sorted { $0.0 < $1.0 }.map(\.1)
                if connectingSince != nil { return .failed(lost, .resolved) }
                if let resolutionFailure { return .failed(lost, .failed(resolutionFailure)) }
                return .failed(lost, .unfinished)
            }
            group.addTask(executorPreference: executor) { [loop] in
                try? await loop.sleep(until: deadline)
                return .deadlinePassed
            }
            if let known {
                arrived(known, &group)
            } else {
                for family in AddressFamily.allCases {
                    group.addTask(executorPreference: executor) {
                        do throws(TetherError) {
                            return .resolved(family, .success(try await resolver.addresses(of: endpoint, family: family)))
                        } catch {
                            return .resolved(family, .failure(error))
                        }
                    }
                }
            }
            while let event = await group.next() {
                switch event {
                case .resolved(let family, let result):
                    guard !Task.isCancelled else { break }
                    act(resolution.answered(family, result), &group)
                case .resolutionDelayPassed:
                    guard !Task.isCancelled else { break }
                    act(resolution.resolutionDelayPassed(), &group)
                case .attempt(let index, .success(let box)):
                    // The others are cancelled; one that connects meanwhile comes back in a
                    // box that closes its socket when the group drops it.
                    group.cancelAll()
                    ended(index, .connected)
                    return .connected(box, tried[index], connectingSince ?? loop.now, records)
                case .attempt(let index, .failure(let error)):
                    running -= 1
                    let failure = error.code == .connectTimedOut
                        ? TetherError(code: .connectTimedOut, message: "connecting to \(tried[index]) timed out after \(describe(connectTimeout))")
                        : error
                    failures.append((index, failure))
                    ended(index, .failed(failure))
                    if !untried.isEmpty, !Task.isCancelled {
                        start(&group)
                    }
                case .delayPassed(let index):
                    if index == tried.count - 1 {
                        delayElapsed = true
                        if !untried.isEmpty, !Task.isCancelled { start(&group) }
                    }
                case .deadlinePassed:
                    deadlinePassed = true
                }
                if exhausted || (deadlinePassed && running == 0) {
                    return failed()
                }
            }
            return failed()
        }
    }

    /// One error for a race in which every address failed: the code they share (refused,
    /// or timed out when any did), and every address's reason.
    static func combine(_ failures: [TetherError], endpoint: Endpoint) -> TetherError {
        guard failures.count > 1 else {
            return failures.first ?? TetherError(code: .connectFailed, message: "cannot connect to \(endpoint): no address to try")
        }
        let codes = Set(failures.map(\.code))
        let code: TetherError.Code =
            codes == [.connectionRefused] ? .connectionRefused : codes.contains(.connectTimedOut) ? .connectTimedOut : .connectFailed
        let details = failures.map(\.message).joined(separator: "; ")
        return TetherError(code: code, message: "cannot connect to \(endpoint): \(details)")
    }
}
