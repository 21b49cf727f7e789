public import Tether

/// One HTTP request a server forwarded, as ``Tether/Server/forwardHTTP(_:observer:)`` reports it:
/// for logs and metrics.
public struct HTTPExchangeRecord: Sendable {
    /// The peer that sent the request.
    public var peer: PeerID
    /// The request, or `nil` when its payload could not be read.
    public var request: HTTPRequest?
    /// The upstream server's response, or why there is none.
    public var outcome: Result<HTTPResponse, HTTPForwardingError>
    /// How long the exchange took, from the request frame to the answer.
    public var duration: Duration
}

extension Server {
    /// Answers HTTP requests that clients send with ``Tether/Connection/http(_:timeout:type:)``
    /// by performing them, within the configuration's allow-list and bounds.
    ///
    /// It registers a handler for ``TetherHTTP/HTTPForwardingConfiguration/requestType`` (`0x403` by
    /// default), replacing any handler of that type. The answers fit the server's
    /// ``Tether/Limits/maximumPayloadLength``.
    ///
    /// ```swift
    /// try server.forwardHTTP(HTTPForwardingConfiguration(allowing: ["api.example.com"])) { record in
    ///     print(record.peer, record.request?.url ?? "?", record.duration)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - configuration: The hosts that may be reached, the timeout and the size limit.
    ///   - observer: Called after each request is answered, on the handler's task; keep it
    ///     short. `nil` (the default) for none.
    /// - Returns: The forwarder, to call ``TetherHTTP/HTTPForwarder/perform(_:)`` directly if you wish.
    @discardableResult
    public func forwardHTTP(
        _ configuration: HTTPForwardingConfiguration,
        observer: (@Sendable (HTTPExchangeRecord) -> Void)? = nil
    ) -> HTTPForwarder {
        let forwarder = HTTPForwarder(configuration: configuration,
                                      maximumPayloadLength: self.configuration.limits.maximumPayloadLength)
        handle(type: configuration.requestType) { request, peer in
            guard let observer else { return await forwarder.answer(request) }
            let clock = ContinuousClock()
            let start = clock.now
            let (response, http, outcome) = await forwarder.exchange(request)
            observer(HTTPExchangeRecord(peer: peer.id, request: http, outcome: outcome, duration: clock.now - start))
            return response
        }
        return forwarder
    }
}
