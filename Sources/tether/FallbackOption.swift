import Tether

/// `--fallback ws://HOST:PORT/PATH` (or `wss://`): a WebSocket endpoint dialed at once when the server's
/// own endpoint cannot connect (a network that blocks its port).
enum FallbackOption {
    static let synopsis = "[--fallback ws://HOST:PORT/PATH]"

    static func help(column: Int) -> String {
        optionHelp(
            [("--fallback URL", "a ws:// or wss:// endpoint dialed at once when HOST:PORT cannot connect (refused, timed out, reset); HOST:PORT is tried again after 5 minutes")],
            column: column
        )
    }

    /// The fallback the options give, or `nil` without `--fallback`.
    static func parse(_ arguments: inout Arguments) throws(ArgumentError) -> FallbackPolicy? {
        guard let text = try arguments.option("--fallback") else { return nil }
        let endpoint = try Parse.endpoint(text, option: "--fallback")
        guard endpoint.webSocketPath != nil else {
            throw ArgumentError("--fallback '\(text)' is not a ws:// or wss:// URL (for example ws://127.0.0.1:8080/tether)")
        }
        return FallbackPolicy(endpoint: endpoint)
    }
}
