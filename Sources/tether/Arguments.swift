import Tether

/// A mistake on the command line: printed as `tether: <message>` with a usage hint, exit status 2.
struct ArgumentError: Error {
    var message: String

    init(_ message: String) {
        self.message = message
    }
}

/// The arguments of one subcommand, consumed as they are parsed.
///
/// Options are taken first (`--name value` or `--name=value`), then positionals in order;
/// ``finish()`` rejects whatever is left, so a misspelt option is an error rather than a
/// silently ignored word.
struct Arguments {
    private var items: [String]

    init<S: Sequence<String>>(_ items: S) {
        self.items = Array(items)
    }

    /// Whether `-h` or `--help` appears anywhere.
    var wantsHelp: Bool {
        items.contains { $0 == "-h" || $0 == "--help" }
    }

    /// Whether `--help-all` appears anywhere: the full help, every option.
    var wantsAllHelp: Bool {
        items.contains("--help-all")
    }

    /// Removes and returns the value of option `name` (`--port 9000` or `--port=9000`),
    /// or `nil` when it is absent. The last occurrence wins.
    mutating func option(_ name: String) throws(ArgumentError) -> String? {
        try options(name).last
    }

    /// Removes and returns every value of option `name`, in the order given: for an option
    /// that may be repeated (`--pin A --pin B`). Empty when it is absent.
    mutating func options(_ name: String) throws(ArgumentError) -> [String] {
        var values: [String] = []
        var index = items.startIndex
        while index < items.endIndex {
            let item = items[index]
            if item == name {
                guard index + 1 < items.endIndex else {
                    throw ArgumentError("\(name) needs a value")
                }
                values.append(items[index + 1])
                items.removeSubrange(index...(index + 1))
            } else if item.hasPrefix(name + "=") {
                values.append(String(item.dropFirst(name.count + 1)))
                items.remove(at: index)
            } else {
                index += 1
            }
        }
        return values
    }

    /// Removes every occurrence of the flag `name` and says whether there was one.
    mutating func flag(_ name: String) -> Bool {
        let before = items.count
        items.removeAll { $0 == name }
        return items.count != before
    }

    /// Removes and returns the next positional argument, or `nil` when there is none.
    mutating func positional() -> String? {
        guard let index = items.firstIndex(where: { !$0.hasPrefix("-") || $0 == "-" }) else { return nil }
        return items.remove(at: index)
    }

    /// Removes and returns the next positional argument.
    ///
    /// - Parameter what: Its name in the error message, such as `HOST:PORT`.
    mutating func positional(_ what: String) throws(ArgumentError) -> String {
        guard let value = positional() else { throw ArgumentError("missing \(what)") }
        return value
    }

    /// Fails on anything not consumed: an unknown option or an extra argument.
    func finish() throws(ArgumentError) {
        guard let first = items.first else { return }
        if first.hasPrefix("-") && first != "-" {
            throw ArgumentError("unknown option '\(first)'")
        }
        throw ArgumentError("unexpected argument '\(first)'")
    }
}

// MARK: Values

enum Parse {
    /// A frame type in decimal (`1026`) or hex (`0x402`).
    static func frameType(_ text: String, option: String) throws(ArgumentError) -> UInt32 {
        let lower = text.lowercased()
        let value: UInt32? =
            lower.hasPrefix("0x") ? UInt32(lower.dropFirst(2), radix: 16) : UInt32(lower, radix: 10)
        guard let value else {
            throw ArgumentError("\(option) '\(text)' is not a frame type (decimal, or hex with 0x, up to 0xffffffff)")
        }
        return value
    }

    /// A positive number of seconds, possibly fractional (`0.5`), at most a day.
    static func seconds(_ text: String, option: String) throws(ArgumentError) -> Duration {
        guard let value = Double(text), value.isFinite, value > 0, value <= 86_400 else {
            throw ArgumentError("\(option) '\(text)' is not a positive number of seconds (at most 86400)")
        }
        return .nanoseconds(Int64((value * 1e9).rounded()))
    }

