import Tether

/// `tether bench`: a closed-loop load generator for any server that speaks the protocol.
struct BenchCommand: Command {
    static let name = "bench"
    static let summary = "load a server with requests; print throughput and latency percentiles"
    static let synopsis = """
        tether bench HOST:PORT|ws://HOST:PORT/PATH [--profile NAME] [--connections C] [--in-flight K] [--duration S] [--size BYTES] [--type T] [--on-loop] \
        \(FallbackOption.synopsis) \(ProxyOption.synopsis) \(ClientTLSOptions.synopsis)
        """
    static let briefHelp: String? = """
        Opens C connections and keeps K requests in flight on each (a closed loop), for
        SECONDS; prints a progress line each second on stderr and, at the end, throughput
        and latency percentiles on stdout. Exits 1 when a request fails. Measure with a
        release build on both sides: `swift run -c release tether serve …` and
        `swift run -c release tether bench …`.

          tether bench 127.0.0.1:9000 --connections 4 --in-flight 50

        common options:
        \(optionHelp([
            ("HOST:PORT", "the server: 127.0.0.1:9000, [::1]:9000, or ws://HOST:PORT/PATH, wss://…"),
            ("--connections C", "connections to open (default 1)"),
            ("--in-flight K", "requests in flight per connection (default 1)"),
            ("--duration SECONDS", "how long to measure (default 5)"),
            ("--size BYTES", "payload bytes per request (default 64)"),
            ("--profile NAME", "the wire format (default seed; `tether profiles`)"),
            ("--tls", "connect with TLS; --ca FILE trusts other CAs than the system's"),
        ], column: 23))
        """
    static let help = """
        Opens C connections and keeps K requests in flight on each: every response sends the
        next request at once (a closed loop). The payload is SIZE bytes; the server should
        answer each request, as `tether serve` does for 0x402. Prints a progress line each
        second on stderr and, at the end, throughput and latency percentiles on stdout.
        Exits 1 when a request fails.

        With --profile it speaks another wire format (`tether profiles`). In profiles
        without a serial (compact, marker, lines) the server answers in order and each
        response goes to the oldest request waiting for it; in marker and lines the
        requests are 0x401.

        With TLS, each connection does its handshake before the measurement starts, and the
        first line of the results names the protocol and cipher. Over WebSocket (a ws:// or
        wss:// URL, or a --fallback taken) the first line names the endpoint in use.

        arguments:
          HOST:PORT            the server: 127.0.0.1:9000, [::1]:9000, or its WebSocket
                               URL: ws://127.0.0.1:8080/tether, wss://…
        \(ProfileOption.help(column: 23))
          --connections C      connections to open (default 1)
          --in-flight K        requests in flight per connection (default 1)
          --duration SECONDS   how long to measure (default 5)
          --size BYTES         payload bytes per request (default 64)
          --type T             request type (default 0x402; 0x401 in marker and lines)
          --on-loop            run the request tasks on their connection's event loop
                               (Connection.taskExecutor) instead of the global executor
        \(FallbackOption.help(column: 23))
        \(ProxyOption.help(column: 23))
        \(ClientTLSOptions.help(column: 23))
          -h, --help           show this help
        """

