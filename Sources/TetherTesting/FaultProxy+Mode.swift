extension FaultProxy {
    /// A direction of the byte stream through the proxy.
    ///
    /// The proxy sits between a client and a server: bytes the client sends travel
    /// ``upstream`` to the server, and the server's answers travel ``downstream``.
    public enum Direction: Sendable, Hashable, CustomStringConvertible {
        /// From the client to the server.
        case upstream
        /// From the server to the client.
        case downstream

        /// `upstream` or `downstream`.
        public var description: String { self == .upstream ? "upstream" : "downstream" }
    }

    /// How the bytes of one direction are written out.
    ///
    /// Both sockets of every connection have `TCP_NODELAY` set, so each write the proxy makes
    /// leaves as a segment of its own: the peer's reads see the pieces the shaping makes.
    public enum Shaping: Sendable, Equatable {
        /// As soon as they are read, as much as the socket takes per write.
        case passThrough
        /// In writes of at most `maximum` bytes each, so a frame arrives split at every
        /// possible place when `maximum` is 1.
        case pieces(maximum: Int)
        /// Held back until at least `minimum` bytes are waiting or the oldest of them has
        /// waited `flushAfter`, then written in one write, so several frames arrive in one
        /// read. The end of the stream flushes what is waiting.
        case coalesce(minimum: Int, flushAfter: Duration)
    }

    /// Closing a connection after a number of forwarded bytes.
    ///
    /// Once the allowance is used up the proxy closes both sockets of the connection, with a
    /// FIN or, with ``reset``, an RST. The cut lands exactly after ``afterBytes`` bytes, so
    /// it can fall in the middle of a frame.
    public struct Cut: Sendable, Equatable {
        /// Which forwarded bytes count towards a cut.
        public enum Counting: Sendable, Equatable {
            /// Only bytes from the client to the server.
            case upstream
            /// Only bytes from the server to the client.
            case downstream
            /// Bytes in both directions.
            case total
        }

        /// How many more bytes may be forwarded before both sockets are closed.
        public var afterBytes: Int
        /// Which bytes count. Default ``Counting/total``.
        public var counting: Counting
        /// Whether to reset both sides (`SO_LINGER` 0: the peers see an RST) instead of
        /// closing them (the peers see a FIN). Default `false`.
        public var reset: Bool

        /// Makes a cut.
        ///
        /// - Parameters:
        ///   - bytes: How many bytes may be forwarded first; 0 closes the connection at once.
        ///     Must not be negative.
        ///   - counting: Which bytes count. Default ``Counting/total``.
        ///   - reset: Whether to reset instead of closing. Default `false`.
        public init(after bytes: Int, counting: Counting = .total, reset: Bool = false) {
            precondition(bytes >= 0, "a cut needs a byte count of 0 or more")
            afterBytes = bytes
            self.counting = counting
            self.reset = reset
        }

        func counts(_ direction: Direction) -> Bool {
            switch counting {
            case .total: true
            case .upstream: direction == .upstream
            case .downstream: direction == .downstream
            }
        }
    }

    /// The faults applied to one connection.
    ///
    /// A mode combines a shaping per direction, a delay, a stall and a cut. The delay comes
    /// first: bytes are held for ``delay`` after they are read, then shaped. A cut counts from
    /// the moment a connection opens with it or its cut changes: setting the same cut again
    /// does not restart the count.
    public struct Mode: Sendable, Equatable {
        /// How bytes from the client to the server are written. Default ``Shaping/passThrough``.
        public var upstream: Shaping = .passThrough
        /// How bytes from the server to the client are written. Default ``Shaping/passThrough``.
        public var downstream: Shaping = .passThrough
        /// Whether to read nothing (so TCP flow control pushes back on both peers) and forward
        /// nothing already read, until unstalled or closed. Bytes given to
        /// ``FaultProxy/inject(_:toward:)`` still go out. Default `false`.
        public var stalled = false
        /// A cut after some forwarded bytes, or `nil` for none. Default `nil`.
        public var cut: Cut?
        /// How long every byte is held, in both directions, after the proxy read it and
        /// before it may be forwarded: a latency. The order of bytes is kept. Default `.zero`.
        public var delay: Duration = .zero
        /// The most bytes a second forwarded from the client to the server, a bandwidth
        /// limit; `nil` for none. Default `nil`.
        ///
        /// A token bucket of a twentieth of a second's worth (at least 1 byte): idle time
        /// earns no more than that, so the rate holds over any span longer than 50 ms. With
        /// TCP's flow control behind the proxy's 64 KiB per direction, the sender is slowed
        /// to the rate as on a slow link.
        public var upstreamBytesPerSecond: Int?
        /// The most bytes a second forwarded from the server to the client; `nil` for none.
        /// Default `nil`. See ``upstreamBytesPerSecond``.
        public var downstreamBytesPerSecond: Int?

        /// Makes a mode.
        ///
        /// - Parameters:
        ///   - upstream: How bytes to the server are written. Default ``Shaping/passThrough``.
        ///   - downstream: How bytes to the client are written. Default ``Shaping/passThrough``.
        ///   - stalled: Whether nothing is forwarded. Default `false`.
        ///   - cut: A cut, or `nil`. Default `nil`.
        ///   - delay: How long each byte is held before it may be forwarded. Default `.zero`.
        public init(
            upstream: Shaping = .passThrough,
            downstream: Shaping = .passThrough,
            stalled: Bool = false,
            cut: Cut? = nil,
            delay: Duration = .zero
        ) {
            self.upstream = upstream
            self.downstream = downstream
            self.stalled = stalled
            self.cut = cut
            self.delay = delay
        }

        /// Every byte forwarded as soon as it is read, with no fault.
        public static let passThrough = Mode()
        /// Nothing read and nothing forwarded (``stalled``).
        public static let stalled = Mode(stalled: true)

        /// Writes of at most `maximum` bytes in both directions.
        ///
        /// - Parameter maximum: The largest write; must be 1 or more.
        /// - Returns: The mode.
        public static func pieces(_ maximum: Int) -> Mode {
            precondition(maximum > 0, "pieces need a maximum of 1 byte or more")
            return Mode(upstream: .pieces(maximum: maximum), downstream: .pieces(maximum: maximum))
        }

        /// Coalesced writes in both directions.
        ///
        /// - Parameters:
        ///   - minimum: How many bytes to gather before a write; must be 1 or more.
        ///   - flushAfter: How long the oldest byte may wait before what is gathered is written.
        /// - Returns: The mode.
        public static func coalesce(minimum: Int, flushAfter: Duration) -> Mode {
            precondition(minimum > 0, "coalescing needs a minimum of 1 byte or more")
            return Mode(upstream: .coalesce(minimum: minimum, flushAfter: flushAfter), downstream: .coalesce(minimum: minimum, flushAfter: flushAfter))
        }

        /// A cut after `bytes` more forwarded bytes, with no other fault.
        ///
        /// - Parameters:
        ///   - bytes: How many bytes may be forwarded first.
        ///   - counting: Which bytes count. Default ``Cut/Counting/total``.
        ///   - reset: Whether to reset instead of closing. Default `false`.
        /// - Returns: The mode.
        public static func cut(after bytes: Int, counting: Cut.Counting = .total, reset: Bool = false) -> Mode {
            Mode(cut: Cut(after: bytes, counting: counting, reset: reset))
        }

        /// A bandwidth limit of `bytesPerSecond` in each direction, with no other fault.
        ///
        /// - Parameter bytesPerSecond: The most bytes a second each way; must be 1 or more.
        /// - Returns: The mode.
        public static func limited(bytesPerSecond: Int) -> Mode {
            precondition(bytesPerSecond > 0, "a bandwidth limit needs 1 byte a second or more")
            var mode = Mode()
            mode.upstreamBytesPerSecond = bytesPerSecond
            mode.downstreamBytesPerSecond = bytesPerSecond
            return mode
        }

        /// Every byte held for `delay` in both directions, with no other fault.
        ///
        /// - Parameter delay: How long each byte is held.
        /// - Returns: The mode.
        public static func delayed(_ delay: Duration) -> Mode {
            Mode(delay: delay)
        }

        func shaping(_ direction: Direction) -> Shaping {
            direction == .upstream ? upstream : downstream
        }

        func bytesPerSecond(_ direction: Direction) -> Int? {
            direction == .upstream ? upstreamBytesPerSecond : downstreamBytesPerSecond
        }
    }

    /// Which connections a mode change applies to.
    public enum Scope: Sendable {
        /// Connections accepted from now on (the ``FaultProxy/defaultMode``).
        case newConnections
        /// Connections open now.
        case currentConnections
        /// Both.
        case all
    }

    /// What the proxy has done so far.
    public struct Counters: Sendable, Equatable, CustomStringConvertible {
        /// Client connections accepted (refused ones not included).
        public var accepted = 0
        /// Client connections reset at once because the proxy refused new connections.
        public var refused = 0
        /// Upstream connections established.
        public var upstreamConnected = 0
        /// Upstream connections that failed (the client was then reset).
        public var upstreamFailed = 0
        /// Accepted connections fully closed (both sockets closed, their thread exited).
        public var closed = 0
        /// Bytes forwarded from the client to the server.
        public var bytesUpstream = 0
        /// Bytes forwarded from the server to the client.
        public var bytesDownstream = 0
        /// `send` calls that forwarded bytes to the server.
        public var writesUpstream = 0
        /// `send` calls that forwarded bytes to the client.
        public var writesDownstream = 0
        /// Bytes written by ``FaultProxy/inject(_:toward:)``, in either direction.
        public var bytesInjected = 0

        /// No connections and no bytes yet.
        public init() {}

        /// Connections accepted and not yet closed.
        public var open: Int { accepted - closed }

        /// Every counter, on one line.
        public var description: String {
            "accepted \(accepted), refused \(refused), connected \(upstreamConnected), failed \(upstreamFailed), closed \(closed), "
                + "up \(bytesUpstream) B in \(writesUpstream) writes, down \(bytesDownstream) B in \(writesDownstream) writes, "
                + "injected \(bytesInjected) B"
        }
    }
}
