import Foundation
import Testing
import TetherTLS
@testable import Tether

/// A fresh directory for socket files, removed with what it holds after `body`.
private func withSocketDirectory<T>(_ body: (String) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tether-unix-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    return try await body(directory)
}

/// The permission bits of the file at `path`.
private func permissions(of path: String) throws -> Int {
    let attributes = try FileManager.default.attributesOfItem(atPath: path)
    return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
}

/// Whether a socket file is at `path`.
private func isSocket(_ path: String) -> Bool {
    (try? Syscall.fileIdentity(path))??.isSocket == true
}

extension ServerConfiguration {
    fileprivate init(host: String, port: Int, unixSocket: UnixSocketConfiguration) {
        self.init(host: host, port: port)
        self.unixSocket = unixSocket
    }
}

@Suite("Unix domain sockets: a server's socket file and clients on unix:// endpoints", .timeLimit(.guarded))
struct UnixSocketTests {
    @Test("a server listens on a socket file beside its TCP port: a unix:// client's request, a push to it, the file made 0600 and removed once the server stops")
    func besideTheTCPPort() async throws {
        try await withSocketDirectory { directory in
            let path = directory + "/tether.sock"
            try await withServer(configure: { $0.unixSocket = UnixSocketConfiguration(path: path) }, handlers: echoHandlers) { server, tcp in
                #expect(isSocket(path))
                #expect(try permissions(of: path) == 0o600)
                let connection = Connection(to: Endpoint(unixSocket: path), configuration: testConfiguration())
                try await bounded("the connection") { try await connection.connect() }
                let reply = try await bounded("the echo") { try await connection.request(Request(type: 0x402, json: ["over": "unix"])) }
                #expect(reply.json == ["echo": ["over": "unix"]])
                #expect(await connection.connectReport?.address == TetherSocketAddress(unixPath: path))
                #expect(await connection.connectReport?.family == "Unix")
                let peer = try #require(server.peers.first)
                #expect(peer.remoteAddress.description == "unix:unnamed")
                let notifications = connection.notifications
                try await server.push(Frame(type: 0x2, serial: 0, payload: Array("hello".utf8)), to: peer.id)
                let pushed = try await collect(1, from: notifications, "the push")
                #expect(pushed.first?.payload == Array("hello".utf8))
                // The TCP port still serves.
                let overTCP = Connection(to: tcp, configuration: testConfiguration())
                try await bounded("the TCP connection") { try await overTCP.connect() }
                #expect(try await overTCP.request(Request(type: 0x402, json: ["over": "tcp"])).json == ["echo": ["over": "tcp"]])
                await overTCP.close()
                await connection.close()
            }
            #expect(!FileManager.default.fileExists(atPath: path), "the socket file outlived its server")
        }
    }

