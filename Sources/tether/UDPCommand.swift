#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether
import TetherUDP

/// `tether udp listen` and `tether udp send`: UDP datagrams by hand, with ``DatagramSocket``.
struct UDPCommand: Command {
    static let name = "udp"
    static let summary = "receive or send UDP datagrams"
    static let synopsis = """
        tether udp listen [HOST:]PORT [--count N]
        tether udp send HOST:PORT TEXT
        """
    static let help = """
        listen: binds a UDP socket to HOST (default 127.0.0.1) and PORT (0 for one the
        system chooses), prints where it listens, then one line per datagram until
        interrupted (Ctrl-C) or COUNT datagrams were printed:

          tether udp listen 9000
          listening on udp 127.0.0.1:9000
          from 127.0.0.1:51234: hello
          from [::1]:40000: hex 00 01 ff

        A datagram is printed as text when it is UTF-8 without control characters (tab
        aside), else as hex. Up to 1,024 datagrams wait to be printed; more are dropped, and
        their count is printed at the end.

        send: sends TEXT as one datagram to HOST:PORT from a port the system chooses, and
        prints `sent N bytes to ADDRESS`. Delivery is not confirmed: UDP may lose datagrams.

          tether udp send 127.0.0.1:9000 hello

        HOST is a numeric IPv4 or IPv6 address (127.0.0.1, 0.0.0.0, [::1], [::]).

        arguments:
          [HOST:]PORT    listen: the address and port to bind: 9000, 0.0.0.0:9000, [::1]:9000
          HOST:PORT      send: where to send: 127.0.0.1:9000, [::1]:9000
          --count N      listen: exit 0 after N datagrams
          -h, --help     show this help

        The older spelling `--host H --port P` still works, with a note on stderr.
        """

    enum Action: Sendable {
        case listen(count: Int?)
        case send(text: String)
    }

    var host: String
    var port: Int
    var action: Action

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        // The spelling of earlier versions, --host H --port P, instead of HOST:PORT.
        let oldHost = try arguments.option("--host")
        let oldPort = try arguments.option("--port").map { (text) throws(ArgumentError) in try Parse.port(text, option: "--port") }
        let count = try arguments.option("--count").map { (text) throws(ArgumentError) in try Parse.count(text, option: "--count") }
        let action = try arguments.positional("listen or send")
        guard action == "listen" || action == "send" else {
            throw ArgumentError("unknown udp action '\(action)': listen or send")
        }
        let address: (host: String, port: Int)
        if oldHost != nil || oldPort != nil {
            address = try Self.oldAddress(host: oldHost, port: oldPort, action: action)
        } else if action == "listen" {
            address = try Parse.ipAddressAndPort(try arguments.positional("[HOST:]PORT"), defaultHost: "127.0.0.1")
        } else {
            address = try Parse.ipAddressAndPort(try arguments.positional("HOST:PORT"))
        }
        (host, port) = address
        if action == "listen" {
            self.action = .listen(count: count)
        } else {
            guard port != 0 else { throw ArgumentError("udp send needs a port other than 0") }
            guard count == nil else { throw ArgumentError("--count is for udp listen") }
            self.action = .send(text: try arguments.positional("TEXT"))
        }
    }

    /// The address given as `--host H --port P`, with a note on stderr that says how to
    /// give it now.
    private static func oldAddress(host: String?, port: Int?, action: String) throws(ArgumentError) -> (host: String, port: Int) {
        guard let port else { throw ArgumentError("missing --port") }
        if action == "send", host == nil { throw ArgumentError("udp send needs --host") }
        let host = host ?? "127.0.0.1"
        guard let address = TetherSocketAddress(ipAddress: host, port: port) else {
            throw ArgumentError("--host '\(host)' is not a numeric IPv4 or IPv6 address")
        }
        let example = action == "listen" ? "tether udp listen \(address)" : "tether udp send \(address) TEXT"
        Console.err("tether: --host and --port are deprecated here: give the address as HOST:PORT, `\(example)`")
        return (host, port)
    }

    func run() async throws -> ExitStatus {
        switch action {
        case .listen(let count): try await listen(count: count)
        case .send(let text): try await send(text)
        }
    }

    private func send(_ text: String) async throws -> ExitStatus {
        guard let destination = TetherSocketAddress(ipAddress: host, port: port) else { return .usage }
        let socket = try await DatagramSocket.bind(host: destination.isIPv6 ? "::" : "0.0.0.0", port: 0)
        defer { socket.close() }
        let bytes = Array(text.utf8)
        try socket.send(bytes, to: destination)
        Console.out("sent \(bytes.count) bytes to \(destination)")
        return .success
    }

    private func listen(count limit: Int?) async throws -> ExitStatus {
        let socket = try await DatagramSocket.bind(host: host, port: port)
        defer { socket.close() }
        Console.out("listening on udp \(socket.localAddress)")
        let watcher = SignalWatcher([SIGINT, SIGTERM])
        defer { watcher.cancel() }
        let signals = watcher.signals
        let status = try await withThrowingTaskGroup(of: ExitStatus.self) { group in
            group.addTask {
                var printed = 0
                for try await datagram in socket.datagrams {
                    Console.out("from \(datagram.sender): \(Self.render(datagram.bytes))")
                    printed += 1
                    if let limit, printed >= limit { return .success }
                }
                return .success
            }
            group.addTask {
                for await _ in signals { return .success }
                return .success
            }
            let status = try await group.next() ?? .success
            group.cancelAll()
            watcher.cancel()
            socket.close()
            return status
        }
        let dropped = socket.droppedDatagrams + socket.truncatedDatagrams
        if dropped > 0 { Console.err("tether: \(dropped) datagrams dropped (more than 1,024 waiting, or too large)") }
        return status
    }

    /// The datagram as text when it is UTF-8 without control characters other than tab,
    /// else as `hex 00 01 ff`.
    static func render(_ bytes: [UInt8]) -> String {
        if let text = String(validating: bytes, as: UTF8.self),
            !text.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\t") || $0.value == 0x7f })
        {
            return text
        }
        return "hex " + bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined(separator: " ")
    }
}