    /// Like ``seconds(_:option:)``, but `0` or `off` switches the limit off: `nil`.
    ///
    /// - Parameter maximum: The most seconds allowed; a day unless given.
    static func secondsOrOff(_ text: String, option: String, maximum: Int = 86_400) throws(ArgumentError) -> Duration? {
        if text.lowercased() == "off" { return nil }
        if let value = Double(text), value == 0 { return nil }
        guard let value = Double(text), value.isFinite, value > 0, value <= Double(maximum) else {
            throw ArgumentError("\(option) '\(text)' is not a positive number of seconds (at most \(maximum)), 0 or off")
        }
        return .nanoseconds(Int64((value * 1e9).rounded()))
    }

    /// A whole number from 0 up.
    static func countOrZero(_ text: String, option: String) throws(ArgumentError) -> Int {
        guard let value = Int(text), value >= 0 else {
            throw ArgumentError("\(option) '\(text)' is not a whole number (0 or more)")
        }
        return value
    }

    /// A positive whole number.
    static func count(_ text: String, option: String) throws(ArgumentError) -> Int {
        guard let value = Int(text), value > 0 else {
            throw ArgumentError("\(option) '\(text)' is not a positive whole number")
        }
        return value
    }

    /// A TCP port, 0 to 65535.
    static func port(_ text: String, option: String) throws(ArgumentError) -> Int {
        guard let value = Int(text), (0...65535).contains(value) else {
            throw ArgumentError("\(option) '\(text)' is not a port number (0 to 65535)")
        }
        return value
    }

    /// `HOST:PORT`, `[IPV6]:PORT`, a WebSocket URL `ws://HOST[:PORT][/PATH]` (port 80 and
    /// path `/` by default) or `wss://HOST[:PORT][/PATH]` (port 443), or a Unix domain
    /// socket `unix:///PATH`; `option` names where it was given, for the error.
    static func endpoint(_ text: String, option: String? = nil) throws(ArgumentError) -> Endpoint {
        let lowered = text.lowercased()
        let where_ = option.map { "\($0) " } ?? ""
        if lowered.hasPrefix("ws://") || lowered.hasPrefix("wss://") {
            guard let endpoint = Endpoint(webSocket: text), endpoint.port != 0 else {
                let scheme = lowered.hasPrefix("wss://") ? "wss" : "ws"
                throw ArgumentError("\(where_)'\(text)' is not a \(scheme):// URL (for example \(scheme)://127.0.0.1:8080/tether)")
            }
            return endpoint
        }
        if lowered.hasPrefix("unix:") {
            guard let endpoint = Endpoint(parsing: text), endpoint.unixSocketPath != nil else {
                throw ArgumentError("\(where_)'\(text)' is not a unix:// URL with an absolute path of at most 107 bytes (for example unix:///run/tether.sock)")
            }
            return endpoint
        }
        guard let endpoint = Endpoint(parsing: text), endpoint.port != 0 else {
            throw ArgumentError("\(where_)'\(text)' is not HOST:PORT, ws[s]://HOST:PORT/PATH or unix:///PATH (for example 127.0.0.1:9000, [::1]:9000, ws://127.0.0.1:8080/tether or unix:///run/tether.sock)")
        }
        return endpoint
    }

    /// `HOST:PORT` or `[IPV6]:PORT` with a numeric address, for a socket of this machine to
    /// bind or a datagram's destination; port 0 is allowed (the caller refuses it where it
    /// makes no sense). With `defaultHost`, a port alone (`9000`) is that host's port.
    static func ipAddressAndPort(_ text: String, defaultHost: String? = nil) throws(ArgumentError) -> (host: String, port: Int) {
        let portOnly = defaultHost != nil && !text.isEmpty && text.allSatisfy(\.isASCII) && text.allSatisfy(\.isNumber)
        let example = defaultHost == nil ? "127.0.0.1:9000 or [::1]:9000" : "9000, 0.0.0.0:9000 or [::1]:9000"
        let form = defaultHost == nil ? "HOST:PORT" : "[HOST:]PORT"
        if portOnly, let defaultHost {
            return (defaultHost, try port(text, option: form))
        }
        guard text.contains(":"), !text.lowercased().hasPrefix("unix:"), let endpoint = Endpoint(parsing: text) else {
            throw ArgumentError("'\(text)' is not \(form) (for example \(example))")
        }
        guard TetherSocketAddress(ipAddress: endpoint.host, port: endpoint.port) != nil else {
            throw ArgumentError("'\(text)': '\(endpoint.host)' is not a numeric IPv4 or IPv6 address (for example \(example))")
        }
        return (endpoint.host, endpoint.port)
    }

