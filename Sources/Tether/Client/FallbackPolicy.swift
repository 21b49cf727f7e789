/// A second way in for when the main endpoint cannot be reached: typically a WebSocket
/// endpoint (`ws://…`) on port 80 or 443 for networks that block other TCP ports.
///
/// With a fallback, every connect attempt (the first, each reconnect, `resume()`,
/// `reconnectNow()`) dials the endpoint of its turn first (``Connection/endpoint`` or one of
/// the ``ConnectionConfiguration/alternateEndpoints``). When that dial cannot connect (refused,
/// timed out, reset, a TLS handshake that breaks, a session hello that gets no answer or a
/// reset) the fallback ``endpoint`` is dialed at once, in the same attempt: no backoff in
/// between, no second attempt counted, no ``ConnectionState/Phase/reconnecting`` published.
/// A connection over the main endpoint that ends before anything arrived from it (a
/// middlebox that accepts TCP and then resets or drops it) goes to the fallback at once
/// too: it publishes ``ConnectionState/Phase/connecting`` and counts no reconnect attempt.
/// A session hello refused by the server, or a connection lost after something arrived,
/// does not switch to the fallback; it is the attempt's failure, as without one.
///
/// While connected over the fallback, the connection goes back to try the main endpoint
/// every ``primaryRetryInterval``: when the interval has passed and no request is in flight
/// or queued, it closes the fallback gracefully and connects again as a fresh attempt (main
/// endpoint first, the fallback again if it still cannot connect). This planned reconnect
/// is no failure: it publishes ``ConnectionState/Phase/connecting`` (not
/// ``ConnectionState/Phase/reconnecting``) and spends none of the ``ReconnectPolicy``'s
/// attempts.
///
/// ``Connection/currentEndpoint`` and ``Connection/connectReport`` name the endpoint in use;
/// the ``ConnectionState/Phase/connected`` state published on ``Connection/states`` names it
/// in ``ConnectionState/endpoint`` when it is the fallback.
///
/// ```swift
/// var configuration = ConnectionConfiguration()
/// configuration.fallback = FallbackPolicy(endpoint: Endpoint(webSocket: "ws://tether.example.com:80/tether")!)
/// ```
public struct FallbackPolicy: Sendable, Hashable {
    /// The endpoint dialed when the main one cannot connect: usually a WebSocket endpoint,
    /// ``Endpoint/init(webSocket:)``.
    public var endpoint: Endpoint
    /// How long a connection over the fallback lasts before the main endpoint is tried
    /// again, at the first moment after it with no request in flight or queued. Must be above
    /// zero. Default 5 minutes.
    public var primaryRetryInterval: Duration

    /// Creates a fallback to `endpoint`.
    ///
    /// - Parameters:
    ///   - endpoint: The endpoint dialed when the main one cannot connect.
    ///   - primaryRetryInterval: How long to stay on the fallback before trying the main
    ///     endpoint again. Default 5 minutes.
    public init(endpoint: Endpoint, primaryRetryInterval: Duration = .seconds(300)) {
        self.endpoint = endpoint
        self.primaryRetryInterval = primaryRetryInterval
    }
}
