// A peer's keyed requests (``SessionWireTypes/keyedRequest``): unwrapped, run once through
// the hub, and answered with the wrapped request's type, or with the keyed type when the
// outcome is unknown.

extension Peer {
    /// Handles a keyed request.
    func keyedRequest(_ frame: Frame, hub: MailboxHub) {
        guard let keyed = KeyedWire.open(frame.payload) else {
            respond(.error("malformed keyed request: expected the key's length, the key, the request's type, the epoch's length, the epoch, then the content"), to: frame)
            return
        }
        func refuse(_ reason: String) {
            var response = Response.error(reason + ": not run")
            response.type = keyed.type
            respond(response, to: frame)
        }
        guard let session else {
            refuse("a request with an idempotency key needs a session (SessionConfiguration)")
            return
        }
        if let sent = keyed.epoch, let current = session.epoch, sent != current {
            respond(Response(payload: Self.unknownOutcome("the history of client \"\(session.clientID)\" began again (epoch \(sent) is gone, \(current) is current), and the record of this request with it")), to: frame)
            return
        }
        guard let entry = handlers.handler(for: keyed.type) else {
            refuse("unknown type \(hex(keyed.type))")
            return
        }
        let bound = max(1, configuration.maximumRequestsPerPeer)
        guard keyedRequests < bound else {
            refuse("\(bound) requests with an idempotency key of this connection run already, the most it may (ServerConfiguration.maximumRequestsPerPeer)")
            return
        }
        keyedRequests += 1
        let inner = Frame(type: keyed.type, serial: frame.serial, payload: keyed.payload)
        let clientID = session.clientID
        Task { [self] in
            defer { keyedRequests -= 1 }
            let outcome = await hub.runOnce(keyed.key, of: clientID) { [self] in await runKeyed(entry, inner) }
            switch outcome {
            case .answer(var response):
                if response.type == 0 { response.type = keyed.type }
                respond(response, to: frame)
            case .refused(let reason):
                refuse(reason)
            case .unknown(let reason):
                respond(Response(payload: Self.unknownOutcome(reason)), to: frame)
            }
        }
    }

    /// Runs the handler of a keyed request's wrapped request.
    private func runKeyed(_ entry: HandlerTable.Entry, _ frame: Frame) async -> Response? {
        switch entry.kind {
        case .immediate(let handler):
            do {
                return try handler(Request(frame: frame), self)
            } catch {
                return Self.errorResponse(for: error)
            }
        case .suspending(let handler):
            return await Self.invoke(handler, Request(frame: frame), self)
        }
    }

    private static func unknownOutcome(_ reason: String) -> [UInt8] {
        JSONValue.object(["error": .string("it may or may not have run: " + reason)]).encoded
    }
}
