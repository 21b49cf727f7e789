// The code of Documentation.docc/Datagrams.md ("UDP Datagrams"), block by block, and tests
// that run it on 127.0.0.1 and check what it prints.
import Testing
@testable import Tether
@testable import TetherUDP

/// The examples' `print`, recorded by the test that runs them (see ``Transcript``).
private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    Transcript.print(items, separator: separator, terminator: terminator)
}

// MARK: - An echo service and a client

func echoDatagrams(on server: DatagramSocket) async throws {
    for try await datagram in server.datagrams {
        try server.send(datagram.bytes, to: datagram.sender)
    }
}

func datagramsEchoAndClient() async throws {
    let server = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
    let echoing = Task { try await echoDatagrams(on: server) }

    let client = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
    try client.connect(to: server.localAddress)
    try client.send(Array("ping".utf8))
    for try await reply in client.datagrams {
        print(String(decoding: reply.bytes, as: UTF8.self))   // ping
        break
    }
    client.close()
    server.close()          // ends the echo loop
    try await echoing.value
}

// MARK: - A peer that is not there

func readReplies(from client: DatagramSocket) async {
    do {
        for try await reply in client.datagrams {
            print("reply of \(reply.bytes.count) bytes")
        }
    } catch where error.code == .connectionRefused {
        print(error.message)   // udp socket 127.0.0.1:40000 connected to 127.0.0.1:9: the peer refused a datagram (its port is closed)
    } catch {
        print("cannot receive:", error.message)
    }
}

// MARK: - Tests

@Suite(.timeLimit(.guarded)) struct DatagramsArticleTests {
    @Test func theEchoServiceAnswersTheClient() async throws {
        let lines = try await printedLines { try await datagramsEchoAndClient() }
        #expect(lines == ["ping"])
    }

    @Test func aClosedPortIsReportedToTheReader() async throws {
        let gone = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        let closedPort = gone.localAddress
        gone.close()
        // The loop closes the descriptor in a job queued by close(): one queued after it runs later.
        try await gone.channel.loop.submit {}
        let client = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { client.close() }
        try client.connect(to: closedPort)
        try client.send(Array("anyone?".utf8))
        let lines = try await printedLines { await readReplies(from: client) }
        #expect(lines == ["udp socket \(client.localAddress) connected to \(closedPort): the peer refused a datagram (its port is closed)"])
    }
}
