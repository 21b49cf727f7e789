#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@testable import Tether

/// The descriptor of this process's socket listening on 127.0.0.1:`port`, found through the
/// socket's inode in `/proc/net/tcp` and the links of `/proc/self/fd`.
private func listeningDescriptor(port: Int) -> Int32? {
    // Read to the end with read(2): a file of /proc has no size to go by, and with the
    // sockets of hundreds of tests it is many pages long.
    let file = open("/proc/net/tcp", O_RDONLY)
    guard file >= 0 else { return nil }
    defer { Glibc.close(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(file, $0.baseAddress, $0.count) }
        guard count > 0 else { break }
        bytes += chunk[..<count]
    }
    let table = String(decoding: bytes, as: UTF8.self)
    let local = String(format: "0100007F:%04X", port)
    var inode: String?
    for line in table.split(separator: "\n").dropFirst() {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        // local address, remote address, state (0A: listening), …, inode at index 9.
        if fields.count > 9, fields[1] == local, fields[3] == "0A" { inode = String(fields[9]) }
    }
    guard let inode else { return nil }
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    for entry in entries {
        guard let fd = Int32(entry) else { continue }
        var target = [CChar](repeating: 0, count: 256)
        let count = readlink("/proc/self/fd/\(entry)", &target, target.count - 1)
        guard count > 0 else { continue }
        if String(decoding: target[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) == "socket:[\(inode)]" { return fd }
    }
    return nil
}

@Suite("A stopped server's listener", .timeLimit(.guarded))
struct ListenerShutdownTests {
    @Test("a server that stops refuses new connections at once, even while another descriptor of its listening socket is open, as a child's is between fork and exec")
    func refusesWhileADescriptorLingers() async throws {
        let server = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: 0))
        let running = Task { try await server.run() }
        let address = try await bounded("the server to listen") { try await server.listeningAddress() }
        let listener = try #require(listeningDescriptor(port: address.port))
        // What a child holds from its fork until its exec: the same socket.
        let copy = dup(listener)
        #expect(copy >= 0)
        defer { Glibc.close(copy) }
        running.cancel()
        try await bounded("the server to stop") { try await running.value }
        let endpoint = Endpoint(host: address.ipAddress, port: address.port)
        #expect(throws: (any Error).self, "a connection landed in the queue of a listener that had stopped") {
            _ = try RawSocket.connect(to: endpoint, timeout: .seconds(2))
        }
    }
}
