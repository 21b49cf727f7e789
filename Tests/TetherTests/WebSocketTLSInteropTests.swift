import Testing
@testable import Tether

extension PythonWebSockets {
    /// Connects to argv[1] (over TLS trusting the CA file argv[2] for wss://), sends the
    /// hex of argv[3] as one binary message and prints the answer; then sends a seed request
    /// of type 0x405, serial 11 and argv[4] payload bytes as one message of several
    /// fragments, and prints the length and SHA-256 of the messages that answer it.
    static let framesClient = """
        import asyncio, hashlib, ssl, struct, sys
        from websockets.asyncio.client import connect
        async def main():
            url, cafile, small, count = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3]), int(sys.argv[4])
            context = ssl.create_default_context(cafile=cafile) if url.startswith("wss://") else None
            async with connect(url, ssl=context, max_size=None) as ws:
                await ws.send(small)
                answer = await asyncio.wait_for(ws.recv(), 10)
                print("SMALL", answer.hex(), "END", flush=True)
                payload = bytes((i * 31) & 0xFF for i in range(count))
                frame = struct.pack(">III", 0x405, 11, count) + payload
                await ws.send([frame[i:i + 300000] for i in range(0, len(frame), 300000)])
                got = b""
                while len(got) < len(frame):
                    got += await asyncio.wait_for(ws.recv(), 10)
                print("LARGE", len(got), hashlib.sha256(got).hexdigest(), "END", flush=True)
        asyncio.run(main())
        """
}

@Suite(
    "WebSocket over TLS and on the main port, with Python websockets",
    .timeLimit(.guarded),
    .enabled(if: PythonWebSockets.available, "python3 cannot import websockets (.ci/run installs it: python3 -m pip install websockets)")
)
struct WebSocketTLSInteropTests {
    /// Runs the Python client against `url` and checks both answers exactly: the small
    /// request's response bytes, and the length and digest of the 2 MiB echo.
    private func check(url: String, caFile: String, server: Server, plainTCP: Endpoint) async throws {
        server.handle(type: 0x405) { request, _ in Response(payload: request.payload) }
        let request = seedBytes(type: 0x402, serial: 9, payload: Array("{\"from\":\"python\"}".utf8))
        // The bytes the server answers over plain TCP: the same bytes must come back.
        let socket = try RawSocket.connect(to: plainTCP)
        try socket.write(request)
        let expected = try await offThread { () throws -> [UInt8] in
            let header = try socket.read(12)
            let length = header.count == 12 ? Int(header[8]) << 24 | Int(header[9]) << 16 | Int(header[10]) << 8 | Int(header[11]) : 0
            return header + (try socket.read(length))
        }
        #expect(expected.count > 12)
        let count = (2 << 20) + 9
        let large = seedBytes(type: 0x405, serial: 11, payload: (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let hex = request.map { String(format: "%02x", $0) }.joined()
        let client = try PythonWebSockets.run(PythonWebSockets.framesClient, [url, caFile, hex, "\(count)"])
        defer { client.kill() }
        let output = try await client.waitForOutput("two result lines", within: eventBound) { output -> String? in
            let text = String(decoding: output, as: UTF8.self)
            return text.components(separatedBy: " END\n").count >= 3 ? text : nil
        }
        let lines = output.split(separator: "\n").filter { $0.hasSuffix(" END") }
        #expect(lines.count == 2, "\(output)")
        #expect(lines.first == "SMALL \(expected.map { String(format: "%02x", $0) }.joined()) END", "\(output)")
        #expect(lines.last == "LARGE \(large.count) \(sha256Hex(large)) END", "\(output)")
        #expect(try await client.waitForExit(within: eventBound) == 0)
    }

    @Test("a websockets client over wss:// (Python ssl trusting the test CA) gets the exact response bytes, and a 2 MiB request sent in fragments comes back whole")
    func pythonClientOverTLS() async throws {
        let certificates = try await TestCertificates.shared()
        try await withSecureWebSocketServer(certificates) { server, endpoint in
            let tcp = try await server.listeningAddress()
            try await check(url: "wss://127.0.0.1:\(endpoint.port)/tether", caFile: certificates.caCertificate, server: server, plainTCP: Endpoint(host: tcp.ipAddress, port: tcp.port))
        }
    }

    @Test("a websockets client on a main port shared with Tether frames gets the exact response bytes")
    func pythonClientOnMainPort() async throws {
        try await withSharedPortServer { server, endpoint, _ in
            try await check(url: "ws://127.0.0.1:\(endpoint.port)/tether", caFile: "-", server: server, plainTCP: endpoint)
        }
    }
}
