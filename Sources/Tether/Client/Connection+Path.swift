extension Connection {
    /// Whether the connection follows a path monitor: it has one, and it does not go to
    /// this host only (loopback needs no network path, whatever a monitor says of it).
    var followsPath: Bool {
        guard configuration.pathMonitor != nil else { return false }
        return !([endpoint] + configuration.alternateEndpoints).allSatisfy(\.isLoopback)
    }

    /// Starts following ``ConnectionConfiguration/pathMonitor``, before the first dial: the
    /// machine learns whether a path exists now, then every change as the monitor sees it,
    /// on the connection's loop.
    func followPath() {
        guard followsPath, pathObservation == nil, !state.isFinal, let monitor = configuration.pathMonitor else { return }
        pathReported(monitor.currentPath)
        let loop = loop
        // Weak: the monitor outlives the connection, which must not be kept by it.
        pathObservation = monitor.observe { [weak self] path in
            guard let connection = self else { return }
            loop.execute { [weak connection] in
                connection?.assumeIsolated { $0.pathReported(path) }
            }
        }
    }

    /// Stops following the path monitor: the connection has ended.
    func stopFollowingPath() {
        pathObservation?.cancel()
        pathObservation = nil
    }

    /// The monitor reported `path`: tells the machine when it differs from the last one.
    func pathReported(_ path: NetworkPath) {
        guard pathObservation != nil || lastPath == nil, !state.isFinal else { return }
        let previous = lastPath
        lastPath = path
        guard let previous else {
            // The first report: only whether a path exists counts, as no change.
            if !path.isUsable { handle(.pathUpdated(usable: false, changed: false)) }
            return
        }
        guard path != previous else { return }
        handle(.pathUpdated(usable: path.isUsable, changed: previous.differs(from: path)))
    }

    /// The path the connection was last told of by its monitor: ``NetworkPath/assumedUsable``
    /// without one, or when it goes to this host only.
    public var networkPath: NetworkPath { lastPath ?? .assumedUsable }
}

extension Endpoint {
    /// Whether the host is this one: `localhost`, a numeric address in 127.0.0.0/8 or `::1`,
    /// or a Unix domain socket.
    var isLoopback: Bool {
        if unixSocketPath != nil || host.lowercased() == "localhost" { return true }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return TetherSocketAddress(ipAddress: bare, port: 0)?.isLoopback ?? false
    }
}