    /// JSON text, checked before it is sent.
    static func json(_ text: String, option: String) throws(ArgumentError) -> [UInt8] {
        let bytes = Array(text.utf8)
        do {
            _ = try JSONValue(parsing: bytes)
        } catch {
            throw ArgumentError("\(option) is not valid JSON: \(text)")
        }
        return bytes
    }

    /// The content given with `--json` (checked) or `--text`, or `nil` when neither was.
    static func content(json: String?, text: String?) throws(ArgumentError) -> [UInt8]? {
        switch (json, text) {
        case (.some, .some):
            throw ArgumentError("--json and --text are two ways to give the content; give one of them")
        case (let json?, nil):
            return try Parse.json(json, option: "--json")
        case (nil, let text?):
            return Array(text.utf8)
        case (nil, nil):
            return nil
        }
    }
}

// MARK: Shared options

/// `--heartbeat fixed|adaptive`, `--heartbeat-interval`, `--heartbeat-timeout` and
/// `--max-missed`: how `listen`, `request` and `ping` tune ``ConnectionConfiguration/heartbeat``.
/// Each command documents its own defaults; an option not given keeps the command's default.
struct HeartbeatOptions: Sendable {
    /// `--heartbeat adaptive`: an interval that adapts to the network
    /// (``HeartbeatConfiguration/adaptive(_:timeout:maximumMissed:)``) instead of a fixed one.
    var adaptive = false
    /// `--heartbeat-interval`: time between heartbeats.
    var interval: Duration?
    /// `--heartbeat-timeout`: how long each ack may take before the heartbeat counts as missed.
    var timeout: Duration?
    /// `--max-missed`: misses in a row after which the connection counts as lost.
    var maximumMissed: Int?

    /// No option given.
    init() {}

    /// Takes the three options from `arguments`.
    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        if let mode = try arguments.option("--heartbeat") {
            switch mode {
            case "fixed": adaptive = false
            case "adaptive": adaptive = true
            default: throw ArgumentError("--heartbeat takes fixed or adaptive, not \"\(mode)\"")
            }
        }
        if let value = try arguments.option("--heartbeat-interval") {
            interval = try Parse.seconds(value, option: "--heartbeat-interval")
        }
        if let value = try arguments.option("--heartbeat-timeout") {
            timeout = try Parse.seconds(value, option: "--heartbeat-timeout")
        }
        if let value = try arguments.option("--max-missed") {
            maximumMissed = try Parse.count(value, option: "--max-missed")
        }
        try checkInterval()
    }

    /// Refuses a fixed interval together with `--heartbeat adaptive`, which finds its own.
    func checkInterval() throws(ArgumentError) {
        if adaptive, interval != nil {
            throw ArgumentError("--heartbeat adaptive finds its own interval, and --heartbeat-interval sets a fixed one: give one of them")
        }
    }

    /// Whether none of the options was given.
    var isEmpty: Bool { !adaptive && interval == nil && timeout == nil && maximumMissed == nil }

    /// `base` with the options given, and heartbeats switched on. An interval given without
    /// a timeout brings a timeout of half the interval, as
    /// ``HeartbeatConfiguration/every(_:timeout:maximumMissed:)`` does. With `--heartbeat
    /// adaptive`, the adaptive defaults (from 30 s, +60 s per step, up to 9 min, 10 s for each
    /// ack) with the command's count of misses.
    ///
    /// - Parameter base: The command's defaults.
    /// - Returns: The configuration to connect with.
    func applied(to base: HeartbeatConfiguration) -> HeartbeatConfiguration {
        var configuration = base
        if adaptive {
            configuration = .adaptive(maximumMissed: base.maximumMissed)
        }
        configuration.isEnabled = true
        if let interval {
            configuration.interval = interval
            configuration.timeout = timeout ?? interval / 2
        } else if let timeout {
            configuration.timeout = timeout
        }
        if let maximumMissed { configuration.maximumMissed = maximumMissed }
        return configuration
    }
}
