import Testing
@testable import Tether
@testable import TetherUDP

/// ``DatagramSocket`` over real UDP sockets on 127.0.0.1 and ::1.
@Suite("UDP datagrams", .timeLimit(.guarded))
struct DatagramTests {
    /// A Python 3 UDP echo peer bound to `host` port 0: it prints `port N`, then sends every
    /// datagram back to its sender.
    static func pythonEcho(host: String) async throws -> (process: ChildProcess, address: TetherSocketAddress) {
        let script = """
            import socket, sys
            host = sys.argv[1]
            family = socket.AF_INET6 if ':' in host else socket.AF_INET
            s = socket.socket(family, socket.SOCK_DGRAM)
            s.bind((host, 0))
            print('port', s.getsockname()[1], flush=True)
            while True:
                data, sender = s.recvfrom(65535)
                s.sendto(data, sender)
            """
        let process = try ChildProcess("python3", ["-u", "-c", script, host])
        do {
            let port = try await process.waitForOutput("the echo peer's port", within: eventBound) { (output: [UInt8]) -> Int? in
                let text = String(decoding: output, as: UTF8.self)
                guard let line = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().first(where: { $0.hasPrefix("port ") }) else {
                    return nil
                }
                return Int(line.dropFirst("port ".count))
            }
            return (process, try #require(TetherSocketAddress(ipAddress: host, port: port)))
        } catch {
            process.kill()
            throw error
        }
    }

    /// The next element of `socket.datagrams`, within the bound.
    static func next(_ socket: DatagramSocket) async throws -> Datagram? {
        try await bounded("a datagram on \(socket.localAddress)") {
            var iterator = socket.datagrams.makeAsyncIterator()
            return try await iterator.next()
        }
    }

    @Test("a datagram sent to an independent echo peer comes back whole, from the peer's address", arguments: ["127.0.0.1", "::1"])
    func roundTripWithPython(host: String) async throws {
        let (echo, echoAddress) = try await Self.pythonEcho(host: host)
        defer { echo.kill() }
        let socket = try await DatagramSocket.bind(host: host, port: 0)
        defer { socket.close() }
        #expect(socket.localAddress.ipAddress == host)
        #expect(socket.localAddress.port != 0)
        let bytes: [UInt8] = [0, 1, 2, 0x7f, 0x80, 0xff] + Array("hello over udp".utf8)
        try socket.send(bytes, to: echoAddress)
        let reply = try #require(try await Self.next(socket))
        #expect(reply.bytes == bytes)
        #expect(reply.sender == echoAddress)
    }

    @Test("1,000 datagrams between two sockets arrive whole and in order, each from the sender's address")
    func thousandInOrder() async throws {
        let receiver = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { receiver.close() }
        let sender = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { sender.close() }
        // The reader runs throughout; its bound starts once the socket has read all 1,000,
        // so a slow machine's sending time does not count against it.
        let reading = Task {
            var received: [Datagram] = []
            for try await datagram in receiver.datagrams {
                received.append(datagram)
                if received.count == 1_000 { break }
            }
            return received
        }
        // Sent 100 at a time, each batch after the receiver read the last one, so the
        // kernel's receive buffer never fills, however slowly the machine runs.
        for batch in 0..<10 {
            for index in (batch * 100)..<((batch + 1) * 100) {
                try sender.send(Array("datagram \(index)".utf8), to: receiver.localAddress)
            }
            try await bounded("batch \(batch) read") { await receiver.waitForReads((batch + 1) * 100) }
        }
        let received = try await bounded("1,000 datagrams") { try await reading.value }
        #expect(received.map { String(decoding: $0.bytes, as: UTF8.self) } == (0..<1_000).map { "datagram \($0)" })
        #expect(Set(received.map(\.sender)) == [sender.localAddress])
        #expect(receiver.droppedDatagrams == 0)
    }

    @Test("a reader that does not read holds receiveBufferCount datagrams, the oldest; every later one of 5,000 is dropped and counted")
    func boundedReceiveBuffer() async throws {
        var configuration = DatagramConfiguration()
        configuration.receiveBufferCount = 1_024
        let receiver = try await DatagramSocket.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        defer { receiver.close() }
        let sender = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { sender.close() }
        for batch in 0..<50 {
            for index in (batch * 100)..<((batch + 1) * 100) {
                try sender.send(Array("\(index)".utf8), to: receiver.localAddress)
            }
            try await bounded("batch \(batch) read") { await receiver.waitForReads((batch + 1) * 100) }
        }
        #expect(receiver.droppedDatagrams == 5_000 - 1_024)
        #expect(receiver.channel.state.withLock { $0.inbox.heldCount } == 1_024)
        let held = try await collect(1_024, from: receiver.datagrams, "the held datagrams")
        #expect(held.map { String(decoding: $0.bytes, as: UTF8.self) } == (0..<1_024).map { "\($0)" })
        // Room again: the next datagram is delivered, not dropped.
        try sender.send(Array("after".utf8), to: receiver.localAddress)
        #expect(try await Self.next(receiver)?.bytes == Array("after".utf8))
        #expect(receiver.droppedDatagrams == 5_000 - 1_024)
    }

    @Test("a datagram larger than maximumDatagramSize is dropped and counted, never delivered cut")
    func truncatedIsDropped() async throws {
        var configuration = DatagramConfiguration()
        configuration.maximumDatagramSize = 100
        let receiver = try await DatagramSocket.bind(host: "127.0.0.1", port: 0, configuration: configuration)
        defer { receiver.close() }
        let sender = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { sender.close() }
        try sender.send([UInt8](repeating: 7, count: 101), to: receiver.localAddress)
        try sender.send([UInt8](repeating: 8, count: 100), to: receiver.localAddress)
        #expect(try await Self.next(receiver)?.bytes == [UInt8](repeating: 8, count: 100))
        #expect(receiver.truncatedDatagrams == 1)
        #expect(receiver.droppedDatagrams == 0)
    }

    @Test("a datagram over maximumDatagramSize is refused before it is sent, with the size, the limit and the destination")
    func oversizeSend() async throws {
        let socket = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { socket.close() }
        let destination = try #require(TetherSocketAddress(ipAddress: "127.0.0.1", port: 9))
        #expect(throws: TetherError(code: .frameTooLarge, message: "datagram of 65508 bytes to 127.0.0.1:9 is over the maximum datagram size of 65507 bytes")) {
            try socket.send([UInt8](repeating: 0, count: 65_508), to: destination)
        }
    }

