public import Tether

/// A ``Tether/PathMonitor`` whose path changes only when a test says so: for tests of how
/// an app and its connections behave when the network changes, goes away and comes back.
///
/// ```swift
/// let monitor = TestPathMonitor()                     // usable, on wlan0
/// var configuration = ConnectionConfiguration.testing(on: network)
/// configuration.pathMonitor = monitor
/// …
/// monitor.update(.testing(interface: "rmnet0", index: 9, gateway: "198.51.100.1"))   // to cellular
/// monitor.update(.unusable)                           // no network at all
/// ```
///
/// Every ``TestNetwork`` has one (``TestNetwork/pathMonitor``), which
/// ``Tether/ConnectionConfiguration/use(_:)`` sets on the connections of the network. A
/// connection acts on an update in its own event loop's turn: on a ``TestNetwork``, await
/// ``TestNetwork/runUntilIdle()`` (or the state it leads to) before asserting.
public final class TestPathMonitor: PathMonitor {
    private let observers: PathObservers

    /// A monitor whose path is `path`: by default ``Tether/NetworkPath/testing(interface:index:gateway:)``,
    /// usable.
    ///
    /// - Parameter path: The path until the first ``update(_:)``.
    public init(_ path: NetworkPath = .testing()) {
        observers = PathObservers(path)
    }

    /// The path now.
    public var currentPath: NetworkPath { observers.path }

    /// How many observers (connections that follow the monitor, `paths` sequences) it has now.
    public var observerCount: Int { observers.count }

    /// Calls `handler` with the current path, then with every change; see
    /// ``Tether/PathMonitor/observe(_:)``.
    ///
    /// - Parameter handler: Told each path.
    /// - Returns: The observation; cancel it to stop the calls.
    public func observe(_ handler: @escaping @Sendable (NetworkPath) -> Void) -> PathObservation {
        observers.add(handler)
    }

    /// Makes `path` the current path and tells every observer before it returns, unless it
    /// equals the current one.
    ///
    /// - Parameter path: The new path.
    public func update(_ path: NetworkPath) {
        observers.publish(path)
    }
}

extension NetworkPath {
    /// A usable path with one IPv4 default route, for tests: `interface` (index `index`)
    /// via `gateway`.
    ///
    /// - Parameters:
    ///   - interface: The interface's name; `wlan0` by default.
    ///   - index: Its index; 3 by default.
    ///   - gateway: The gateway; `192.0.2.1` by default (a documentation address).
    /// - Returns: The path.
    public static func testing(interface: String = "wlan0", index: Int = 3, gateway: String = "192.0.2.1") -> NetworkPath {
        NetworkPath(isUsable: true, routes: [Route(family: .ipv4, interfaceName: interface, interfaceIndex: index, gateway: gateway)])
    }
}
