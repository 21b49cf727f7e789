import Synchronization
import Testing
@testable import Tether

/// A resolver whose answers the test gives: at once, when the test says, or never (until the
/// asking task is cancelled). Every question is reported on ``asks``.
private final class ScriptedResolver: NameResolver {
    enum Script: Sendable {
        case now([TetherSocketAddress])
        case held
        case never
    }

    let asks: AsyncStream<AddressFamily>
    private let asked: AsyncStream<AddressFamily>.Continuation
    private let scripts: [AddressFamily: Script]
    private let held = Mutex<[AddressFamily: CheckedContinuation<Result<[TetherSocketAddress], TetherError>, Never>]>([:])
    private let cancelled = Mutex<Set<AddressFamily>>([])

    init(_ scripts: [AddressFamily: Script]) {
        self.scripts = scripts
        (asks, asked) = AsyncStream.makeStream()
    }

    func addresses(of endpoint: Endpoint, family: AddressFamily) async throws(TetherError) -> [TetherSocketAddress] {
        switch scripts[family] ?? .never {
        case .now(let addresses):
            asked.yield(family)
            return addresses
        case .held, .never:
            let result = await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Result<[TetherSocketAddress], TetherError>, Never>) in
                    let early = cancelled.withLock { $0.contains(family) }
                    if early {
                        continuation.resume(returning: .failure(TetherError(code: .connectFailed, message: "cancelled")))
                    } else {
                        held.withLock { $0[family] = continuation }
                    }
                    // Only now: a test that answers once it saw the question finds it held.
                    asked.yield(family)
                }
            } onCancel: {
                cancelled.withLock { _ = $0.insert(family) }
                held.withLock { $0.removeValue(forKey: family) }?.resume(returning: .failure(TetherError(code: .connectFailed, message: "cancelled")))
            }
            return try result.get()
        }
    }

    /// Answers the held question for `family`.
    func answer(_ family: AddressFamily, _ addresses: [TetherSocketAddress]) {
        held.withLock { $0.removeValue(forKey: family) }?.resume(returning: .success(addresses))
    }

    /// Waits until both families were asked.
    func bothAsked() async throws {
        let asks = asks
        try await bounded("both questions") {
            var seen = Set<AddressFamily>()
            for await family in asks {
                seen.insert(family)
                if seen.count == 2 { return }
            }
        }
    }
}

@Suite("Resolving within the connect timeout: AAAA and A apart, the first answer starts (RFC 8305)", .timeLimit(.guarded))
struct ResolutionRaceTests {
    private func v6(_ port: Int = 9000) -> TetherSocketAddress { TetherSocketAddress(ipAddress: "::1", port: port)! }
    private func v4(_ port: Int = 9000) -> TetherSocketAddress { TetherSocketAddress(ipAddress: "127.0.0.1", port: port)! }

    // MARK: The state machine

    @Test("an AAAA answer first starts the race at once; the A answer joins it")
    func aaaaFirst() {
        var machine = ResolutionStateMachine()
        #expect(machine.answered(.ipv6, .success([v6()])) == .connect([v6()]))
        #expect(machine.isResolving)
        #expect(machine.answered(.ipv4, .success([v4()])) == .connect([v4()]))
        #expect(!machine.isResolving)
        #expect(machine.resolutionDelayPassed() == .none)
    }

    @Test("an A answer first waits for the resolution delay; an AAAA answer within it goes first, the families interleaved")
    func aFirstThenAAAA() {
        #expect(ResolutionStateMachine.resolutionDelay == .milliseconds(50))
        var machine = ResolutionStateMachine()
        let v4s = [v4(), TetherSocketAddress(ipAddress: "127.0.0.2", port: 9000)!]
        #expect(machine.answered(.ipv4, .success(v4s)) == .startResolutionDelay)
        #expect(!machine.hasStarted)
        #expect(machine.answered(.ipv6, .success([v6()])) == .connect([v6(), v4s[0], v4s[1]]))
        #expect(machine.resolutionDelayPassed() == .none)
    }

