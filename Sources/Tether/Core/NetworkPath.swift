/// The way out of this device to the network, as a ``PathMonitor`` sees it: whether one is
/// usable, through which interface and gateway it goes, and from which of the interface's
/// addresses.
///
/// A connection compares each path with the one before: a path that is no longer usable, or
/// that goes out another way (Wi-Fi to cellular, a new gateway, a new address on the same
/// interface and gateway), is a change, and a connection verifies itself on it (see
/// <doc:Resilience>). ``identity`` names the network, so an app can key what it learns about
/// one network (its latency, whether it blocks a port) and find it again when the device
/// comes back to it: two Wi-Fi networks whose routers are both `192.168.1.1` still differ by
/// the address each gives the device.
///
/// ```swift
/// for await path in SystemPathMonitor.shared.paths {
///     print(path)     // usable: IPv4 via 192.0.2.1 on wlan0 (index 3) from 192.0.2.10/24
/// }
/// ```
public struct NetworkPath: Sendable, Hashable, CustomStringConvertible {
    /// An address family: IPv4 or IPv6.
    public struct Family: Sendable, Hashable, Comparable, CustomStringConvertible {
        let value: UInt8

        /// IPv4.
        public static let ipv4 = Family(value: 4)
        /// IPv6.
        public static let ipv6 = Family(value: 6)

        /// Orders IPv4 before IPv6.
        ///
        /// - Parameters:
        ///   - lhs: A family.
        ///   - rhs: Another family.
        /// - Returns: Whether `lhs` comes first.
        public static func < (lhs: Family, rhs: Family) -> Bool { lhs.value < rhs.value }

        /// `IPv4` or `IPv6`.
        public var description: String { "IPv\(value)" }
    }

    /// One default route: the way out for one address family, and the interface's addresses
    /// of that family that name the network.
    public struct Route: Sendable, Hashable, CustomStringConvertible {
        /// The address family the route is for.
        public var family: Family
        /// The name of the interface it goes out of, such as `wlan0` or `en0`.
        public var interfaceName: String
        /// The system's index of that interface.
        public var interfaceIndex: Int
        /// The gateway, as text (`192.0.2.1`, `fe80::1`); `nil` for a point-to-point link
        /// or when the system does not say.
        public var gateway: String?
        /// The interface's own addresses of the route's family, as far as they name the
        /// network, in order: for IPv4 each primary address with its prefix length
        /// (`192.0.2.10/24`); for IPv6 the prefix of each global address, at most 64 bits
        /// long (`2001:db8:1:2::/64`), since the addresses in it rotate (temporary, privacy
        /// addresses) while the network stays the same. Empty when the monitor does not say
        /// (`NWPathMonitor` names no addresses).
        ///
        /// Secondary IPv4 addresses (aliases) and link-local IPv6 addresses are left out:
        /// connections do not go out from the former, and the latter are the same on every
        /// network.
        public var localAddresses: [String]

        /// Creates a route.
        ///
        /// - Parameters:
        ///   - family: The address family.
        ///   - interfaceName: The interface's name.
        ///   - interfaceIndex: The interface's index.
        ///   - gateway: The gateway's address as text, if there is one.
        ///   - localAddresses: The interface's addresses that name the network
        ///     (see ``localAddresses``); none by default.
        public init(family: Family, interfaceName: String, interfaceIndex: Int, gateway: String? = nil, localAddresses: [String] = []) {
            self.family = family
            self.interfaceName = interfaceName
            self.interfaceIndex = interfaceIndex
            self.gateway = gateway
            self.localAddresses = localAddresses
        }

        /// `IPv4 via 192.0.2.1 on wlan0 (index 3) from 192.0.2.10/24`, `IPv6 on ppp0 (index 7)`
        /// without a gateway or known addresses.
        public var description: String {
            let via = gateway.map { " via \($0)" } ?? ""
            let from = localAddresses.isEmpty ? "" : " from " + localAddresses.joined(separator: ", ")
            return "\(family)\(via) on \(interfaceName) (index \(interfaceIndex))\(from)"
        }
    }

    /// Whether a usable way out exists: a default route whose interface is up, on Linux;
    /// a satisfied path, on Apple platforms.
    public var isUsable: Bool
    /// The default routes, at most one per family, IPv4 first; empty when there is none or
    /// when the monitor cannot tell (``assumedUsable``).
    public var routes: [Route]

    /// Creates a path.
    ///
    /// - Parameters:
    ///   - isUsable: Whether a usable way out exists.
    ///   - routes: Its default routes; they are kept in family order, IPv4 first.
    public init(isUsable: Bool, routes: [Route] = []) {
        self.isUsable = isUsable
        self.routes = routes.sorted { $0.family < $1.family }
    }

    /// No way out: no default route, no interface up.
    public static let unusable = NetworkPath(isUsable: false)

    /// Usable, with nothing known of the way out: what a connection without a path monitor
    /// assumes, and what ``SystemPathMonitor`` reports when it cannot watch the system.
    public static let assumedUsable = NetworkPath(isUsable: true)

    /// A name for the network the path goes out on, stable while it stays the same: the
    /// families, interfaces, gateways and local addresses (``Route/localAddresses``) of its
    /// routes, such as
    /// `IPv4 wlan0#3 via 192.0.2.1 from 192.0.2.10/24, IPv6 wlan0#3 via fe80::1 from 2001:db8:1:2::/64`.
    /// Empty when no route is known.
    ///
    /// A new address on the same interface and gateway (a lease from another router at the
    /// same address, a new subnet) is a new identity; a new temporary IPv6 address in the
    /// same prefix is not.
    public var identity: String {
        routes.map { route in
            "\(route.family) \(route.interfaceName)#\(route.interfaceIndex)"
                + (route.gateway.map { " via \($0)" } ?? "")
                + (route.localAddresses.isEmpty ? "" : " from " + route.localAddresses.joined(separator: " "))
        }.joined(separator: ", ")
    }

    /// `usable: IPv4 via 192.0.2.1 on wlan0 (index 3) from 192.0.2.10/24`,
    /// `usable (no route details)`, or `no usable path`.
    public var description: String {
        guard isUsable else { return "no usable path" }
        guard !routes.isEmpty else { return "usable (no route details)" }
        return "usable: " + routes.map(\.description).joined(separator: "; ")
    }

    /// Whether `other` goes out another way than this path: usable where this one is not
    /// (or the reverse), or with other routes or local addresses (another ``identity``). Between usable paths of which one has no
    /// known routes (``assumedUsable``) there is no change: nothing is known to have changed.
    ///
    /// - Parameter other: The newer path.
    /// - Returns: Whether a connection should treat `other` as a change of network.
    func differs(from other: NetworkPath) -> Bool {
        if isUsable != other.isUsable { return true }
        guard isUsable, !routes.isEmpty, !other.routes.isEmpty else { return false }
        return identity != other.identity
    }
}
