import Tether

func serve() async throws {
    let server = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: 9000))
    server.handle(type: 0x402) { request, peer in
        Response(json: ["echo": request.json ?? .null])
    }
    try await server.run()            // until the task is cancelled; heartbeats are acked for you
}
