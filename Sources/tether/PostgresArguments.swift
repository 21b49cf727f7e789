#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether
import TetherPostgres

/// `--postgres URL` and `--node NAME`: the cluster database a `tether serve` joins, or
/// a `tether push` stores in, and the name of the node.
struct PostgresOptions: Sendable {
    /// The libpq connection string or `postgresql://` URL.
    var url: String
    /// The node name given with `--node`; `nil` picks ``defaultNodeName(port:)``.
    var node: String?

    /// The longest node name, in bytes, as the cluster accepts it.
    static let maximumNodeNameLength = 48

    /// `--postgres URL`, and with `nodes`, `--node NAME`; `nil` when `--postgres` is absent.
    ///
    /// - Throws: ``ArgumentError`` for an empty URL, `--node` without `--postgres`, or a
    ///   node name the cluster would refuse.
    static func parse(_ arguments: inout Arguments, nodes: Bool) throws(ArgumentError) -> PostgresOptions? {
        let url = try arguments.option("--postgres")
        let node = nodes ? try arguments.option("--node") : nil
        guard let url else {
            if node != nil { throw ArgumentError("--node names this server in a cluster: it needs --postgres") }
            return nil
        }
        guard !url.isEmpty else { throw ArgumentError("--postgres needs a URL, such as postgresql://tether@127.0.0.1:5432/tether") }
        if let node, !isValidNodeName(node) {
            throw ArgumentError("--node '\(node)' cannot name a node: use 1 to \(maximumNodeNameLength) letters, digits, '.', '-' or '_'")
        }
        return PostgresOptions(url: url, node: node)
    }

    /// Whether the cluster accepts `name` for a node: 1 to 48 ASCII letters, digits, `.`,
    /// `-` or `_`.
    static func isValidNodeName(_ name: String) -> Bool {
        (1...maximumNodeNameLength).contains(name.utf8.count) && name.utf8.allSatisfy(isNodeNameByte)
    }

    private static func isNodeNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"):
            return true
        default:
            return false
        }
    }

    /// The node's name: the one given, or `HOSTNAME-PORT` for a fixed port (a restart under
    /// the same name takes the old run's place), `HOSTNAME-pPID` for `--port 0`.
    func nodeName(port: Int) -> String {
        node ?? Self.defaultNodeName(hostname: Self.hostname(), port: port, pid: Int(getpid()))
    }

    /// `HOSTNAME-PORT` (`HOSTNAME-pPID` when `port` is 0), with every byte the cluster
    /// refuses in the host name made `-`, and the host name shortened to fit 48 bytes.
    static func defaultNodeName(hostname: String, port: Int, pid: Int) -> String {
        let suffix = port == 0 ? "-p\(pid)" : "-\(port)"
        var host = String(decoding: hostname.utf8.map { isNodeNameByte($0) ? $0 : UInt8(ascii: "-") }, as: UTF8.self)
        if host.isEmpty { host = "tether" }
        return String(host.prefix(maximumNodeNameLength - suffix.utf8.count)) + suffix
    }

    /// This machine's host name, or empty when it has none.
    private static func hostname() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `HOST:PORT` of the database, for messages: never the user or the password.
    var endpoint: String { Self.endpoint(of: url) }

    /// `HOST:PORT` named by a `postgresql://` URL or a `key=value` connection string, with
    /// libpq's defaults (`localhost`, 5432) for what it leaves out.
    static func endpoint(of url: String) -> String {
        var host: String?
        var port: String?
        if let scheme = ["postgresql://", "postgres://"].first(where: { url.hasPrefix($0) }) {
            var authority = Substring(url.dropFirst(scheme.count))
            authority = authority.prefix { $0 != "/" && $0 != "?" }
            if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
            // The first host of a list, `[::1]:5432` or `db:5432`.
            authority = authority.prefix { $0 != "," }
            if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
                host = String(authority[...close])
                let rest = authority[authority.index(after: close)...]
                if rest.hasPrefix(":") { port = String(rest.dropFirst()) }
            } else if let colon = authority.firstIndex(of: ":") {
                host = String(authority[..<colon])
                port = String(authority[authority.index(after: colon)...])
            } else {
                host = String(authority)
            }
            for parameter in url.drop(while: { $0 != "?" }).dropFirst().split(separator: "&") {
                let pair = parameter.split(separator: "=", maxSplits: 1).map(String.init)
                guard pair.count == 2 else { continue }
                if pair[0] == "host" || pair[0] == "hostaddr" { host = pair[1] }
                if pair[0] == "port" { port = pair[1] }
            }
        } else {
            for word in url.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }) {
                let pair = word.split(separator: "=", maxSplits: 1).map(String.init)
                guard pair.count == 2 else { continue }
                if pair[0] == "host" || pair[0] == "hostaddr" { host = pair[1] }
                if pair[0] == "port" { port = pair[1] }
            }
        }
        if host?.isEmpty ?? true { host = "localhost" }
        if port?.isEmpty ?? true { port = "5432" }
        return "\(host!):\(port!)"
    }
}

/// `message` on one line: line breaks and the tabs libpq indents with become single spaces.
func oneLine(_ message: String) -> String {
    message.split(whereSeparator: { $0 == "\n" || $0 == "\r" || $0 == "\t" || $0 == " " })
        .joined(separator: " ")
}

extension TetherError {
    /// The same error with its message on one line (``oneLine(_:)``).
    var onOneLine: TetherError {
        TetherError(code: code, message: oneLine(message))
    }
}
