#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CZlib
import Foundation
import Synchronization
@testable import Tether

/// A small HTTP/1.1 server on 127.0.0.1 for the forwarding tests: real sockets, one thread
/// per connection, `Connection: close` on every answer. Every wait is bounded by `poll`.
///
/// Routes:
/// - `/status/N`: status N, body `status N`.
/// - `/echo`: a JSON object with the method, path, query, header fields and body text.
/// - `/large/N`: N bytes with a `Content-Length`.
/// - `/stream/N`: N bytes in 64 KiB chunks, chunked, without a `Content-Length`.
/// - `/slow/MS`: answers after MS milliseconds, or gives up when the client leaves.
/// - `/redirect?to=URL`: `302` to URL.
/// - `/hop`: a body with hop-by-hop fields in the response.
/// - `/gzip`: a gzip-encoded text body.
final class TestHTTPServer: Sendable {
    struct Received: Sendable {
        var method: String
        var target: String
        var headers: [(String, String)]
        var body: [UInt8]

        func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
    }

    let port: Int
    private let listener: Int32
    private let stopped = Atomic<Bool>(false)
    private let log = Mutex<[Received]>([])
    private let accepted = Atomic<Int>(0)
    private let done = Semaphore()
    private let arrivalSink: AsyncStream<String>.Continuation
    private let hangupSink: AsyncStream<String>.Continuation
    /// The target of each request, as it arrives.
    let arrivals: AsyncStream<String>
    /// The target of each `/slow` request whose client left before the answer.
    let hangups: AsyncStream<String>

    init() throws {
        let address = TetherSocketAddress(ipAddress: "127.0.0.1", port: 0)!
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(4))
        guard address.withSockAddr({ bind(fd, $0, $1) }) == 0, listen(fd, 64) == 0 else {
            Glibc.close(fd)
            throw Errno.current
        }
        listener = fd
        port = try Syscall.localAddress(fd).port
        (arrivals, arrivalSink) = AsyncStream.makeStream()
        (hangups, hangupSink) = AsyncStream.makeStream()
        BlockingThread.run { [self] in acceptLoop() }
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    /// The allow-list entry for this server.
    var hostAndPort: String { "127.0.0.1:\(port)" }

