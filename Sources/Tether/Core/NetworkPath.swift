/// The way out of this device to the network, as a ``PathMonitor`` sees it: whether one is
/// usable, and through which interface and gateway it goes.
///
/// A connection compares each path with the one before: a path that is no longer usable, or
/// that goes out another way (Wi-Fi to cellular, a new gateway), is a change, and a
/// connection verifies itself on it (see <doc:Resilience>). ``identity`` names the network,
/// so an app can key what it learns about one network (its latency, whether it blocks a
/// port) and find it again when the device comes back to it.
///
/// ```swift
/// for await path in SystemPathMonitor.shared.paths {
///     print(path)     // usable: IPv4 via 192.0.2.1 on wlan0 (index 3)
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

    /// One default route: the way out for one address family.
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

        /// Creates a route.
        ///
        /// - Parameters:
        ///   - family: The address family.
        ///   - interfaceName: The interface's name.
        ///   - interfaceIndex: The interface's index.
        ///   - gateway: The gateway's address as text, if there is one.
        public init(family: Family, interfaceName: String, interfaceIndex: Int, gateway: String? = nil) {
            self.family = family
            self.interfaceName = interfaceName
            self.interfaceIndex = interfaceIndex
            self.gateway = gateway
        }

        /// `IPv4 via 192.0.2.1 on wlan0 (index 3)`, or `IPv6 on ppp0 (index 7)` without a gateway.
        public var description: String {
            let via = gateway.map { " via \($0)" } ?? ""
            return "\(family)\(via) on \(interfaceName) (index \(interfaceIndex))"
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
    /// families, interfaces and gateways of its routes, such as
    /// `IPv4 wlan0#3 via 192.0.2.1, IPv6 wlan0#3 via fe80::1`. Empty when no route is known.
    public var identity: String {
        routes.map { route in
            "\(route.family) \(route.interfaceName)#\(route.interfaceIndex)" + (route.gateway.map { " via \($0)" } ?? "")
        }.joined(separator: ", ")
    }

    /// `usable: IPv4 via 192.0.2.1 on wlan0 (index 3)`, `usable (no route details)`, or
    /// `no usable path`.
    public var description: String {
        guard isUsable else { return "no usable path" }
        guard !routes.isEmpty else { return "usable (no route details)" }
        return "usable: " + routes.map(\.description).joined(separator: "; ")
    }

    /// Whether `other` goes out another way than this path: usable where this one is not
    /// (or the reverse), or with other routes. Between usable paths of which one has no
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
