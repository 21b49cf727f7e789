#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
import TetherTLS
@testable import Tether

/// A TLS client driven by hand over a raw socket, so a test can send part of a record.
/// Every wait is bounded by `poll(2)`; it runs on a thread of its own (``offThread(_:)``).
private struct HandDrivenTLS {
    let socket: RawSocket
    let session: any TLSSession

    /// Connects and completes the handshake.
    init(to endpoint: Endpoint, trusting certificates: TestCertificates) throws {
        var options = TLSClientOptions()
        options.handshakeTimeout = eventBound
        options.trustRoots = .file(certificates.caCertificate)
        options.serverName = "localhost"
        let configuration = TLSConfiguration.client(options: options)
        try configuration.provider.prepare()
        socket = try RawSocket.connect(to: endpoint)
        session = try configuration.provider.makeSession(host: "localhost", remoteAddress: TetherSocketAddress(ipAddress: "127.0.0.1", port: endpoint.port)!)
        var hello = FrameBuffer()
        try session.start(output: &hello)
        try socket.write(Array(hello.readableBytesView))
        while !session.isEstablished {
            var plaintext = FrameBuffer()
            try receive(into: &plaintext)
        }
    }

    /// Reads what the socket has within the bound and runs it through the session.
    func receive(into plaintext: inout FrameBuffer) throws {
        var descriptor = pollfd(fd: socket.fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 10_000) > 0 else { throw TimedOut(what: "TLS bytes from the server") }
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        let got = chunk.withUnsafeMutableBytes { recv(socket.fd, $0.baseAddress, $0.count, 0) }
        guard got > 0 else { throw TimedOut(what: "TLS bytes: the server closed") }
        var ciphertext = FrameBuffer(bytes: Array(chunk.prefix(got)))
        var output = FrameBuffer()
        _ = try session.receive(&ciphertext, plaintext: &plaintext, output: &output)
        if output.readableBytes > 0 { try socket.write(Array(output.readableBytesView)) }
    }

    /// The ciphertext of `bytes`: one record for a small frame.
    func seal(_ bytes: [UInt8]) throws -> [UInt8] {
        var plaintext = FrameBuffer(bytes: bytes)
        var sealed = FrameBuffer()
        try session.send(&plaintext, output: &sealed)
        return Array(sealed.readableBytesView)
    }
}

@Suite("Frame completion over TLS", .timeLimit(.guarded))
struct TLSFrameTimeoutTests {
    @Test("a TLS peer that sends part of a record after its first frame is closed with frameTimeout")
    func partialRecord() async throws {
        let certificates = try await TestCertificates.shared()
        let tls = TLSConfiguration.server(options: TLSServerOptions.guarded(certificates.server))
        try await withServer(configure: {
            $0.tls = tls
            $0.frameCompletionTimeout = .milliseconds(200)
            $0.handshakeTimeout = nil
            $0.idleTimeout = nil
        }, handlers: echoHandlers) { server, endpoint in
            let events = server.events
            let stalled = try await offThread { () throws -> Bool in
                let client = try HandDrivenTLS(to: endpoint, trusting: certificates)
                try client.socket.write(try client.seal(seedBytes(type: 0x1, serial: 1)))
                var plaintext = FrameBuffer()
                while plaintext.readableBytes < 12 { try client.receive(into: &plaintext) }
                // The heartbeat's ack came back; now ten bytes of the next record, and nothing more.
                let record = try client.seal(seedBytes(type: 0x402, serial: 2, payload: Array(repeating: 0x20, count: 100)))
                try client.socket.write(Array(record.prefix(10)))
                return try client.socket.waitForCloseBlocking(timeout: .seconds(5))
            }
            #expect(stalled)
            let gone = try await collect(1, from: events.filter { $0.kind == .peerDisconnected })
            let reason = try #require(gone.first?.reason)
            #expect(reason.code == .frameTimeout)
            #expect(reason.message.contains("did not finish a frame within 200 ms of its first byte"))
            let metrics = await server.metrics()
            #expect(metrics.frameTimeouts == 1)
            #expect(metrics.heartbeatsAcked == 1)
        }
    }
}
