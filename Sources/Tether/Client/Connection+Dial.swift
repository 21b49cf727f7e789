extension Connection {
    /// A dialed socket and how the race that opened it went.
    struct Dialed {
        var socket: ChannelBase
        var address: SocketAddress
        var report: ConnectReport
    }

    /// Resolves `endpoint` and races connections to its addresses (Happy Eyeballs, RFC 8305),
    /// within the connect timeout: the first that connects wins.
    func dial(_ endpoint: Endpoint) async -> Result<Dialed, TetherError> {
        let began = loop.now
        if let network = configuration.memoryNetwork {
            guard network.loop === loop else {
                return .failure(TetherError(code: .invalidArgument, message: "a connection on an in-memory network must use the network's event loop group"))
            }
            return await network.connect(to: endpoint, sealed: configuration.tls != nil, timeout: configuration.connectTimeout)
                .map { channel, address in
                    let elapsed = MonotonicTime.duration(nanoseconds: loop.now &- began)
                    let attempt = ConnectReport.Attempt(address: address, startedAfter: .zero, outcome: .connected, duration: elapsed)
                    let report = ConnectReport(endpoint: endpoint, address: address, resolutionTime: .zero, connectTime: elapsed, attempts: [attempt])
                    return Dialed(socket: .memory(channel), address: address, report: report)
                }
        }
        // A WebSocket endpoint behind a proxy: the race is to the proxy, then CONNECT.
        let proxy = endpoint.webSocketPath == nil ? nil : configuration.webSocket.proxy
        let result = await dial(proxy?.endpoint ?? endpoint, began: began)
        guard let proxy else { return result }
        switch result {
        case .failure(let error):
            return .failure(TetherError(code: error.code, message: "cannot reach \(endpoint) through the proxy \(proxy): \(error.message)", underlying: error))
        case .success(var dialed):
            let deadline = began &+ MonotonicTime.nanoseconds(of: configuration.connectTimeout)
            let now = loop.now
            let remaining = MonotonicTime.duration(nanoseconds: deadline > now ? deadline - now : 0)
            guard case .socket(let box) = dialed.socket else { return result }
            switch await ProxyTunnel.open(box, through: proxy, to: endpoint, timeout: remaining, on: loop, isolation: self) {
            case .failure(let error):
                return .failure(error)
            case .success(let tunnel):
                dialed.socket = .socket(tunnel)
                dialed.report.endpoint = endpoint
                dialed.report.connectTime = MonotonicTime.duration(nanoseconds: loop.now &- began)
                return .success(dialed)
            }
        }
    }

    /// Resolves `endpoint` and races connections to its addresses, from `began`.
    private func dial(_ endpoint: Endpoint, began: UInt64) async -> Result<Dialed, TetherError> {
        let addresses: [SocketAddress]
        do {
            if let resolver = configuration.resolver {
                addresses = try await resolver(endpoint)
            } else {
                addresses = try await Resolver.resolve(endpoint)
            }
        } catch {
            return .failure(error)
        }
        let resolved = loop.now
        let ordered = AddressRace.interleaved(addresses)
        let deadline = began &+ MonotonicTime.nanoseconds(of: configuration.connectTimeout)
        let failures: [TetherError]
        switch await race(ordered, deadline: deadline) {
        case .connected(let box, let address, let attempts):
            let report = ConnectReport(
                endpoint: endpoint,
                address: address,
                resolutionTime: MonotonicTime.duration(nanoseconds: resolved &- began),
                connectTime: MonotonicTime.duration(nanoseconds: loop.now &- began),
                attempts: attempts.map { $0.relative(to: resolved) }
            )
            return .success(Dialed(socket: .socket(box), address: address, report: report))
        case .failed(let lost):
            failures = lost
        }
        if Task.isCancelled {
            return .failure(TetherError(code: .connectFailed, message: "connecting to \(endpoint) was cancelled"))
        }
        if failures.isEmpty, !ordered.isEmpty {
            return .failure(TetherError(code: .connectTimedOut, message: "connecting to \(endpoint) timed out after \(describe(configuration.connectTimeout))"))
        }
        return .failure(Self.combine(failures, endpoint: endpoint))
    }

    /// One attempt of a race, on the loop's clock.
    private struct AttemptRecord {
        var index: Int
        var address: SocketAddress
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

    /// How a connection race ended.
    private enum RaceOutcome {
        /// The socket that connected, its address, and every attempt started, in order.
        case connected(SocketBox, SocketAddress, [AttemptRecord])
        /// Every attempt failed: their failures, in the order of the addresses.
        case failed([TetherError])
    }

    /// What a child of the connection race reports.
    private enum RaceEvent: Sendable {
        /// Attempt `index` ended.
        case attempt(Int, Result<SocketBox, TetherError>)
        /// The attempt delay after attempt `index` started has passed.
        case delayPassed(Int)
    }

    /// Races connection attempts to `addresses`, in order: each starts when the one before
    /// it failed or has been pending for the attempt delay. Returns the first socket that
    /// connects (the others are cancelled, and their sockets closed), or every failure, in
    /// the order of the addresses.
    private func race(_ addresses: [SocketAddress], deadline: UInt64) async -> RaceOutcome {
        guard !addresses.isEmpty else { return .failed([]) }
        let delay = MonotonicTime.nanoseconds(of: configuration.connectionAttemptDelay)
        let connectTimeout = configuration.connectTimeout
        return await withTaskGroup(of: RaceEvent.self) { group in
            var started = 0
            var running = 0
            var failures: [(Int, TetherError)] = []
            var records: [AttemptRecord] = []
            func start(_ group: inout TaskGroup<RaceEvent>) {
                let index = started
                let address = addresses[index]
                let now = loop.now
                started += 1
                guard now < deadline else {
                    failures.append((index, TetherError(code: .connectTimedOut, message: "connecting to \(address) timed out after \(describe(connectTimeout))")))
                    return
                }
                running += 1
                records.append(AttemptRecord(index: index, address: address, started: now, outcome: .abandoned))
                let remaining = MonotonicTime.duration(nanoseconds: deadline - now)
                group.addTask { [self] in
                    .attempt(index, await ConnectAttempt.connect(to: address, timeout: remaining, on: loop, isolation: self))
                }
                if started < addresses.count {
                    group.addTask { [loop] in
                        try? await loop.sleep(until: now &+ delay)
                        return .delayPassed(index)
                    }
                }
            }
            func ended(_ index: Int, _ outcome: ConnectReport.Attempt.Outcome) {
                guard let position = records.firstIndex(where: { $0.index == index }) else { return }
                records[position].ended = loop.now
                records[position].outcome = outcome
            }
            start(&group)
            while let event = await group.next() {
                switch event {
                case .attempt(let index, .success(let box)):
                    // The others are cancelled; one that connects meanwhile comes back in a
                    // box that closes its socket when the group drops it.
                    group.cancelAll()
                    ended(index, .connected)
                    return .connected(box, addresses[index], records)
                case .attempt(let index, .failure(let error)):
                    running -= 1
                    let failure = error.code == .connectTimedOut
                        ? TetherError(code: .connectTimedOut, message: "connecting to \(addresses[index]) timed out after \(describe(connectTimeout))")
                        : error
                    failures.append((index, failure))
                    ended(index, .failed(failure))
                    if started < addresses.count, !Task.isCancelled {
                        start(&group)
                    }
                    if running == 0, started == addresses.count {
                        group.cancelAll()
                        return .failed(failures.sorted { $0.0 < $1.0 }.map(\.1))
                    }
                case .delayPassed(let index):
                    if index == started - 1, started < addresses.count, !Task.isCancelled {
                        start(&group)
                    }
                }
            }
            return .failed(failures.sorted { $0.0 < $1.0 }.map(\.1))
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