    var requests: [Received] { log.withLock { $0 } }
    var connections: Int { accepted.load(ordering: .acquiring) }

    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        done.wait()
        Glibc.close(listener)
    }

    deinit { stop() }

    private func acceptLoop() {
        while !stopped.load(ordering: .acquiring) {
            var descriptor = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 50) > 0 else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            accepted.add(1, ordering: .acquiringAndReleasing)
            BlockingThread.run { [self] in serve(client) }
        }
        done.signal()
    }

    private func serve(_ fd: Int32) {
        defer { Glibc.close(fd) }
        guard let request = readRequest(fd) else { return }
        log.withLock { $0.append(request) }
        arrivalSink.yield(request.target)
        let (path, query) = split(request.target)
        let parts = path.split(separator: "/").map(String.init)
        switch parts.first {
        case "status":
            let code = Int(parts.dropFirst().first ?? "") ?? 500
            respond(fd, status: code, headers: [("Content-Type", "text/plain")], body: Array("status \(code)".utf8))
        case "echo":
            let echo: JSONValue = [
                "method": .string(request.method),
                "path": .string(path),
                "query": .string(query ?? ""),
                "headers": .array(request.headers.map { .array([.string($0.0), .string($0.1)]) }),
                "body": .string(String(decoding: request.body, as: UTF8.self)),
            ]
            respond(fd, status: 200, headers: [("Content-Type", "application/json")], body: echo.encoded)
        case "large":
            let count = Int(parts.dropFirst().first ?? "") ?? 0
            respond(fd, status: 200, headers: [("Content-Type", "application/octet-stream")], body: pattern(count))
        case "stream":
            let count = Int(parts.dropFirst().first ?? "") ?? 0
            streamChunked(fd, body: pattern(count))
        case "slow":
            let millis = Int32(parts.dropFirst().first ?? "") ?? 0
            // Waits, but returns at once when the client hangs up.
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, millis) > 0 {
                hangupSink.yield(request.target)
                return
            }
            respond(fd, status: 200, headers: [("Content-Type", "text/plain")], body: Array("slow".utf8))
        case "redirect":
            let target = query.flatMap { $0.hasPrefix("to=") ? percentDecoded(String($0.dropFirst(3))) : nil } ?? "/"
            respond(fd, status: 302, headers: [("Location", target)], body: Array("moved".utf8))
        case "hop":
            respond(fd, status: 200, headers: [
                ("Connection", "close, X-Hop"), ("X-Hop", "secret"), ("Keep-Alive", "timeout=5"),
                ("X-Kept", "yes"), ("Content-Type", "text/plain"),
            ], body: Array("hop".utf8))
        case "gzip":
            let text = String(repeating: "compressible text ", count: 200)
            respond(fd, status: 200, headers: [("Content-Type", "text/plain"), ("Content-Encoding", "gzip")],
                    body: gzip(Array(text.utf8)))
        default:
            respond(fd, status: 404, headers: [("Content-Type", "text/plain")], body: Array("not found".utf8))
        }
    }

    private func readRequest(_ fd: Int32) -> Received? {
        var bytes: [UInt8] = []
        var headEnd: Int?
        while headEnd == nil {
            guard let chunk = readSome(fd) else { return nil }
            bytes += chunk
            headEnd = find([13, 10, 13, 10], in: bytes)
        }
        let head = String(decoding: bytes[..<headEnd!], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count == 3 else { return nil }
        var headers: [(String, String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        var body = Array(bytes[(headEnd! + 4)...])
        let length = Int(headers.first { $0.0.lowercased() == "content-length" }?.1 ?? "0") ?? 0
        while body.count < length {
            guard let chunk = readSome(fd) else { return nil }
            body += chunk
        }
        return Received(method: String(requestLine[0]), target: String(requestLine[1]), headers: headers, body: body)
    }

    private func readSome(_ fd: Int32) -> [UInt8]? {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 5_000) > 0 else { return nil }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let got = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard got > 0 else { return nil }
        return Array(chunk.prefix(got))
    }

    private func respond(_ fd: Int32, status: Int, headers: [(String, String)], body: [UInt8]) {
        var head = "HTTP/1.1 \(status) \(reason(status))\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(body.count)\r\n"
        if !headers.contains(where: { $0.0 == "Connection" }) { head += "Connection: close\r\n" }
        head += "\r\n"
        write(fd, Array(head.utf8) + body)
    }

    private func streamChunked(_ fd: Int32, body: [UInt8]) {
        write(fd, Array("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".utf8))
        var offset = 0
        while offset < body.count {
            let end = min(offset + 65_536, body.count)
            guard write(fd, Array((String(end - offset, radix: 16) + "\r\n").utf8) + body[offset..<end] + [13, 10]) else { return }
            offset = end
        }
        write(fd, Array("0\r\n\r\n".utf8))
    }

    @discardableResult
    private func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }

    private func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 302: "Found"
        case 404: "Not Found"
        case 500: "Internal Server Error"
        default: "Status"
        }
    }

    private func split(_ target: String) -> (String, String?) {
        guard let mark = target.firstIndex(of: "?") else { return (target, nil) }
        return (String(target[..<mark]), String(target[target.index(after: mark)...]))
    }

    private func percentDecoded(_ text: String) -> String {
        text.removingPercentEncoding ?? text
    }

    private func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start..<(start + needle.count)].elementsEqual(needle) {
            return start
        }
        return nil
    }
}

/// The test body `/large/N` and `/stream/N` send: byte i is i mod 251.
func pattern(_ count: Int) -> [UInt8] {
    // Whole 251-byte blocks copied in: quick in a debug build, where a per-byte map is not.
    let block = (0..<251).map { UInt8($0) }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(count)
    while bytes.count < count {
        bytes.append(contentsOf: block.prefix(count - bytes.count))
    }
    return bytes
}

/// Compresses `bytes` in the gzip format, with zlib.
func gzip(_ bytes: [UInt8]) -> [UInt8] {
    var stream = z_stream()
    precondition(deflateInit2_(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY,
                               ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK)
    defer { deflateEnd(&stream) }
    var input = bytes
    var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, UInt(bytes.count))) + 32)
    let written: Int = input.withUnsafeMutableBufferPointer { inBuffer in
        output.withUnsafeMutableBufferPointer { outBuffer in
            stream.next_in = inBuffer.baseAddress
            stream.avail_in = UInt32(inBuffer.count)
            stream.next_out = outBuffer.baseAddress
            stream.avail_out = UInt32(outBuffer.count)
            precondition(deflate(&stream, Z_FINISH) == Z_STREAM_END)
            return outBuffer.count - Int(stream.avail_out)
        }
    }
    return Array(output.prefix(written))
}
