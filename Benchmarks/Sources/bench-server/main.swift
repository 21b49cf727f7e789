import BenchCore
import Dispatch
import Tether
import TetherTLS

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let usage = """
    usage: bench-server --impl tether|nio [--port P] [--tls-cert FILE --tls-key FILE]
                        [--websocket PATH] [--mailboxes on|off] [--chunk-size BYTES]
      An echo server for the seed protocol on 127.0.0.1: every request (0x402) and
      heartbeat (0x1) is answered with a frame of the same type, serial and payload.
      A request of type 0x403 with the payload `rounds: UInt32 | size: UInt32` pushes
      `rounds` notifications of type 0x2 with `size` bytes to every connected peer, then
      is answered with an empty payload (the fan-out scenario).
      With --tls-cert and --tls-key (PEM), every connection is TLS: Tether's TetherTLS
      (OpenSSL) or NIO's NIOSSL (BoringSSL).
      With --websocket PATH, --port is a WebSocket port that upgrades `GET PATH` and
      carries the seed frames in binary messages: Tether's `ServerConfiguration.webSocket`
      (its TCP port is then any free one, unused), or NIO's HTTP/1.1 pipeline with
      `NIOWebSocketServerUpgrader`, which echoes a read burst's answers as one message
      (every frame type is echoed there, 0x403 too: no fan-out over NIO's WebSocket).
      With --mailboxes on (tether only), in-memory mailboxes: clients may have sessions
      (bench-client --session), and large frames go in chunks to those that announce them,
      of --chunk-size bytes (default: Limits.chunkSize). Its request records hold up to
      10,000,000 keyed requests (bench-client --keys on), 4 GiB of answers per client.
      --port 0 (the default) lets the system choose. Prints `listening on 127.0.0.1:PORT`
      when ready; runs until SIGTERM or SIGINT.
    """

let options = Options(Array(CommandLine.arguments.dropFirst()), known: ["impl", "port", "tls-cert", "tls-key", "websocket", "mailboxes", "chunk-size"], usage: usage)
let impl = options.string("impl", allowed: ["tether", "nio"])
let port = options.int("port", default: 0)
let tlsCertificate = options.string("tls-cert", default: "")
let tlsKey = options.string("tls-key", default: "")
let tls = tlsCertificate.isEmpty ? nil : (certificate: tlsCertificate, key: tlsKey)
let webSocketPath = options.string("websocket", default: "")
let mailboxes = options.string("mailboxes", default: "off", allowed: ["off", "on"]) == "on"
let requestedChunkSize = options.int("chunk-size", default: 0)
let chunkSize = requestedChunkSize > 0 ? requestedChunkSize : nil
if !webSocketPath.isEmpty {
    if tls != nil { Options.fail("--websocket does not combine with TLS", usage: usage) }
    if !webSocketPath.hasPrefix("/") { Options.fail("--websocket takes a path starting with /, not \(webSocketPath)", usage: usage) }
}

/// Ends the process on SIGTERM or SIGINT; `stop` runs first, on a global queue.
func onTermination(_ stop: @escaping @Sendable () -> Void) -> [any DispatchSourceSignal] {
    [SIGTERM, SIGINT].map { signalNumber in
        signal(signalNumber, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
        source.setEventHandler(handler: stop)
        source.resume()
        return source
    }
}

switch impl {
case "nio":
    let (channel, bound) = webSocketPath.isEmpty
        ? try await startNIOServer(port: port, tls: tls)
        : try await startNIOWebSocketServer(port: port, path: webSocketPath)
    let sources = onTermination { exit(0) }
    printNow("listening on 127.0.0.1:\(bound)")
    try await channel.closeFuture.get()
    _ = sources
default:
    var configuration = ServerConfiguration(host: "127.0.0.1", port: webSocketPath.isEmpty ? port : 0)
    configuration.maximumConnections = 100_000
    if mailboxes {
        var mailboxConfiguration = MailboxConfiguration.inMemory
        mailboxConfiguration.limits.maximumRequestRecords = 10_000_000
        mailboxConfiguration.limits.maximumRequestRecordsPerClient = 10_000_000
        mailboxConfiguration.limits.maximumRequestRecordBytesPerClient = 4 << 30
        configuration.mailboxes = mailboxConfiguration
    }
    if let size = chunkSize { configuration.limits.chunkSize = size }
    if !webSocketPath.isEmpty {
        configuration.webSocket = WebSocketServerConfiguration(port: port, path: webSocketPath)
    }
    if let tls {
        configuration.tls = .server(options: TLSServerOptions(certificate: TLSCertificateFiles(certificateChain: tls.certificate, privateKey: tls.key)))
    }
    let server = Server(configuration: configuration)
    server.handle(type: 0x402) { request, _ in
        Response(payload: request.payload)
    }
    server.handle(type: 0x403) { request, _ in
        guard let (rounds, size) = FanOut.parse(request.payload) else { return Response.error("expected rounds and size") }
        let notification = Frame(type: 0x2, payload: [UInt8](repeating: 0x62, count: size))
        // Queued without waiting for the loops to write each round, as the NIO server's
        // tasks do: rounds queued together leave together.
        for _ in 0..<rounds {
            server.queueBroadcast(notification)
        }
        return Response()
    }
    let task = Task {
        do {
            try await server.run()
            exit(0)
        } catch {
            printError("bench-server: \(error)")
            exit(1)
        }
    }
    let sources = onTermination { task.cancel() }
    let address = webSocketPath.isEmpty ? try await server.listeningAddress() : try await server.webSocketAddress()
    printNow("listening on 127.0.0.1:\(address.port)")
    _ = sources
    await task.value
}
