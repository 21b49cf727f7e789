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
    private let listener: DemoListener

    var port: Int { listener.port }

    init() throws {
        listener = try DemoListener(serving: DemoHTTPServer.serve)
    }

    /// Stops accepting: the accept loop closes the listening socket within 20 ms.
    func stop() {
        listener.stop()
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
