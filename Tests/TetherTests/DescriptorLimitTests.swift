#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@testable import Tether

/// The CPU time a process has used, from `/proc/PID/stat`, in seconds.
private func cpuSeconds(of pid: pid_t) throws -> Double {
    let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
    let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else {
        throw PostgresFixtureError(description: "cannot read /proc/\(pid)/stat: \(stat)")
    }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

@Suite("A server out of descriptors", .timeLimit(.guarded))
struct DescriptorLimitTests {
    @Test("a server whose descriptors run out while peers keep connecting does not spin on its listener: idle, it uses almost no CPU; once descriptors are free again it accepts")
    func listenerBacksOff() async throws {
        let path = try #require(CLIProfileTests.executable)
        let server = try ChildProcess("sh", ["-c", "ulimit -n 64; exec '\(path)' serve --port 0"])
        defer { server.kill() }
        let port = try await server.waitForOutput("the listening line", within: eventBound) { (output: [UInt8]) -> Int? in
            listeningPort(in: String(decoding: output, as: UTF8.self))
        }
        let endpoint = Endpoint(host: "127.0.0.1", port: port)
        // More connections than the server has descriptors: the last ones wait in its backlog.
        var sockets: [RawSocket] = []
        for _ in 0..<100 { sockets.append(try RawSocket.connect(to: endpoint)) }
        defer { for socket in sockets { socket.close() } }
        // The server accepts what it can; the accepted peers are logged.
        _ = try await server.waitForOutput(containing: "peer#40 connected", within: eventBound)
        // A window of idle time, measured: a listener that retried accept(2) at once every
        // turn would burn a core here.
        let before = try cpuSeconds(of: server.pid)
        try await Task.sleep(for: .seconds(2))
        let used = try cpuSeconds(of: server.pid) - before
        #expect(used < 0.3, "the idle server used \(used) s of CPU in 2 s")
        // Descriptors come back: the connections waiting in the backlog are taken.
        for socket in sockets.prefix(50) { socket.close() }
        sockets.removeFirst(50)
        let fresh = try RawSocket.connect(to: endpoint)
        defer { fresh.close() }
        try fresh.write(seedBytes(type: 0x1, serial: 7, payload: []))
        let answer = try await fresh.readFrame()
        #expect(answer?.serial == 7, "a heartbeat on a new connection is answered")
    }
}
