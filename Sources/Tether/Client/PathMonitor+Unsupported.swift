#if !(os(Linux) || os(Android)) && !canImport(Network)
extension SystemPathMonitor {
    /// No watcher on this platform: the path stays ``NetworkPath/assumedUsable``.
    static func startWatching(
        _ publish: @escaping @Sendable (NetworkPath) -> Void,
        failed: @escaping @Sendable (TetherError) -> Void
    ) throws(TetherError) -> any Sendable {
        throw TetherError(code: .systemCall, message: "cannot watch the network path: this platform has no path watcher")
    }
}
#endif