    @Test("an A answer first and no AAAA answer within the delay: IPv4 starts when it ends, and a late AAAA answer joins")
    func aFirstDelayPasses() {
        var machine = ResolutionStateMachine()
        #expect(machine.answered(.ipv4, .success([v4()])) == .startResolutionDelay)
        #expect(machine.resolutionDelayPassed() == .connect([v4()]))
        #expect(machine.answered(.ipv6, .success([v6()])) == .connect([v6()]))
    }

    @Test("an A answer first and a failed AAAA question within the delay: IPv4 starts at once")
    func aFirstAAAAFails() {
        var machine = ResolutionStateMachine()
        #expect(machine.answered(.ipv4, .success([v4()])) == .startResolutionDelay)
        #expect(machine.answered(.ipv6, .failure(TetherError(code: .resolutionFailed, message: "no AAAA"))) == .connect([v4()]))
        #expect(machine.resolutionDelayPassed() == .none)
    }

    @Test("a failed AAAA question first: the A answer starts at once, without the delay")
    func aaaaFailsFirst() {
        var machine = ResolutionStateMachine()
        #expect(machine.answered(.ipv6, .failure(TetherError(code: .resolutionFailed, message: "no AAAA"))) == .none)
        #expect(machine.answered(.ipv4, .success([v4()])) == .connect([v4()]))
    }

    @Test("both questions failing fails resolving: one message when they agree, both when not")
    func bothFail() {
        let unknown = TetherError(code: .resolutionFailed, message: "cannot resolve x.test: Name or service not known")
        var machine = ResolutionStateMachine()
        #expect(machine.answered(.ipv4, .failure(unknown)) == .none)
        #expect(machine.answered(.ipv6, .failure(unknown)) == .fail(unknown))
        let other = TetherError(code: .resolutionFailed, message: "cannot resolve x.test: Temporary failure in name resolution")
        var second = ResolutionStateMachine()
        #expect(second.answered(.ipv6, .failure(other)) == .none)
        guard case .fail(let error) = second.answered(.ipv4, .failure(unknown)) else {
            Issue.record("both failed, yet resolving goes on")
            return
        }
        #expect(error.code == .resolutionFailed)
        #expect(error.message == "\(unknown.message) (IPv4); \(other.message) (IPv6)")
    }

    @Test("numeric addresses and localhost need no lookup; late addresses join after the last tried family")
    func known() {
        #expect(Resolver.immediateAddresses(of: Endpoint(host: "192.0.2.1", port: 80)) == [TetherSocketAddress(ipAddress: "192.0.2.1", port: 80)!])
        #expect(Resolver.immediateAddresses(of: Endpoint(host: "2001:db8::1", port: 80)) == [TetherSocketAddress(ipAddress: "2001:db8::1", port: 80)!])
        #expect(Resolver.immediateAddresses(of: Endpoint(host: "LocalHost", port: 80)) == [v6(80), v4(80)])
        #expect(Resolver.immediateAddresses(of: Endpoint(host: "example.test", port: 80)) == nil)
        let machine = ResolutionStateMachine(known: [v4()])
        #expect(machine.hasStarted && !machine.isResolving)
        let other = TetherSocketAddress(ipAddress: "::2", port: 9000)!
        #expect(AddressRace.interleaved([v4(), v6(), other], preferring: .ipv6) == [v6(), v4(), other])
    }

    // MARK: The shared lookups

    @Test("a lookup that blocks: a cancelled waiter returns at once, a second waiter shares the thread, and the answer reaches the one still waiting")
    func sharedLookup() async throws {
        let release = Semaphore()
        let (calls, called) = AsyncStream<AddressFamily>.makeStream()
        let count = Lock(0)
        let resolver = SystemResolver { endpoint, family in
            count.withLock { $0 += 1 }
            called.yield(family)
            release.wait()
            return .success([TetherSocketAddress(ipAddress: "127.0.0.1", port: endpoint.port)!])
        }
        let endpoint = Endpoint(host: "silent.test", port: 9000)
        let first = Task { try await resolver.addresses(of: endpoint, family: .ipv4) }
        _ = try await bounded("the lookup to start") {
            for await _ in calls { return true }
            return false
        }
        let second = Task { try await resolver.addresses(of: endpoint, family: .ipv4) }
        try await bounded("the second waiter to join") {
            while resolver.waiting < 2 { await Task.yield() }
        }
        first.cancel()
        let cancelled = try await bounded("the cancelled waiter") { await first.result }
        guard case .failure(let error as TetherError) = cancelled else {
            Issue.record("the cancelled waiter got \(cancelled)")
            return
        }
        #expect(error.underlying is CancellationError)
        // It returned while the lookup is still blocked: it did not wait for it.
        #expect(count.withLock { $0 } == 1)
        #expect(resolver.lookupsInFlight == 1)
        #expect(resolver.waiting == 1)
        // The lookup is still blocked: the second waiter waits on it, with no thread of its own.
        release.signal()
        let answer = try await bounded("the shared answer") { try await second.value }
        #expect(answer == [v4()])
        #expect(count.withLock { $0 } == 1)
        #expect(resolver.lookupsInFlight == 0)
    }

