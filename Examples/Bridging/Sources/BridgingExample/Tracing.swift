// Tether's requests and handlers as spans of swift-distributed-tracing, and its states and
// events as lines of swift-log, through one observer.

import Logging
import Tether
import Tracing

/// Makes a span of every request a connection sends and every request a server handles,
/// and logs every state change, session event and server event.
struct TracingObserver: TetherObserver {
    let logger: Logger

    /// Runs in the task that sends the request: the span is a child of that task's span.
    func requestStarted(_ request: ObservedRequest) -> any Span {
        let span = startSpan("tether \(hex(request.type))", ofKind: .client)
        span.updateAttributes { attributes in
            attributes["rpc.system"] = "tether"
            attributes["rpc.method"] = hex(request.type)
            attributes["tether.payload_size"] = request.payloadSize
            attributes["server.address"] = request.endpoint?.host
            attributes["server.port"] = request.endpoint?.port
        }
        return span
    }

    func requestEnded(_ request: ObservedRequest, outcome: RequestOutcome, span: any Span) {
        end(span, of: request, with: outcome)
    }

    func handlerStarted(_ request: ObservedRequest, peer: PeerID) -> any Span {
        let span = startSpan("tether \(hex(request.type))", ofKind: .server)
        span.updateAttributes { attributes in
            attributes["rpc.system"] = "tether"
            attributes["rpc.method"] = hex(request.type)
            attributes["tether.payload_size"] = request.payloadSize
            attributes["tether.peer"] = "\(peer)"
            attributes["client.address"] = request.remoteAddress?.ipAddress
            attributes["client.port"] = request.remoteAddress?.port
        }
        return span
    }

    func handlerEnded(_ request: ObservedRequest, peer: PeerID, outcome: RequestOutcome, span: any Span) {
        end(span, of: request, with: outcome)
    }

    /// Sets the serial and the status, records the error, and ends the span.
    private func end(_ span: any Span, of request: ObservedRequest, with outcome: RequestOutcome) {
        span.attributes["tether.serial"] = Int(request.serial)
        if let error = outcome.error {
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error, message: "\(error)"))
        } else if let message = outcome.response?.errorMessage {
            span.setStatus(SpanStatus(code: .error, message: message))
        }
        span.end()
        logger.debug("\(request): \(outcome)")
    }

    func connectionStateChanged(_ state: ConnectionState, of endpoint: Endpoint) {
        let level: Logger.Level = state.phase == .failed ? .error : state.phase == .reconnecting ? .warning : .info
        logger.log(level: level, "\(state)", metadata: ["endpoint": "\(endpoint)"])
    }

    func sessionEvent(_ event: SessionEvent, of endpoint: Endpoint) {
        logger.info("\(event)", metadata: ["endpoint": "\(endpoint)"])
    }
    // Server events are left to logEvents(_:to:), which the server's service runs.
}

/// `0x402`.
func hex(_ type: UInt32) -> String {
    "0x" + String(type, radix: 16)
}

/// Sends one request inside a span of its own: the request's span is its child.
func tracedCheckout(at endpoint: Endpoint, logger: Logger) async throws {
    var configuration = ConnectionConfiguration()
    configuration.observer = TracingObserver(logger: logger)   // a span per request
    try await Connection.withConnection(to: endpoint, configuration: configuration) { connection in
        try await withSpan("checkout") { _ in
            let reply = try await connection.request(Request(type: 0x402, json: ["order": 17]))
            logger.info("checked out: \(reply.text)")
        }
    }
}