    var endpoint: Endpoint
    var profile = Profile.seed
    var connections = 1
    var inFlight = 1
    var duration: Duration = .seconds(5)
    var size = 64
    var type: UInt32 = 0x402
    var onLoop = false
    var tls = ClientTLSOptions()
    var fallback: FallbackPolicy?
    var proxy: HTTPProxy?

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        profile = try ProfileOption.parse(&arguments)
        if let value = try arguments.option("--connections") {
            connections = try Parse.count(value, option: "--connections")
        }
        if let value = try arguments.option("--in-flight") {
            inFlight = try Parse.count(value, option: "--in-flight")
        }
        if let value = try arguments.option("--duration") {
            duration = try Parse.seconds(value, option: "--duration")
        }
        if let value = try arguments.option("--size") {
            guard let bytes = Int(value), bytes >= 0, bytes <= 16 << 20 else {
                throw ArgumentError("--size must be a byte count from 0 to 16777216, not '\(value)'")
            }
            size = bytes
            if let layout = profile.layout, layout.compression == nil,
                let length = layout.fields.first(where: { $0.role == .length }), length.width < 4
            {
                // The echo wraps the payload in {"echo":"…"}: 11 bytes more.
                let largest = (1 << (length.width * 8)) - 1 - 11
                guard size <= largest else {
                    throw ArgumentError("--size \(size) is too large for the \(profile.name) profile: its bodies are at most \((1 << (length.width * 8)) - 1) bytes, and the echo adds 11, so at most \(largest)")
                }
            }
        }
        let types = profile.typeList(of: .message) ?? "none"
        if let value = try arguments.option("--type") {
            type = try Parse.frameType(value, option: "--type")
            guard profile.kind(of: type) == .message else {
                throw ArgumentError("--type \(hex(type)) is not a request type in the \(profile.name) profile (\(types))")
            }
        } else {
            guard let echo = profile.echoType else {
                throw ArgumentError("missing --type: one of \(types) in the \(profile.name) profile")
            }
            type = echo
        }
        onLoop = arguments.flag("--on-loop")
        fallback = try FallbackOption.parse(&arguments)
        proxy = try ProxyOption.parse(&arguments)
        tls = try ClientTLSOptions(parsing: &arguments)
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
        try tls.check(for: [endpoint, fallback?.endpoint])
    }

    func run() async throws -> ExitStatus {
        #if DEBUG
        // An unoptimized build measures several times less than the library can do.
        Console.err("tether: warning: this tether is a debug build, which measures several times less than a release build: use `swift run -c release tether bench …`, against a release server")
        #endif
        var configuration = ConnectionConfiguration(profile: profile)
        configuration.heartbeat = .disabled
        configuration.reconnect.appliesToFirstConnect = false
        configuration.tls = tls.configuration()
        configuration.fallback = fallback
        configuration.webSocket.proxy = proxy
        var connecting: [Connection] = []
        do {
            for _ in 0..<connections {
                connecting.append(try await Connection.connect(to: endpoint, configuration: configuration))
            }
        } catch {
            for connection in connecting { await connection.close() }
            throw error
        }
        let opened = connecting
        let security = await opened.first?.tlsDetails.map { ", \($0.version) \($0.cipher)" } ?? ""
        let target = await opened.first?.currentEndpoint ?? endpoint
        do {
            try await measure(on: opened, target: target, security: security)
        } catch {
            for connection in opened { await connection.close() }
            throw error
        }
        for connection in opened { await connection.close() }
        return .success
    }

    /// - Parameters:
    ///   - target: The endpoint in use, as the results name it: the fallback's when taken.
    ///   - security: `, TLSv1.3 …` for the results, or nothing without TLS.
    private func measure(on opened: [Connection], target: Endpoint, security: String) async throws {
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = start + duration
        let progress = Task {
            var second = 0
            while clock.now < deadline {
                // Cancelled when the measurement ends early, on a failed request: no line then.
                guard (try? await Task.sleep(for: .seconds(1))) != nil else { break }
                second += 1
                var completed = 0
                for connection in opened { completed += await connection.metrics.requestsCompleted }
                Console.err("\(second) s: \(completed) responses, \(completed / max(second, 1)) req/s")
            }
        }
        defer { progress.cancel() }
        let payload = [UInt8](repeating: 0x61, count: size)
        let request = Request(type: type, payload: payload)
        // Latencies in nanoseconds from every worker, merged once at the end.
        let latencies = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for connection in opened {
                for _ in 0..<inFlight {
                    let executor: (any TaskExecutor)? = onLoop ? connection.taskExecutor : nil
                    group.addTask(executorPreference: executor) {
                        var mine: [UInt64] = []
                        mine.reserveCapacity(1 << 14)
                        while clock.now < deadline {
                            let sent = clock.now
                            _ = try await connection.request(request)
                            mine.append(nanoseconds(clock.now - sent))
                        }
                        return mine
                    }
                }
            }
            var all: [UInt64] = []
            for try await part in group { all += part }
            return all
        }
        let elapsed = nanoseconds(clock.now - start)
        report(latencies.sorted(), target: target, elapsedNanoseconds: elapsed, security: security)
        Console.err(Self.serverNote)
    }

    /// Printed after the results: the server's build counts as much as this one's, and only
    /// the server can tell which it is.
    static let serverNote = "tether: check the server's build too: a debug build of `tether serve` says so when it starts; measure against `swift run -c release tether serve …`"

    private func report(_ sorted: [UInt64], target: Endpoint, elapsedNanoseconds: UInt64, security: String) {
        let seconds = Double(elapsedNanoseconds) / 1e9
        let count = sorted.count
        let rate = Double(count) / seconds
        let megabytes = rate * Double(size) / 1e6
        let wire = profile.name == Profile.seed.name ? "" : ", profile \(profile.name)"
        Console.out("\(target): \(connections) connection(s) × \(inFlight) in flight, \(size)-byte payloads, \(onLoop ? "tasks on the loop" : "tasks on the global executor")\(wire)\(security)")
        Console.out("\(count) requests in \(String(format2(seconds))) s: \(Int(rate.rounded())) req/s, \(format2(megabytes)) MB/s each way")
        guard count > 0 else { return }
        Console.out("latency      µs")
        for (label, fraction) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)] {
            let index = min(count - 1, Int((Double(count) * fraction).rounded(.down)))
            Console.out(label.padding(toLength: 12, withPad: " ", startingAt: 0) + format2(Double(sorted[index]) / 1e3))
        }
        Console.out("max".padding(toLength: 12, withPad: " ", startingAt: 0) + format2(Double(sorted[count - 1]) / 1e3))
    }
}

private func nanoseconds(_ duration: Duration) -> UInt64 {
    let (seconds, attoseconds) = duration.components
    return UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
}

/// `12.34`: two decimals.
private func format2(_ value: Double) -> String {
    let hundredths = Int((value * 100).rounded())
    let fraction = hundredths % 100
    return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
}
