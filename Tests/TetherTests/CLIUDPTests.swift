import Foundation
import Testing
@testable import Tether

/// `tether udp listen` and `tether udp send`, end to end, as child processes on 127.0.0.1.
@Suite("tether udp", .serialized, .timeLimit(.guarded))
struct CLIUDPTests {
    @Test("udp listen --count 2 prints a datagram from udp send as text and a binary one as hex, each with its sender, then exits 0")
    func listenAndSend() async throws {
        let listen = try tether(["udp", "listen", "--host", "127.0.0.1", "--port", "0", "--count", "2"])
        defer { listen.kill() }
        let port = try await listen.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            listeningPort(in: String(decoding: output, as: UTF8.self).replacingOccurrences(of: "listening on udp ", with: "listening on "))
        }
        let send = try tether(["udp", "send", "--host", "127.0.0.1", "--port", "\(port)", "hello udp"])
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

    @Test("udp send with a host name, and udp without an action, are usage errors (exit 2) that say what is wrong")
    func usageErrors() async throws {
        let named = try tether(["udp", "send", "--host", "localhost", "--port", "9", "x"])
        defer { named.kill() }
        #expect(try await named.waitForExit(within: eventBound) == 2)
        #expect(named.outputText.hasPrefix("tether: --host 'localhost' is not a numeric IPv4 or IPv6 address\n"), "\(named.outputText)")
        let bare = try tether(["udp", "--port", "9"])
        defer { bare.kill() }
        #expect(try await bare.waitForExit(within: eventBound) == 2)
        #expect(bare.outputText.hasPrefix("tether: missing listen or send\n"), "\(bare.outputText)")
    }
}
