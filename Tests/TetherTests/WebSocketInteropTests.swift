import Foundation
import Testing
@testable import Tether

/// Python and its `websockets` package, the independent implementation the interop tests
/// talk to (.ci/run installs the package with pip when it is missing).
enum PythonWebSockets {
    /// The `python3` executable: the first in `PATH`, or /usr/bin/python3.
    static let python: String = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates = path.split(separator: ":").map { "\($0)/python3" }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/usr/bin/python3"
    }()

    /// Whether `import websockets` works.
    static let available: Bool = {
        guard let child = try? ChildProcess(python, ["-c", "import websockets"]) else { return false }
        defer { child.kill() }
        return (try? child.waitForExitBlocking(within: .seconds(30))) == 0
    }()

    /// Starts `python3 -c script arguments…`.
    static func run(_ script: String, _ arguments: [String] = []) throws -> ChildProcess {
        try ChildProcess(python, ["-u", "-c", script] + arguments)
    }

    /// Echoes every message back as it came (binary as binary), on a free port it prints.
    static let echoServer = """
        import asyncio
        from websockets.asyncio.server import serve
        async def echo(ws):
            async for message in ws:
                await ws.send(message)
        async def main():
            async with serve(echo, "127.0.0.1", 0, max_size=None) as server:
                print("PORT", server.sockets[0].getsockname()[1], flush=True)
                await asyncio.Future()
        asyncio.run(main())
        """

    /// Sends argv[2] (hex) as one binary message to argv[1] and prints the answer; then, on
    /// a second connection, sends a text message and prints the close code it gets.
    static let client = """
        import asyncio, sys
        import websockets
        from websockets.asyncio.client import connect
        async def main():
            async with connect(sys.argv[1]) as ws:
                await ws.send(bytes.fromhex(sys.argv[2]))
                answer = await asyncio.wait_for(ws.recv(), 10)
                kind = "BINARY" if isinstance(answer, bytes) else "TEXT"
                print(kind, answer.hex() if isinstance(answer, bytes) else answer, "END", flush=True)
            async with connect(sys.argv[1]) as ws:
                await ws.send("hello")
                try:
                    await asyncio.wait_for(ws.recv(), 10)
                    print("NO CLOSE", flush=True)
                except websockets.exceptions.ConnectionClosed as closed:
                    print("CLOSED", closed.rcvd.code if closed.rcvd else None, "END", flush=True)
        asyncio.run(main())
        """
}

@Suite(
    "WebSocket interop with Python websockets",
    .timeLimit(.guarded),
    .enabled(if: PythonWebSockets.available, "python3 cannot import websockets (.ci/run installs it: python3 -m pip install websockets)")
)
struct WebSocketInteropTests {
    @Test("a Tether client talks to a websockets echo server: each request's echoed frame is its own response")
    func tetherClientPythonServer() async throws {
        let server = try PythonWebSockets.run(PythonWebSockets.echoServer)
        defer { server.kill() }
        let output = try await server.waitForOutput("the PORT line", within: eventBound) { output -> Int? in
            let text = String(decoding: output, as: UTF8.self)
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("PORT ") }), text.contains("\n") else { return nil }
            return Int(line.dropFirst(5))
        }
        let endpoint = try #require(Endpoint(webSocket: "ws://127.0.0.1:\(output)/echo"))
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        for index in 0..<10 {
            let payload = Array("request \(index)".utf8)
            let reply = try await connection.request(Request(type: 0x402, payload: payload))
            #expect(reply.type == 0x402)
            #expect(reply.payload == payload)
        }
        // Several messages' worth, reassembled by the echo in order.
        let large = (0..<(2 << 20) + 17).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let reply = try await connection.request(Request(type: 0x402, payload: large))
        #expect(reply.payload == large)
        await connection.close()
    }

    @Test("a websockets client gets the exact response bytes for a Tether request in a binary message, and close code 1003 for a text message")
    func pythonClientTetherServer() async throws {
        try await withWebSocketServer { server, endpoint in
            let request = seedBytes(type: 0x402, serial: 9, payload: Array("{\"from\":\"python\"}".utf8))
            // The bytes the server answers over plain TCP: the same bytes must come back in
            // the binary message.
            let tcp = try await server.listeningAddress()
            let socket = try RawSocket.connect(to: Endpoint(host: tcp.ipAddress, port: tcp.port))
            try socket.write(request)
            let expected = try await offThread { () throws -> [UInt8] in
                let header = try socket.read(12)
                let length = header.count == 12 ? Int(header[8]) << 24 | Int(header[9]) << 16 | Int(header[10]) << 8 | Int(header[11]) : 0
                return header + (try socket.read(length))
            }
            #expect(expected.count > 12)
            let hex = request.map { String(format: "%02x", $0) }.joined()
            let client = try PythonWebSockets.run(PythonWebSockets.client, ["ws://127.0.0.1:\(endpoint.port)/tether", hex])
            defer { client.kill() }
            let output = try await client.waitForOutput("two result lines", within: eventBound) { output -> String? in
                let text = String(decoding: output, as: UTF8.self)
                return text.components(separatedBy: " END\n").count >= 3 ? text : nil
            }
            let lines = output.split(separator: "\n").filter { $0.hasSuffix(" END") }
            #expect(lines.count == 2, "\(output)")
            #expect(lines.first == "BINARY \(expected.map { String(format: "%02x", $0) }.joined()) END", "\(output)")
            #expect(lines.last == "CLOSED 1003 END", "\(output)")
            #expect(try await client.waitForExit(within: eventBound) == 0)
        }
    }
}
