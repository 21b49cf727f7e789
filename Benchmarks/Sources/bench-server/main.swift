import BenchCore
import Dispatch
import Tether

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let usage = """
    usage: bench-server --impl tether|nio [--port P]
      An echo server for the seed protocol on 127.0.0.1: every request (0x402) and
      heartbeat (0x1) is answered with a frame of the same type, serial and payload.
      --port 0 (the default) lets the system choose. Prints `listening on 127.0.0.1:PORT`
      when ready; runs until SIGTERM or SIGINT.
    """

let options = Options(Array(CommandLine.arguments.dropFirst()), known: ["impl", "port"], usage: usage)
let impl = options.string("impl", allowed: ["tether", "nio"])
let port = options.int("port", default: 0)

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
    let (channel, bound) = try await startNIOServer(port: port)
    let sources = onTermination { exit(0) }
    printNow("listening on 127.0.0.1:\(bound)")
    try await channel.closeFuture.get()
    _ = sources
default:
    let server = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: port))
    server.handle(type: 0x402) { request, _ in
        Response(payload: request.payload)
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
    let address = try await server.listeningAddress()
    printNow("listening on 127.0.0.1:\(address.port)")
    _ = sources
    await task.value
}
