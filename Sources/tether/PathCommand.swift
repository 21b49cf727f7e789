#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether

/// `tether path`: the network path as connections see it, and each change of it.
struct PathCommand: Command {
    static let name = "path"
    static let summary = "print the network path and each change of it"
    static let synopsis = "tether path [--count N]"
    static let help = """
        Prints the network path that connections follow (the system's default routes and the
        addresses of their interfaces, from rtnetlink on Linux, or NWPathMonitor on Apple
        platforms), one line now and one line per change, until interrupted (Ctrl-C) or
        COUNT lines were printed:

          no usable path
          usable: IPv4 via 192.0.2.1 on wlan0 (index 3) from 192.0.2.10/24

        With IPv6 too, the line goes on like this:

          …; IPv6 via fe80::1 on wlan0 (index 3) from 2001:db8:1:2::/64

        Each IPv4 address is the interface's primary address with its prefix length; each
        IPv6 entry is the prefix of a global address, so a new temporary address is no change.
        A new address on the same interface and gateway is a new network.

        A connection verifies itself with a heartbeat when its path changes, and waits for
        a usable path instead of spending reconnect attempts while there is none.

        Exits 1 when the system's path cannot be watched, with the reason.

        arguments:
          --count N      exit 0 after N lines
          -h, --help     show this help
        """

    var count: Int?

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        if let count = try arguments.option("--count") {
            self.count = try Parse.count(count, option: "--count")
        }
    }

    func run() async throws -> ExitStatus {
        let monitor = SystemPathMonitor.shared
        // The first line is the system's path, not the one assumed until it is read.
        await monitor.waitForFirstReading()
        if let failure = monitor.failure {
            Console.fail(failure.message)
            return .failure
        }
        let watcher = SignalWatcher([SIGINT, SIGTERM])
        defer { watcher.cancel() }
        let signals = watcher.signals
        let limit = count
        return await withTaskGroup(of: ExitStatus.self) { group in
            group.addTask {
                var printed = 0
                for await path in monitor.paths {
                    Console.out(path.description)
                    printed += 1
                    if let limit, printed >= limit { return .success }
                }
                return .success
            }
            group.addTask {
                for await _ in signals { return .success }
                return .success
            }
            let status = await group.next() ?? .success
            group.cancelAll()
            watcher.cancel()
            return status
        }
    }
}
