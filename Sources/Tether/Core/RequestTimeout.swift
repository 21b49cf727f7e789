/// How long a request may wait for its response: the connection's configured timeout, a
/// duration of its own, or no limit.
///
/// Passed to ``Connection/request(_:timeout:)``, ``Connection/pipeline(_:timeout:)`` and
/// ``Connection/http(_:timeout:type:)``. The default, ``configured``, is
/// ``ConnectionConfiguration/requestTimeout`` (30 s unless set otherwise). A duration of its
/// own is written the way a `Duration` is, `.seconds(5)`, `.milliseconds(200)`, or with
/// ``after(_:)``; ``unlimited`` waits until the response comes, the calling task is
/// cancelled or the connection ends, whatever the configuration says.
///
/// ```swift
/// let report = try await connection.request(Request(type: 0x420), timeout: .unlimited)
/// let quote = try await connection.request(Request(type: 0x421), timeout: .seconds(2))
/// ```
///
/// A timeout counts from the call, time spent in the queue included; one that passes ends
/// the request with ``TetherError/Code/timedOut``.
public struct RequestTimeout: Sendable, Hashable, CustomStringConvertible {
    package enum Kind: Sendable, Hashable {
        case configured
        case unlimited
        case after(Duration)
    }

    package let kind: Kind

    private init(_ kind: Kind) {
        self.kind = kind
    }

    /// ``ConnectionConfiguration/requestTimeout``, as it is when the request is placed: no
    /// limit when that is `nil`. The default of every call that takes a timeout.
    public static var configured: RequestTimeout { RequestTimeout(.configured) }

    /// No limit: the request waits until it is answered, its task is cancelled or the
    /// connection ends (``TetherError/Code/connectionLost``,
    /// ``TetherError/Code/connectionClosed``), whatever
    /// ``ConnectionConfiguration/requestTimeout`` says.
    public static var unlimited: RequestTimeout { RequestTimeout(.unlimited) }

    /// A limit of its own, whatever ``ConnectionConfiguration/requestTimeout`` says.
    ///
    /// - Parameter duration: How long the request may take from the call; zero or less
    ///   times it out as soon as the connection's loop sees it, unanswered.
    /// - Returns: The timeout.
    public static func after(_ duration: Duration) -> RequestTimeout {
        RequestTimeout(.after(duration))
    }

    /// A limit of its own, in whole seconds: `.seconds(5)`.
    ///
    /// - Parameter seconds: How many seconds the request may take from the call.
    /// - Returns: The timeout.
    public static func seconds(_ seconds: some BinaryInteger) -> RequestTimeout {
        .after(.seconds(seconds))
    }

    /// A limit of its own, in seconds with a fraction: `.seconds(0.5)`.
    ///
    /// - Parameter seconds: How many seconds the request may take from the call.
    /// - Returns: The timeout.
    public static func seconds(_ seconds: Double) -> RequestTimeout {
        .after(.seconds(seconds))
    }

    /// A limit of its own, in whole milliseconds: `.milliseconds(200)`.
    ///
    /// - Parameter milliseconds: How many milliseconds the request may take from the call.
    /// - Returns: The timeout.
    public static func milliseconds(_ milliseconds: some BinaryInteger) -> RequestTimeout {
        .after(.milliseconds(milliseconds))
    }

    /// A limit of its own, in milliseconds with a fraction: `.milliseconds(2.5)`.
    ///
    /// - Parameter milliseconds: How many milliseconds the request may take from the call.
    /// - Returns: The timeout.
    public static func milliseconds(_ milliseconds: Double) -> RequestTimeout {
        .after(.milliseconds(milliseconds))
    }

    /// The limit a request placed now gets: `configured` for ``configured``, `nil` (none)
    /// for ``unlimited``.
    ///
    /// - Parameter configured: ``ConnectionConfiguration/requestTimeout``.
    /// - Returns: The limit, or `nil` for none.
    func limit(configured: Duration?) -> Duration? {
        switch kind {
        case .configured: configured
        case .unlimited: nil
        case .after(let duration): duration
        }
    }

    /// `configured`, `unlimited`, or the duration: `5 s`, `250 ms`, `1.5 s`.
    public var description: String {
        switch kind {
        case .configured: "configured"
        case .unlimited: "unlimited"
        case .after(let duration): describe(duration)
        }
    }
}
