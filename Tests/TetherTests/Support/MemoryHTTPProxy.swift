import TetherTesting
@testable import Tether

/// An HTTP `CONNECT` proxy on a test network (`proxy:3128`): it reads each client's
/// `CONNECT` head, reports it on ``connects``, and then does what its ``Behavior`` says:
/// tunnels to the target on the same network (answering `200` and relaying both ways),
/// answers with fixed bytes and closes, or stays silent. Loop thread only, but for
/// ``connects``.
final class MemoryHTTPProxy: @unchecked Sendable {
    // @unchecked Sendable: its sessions are touched only on the network's loop.

    enum Behavior: Sendable {
        /// `200 Connection established`, then the bytes of both sides relayed.
        case tunnel
        /// These bytes, then the connection closed.
        case answer(String)
        /// Nothing, ever.
        case silent
    }

    static let endpoint = Endpoint(host: "proxy", port: 3128)

    private let memory: MemoryNetwork
    private let behavior: Behavior
    private var sessions: [Session] = []
    /// The head of each `CONNECT` the proxy read, as it read it.
    let connects: AsyncStream<String>
    private let reported: AsyncStream<String>.Continuation

    /// Listens on `network` at ``endpoint``.
    init(on network: TestNetwork, behavior: Behavior = .tunnel) throws {
        memory = network.memory
        self.behavior = behavior
        (connects, reported) = AsyncStream.makeStream()
        _ = try memory.listen(host: Self.endpoint.host, port: Self.endpoint.port) { [self] end, _ in
            let session = Session(proxy: self, client: end)
            sessions.append(session)
            end.handler = session
            try? end.start()
        }
    }

    /// The proxy as a client configuration names it.
    var httpProxy: HTTPProxy { HTTPProxy(host: Self.endpoint.host, port: Self.endpoint.port) }

    /// Stops listening; tunnels already made stay.
    func stop() {
        memory.stopListening(host: Self.endpoint.host, port: Self.endpoint.port)
        reported.finish()
    }

    /// One client of the proxy: its `CONNECT`, then its tunnel.
    private final class Session: ByteTransportHandler, @unchecked Sendable {
        unowned let proxy: MemoryHTTPProxy
        let client: InMemoryTransport
        var head: [UInt8] = []
        var target: InMemoryTransport?
        var relay: Relay?

        init(proxy: MemoryHTTPProxy, client: InMemoryTransport) {
            self.proxy = proxy
            self.client = client
        }

        func transportRead() {
            let bytes = Array(client.buffers.inbound.readableBytesView)
            client.buffers.inbound.moveReaderIndex(forwardBy: bytes.count)
            if let target {
                target.buffers.outbound.writeBytes(bytes)
                target.flush()
                return
            }
            head += bytes
            guard let end = head.withUnsafeBytes({ WebSocketHandshake.endOfHead($0) }) else { return }
            let text = String(decoding: head[..<end], as: UTF8.self)
            head.removeAll()
            proxy.reported.yield(text)
            switch proxy.behavior {
            case .silent:
                return
            case .answer(let answer):
                client.buffers.outbound.writeBytes(Array(answer.utf8))
                client.closeAfterFlush(timeout: .seconds(1))
            case .tunnel:
                let authority = text.split(separator: " ", maxSplits: 2).dropFirst().first.map(String.init) ?? ""
                guard let colon = authority.lastIndex(of: ":"), let port = Int(authority[authority.index(after: colon)...]) else {
                    client.close()
                    return
                }
                let destination = Endpoint(host: String(authority[..<colon]), port: port)
                let memory = proxy.memory
                let loop = client.loop
                Task(executorPreference: loop.taskExecutor) { [self] in
                    let dialed = await memory.connect(to: destination, timeout: .seconds(5))
                    loop.execute { [self] in tunnel(dialed) }
                }
            }
        }

        /// The target answered the dial, or did not.
        private func tunnel(_ dialed: Result<(InMemoryTransport, TetherSocketAddress), TetherError>) {
            guard client.isOpen else { return }
            guard case .success(let (end, _)) = dialed else {
                client.buffers.outbound.writeBytes(Array("HTTP/1.1 502 Bad Gateway\r\n\r\n".utf8))
                client.closeAfterFlush(timeout: .seconds(1))
                return
            }
            target = end
            let relay = Relay(from: end, to: client)
            self.relay = relay
            end.handler = relay
            try? end.start()
            client.buffers.outbound.writeBytes(Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8))
            client.flush()
        }

        func transportClosed(_ error: TetherError) {
            target?.closeAfterFlush(timeout: .seconds(1))
        }

        func transportWritable() {}
        func transportSecured() {}
    }

    /// The target's bytes back to the client.
    private final class Relay: ByteTransportHandler {
        let from: InMemoryTransport
        let to: InMemoryTransport

        init(from: InMemoryTransport, to: InMemoryTransport) {
            self.from = from
            self.to = to
        }

        func transportRead() {
            let bytes = Array(from.buffers.inbound.readableBytesView)
            from.buffers.inbound.moveReaderIndex(forwardBy: bytes.count)
            to.buffers.outbound.writeBytes(bytes)
            to.flush()
        }

        func transportClosed(_ error: TetherError) {
            to.closeAfterFlush(timeout: .seconds(1))
        }

        func transportWritable() {}
        func transportSecured() {}
    }
}
