#if canImport(Network)
import Dispatch
import Network

extension SystemPathMonitor {
    /// Starts the process's `NWPathMonitor` on a queue of its own. Its first path comes
    /// shortly after the start: until then the path is ``NetworkPath/assumedUsable``, and
    /// the first real one is no change to a connection (``NetworkPath/differs(from:)``).
    static func startWatching(
        _ publish: @escaping @Sendable (NetworkPath) -> Void,
        failed: @escaping @Sendable (TetherError) -> Void
    ) throws(TetherError) -> any Sendable {
        let monitor = NWPathMonitor()
        monitor.pathUpdateHandler = { path in
            publish(NetworkPath(path))
        }
        monitor.start(queue: DispatchQueue(label: "tether.path-monitor"))
        return WatchedMonitor(monitor: monitor)
    }
}

/// Keeps the `NWPathMonitor` alive for as long as the process watches the network.
private struct WatchedMonitor: @unchecked Sendable {
    // @unchecked Sendable: the monitor is only kept, never used again, after its start.
    let monitor: NWPathMonitor
}

extension NetworkPath {
    /// The path `path` describes: usable when satisfied; one route per gateway (or one per
    /// family the path supports, without a gateway, when it names none), on the interface
    /// the system would use first.
    init(_ path: NWPath) {
        guard path.status == .satisfied else {
            self.init(isUsable: false)
            return
        }
        guard let interface = path.availableInterfaces.first else {
            self.init(isUsable: true)
            return
        }
        var routes: [Route] = []
        for gateway in path.gateways {
            guard case .hostPort(let host, _) = gateway else { continue }
            switch host {
            case .ipv4(let address):
                if !routes.contains(where: { $0.family == .ipv4 }) {
                    routes.append(Route(family: .ipv4, interfaceName: interface.name, interfaceIndex: interface.index, gateway: "\(address)"))
                }
            case .ipv6(let address):
                if !routes.contains(where: { $0.family == .ipv6 }) {
                    routes.append(Route(family: .ipv6, interfaceName: interface.name, interfaceIndex: interface.index, gateway: "\(address)"))
                }
            default:
                continue
            }
        }
        if routes.isEmpty {
            if path.supportsIPv4 { routes.append(Route(family: .ipv4, interfaceName: interface.name, interfaceIndex: interface.index)) }
            if path.supportsIPv6 { routes.append(Route(family: .ipv6, interfaceName: interface.name, interfaceIndex: interface.index)) }
        }
        self.init(isUsable: true, routes: routes)
    }
}
#endif
