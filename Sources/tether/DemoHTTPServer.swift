#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization
import Tether

/// The demo's "business" HTTP server on 127.0.0.1: answers `GET /weather` with a small JSON
/// document and anything else with 404, one connection at a time, `Connection: close`.
/// Every wait is a `poll` with a timeout, so `stop()` returns promptly.
final class DemoHTTPServer: Sendable {
    let port: Int
    private let stopping = Atomic<Bool>(false)

    init() throws {
        let fd = socket(AF_INET, SocketOptions.streamType, 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        let listening = Socket(adopting: fd)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let error = POSIXError(.init(rawValue: errno) ?? .EIO)
            listening.close()
            throw error
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        // The accept loop owns the listening socket and closes it when it leaves.
        let box = SocketBox(listening)
        Thread { [self] in
            let listening = box.take()
            let fd = listening.descriptor
            while !stopping.load(ordering: .acquiring) {
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&descriptor, 1, 20) > 0 else { continue }
                let accepted = accept(fd, nil, nil)
                guard accepted >= 0 else { continue }
                let client = Socket(adopting: accepted)
                DemoHTTPServer.serve(client.descriptor)
                client.close()
            }
        }.start()
    }

    /// Stops accepting: the accept loop closes the listening socket within 20 ms.
    func stop() {
        stopping.store(true, ordering: .releasing)
    }

    private static func serve(_ fd: Int32) {
        var request: [UInt8] = []
        let end: [UInt8] = [13, 10, 13, 10]
        while request.count < 16_384, !(request.count >= 4 && Array(request.suffix(4)) == end) {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 2_000) > 0 else { return }
            var chunk = [UInt8](repeating: 0, count: 4_096)
            let got = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard got > 0 else { return }
            request += chunk.prefix(got)
            if request.firstRange(of: end) != nil { break }
        }
        let line = String(decoding: request.prefix { $0 != 13 }, as: UTF8.self)
        let found = line.hasPrefix("GET /weather ")
        let body = found ? #"{"city":"Lisbon","celsius":19,"sky":"clear"}"# : "not found"
        let head = "HTTP/1.1 \(found ? "200 OK" : "404 Not Found")\r\nContent-Type: \(found ? "application/json" : "text/plain")\r\n"
            + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array((head + body).utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Syscall.noSignalFlag) }
            guard written > 0 else { return }
            offset += written
        }
    }
}