    // MARK: The race, on a manual clock

    /// Connects to `host:port` on a loop of `clock` with `resolver`, in a task.
    private func connecting(
        _ host: String,
        port: Int,
        resolver: any NameResolver,
        group: TetherEventLoopGroup,
        timeout: Duration = .seconds(5)
    ) -> Task<Connection, any Error> {
        let configuration = testConfiguration {
            $0.eventLoopGroup = group
            $0.connectTimeout = timeout
            $0.resolver = resolver
        }
        return Task { try await Connection.connect(to: Endpoint(host: host, port: port), configuration: configuration) }
    }

    @Test("the AAAA answer first starts connecting at once, while the A question is still unanswered")
    func firstAnswerStarts() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let (listener, endpoint) = try RawSocket.listen(host: "::1")
        defer { listener.close() }
        let resolver = ScriptedResolver([.ipv6: .now([v6(endpoint.port)]), .ipv4: .never])
        let task = connecting("dual.test", port: endpoint.port, resolver: resolver, group: group)
        let connection = try await bounded("the connect") { try await task.value }
        let report = try #require(await connection.connectReport)
        #expect(report.address == v6(endpoint.port))
        #expect(report.resolutionTime == .zero)
        #expect(report.attempts.map(\.address) == [v6(endpoint.port)])
        await connection.close()
    }

    @Test("the A answer first and no AAAA answer: IPv4 starts after the resolution delay, 50 ms, not before")
    func resolutionDelay() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        let resolver = ScriptedResolver([.ipv4: .now([v4(endpoint.port)]), .ipv6: .never])
        let task = connecting("dual.test", port: endpoint.port, resolver: resolver, group: group)
        try await resolver.bothAsked()
        await clock.advance(by: .milliseconds(49))
        await clock.advance(by: .milliseconds(1))
        let connection = try await bounded("the connect") { try await task.value }
        let report = try #require(await connection.connectReport)
        // On the manual clock: exactly the delay, so nothing started at 49 ms.
        #expect(report.resolutionTime == .milliseconds(50), "\(report)")
        #expect(report.attempts.map(\.address) == [v4(endpoint.port)])
        await connection.close()
    }

    @Test("the A answer first and the AAAA answer within the delay: IPv6 is tried first, when the AAAA answer comes")
    func aaaaWithinDelay() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let (listener, endpoint) = try RawSocket.listen(host: "::1")
        defer { listener.close() }
        let resolver = ScriptedResolver([.ipv4: .now([v4(endpoint.port)]), .ipv6: .held])
        let task = connecting("dual.test", port: endpoint.port, resolver: resolver, group: group)
        try await resolver.bothAsked()
        await clock.advance(by: .milliseconds(20))
        resolver.answer(.ipv6, [v6(endpoint.port)])
        let connection = try await bounded("the connect") { try await task.value }
        let report = try #require(await connection.connectReport)
        #expect(report.resolutionTime == .milliseconds(20), "\(report)")
        #expect(report.address == v6(endpoint.port))
        #expect(report.attempts.first?.address == v6(endpoint.port))
        await connection.close()
    }

    @Test("addresses that come after the race started join it: a refused IPv6 address, then the late A answer connects")
    func lateAddressesJoin() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let (listener, endpoint) = try RawSocket.listen()
        defer { listener.close() }
        let (closed, closedEndpoint) = try RawSocket.listen(host: "::1")
        closed.close()
        let refused = v6(closedEndpoint.port)
        let resolver = ScriptedResolver([.ipv6: .now([refused]), .ipv4: .held])
        let task = connecting("dual.test", port: endpoint.port, resolver: resolver, group: group)
        try await resolver.bothAsked()
        await clock.advance(by: .milliseconds(100))
        resolver.answer(.ipv4, [v4(endpoint.port)])
        let connection = try await bounded("the connect") { try await task.value }
        let report = try #require(await connection.connectReport)
        #expect(report.address == v4(endpoint.port))
        #expect(report.resolutionTime == .zero)
        #expect(report.attempts.map(\.address) == [refused, v4(endpoint.port)])
        #expect(report.attempts.count == 2)
        if report.attempts.count == 2 {
            guard case .failed(let error) = report.attempts[0].outcome else {
                Issue.record("the IPv6 attempt: \(report.attempts[0].outcome)")
                return
            }
            #expect(error.code == .connectionRefused)
            #expect(report.attempts[1].startedAfter == .milliseconds(100), "\(report)")
            #expect(report.attempts[1].outcome == .connected)
        }
        await connection.close()
    }

    @Test("a resolver that never answers: the connect timeout ends resolving, naming the host and the step")
    func timeoutWhileResolving() async throws {
        let clock = ManualClock()
        let group = TetherEventLoopGroup(loopCount: 1, clock: clock)
        defer { group.shutdown() }
        let resolver = ScriptedResolver([:])
        let task = connecting("silent.test", port: 9000, resolver: resolver, group: group, timeout: .seconds(1))
        try await resolver.bothAsked()
        await clock.advance(by: .milliseconds(999))
        await clock.advance(by: .milliseconds(1))
        let outcome = try await bounded("the connect to fail") { await task.result }
        guard case .failure(let error as TetherError) = outcome else {
            Issue.record("the connect ended with \(outcome)")
            return
        }
        #expect(error.code == .connectTimedOut)
        #expect(error.message == "resolving silent.test did not finish within 1 s")
    }

    @Test("cancelling a connect whose lookups block returns at once; a second connect joins the blocked lookups instead of starting threads")
    func cancelWhileResolving() async throws {
        let release = Semaphore()
        let count = Lock(0)
        let resolver = SystemResolver { _, _ in
            count.withLock { $0 += 1 }
            release.wait()
            return .failure(TetherError(code: .resolutionFailed, message: "too late"))
        }
        let watched = Watched(resolver)
        for round in 1...2 {
            let configuration = testConfiguration {
                $0.connectTimeout = .seconds(60)
                $0.resolver = watched
            }
            let task = Task { try await Connection.connect(to: Endpoint(host: "silent.test", port: 9000), configuration: configuration) }
            try await watched.bothAsked()
            task.cancel()
            // The lookups stay blocked until the end of the test: returning at all is
            // returning without them. The bound guards against a hang, not a measurement.
            let outcome = try await bounded("the cancelled connect") { await task.result }
            guard case .failure = outcome else {
                Issue.record("round \(round): the cancelled connect ended with \(outcome)")
                return
            }
            // One blocked thread per family, however often the connect was tried.
            #expect(resolver.lookupsInFlight == 2, "round \(round)")
            #expect(count.withLock { $0 } == 2, "round \(round)")
        }
        release.signal()
        release.signal()
    }
}

/// Reports each question on ``asks``, then forwards it.
private final class Watched: NameResolver {
    private let resolver: any NameResolver
    private let asks: AsyncStream<AddressFamily>
    private let asked: AsyncStream<AddressFamily>.Continuation

    init(_ resolver: any NameResolver) {
        self.resolver = resolver
        (asks, asked) = AsyncStream.makeStream()
    }

    func addresses(of endpoint: Endpoint, family: AddressFamily) async throws(TetherError) -> [TetherSocketAddress] {
        asked.yield(family)
        return try await resolver.addresses(of: endpoint, family: family)
    }

    func bothAsked() async throws {
        let asks = asks
        try await bounded("both questions") {
            var seen = 0
            for await _ in asks {
                seen += 1
                if seen == 2 { return }
            }
        }
    }
}