    @Test("on a connected socket, the refusal of a closed port reaches the reader as connectionRefused, and the socket stays usable")
    func connectedRefusal() async throws {
        // A port that was just bound and closed: nothing listens there.
        let gone = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        let closedPort = gone.localAddress
        gone.close()
        // The loop closes the descriptor in a job queued by close(): one queued after it runs later.
        try await gone.channel.loop.submit {}
        let socket = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { socket.close() }
        try socket.connect(to: closedPort)
        #expect(socket.remoteAddress == closedPort)
        try socket.send(Array("anyone?".utf8))
        let refusal = TetherError(
            code: .connectionRefused,
            message: "udp socket \(socket.localAddress) connected to \(closedPort): the peer refused a datagram (its port is closed)"
        )
        await #expect(throws: refusal) { _ = try await Self.next(socket) }

        // The socket is still open: connected to a live peer, it sends and receives.
        let peer = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { peer.close() }
        try socket.connect(to: peer.localAddress)
        try socket.send(Array("hello".utf8))
        let datagram = try #require(try await Self.next(peer))
        #expect(datagram.bytes == Array("hello".utf8))
        try peer.send(Array("back".utf8), to: datagram.sender)
        #expect(try await Self.next(socket)?.bytes == Array("back".utf8))
    }

    @Test("send without an address on a socket that is not connected throws notConnected")
    func sendUnconnected() async throws {
        let socket = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { socket.close() }
        #expect(throws: TetherError(code: .notConnected, message: "udp socket \(socket.localAddress) is not connected: give the datagram an address or connect first")) {
            try socket.send([1])
        }
    }

    @Test("close ends a reader that waits, and later reads; sends after it throw connectionClosed; close twice is harmless")
    func closeEndsTheSequence() async throws {
        let socket = try await DatagramSocket.bind(host: "::1", port: 0)
        let waiting = Task { try await collect(1, from: socket.datagrams, "the end of the sequence") }
        // Whether the reader already waits when close() comes or reads after it, it ends
        // with no element.
        socket.close()
        socket.close()
        #expect(try await waiting.value.isEmpty)
        #expect(try await Self.next(socket) == nil)
        #expect(socket.isClosed)
        let destination = try #require(TetherSocketAddress(ipAddress: "::1", port: 9))
        #expect(throws: TetherError(code: .connectionClosed, message: "udp socket \(socket.localAddress) is closed: a datagram to [::1]:9 was not sent")) {
            try socket.send([1], to: destination)
        }
    }

    @Test("a host that is not a numeric address and a port out of range are refused with what was given")
    func badArguments() async throws {
        await #expect(throws: TetherError(code: .invalidArgument, message: "udp host 'localhost' is not a numeric IPv4 or IPv6 address")) {
            _ = try await DatagramSocket.bind(host: "localhost", port: 0)
        }
        await #expect(throws: TetherError(code: .invalidArgument, message: "udp port 70000 is out of range (0 to 65535)")) {
            _ = try await DatagramSocket.bind(host: "127.0.0.1", port: 70_000)
        }
    }
}
