#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#else
#error("unsupported platform")
#endif

/// Plain blocking POSIX sockets on 127.0.0.1 that allocate nothing per frame: the far side
/// of a benchmark that counts only Tether's allocations.
enum RawSocket {
    struct Failure: Error, CustomStringConvertible {
        var call: String
        var code: Int32
        var description: String { "\(call) failed: errno \(code)" }
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return address
    }

    #if canImport(Glibc)
    private static let stream = Int32(SOCK_STREAM.rawValue)
    #else
    private static let stream = SOCK_STREAM
    #endif

    /// A listening socket on 127.0.0.1 and the port the system chose.
    static func makeListener() throws -> (descriptor: Int32, port: Int) {
        let fd = socket(AF_INET, stream, 0)
        guard fd >= 0 else { throw Failure(call: "socket", code: errno) }
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(fd, address, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, address, &length) == 0
            }
        }
        guard bound else { throw Failure(call: "bind", code: errno) }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A connected socket to 127.0.0.1:`port`, with `TCP_NODELAY`.
    static func makeConnection(port: Int) throws -> Int32 {
        let fd = socket(AF_INET, stream, 0)
        guard fd >= 0 else { throw Failure(call: "socket", code: errno) }
        var address = loopback(port: UInt16(port))
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else { throw Failure(call: "connect", code: errno) }
        setNoDelay(fd)
        return fd
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Writes all of `bytes`; false when the socket failed.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }

    /// Reads exactly `bytes.count` bytes; false on end of stream or failure.
    static func readExactly(_ fd: Int32, _ bytes: UnsafeMutableRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let count = read(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            offset += count
        }
        return true
    }
}

/// A seed-protocol echo server on its own thread: accepts one connection and answers each
/// frame with its own bytes, reading the 12-byte header and then the payload.
final class RawEchoServer: Sendable {
    let port: Int
    private let listener: Int32

    init() throws {
        (listener, port) = try RawSocket.makeListener()
        var thread = pthread_t()
        let context = Unmanaged.passRetained(self).toOpaque()
        let created = pthread_create(&thread, nil, { context in
            let server = Unmanaged<RawEchoServer>.fromOpaque(context!).takeRetainedValue()
            server.serve()
            return nil
        }, context)
        guard created == 0 else { throw RawSocket.Failure(call: "pthread_create", code: created) }
        pthread_detach(thread)
    }

    private func serve() {
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else { return }
        RawSocket.setNoDelay(fd)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 << 20, alignment: 8)
        defer {
            buffer.deallocate()
            close(fd)
        }
        while true {
            let header = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<12])
            guard RawSocket.readExactly(fd, header) else { return }
            let length = Int(UInt32(bigEndian: header.loadUnaligned(fromByteOffset: 8, as: UInt32.self)))
            guard length <= buffer.count - 12 else { return }
            let frame = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<(12 + length)])
            guard RawSocket.readExactly(fd, UnsafeMutableRawBufferPointer(rebasing: frame[12...])),
                  RawSocket.writeAll(fd, UnsafeRawBufferPointer(frame))
            else { return }
        }
    }

    /// Stops accepting; a connection already accepted ends when its peer closes.
    func stop() {
        close(listener)
    }
}

/// A client that sends one seed request at a time over a blocking socket and waits for
/// its echo, from preallocated buffers.
final class RawEchoClient {
    private let fd: Int32
    private let request: UnsafeMutableRawBufferPointer
    private let response: UnsafeMutableRawBufferPointer
    private var serial: UInt32 = 0

    init(port: Int, payloadLength: Int) throws {
        fd = try RawSocket.makeConnection(port: port)
        request = .allocate(byteCount: 12 + payloadLength, alignment: 8)
        response = .allocate(byteCount: 12 + payloadLength, alignment: 8)
        request.initializeMemory(as: UInt8.self, repeating: 0x61)
        request.storeBytes(of: UInt32(0x402).bigEndian, toByteOffset: 0, as: UInt32.self)
        request.storeBytes(of: UInt32(payloadLength).bigEndian, toByteOffset: 8, as: UInt32.self)
    }

    deinit {
        close(fd)
        request.deallocate()
        response.deallocate()
    }

    /// One round trip; false when the connection failed.
    func roundTrip() -> Bool {
        serial = serial == .max ? 1 : serial + 1
        request.storeBytes(of: serial.bigEndian, toByteOffset: 4, as: UInt32.self)
        return RawSocket.writeAll(fd, UnsafeRawBufferPointer(request)) && RawSocket.readExactly(fd, response)
    }
}
