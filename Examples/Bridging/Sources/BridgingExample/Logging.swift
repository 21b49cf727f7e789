// Tether's states and events through swift-log.

import Logging
import Tether

/// Logs every state change of a connection, until it closes for good.
func logStates(of connection: Connection, to logger: Logger) async {
    for await state in connection.states {
        var metadata: Logger.Metadata = ["endpoint": "\(connection.endpoint)"]
        if let reason = state.reason {
            metadata["code"] = "\(reason.code)"
            metadata["reason"] = "\(reason.message)"
        }
        switch state.phase {
        case .connected:
            logger.info("connected", metadata: metadata)
        case .reconnecting:
            metadata["attempt"] = "\(state.attempt ?? 1)"
            logger.warning("connection lost, reconnecting", metadata: metadata)
        case .failed:
            logger.error("connection failed for good", metadata: metadata)
        default:
            logger.debug("\(state.phase)", metadata: metadata)
        }
    }
}

/// Logs what happens to a server, until it stops. Subscribe before `run()` to log
/// `listening` too.
func logEvents(_ events: Subscription<ServerEvent>, to logger: Logger) async {
    for await event in events {
        var metadata: Logger.Metadata = ["address": "\(event.address)"]
        if let peer = event.peer { metadata["peer"] = "\(peer)" }
        if let reason = event.reason { metadata["code"] = "\(reason.code)" }
        switch event.kind {
        case .peerRejected:
            logger.warning("\(event)", metadata: metadata)
        case .peerDisconnected where event.reason?.code == .idleTimeout || event.reason?.code == .handshakeTimeout:
            logger.notice("\(event)", metadata: metadata)
        default:
            logger.info("\(event)", metadata: metadata)
        }
    }
}
