import Tether

/// `--proxy http://[USER:PASSWORD@]HOST:PORT`: the HTTP proxy that WebSocket endpoints are
/// reached through with `CONNECT` (a network whose only way out is a proxy).
enum ProxyOption {
    static let synopsis = "[--proxy http://HOST:PORT]"

    static func help(column: Int) -> String {
        optionHelp(
            [("--proxy URL", "reach ws:// and wss:// endpoints through this HTTP proxy with CONNECT; http://USER:PASSWORD@HOST:PORT sends Basic credentials (plain TCP endpoints stay direct)")],
            column: column
        )
    }

    /// The proxy the options give, or `nil` without `--proxy`.
    static func parse(_ arguments: inout Arguments) throws(ArgumentError) -> HTTPProxy? {
        guard let text = try arguments.option("--proxy") else { return nil }
        guard let proxy = HTTPProxy(url: text), proxy.port != 0 else {
            throw ArgumentError("--proxy '\(text)' is not an http://[USER:PASSWORD@]HOST[:PORT] URL (for example http://127.0.0.1:3128)")
        }
        return proxy
    }
}
