/// When the addresses of a host name go to the connection race (RFC 8305, section 3).
///
/// The AAAA and A questions are asked at once and answered separately. Connecting starts on
/// the first answer, with one exception, the resolution delay: an A answer that comes
/// first waits up to ``resolutionDelay`` (50 ms) for the AAAA answer, so a host that has
/// both is tried over IPv6 first. Answers that come once the race has started join it. When
/// both questions fail, resolving fails.
///
/// Pure: the connection feeds it the answers and the end of the delay, and carries out the
/// actions it returns.
struct ResolutionStateMachine {
    /// How long an A answer that came first waits for the AAAA answer: 50 ms, as RFC 8305
    /// recommends.
    static let resolutionDelay: Duration = .milliseconds(50)

    /// What the connection does next.
    enum Action: Equatable {
        /// Nothing yet.
        case none
        /// Start the resolution delay, and report its end with ``resolutionDelayPassed()``.
        case startResolutionDelay
        /// Give these addresses to the race, in this order: the first time, they start it;
        /// later, they join it.
        case connect([TetherSocketAddress])
        /// Both questions failed before any address came: resolving failed with this error.
        case fail(TetherError)
    }

    private enum Answer {
        case pending
        case addresses([TetherSocketAddress])
        case failed(TetherError)
    }

    private var ipv6: Answer = .pending
    private var ipv4: Answer = .pending
    /// Whether addresses went to the race.
    private(set) var hasStarted = false
    /// Whether the resolution delay is running, with the A answer waiting for it.
    private var delaying = false

    /// A host name: both questions pending.
    init() {}

    /// Addresses known without a lookup (a numeric address, `localhost`): both questions
    /// answered, the race started with `addresses`.
    init(known addresses: [TetherSocketAddress]) {
        ipv6 = .addresses(addresses.filter(\.isIPv6))
        ipv4 = .addresses(addresses.filter { !$0.isIPv6 })
        hasStarted = true
    }

    /// Whether a question is still waiting for its answer.
    var isResolving: Bool {
        if case .pending = ipv6 { return true }
        if case .pending = ipv4 { return true }
        return false
    }

    /// The answer to the question for `family` came.
    ///
    /// An empty list counts as a failure to find an address.
    mutating func answered(_ family: AddressFamily, _ result: Result<[TetherSocketAddress], TetherError>) -> Action {
        let answer: Answer
        switch result {
        case .success(let addresses) where !addresses.isEmpty: answer = .addresses(addresses)
        case .success: answer = .failed(TetherError(code: .resolutionFailed, message: "no \(family) address"))
        case .failure(let error): answer = .failed(error)
        }
        switch family {
        case .ipv6:
            guard case .pending = ipv6 else { preconditionFailure("a second AAAA answer") }
            ipv6 = answer
        case .ipv4:
            guard case .pending = ipv4 else { preconditionFailure("a second A answer") }
            ipv4 = answer
        }
        if hasStarted {
            guard case .addresses(let addresses) = answer else { return .none }
            return .connect(addresses)
        }
        switch (ipv6, ipv4) {
        case (.addresses(let v6), .addresses(let v4)):
            // The AAAA answer came within the delay (or with the A answer): IPv6 first.
            return start(AddressRace.interleaved(v6 + v4))
        case (.addresses(let v6), _):
            return start(v6)
        case (.failed, .addresses(let v4)):
            return start(v4)
        case (.pending, .addresses):
            delaying = true
            return .startResolutionDelay
        case (.failed(let v6), .failed(let v4)):
            return .fail(Self.combine(v6, v4))
        case (.pending, _), (.failed, .pending):
            return .none
        }
    }

    /// The resolution delay passed: the A answer that waited for it starts the race, unless
    /// the AAAA answer came meanwhile.
    mutating func resolutionDelayPassed() -> Action {
        guard delaying else { return .none }
        delaying = false
        guard !hasStarted, case .addresses(let v4) = ipv4 else { return .none }
        return start(v4)
    }

    private mutating func start(_ addresses: [TetherSocketAddress]) -> Action {
        hasStarted = true
        delaying = false
        return .connect(addresses)
    }

    /// One error for two failed questions: the A question's when they say the same.
    private static func combine(_ v6: TetherError, _ v4: TetherError) -> TetherError {
        if v6.message == v4.message { return v4 }
        return TetherError(code: v4.code, message: "\(v4.message) (IPv4); \(v6.message) (IPv6)", underlying: v4)
    }
}
