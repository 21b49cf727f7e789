import Foundation
import Testing
@testable import Tether
@testable import TetherUDP

/// `tether udp listen` and `tether udp send`, end to end, as child processes on 127.0.0.1.
@Suite("tether udp", .serialized, .timeLimit(.guarded))
struct CLIUDPTests {
    @Test("udp listen 0 --count 2 prints a datagram from udp send HOST:PORT as text and a binary one as hex, each with its sender, then exits 0")
    func listenAndSend() async throws {
        let listen = try tether(["udp", "listen", "0", "--count", "2"])
        defer { listen.kill() }
        let port = try await listen.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            listeningPort(in: String(decoding: output, as: UTF8.self).replacingOccurrences(of: "listening on udp ", with: "listening on "))
        }
        let send = try tether(["udp", "send", "127.0.0.1:\(port)", "hello udp"])
        defer { send.kill() }
        #expect(try await send.waitForExit(within: eventBound) == 0, "\(send.outputText)")
        #expect(send.outputText == "sent 9 bytes to 127.0.0.1:\(port)\n")
        _ = try await listen.waitForOutput(containing: ": hello udp\n", within: eventBound)

        let socket = try await DatagramSocket.bind(host: "127.0.0.1", port: 0)
        defer { socket.close() }
        try socket.send([0x00, 0x01, 0xff], to: try #require(TetherSocketAddress(ipAddress: "127.0.0.1", port: port)))
        #expect(try await listen.waitForExit(within: eventBound) == 0, "\(listen.outputText)")
        let lines = listen.outputText.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(listen.outputText)")
        #expect(lines.first == "listening on udp 127.0.0.1:\(port)")
        #expect(lines.dropFirst().first?.hasPrefix("from 127.0.0.1:") == true, "\(listen.outputText)")
        #expect(lines.dropFirst().first?.hasSuffix(": hello udp") == true, "\(listen.outputText)")
        #expect(lines.last == "from \(socket.localAddress): hex 00 01 ff")
    }

    @Test("udp listen HOST:PORT binds that address, and udp send takes HOST:PORT like every client command")
    func hostAndPort() async throws {
        let listen = try tether(["udp", "listen", "127.0.0.1:0", "--count", "1"])
        defer { listen.kill() }
        let port = try await listen.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            listeningPort(in: String(decoding: output, as: UTF8.self).replacingOccurrences(of: "listening on udp ", with: "listening on "))
        }
        let send = try tether(["udp", "send", "127.0.0.1:\(port)", "one"])
        defer { send.kill() }
        #expect(try await send.waitForExit(within: eventBound) == 0, "\(send.outputText)")
        #expect(try await listen.waitForExit(within: eventBound) == 0, "\(listen.outputText)")
        #expect(listen.outputText.hasSuffix(": one\n"), "\(listen.outputText)")
    }

    @Test("the older --host and --port still work, each with a one-line note on stderr that shows the HOST:PORT form")
    func deprecatedOptions() async throws {
        let listen = try tether(["udp", "listen", "--host", "127.0.0.1", "--port", "0", "--count", "1"])
        defer { listen.kill() }
        let port = try await listen.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            listeningPort(in: String(decoding: output, as: UTF8.self).replacingOccurrences(of: "listening on udp ", with: "listening on "))
        }
        let send = try tether(["udp", "send", "--host", "127.0.0.1", "--port", "\(port)", "old"])
        defer { send.kill() }
        #expect(try await send.waitForExit(within: eventBound) == 0, "\(send.outputText)")
        #expect(send.outputText == """
            tether: --host and --port are deprecated here: give the address as HOST:PORT, `tether udp send 127.0.0.1:\(port) TEXT`
            sent 3 bytes to 127.0.0.1:\(port)

            """, "\(send.outputText)")
        #expect(try await listen.waitForExit(within: eventBound) == 0, "\(listen.outputText)")
        let lines = listen.outputText.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(listen.outputText)")
        #expect(lines.first == "tether: --host and --port are deprecated here: give the address as HOST:PORT, `tether udp listen 127.0.0.1:0`")
        #expect(lines.last?.hasSuffix(": old") == true, "\(listen.outputText)")
    }

    @Test("a host name, a port 0 to send to, a missing address or a missing action are usage errors (exit 2) that say what is wrong")
    func usageErrors() async throws {
        for (arguments, message) in [
            (["udp", "send", "localhost:9", "x"], "tether: 'localhost:9': 'localhost' is not a numeric IPv4 or IPv6 address (for example 127.0.0.1:9000 or [::1]:9000)\n"),
            (["udp", "send", "[::1]:0", "x"], "tether: udp send needs a port other than 0\n"),
            (["udp", "send", "9000", "x"], "tether: '9000' is not HOST:PORT (for example 127.0.0.1:9000 or [::1]:9000)\n"),
            (["udp", "listen", "127.0.0.1:70000"], "tether: '127.0.0.1:70000' is not [HOST:]PORT (for example 9000, 0.0.0.0:9000 or [::1]:9000)\n"),
            (["udp", "listen"], "tether: missing [HOST:]PORT\n"),
            (["udp", "send", "--host", "localhost", "--port", "9", "x"], "tether: --host 'localhost' is not a numeric IPv4 or IPv6 address\n"),
            (["udp", "9"], "tether: unknown udp action '9': listen or send\n"),
            (["udp"], "tether: missing listen or send\n"),
        ] {
            let command = try tether(arguments)
            defer { command.kill() }
            #expect(try await command.waitForExit(within: eventBound) == 2, "\(arguments)")
            #expect(command.outputText.hasPrefix(message), "\(arguments): \(command.outputText)")
        }
    }
}
