public import Tether

/// A host, and optionally a port, that an ``HTTPForwarder`` may reach.
///
/// Written as `host`, `host:port`, `[ipv6]:port` or `*.domain`:
///
/// - `api.example.com` allows that host on any port;
/// - `api.example.com:8443` allows that host on port 8443 only;
/// - `*.example.com` allows every subdomain of `example.com` (not `example.com` itself);
/// - `127.0.0.1:8080` and `[::1]:8080` allow a loopback port.
///
/// Host names are compared without regard to case and without a trailing dot. The
/// allow-list judges the host written in the URL: allowing a name trusts whatever
/// addresses it resolves to.
public struct HTTPAllowedHost: Sendable, Hashable, CustomStringConvertible {
    /// The host name or address, in lower case, without brackets; `*.` starts a wildcard.
    public let host: String
    /// The only port allowed, or `nil` for any port.
    public let port: Int?

    /// Creates an entry from its parts.
    ///
    /// - Parameters:
    ///   - host: The host name or address (an IPv6 address without brackets), or
    ///     `*.domain` for every subdomain.
    ///   - port: The only port allowed, or `nil` for any.
    public init(host: String, port: Int? = nil) {
        self.host = normalizedHost(host)
        self.port = port
    }

    /// Parses an entry written as `host`, `host:port`, `[ipv6]`, `[ipv6]:port` or `*.domain`.
    ///
    /// - Parameter spec: The entry.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument`` naming the entry
    ///   when it cannot be read.
    public init(parsing spec: String) throws(TetherError) {
        func refuse(_ why: String) -> TetherError {
            TetherError(code: .invalidArgument, message: "cannot read the allowed host \"\(spec)\": \(why)")
        }
        var hostPart = Substring(spec)
        var portPart: Substring?
        if spec.hasPrefix("[") {
            guard let close = spec.firstIndex(of: "]") else { throw refuse("no closing ]") }
            hostPart = spec[spec.index(after: spec.startIndex)..<close]
            let rest = spec[spec.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { throw refuse("expected :PORT after ]") }
                portPart = rest.dropFirst()
            }
        } else if let colon = spec.lastIndex(of: ":") {
            guard spec.firstIndex(of: ":") == colon else { throw refuse("write an IPv6 address in brackets: [::1]:8080") }
            hostPart = spec[..<colon]
            portPart = spec[spec.index(after: colon)...]
        }
        var port: Int?
        if let portPart {
            guard let value = Int(portPart), (1...65_535).contains(value) else { throw refuse("the port must be 1…65535") }
            port = value
        }
        var name = String(hostPart)
        let wildcard = name.hasPrefix("*.")
        if wildcard { name.removeFirst(2) }
        guard !name.isEmpty, name.utf8.allSatisfy(isHostByte) else {
            throw refuse("a host is letters, digits, dots, hyphens, or an IPv6 address in brackets")
        }
        self.init(host: (wildcard ? "*." : "") + name, port: port)
    }

    /// Whether a URL's host and port are allowed by this entry.
    ///
    /// - Parameters:
    ///   - host: The URL's host, in any case (an IPv6 address without brackets).
    ///   - port: The URL's port, or its scheme's default.
    /// - Returns: `true` when the entry covers them.
    public func matches(host: String, port: Int) -> Bool {
        if let allowed = self.port, allowed != port { return false }
        let candidate = normalizedHost(host)
        if self.host.hasPrefix("*.") {
            let suffix = self.host.dropFirst(1)   // ".example.com"
            return candidate.count > suffix.count && candidate.hasSuffix(suffix)
        }
        return candidate == self.host
    }

    /// The entry as written: `host`, `host:port` or `[ipv6]:port`.
    public var description: String {
        let shown = host.contains(":") ? "[\(host)]" : host
        return port.map { "\(shown):\($0)" } ?? shown
    }
}

func normalizedHost(_ host: String) -> String {
    var lowered = host.lowercased()
    while lowered.hasSuffix(".") { lowered.removeLast() }
    return lowered
}

func isHostByte(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
         UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: ":"):
        return true
    default:
        return false
    }
}

/// How a server performs HTTP requests for its clients: which hosts it reaches and within
/// what bounds.
///
/// The allow-list starts empty, so a forwarder refuses every request until you name the
/// hosts it may reach. An open forwarder would let any client make the server fetch
/// internal addresses (cloud metadata endpoints, admin consoles) on its behalf.
public struct HTTPForwardingConfiguration: Sendable {
    /// The hosts requests may go to. Empty (the default) refuses everything.
    public var allowedHosts: [HTTPAllowedHost]
    /// The longest an exchange with the upstream server may take, redirects included. A
    /// client may ask for less with ``HTTPRequest/timeout``, never more. Default 30 s.
    public var timeout: Duration = .seconds(30)
    /// The largest response body passed back. A larger one is cut off as soon as it is seen
    /// (from `Content-Length`, or while it streams) and answered with
    /// ``HTTPForwardingError/Reason/responseTooLarge``. The server's frame limit
    /// (``Tether/Limits/maximumPayloadLength``) applies too. Default 8 MiB.
    public var maximumResponseBodySize: Int = 8 << 20
    /// How many redirects are followed, each only to an allowed host; a redirect elsewhere,
    /// or one too many, is passed back as the `3xx` response it is. Default 5.
    public var maximumRedirects: Int = 5
    /// The frame type requests arrive on. Default `0x403`, the seed profile's.
    public var requestType: UInt32 = 0x403

    /// Creates a configuration that allows the given hosts.
    ///
    /// - Parameter allowedHosts: The hosts requests may go to; none by default.
    public init(allowedHosts: [HTTPAllowedHost] = []) {
        self.allowedHosts = allowedHosts
    }

    /// Creates a configuration from allow-list entries written as text.
    ///
    /// - Parameter allowing: Entries such as `"api.example.com"`, `"127.0.0.1:8080"` or
    ///   `"*.internal.example"`; see ``HTTPAllowedHost``.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/invalidArgument`` for an entry that
    ///   cannot be read.
    public init(allowing: [String]) throws(TetherError) {
        var hosts: [HTTPAllowedHost] = []
        for entry in allowing { hosts.append(try HTTPAllowedHost(parsing: entry)) }
        self.init(allowedHosts: hosts)
    }

    /// Whether a host and port are on the allow-list.
    ///
    /// - Parameters:
    ///   - host: The URL's host.
    ///   - port: The URL's port, or its scheme's default.
    /// - Returns: `true` when an entry allows them.
    public func allows(host: String, port: Int) -> Bool {
        allowedHosts.contains { $0.matches(host: host, port: port) }
    }
}
