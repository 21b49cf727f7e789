#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Tether

/// `tether serve`: the seed demo server, until SIGINT or SIGTERM.
struct ServeCommand: Command {
    static let name = "serve"
    static let summary = "run the seed demo server (echo, pushes, heartbeat acks)"
    static let synopsis = """
        tether serve [--host HOST] [--port PORT] [--push-every SECONDS [--push-type TYPE]] \
        [--idle-timeout SECONDS] [--handshake-timeout SECONDS]
        """
    static let help = """
        Runs the seed demo server until SIGINT or SIGTERM, then closes every connection
        gracefully and exits 0.

          0x402  answers {"echo": <request content>}
          0x404  {"delay_ms": N}: waits N ms, then answers like 0x402
          0x1    heartbeats are acked with the same serial
          other  answered with {"error": "unknown type 0x…"}

        Prints `listening on HOST:PORT` on stdout once it accepts connections; logs peers
        on stderr, with the reason each one left (an idle or handshake timeout among them).

        options:
          --host HOST                   address to listen on (default 127.0.0.1)
          --port PORT                   port; 0 picks a free one (default 9000)
          --push-every SECONDS          broadcast a notification to every peer this often:
                                        serial n, content {"seq": n, "time": "<ISO 8601>"}
          --push-type TYPE              its type, 0x2…0x400 (default 0x2)
          --idle-timeout SECONDS        close a peer that sends nothing at all, not even a
                                        heartbeat, for this long; 0 or off keeps quiet
                                        peers (default 60)
          --handshake-timeout SECONDS   close a new peer that has not sent a complete frame
                                        this long after connecting; 0 or off waits forever
                                        (default 10)
          -h, --help                    show this help
        """

    var host = "127.0.0.1"
    var port = 9000
    var pushInterval: Duration?
    var pushType = SeedService.pushType
    var idleTimeout = ServerConfiguration().idleTimeout
    var handshakeTimeout = ServerConfiguration().handshakeTimeout

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        if let host = try arguments.option("--host") {
            guard !host.isEmpty else { throw ArgumentError("--host needs an address") }
            self.host = host
        }
        if let port = try arguments.option("--port") {
            self.port = try Parse.port(port, option: "--port")
        }
        if let every = try arguments.option("--push-every") {
            pushInterval = try Parse.seconds(every, option: "--push-every")
        }
        if let type = try arguments.option("--push-type") {
            guard pushInterval != nil else { throw ArgumentError("--push-type needs --push-every") }
            pushType = try Parse.frameType(type, option: "--push-type")
            guard Profile.seed.classify(pushType) == .notification else {
                throw ArgumentError("--push-type \(hex(pushType)) is not a notification type (0x2…0x400)")
            }
        }
        if let timeout = try arguments.option("--idle-timeout") {
            idleTimeout = try Parse.secondsOrOff(timeout, option: "--idle-timeout")
        }
        if let timeout = try arguments.option("--handshake-timeout") {
            handshakeTimeout = try Parse.secondsOrOff(timeout, option: "--handshake-timeout")
        }
    }

    /// What ended one of the serve tasks.
    private enum Outcome: Sendable {
        case signal(Int32)
        case serverStopped
        case idle
    }

    func run() async throws -> ExitStatus {
        var configuration = ServerConfiguration(host: host, port: port)
        configuration.idleTimeout = idleTimeout
        configuration.handshakeTimeout = handshakeTimeout
        let server = Server(configuration: configuration)
        SeedService.install(on: server)
        let watcher = SignalWatcher([SIGINT, SIGTERM])
        defer { watcher.cancel() }
        let signals = watcher.signals
        let pushInterval = pushInterval
        let pushType = pushType

        try await withThrowingTaskGroup(of: Outcome.self) { group in
            group.addTask {
                try await server.run()
                return .serverStopped
            }
            group.addTask {
                let address = try await server.listeningAddress()
                Console.out("listening on \(address)")
                return .idle
            }
            group.addTask {
                for await event in server.events {
                    if let line = Self.logLine(for: event) { Console.err(line) }
                }
                return .idle
            }
            if let pushInterval {
                group.addTask {
                    try await Self.broadcast(on: server, every: pushInterval, type: pushType)
                    return .idle
                }
            }
            group.addTask {
                for await number in signals { return .signal(number) }
                return .idle
            }
            var stopping = false
            while true {
                let outcome: Outcome?
                do {
                    outcome = try await group.next()
                } catch is CancellationError where stopping {
                    continue
                }
                guard let outcome else { break }
                switch outcome {
                case .signal(let number):
                    Console.err("\(SignalWatcher.name(of: number)): shutting down")
                    stopping = true
                    group.cancelAll()
                case .serverStopped:
                    stopping = true
                    group.cancelAll()
                case .idle:
                    continue
                }
            }
        }
        return .success
    }

    /// `peer#3 connected from 127.0.0.1:53422`, or `nil` for events not worth a line.
    private static func logLine(for event: ServerEvent) -> String? {
        let peer = event.peer.map(String.init(describing:)) ?? "peer"
        let reason = event.reason.map { ": \($0.message)" } ?? ""
        switch event.kind {
        case .peerConnected: return "\(peer) connected from \(event.address)"
        case .peerDisconnected: return "\(peer) disconnected\(reason)"
        case .peerRejected: return "rejected a connection from \(event.address)\(reason)"
        default: return nil
        }
    }

    /// Broadcasts numbered pushes until cancelled.
    private static func broadcast(on server: Server, every interval: Duration, type: UInt32) async throws {
        _ = try await server.listeningAddress()
        var sequence: UInt32 = 0
        while true {
            try await Task.sleep(for: interval)
            sequence = sequence == .max ? 1 : sequence + 1
            let time = Date().ISO8601Format()
            await server.broadcast(SeedService.push(type: type, sequence: sequence, time: time))
        }
    }
}