    @Test("with replacesPort the server listens on the socket file only: its listening address is the file's, with the permissions asked for")
    func insteadOfThePort() async throws {
        try await withSocketDirectory { directory in
            let path = directory + "/only.sock"
            var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
            configuration.handshakeTimeout = nil
            configuration.unixSocket = UnixSocketConfiguration(path: path, permissions: 0o660, replacesPort: true)
            let server = Server(configuration: configuration)
            echoHandlers(server)
            let running = Task { try await server.run() }
            let address = try await bounded("the server to listen") { try await server.listeningAddress() }
            #expect(address.unixPath == path)
            #expect(address.description == "unix://\(path)")
            #expect(try permissions(of: path) == 0o660)
            let connection = Connection(to: try #require(Endpoint(parsing: "unix://\(path)")), configuration: testConfiguration())
            try await bounded("the connection") { try await connection.connect() }
            #expect(try await connection.request(Request(type: 0x402, json: ["n": 1])).json == ["echo": ["n": 1]])
            await connection.close()
            running.cancel()
            try await bounded("the server to stop") { try await running.value }
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }

    @Test("a socket file left by a server that died is replaced; a live server's file, or a file that is not a socket, fails the start with bindFailed and is left alone")
    func staleAndTakenPaths() async throws {
        try await withSocketDirectory { directory in
            // A socket bound and closed without unlinking, as a killed server leaves it.
            let stale = directory + "/stale.sock"
            let address = try #require(TetherSocketAddress(unixPath: stale))
            do {
                let socket = try Socket(family: address.family, type: SocketOptions.streamType)
                try Syscall.bindAddress(socket.descriptor, address)
                try Syscall.startListening(socket.descriptor, backlog: 1)
            }
            #expect(isSocket(stale))
            try await withServer(configure: { $0.unixSocket = UnixSocketConfiguration(path: stale, replacesPort: true) }, handlers: echoHandlers) { server, _ in
                let connection = Connection(to: Endpoint(unixSocket: stale), configuration: testConfiguration())
                try await bounded("the connection") { try await connection.connect() }
                #expect(try await connection.request(Request(type: 0x402, json: ["stale": true])).json == ["echo": ["stale": true]])

                // A second server on the same file fails, and the first keeps its file.
                let second = ServerConfiguration(host: "127.0.0.1", port: 0, unixSocket: UnixSocketConfiguration(path: stale, replacesPort: true))
                do {
                    try await bounded("the second server to fail") { try await Server(configuration: second).run() }
                    Issue.record("a second server listened on a live socket file")
                } catch let error as TetherError {
                    #expect(error.code == .bindFailed)
                    #expect(error.message == "cannot listen on unix://\(stale): another server listens there")
                }
                #expect(try await connection.request(Request(type: 0x402, json: ["still": true])).json == ["echo": ["still": true]])
                await connection.close()
            }

            let plain = directory + "/plain"
            try Data("keep".utf8).write(to: URL(fileURLWithPath: plain))
            let configuration = ServerConfiguration(host: "127.0.0.1", port: 0, unixSocket: UnixSocketConfiguration(path: plain))
            do {
                try await bounded("the server to fail") { try await Server(configuration: configuration).run() }
                Issue.record("a server listened on a regular file")
            } catch let error as TetherError {
                #expect(error.code == .bindFailed)
                #expect(error.message == "cannot listen on unix://\(plain): a file that is not a socket is there")
            }
            #expect(try String(contentsOfFile: plain, encoding: .utf8) == "keep")
        }
    }

    @Test("a client to a path with no socket, or to a socket nothing listens on, fails at once with an error that names the path")
    func nothingThere() async throws {
        try await withSocketDirectory { directory in
            let missing = directory + "/missing.sock"
            let connection = Connection(to: Endpoint(unixSocket: missing), configuration: testConfiguration())
            do {
                try await bounded("the connect to fail") { try await connection.connect() }
                Issue.record("connected to nothing")
            } catch let error as TetherError {
                #expect(error.code == .connectFailed, "\(error)")
                #expect(error.message.contains("unix://\(missing)"), "\(error.message)")
            }
            let stale = directory + "/stale.sock"
            let address = try #require(TetherSocketAddress(unixPath: stale))
            do {
                let socket = try Socket(family: address.family, type: SocketOptions.streamType)
                try Syscall.bindAddress(socket.descriptor, address)
            }
            let refused = Connection(to: Endpoint(unixSocket: stale), configuration: testConfiguration())
            do {
                try await bounded("the connect to be refused") { try await refused.connect() }
                Issue.record("connected to a socket nothing listens on")
            } catch let error as TetherError {
                #expect(error.code == .connectionRefused, "\(error)")
                #expect(error.message == "connection refused by unix://\(stale)", "\(error.message)")
            }
        }
    }

    @Test("a 4 MiB payload both ways over a Unix domain socket, and TLS over one: the stream socket carries what TCP carries")
    func largePayloadAndTLS() async throws {
        let certificates = try await TestCertificates.shared()
        try await withSocketDirectory { directory in
            let path = directory + "/big.sock"
            try await withServer(configure: {
                $0.unixSocket = UnixSocketConfiguration(path: path, replacesPort: true)
                $0.limits.maximumPayloadLength = 8 << 20
            }, handlers: { server in
                server.handle(type: 0x500) { request, _ in Response(payload: request.payload.reversed()) }
            }) { _, _ in
                let connection = Connection(to: Endpoint(unixSocket: path), configuration: testConfiguration { $0.limits.maximumPayloadLength = 8 << 20 })
                try await bounded("the connection") { try await connection.connect() }
                let payload = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
                let response = try await bounded("the large echo") { try await connection.request(Request(type: 0x500, payload: payload)) }
                #expect(response.payload == payload.reversed())
                await connection.close()
            }
            let secured = directory + "/tls.sock"
            try await withServer(configure: {
                $0.unixSocket = UnixSocketConfiguration(path: secured, replacesPort: true)
                $0.tls = .server(options: TLSServerOptions.guarded(certificates.server))
            }, handlers: echoHandlers) { _, _ in
                var options = TLSClientOptions()
                options.handshakeTimeout = eventBound
                options.trustRoots = .file(certificates.caCertificate)
                options.serverName = "localhost"
                let connection = Connection(to: Endpoint(unixSocket: secured), configuration: testConfiguration { $0.tls = .client(options: options) })
                try await bounded("the TLS connection") { try await connection.connect() }
                #expect(await connection.tlsDetails != nil)
                #expect(try await connection.request(Request(type: 0x402, json: ["tls": true])).json == ["echo": ["tls": true]])
                await connection.close()
            }
        }
    }

    @Test("tether serve --unix PATH --unix-only and tether request unix:///PATH: the echo over the socket file, which is gone once the server exits")
    func commandLine() async throws {
        try await withSocketDirectory { directory in
            let path = directory + "/cli.sock"
            let server = try tether(["serve", "--unix", path, "--unix-only", "--unix-mode", "660"])
            defer { server.kill() }
            _ = try await server.waitForOutput(containing: "listening on unix://\(path)\n", within: eventBound)
            #expect(try permissions(of: path) == 0o660)
            let request = try tether(["request", "unix://\(path)", "--type", "0x402", "--json", #"{"over":"unix"}"#, "--verbose"])
            defer { request.kill() }
            #expect(try await request.waitForExit(within: eventBound) == 0, "\(request.outputText)")
            #expect(request.outputText.contains(#"{"echo":{"over":"unix"}}"#), "\(request.outputText)")
            #expect(request.outputText.contains("connected to unix://\(path) (Unix) in "), "\(request.outputText)")
            let wrong = try tether(["request", "unix://relative.sock", "--type", "0x402", "--json", "{}"])
            defer { wrong.kill() }
            #expect(try await wrong.waitForExit(within: eventBound) == 2, "\(wrong.outputText)")
            #expect(wrong.outputText.contains("'unix://relative.sock' is not a unix:// URL"), "\(wrong.outputText)")
            #expect(kill(server.pid, SIGINT) == 0)
            #expect(try await server.waitForExit(within: eventBound) == 0, "\(server.outputText)")
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }
}
