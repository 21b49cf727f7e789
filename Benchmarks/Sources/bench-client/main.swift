import BenchCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let usage = """
    usage: bench-client --impl tether|tether-pipeline|nio-handler|nio-async --port P [--host 127.0.0.1]
                        [--connections C] [--in-flight K] [--size BYTES]
                        [--duration S] [--warmup S] [--executor default|loop]
                        [--tls-ca FILE] [--websocket PATH] [--session off|chunks|whole]
                        [--keys off|on]
      A closed-loop load generator for the seed echo protocol: each of C connections keeps
      K requests (type 0x402, BYTES of payload) in flight; each response issues the next.
      Load runs for --warmup seconds unmeasured, then --duration seconds measured, and one
      line is printed at the end:
      RESULT impl=… conns=… inflight=… size=… requests=… seconds=… rps=… mbps=… p50_us=… …
      (mbps: megabytes of payload per second, one direction). Exit status: 0 done, 1 errors,
      2 bad arguments, 3 stalled.
      tether-pipeline: one task per connection sends K requests at a time with
      Connection.pipeline and sends the next K once all are answered (closed loop by
      batches rather than by request).
      --tls-ca FILE: connect with TLS (tether and nio-handler), trusting the CA in this
      PEM file, verifying the name localhost.
      --websocket PATH: connect to ws://HOST:PORT/PATH and carry the seed frames in binary
      WebSocket messages (not nio-async). tether and tether-pipeline:
      `Endpoint(host:port:webSocketPath:)`.
      nio-handler: NIO's HTTP/1.1 client upgraded with `NIOWebSocketClientUpgrader`; each
      read burst's next requests go out as one binary message, masked with a random key.
      --session chunks|whole (tether only): each connection has a session (the server
        needs mailboxes: bench-server --mailboxes on); `chunks` announces the default chunk
        size (or --chunk-size BYTES), so large frames go in chunks both ways, `whole` announces
        none.
      --keys on (tether with --session): every request carries an idempotency key of its
        own (Connection.request(_:idempotencyKey:)), so the server records it and its answer.
      --executor loop (tether only): the request tasks prefer their connection's event loop
      instead of the global concurrent executor.
    """

let options = Options(
    Array(CommandLine.arguments.dropFirst()),
    known: ["impl", "host", "port", "connections", "in-flight", "size", "duration", "warmup", "executor", "tls-ca", "websocket", "session", "chunk-size", "keys"],
    usage: usage
)
let impl = options.string("impl", allowed: ["tether", "tether-pipeline", "nio-handler", "nio-async"])
var load = Load(
    host: options.string("host", default: "127.0.0.1"),
    port: options.int("port"),
    connections: max(1, options.int("connections", default: 1)),
    inFlight: max(1, options.int("in-flight", default: 1)),
    size: options.int("size", default: 64),
    duration: options.double("duration", default: 5),
    warmup: options.double("warmup", default: 1)
)
load.chunkSize = options.int("chunk-size", default: 0)
load.session = options.string("session", default: "off", allowed: ["off", "chunks", "whole"])
load.keyed = options.string("keys", default: "off", allowed: ["off", "on"]) == "on"
if load.keyed, impl != "tether" || load.session == "off" {
    Options.fail("--keys on is for --impl tether with --session chunks or whole", usage: usage)
}
load.preferLoopExecutor = options.string("executor", default: "default", allowed: ["default", "loop"]) == "loop"
let trustedCA = options.string("tls-ca", default: "")
load.tlsCA = trustedCA.isEmpty ? nil : trustedCA
let webSocketPath = options.string("websocket", default: "")
if !webSocketPath.isEmpty {
    guard impl != "nio-async" else { Options.fail("--websocket is for tether, tether-pipeline and nio-handler", usage: usage) }
    guard load.tlsCA == nil else { Options.fail("--websocket does not combine with --tls-ca", usage: usage) }
    guard webSocketPath.hasPrefix("/") else { Options.fail("--websocket takes a path starting with /, not \(webSocketPath)", usage: usage) }
    load.webSocketPath = webSocketPath
}

let stats: Stats
let window: Window
do {
    switch impl {
    case "nio-handler" where load.webSocketPath != nil: (stats, window) = try await NIOWebSocketClient.run(load)
    case "nio-handler": (stats, window) = try await NIOHandlerClient.run(load)
    case "nio-async": (stats, window) = try await NIOAsyncClient.run(load)
    case "tether-pipeline": (stats, window) = try await TetherClient.run(load, pipelined: true)
    default: (stats, window) = try await TetherClient.run(load)
    }
} catch {
    printError("bench-client: \(error)")
    exit(1)
}
if let firstError = stats.firstError {
    printError("bench-client: \(stats.errors) errors; first: \(firstError)")
}
printNow(stats.resultLine(impl: impl, connections: load.connections, inFlight: load.inFlight, size: load.size, window: window))
exit(stats.errors == 0 ? 0 : 1)
