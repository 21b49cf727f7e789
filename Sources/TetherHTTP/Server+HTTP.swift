public import Tether

extension Server {
    /// Answers HTTP requests that clients send with ``Tether/Connection/http(_:timeout:type:)``
    /// by performing them, within the configuration's allow-list and bounds.
    ///
    /// It registers a handler for ``HTTPForwardingConfiguration/requestType`` (`0x403` by
    /// default), replacing any handler of that type. The answers fit the server's
    /// ``Tether/Limits/maximumPayloadLength``.
    ///
    /// - Parameter configuration: The hosts that may be reached, the timeout and the size limit.
    /// - Returns: The forwarder, to call ``HTTPForwarder/perform(_:)`` directly if you wish.
    @discardableResult
    public func forwardHTTP(_ configuration: HTTPForwardingConfiguration) -> HTTPForwarder {
        let forwarder = HTTPForwarder(configuration: configuration,
                                      maximumPayloadLength: self.configuration.limits.maximumPayloadLength)
        handle(type: configuration.requestType) { request, _ in
            await forwarder.answer(request)
        }
        return forwarder
    }
}
