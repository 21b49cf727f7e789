import Tether

func talk() async throws {
    let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: 9000))

    // Pushes from the server, in their own loop; the connection reconnects by itself under it.
    let pushes = Task {
        for await push in connection.notifications {
            print("push", push.type, push.text)
        }
    }

    // A request: the connection gives it a serial and resumes you with the matching response.
    let reply = try await connection.request(Request(type: 0x402, json: ["hello": "world"]), timeout: .seconds(5))
    print(reply.text)                 // {"echo":{"hello":"world"}}

    await connection.close()          // ends the pushes loop too
    await pushes.value
}
