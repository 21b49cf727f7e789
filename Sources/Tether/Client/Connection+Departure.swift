extension Connection {
    /// The server announced that it drains: take the responses to what is in flight, send
    /// nothing new, then reconnect as planned (see ``ConnectionStateMachine``).
    func departureAnnounced(_ notice: DrainNotice) {
        let server = channel?.remoteAddress.description ?? currentEndpoint.description
        let words = notice.message.isEmpty ? "" : ": \(notice.message)"
        let reason = TetherError(code: .serverDraining, message: "\(server) is draining\(words)")
        // The server asks; the policy's longest delay bounds what it may ask for.
        let delay = min(notice.reconnectAfter, configuration.reconnect.maximumDelay)
        handle(.departureAnnounced(reconnectAfter: delay, reason))
    }

    /// Arms the bound on the wait for the responses in flight, and leaves at once when none
    /// is.
    func awaitDeparture() {
        let limit = configuration.serverDrainTimeout
        let server = channel?.remoteAddress.description ?? currentEndpoint.description
        reconnectHandles.departureTimer = loop.schedule(after: limit) { [self] in
            assumeIsolated { connection in
                connection.reconnectHandles.departureTimer = nil
                connection.handle(.departureDue(TetherError(
                    code: .connectionLost,
                    message: "\(server) announced that it drains and did not answer within \(describe(limit)) (serverDrainTimeout)"
                )))
            }
        }
        departIfIdle()
    }

    /// The error for a response of a draining server that did not run its request
    /// (``Peer/drainingResponse(to:)``): `{"error": …, "code": "serverDraining"}`; `nil` for
    /// any other response.
    func drainingRefusal(_ frame: Frame) -> TetherError? {
        guard frame.payload.first == UInt8(ascii: "{"), let json = try? JSONValue(parsing: frame.payload),
              json["code"]?.stringValue == TetherError.Code.serverDraining.description,
              let message = json["error"]?.stringValue else { return nil }
        let server = channel?.remoteAddress.description ?? currentEndpoint.description
        return TetherError(code: .serverDraining, message: "request \(hex(frame.type)) serial \(frame.serial) was not run: \(server) said \(message)")
    }

    /// Leaves the draining server once no request is in flight on its connection.
    func departIfIdle() {
        guard let reason = lifecycle.departure?.reason, table.inFlightCount == 0 else { return }
        handle(.departureDue(reason))
    }
}
