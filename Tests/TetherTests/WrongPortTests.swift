import Testing
import TetherTLS
import TetherTesting
@testable import Tether

/// A client that reaches a port speaking something else is told at once what the port
/// speaks, in one message, and the server says what it got.
@Suite("The wrong port or protocol", .timeLimit(.guarded))
struct WrongPortTests {
    /// What a client to `endpoint` is told: the error of connecting, or, when connecting
    /// succeeds (a plain TCP connection is up before anything is read), of its first request.
    func failure(connectingTo endpoint: Endpoint, configuration: ConnectionConfiguration = testConfiguration()) async -> TetherError? {
        do {
            let connection = try await Connection.connect(to: endpoint, configuration: configuration)
            defer { Task { await connection.close() } }
            _ = try await connection.request(Request(type: 0x402, json: [:]), timeout: .unlimited)
            return nil
        } catch {
            return error as? TetherError
        }
    }

    @Test("Tether frames on a WebSocket-only port are answered at once: the client learns that the port wants ws://, and the server's event says what arrived")
    func framesOnWebSocketPort() async throws {
        // The server has no handshake timeout (withServer turns it off): an answer that
        // waited for one would wait until the guard.
        try await withWebSocketServer { server, webSocket in
            let events = server.events
            let plain = Endpoint(host: webSocket.host, port: webSocket.port)
            let error = await failure(connectingTo: plain)
            let text = error.map { "\($0)" } ?? ""
            #expect(text.contains("speaks WebSocket"), "\(text)")
            #expect(text.contains("ws://"), "\(text)")
            #expect(text.contains("/tether"), "\(text)")
            let ended = try await firstEvent(events, "the peer's end") { $0.kind == .peerDisconnected || $0.kind == .peerRejected }
            let reason = ended.reason.map { "\($0)" } ?? ""
            #expect(reason.contains("not a WebSocket upgrade"), "\(reason)")
        }
    }

    @Test("a WebSocket client on a plain Tether port is told that the port speaks Tether frames")
    func webSocketOnTetherPort() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let webSocket = Endpoint(host: endpoint.host, port: endpoint.port, webSocketPath: "/tether")
            let error = await failure(connectingTo: webSocket)
            let text = error.map { "\($0)" } ?? ""
            #expect(text.contains("This port speaks the Tether seed protocol"), "\(text)")
            #expect(text.contains("without ws://") || text.contains("not WebSocket") || text.contains("not HTTP"), "\(text)")
        }
    }

    @Test("ws:// against a wss:// port says that the port speaks TLS and names wss://")
    func plainWebSocketOnSecurePort() async throws {
        let certificates = try await TestCertificates.shared()
        try await withSecureWebSocketServer(certificates) { _, secure in
            var plain = secure
            plain.webSocketSecure = false
            let error = await failure(connectingTo: plain)
            let text = error.map { "\($0)" } ?? ""
            #expect(text.contains("TLS"), "\(text)")
            #expect(text.contains("wss://"), "\(text)")
        }
    }

    @Test("a plain client on a TLS port gets one sentence about TLS, not the same one twice")
    func plainOnTLSPort() async throws {
        let certificates = try await TestCertificates.shared()
        try await withServer(configure: { $0.tls = webSocketServerTLS(certificates) }, handlers: echoHandlers) { _, endpoint in
            let error = await failure(connectingTo: endpoint)
            let text = error.map { "\($0)" } ?? ""
            #expect(text.contains("TLS"), "\(text)")
            #expect(text.ranges(of: "seems to speak TLS").count <= 1, "\(text)")
            #expect(text.ranges(of: "does the server need TLS").count <= 1, "\(text)")
        }
    }
}
