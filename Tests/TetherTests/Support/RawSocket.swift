#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@testable import Tether

/// A plain TCP socket for playing a misbehaving peer in tests. Every wait is bounded by
/// `poll(2)` with a timeout, so a test using it can never block forever, and runs on a
/// thread of its own, so it never holds one of the few cooperative threads that the
/// server and connection under test need.
final class RawSocket: @unchecked Sendable {
    // @unchecked Sendable: used by one test task at a time.
    private(set) var fd: Int32

    init(fd: Int32) { self.fd = fd }

    deinit { close() }

    /// Connects to `endpoint`, waiting at most `timeout` for the handshake.
    static func connect(to endpoint: Endpoint, timeout: Duration = eventBound) throws -> RawSocket {
        let address = TetherSocketAddress(ipAddress: endpoint.host, port: endpoint.port)!
        let fd = socket(address.isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        precondition(fd >= 0)
        let socket = RawSocket(fd: fd)
        let result = address.withSockAddr { Glibc.connect(fd, $0, $1) }
        if result != 0 {
            guard Errno.current == .inProgress, socket.poll(Int16(POLLOUT), timeout: timeout),
                (try? Syscall.getOption(fd, level: SOL_SOCKET, name: SO_ERROR)) == 0
            else { throw TimedOut(what: "connecting to \(endpoint)") }
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return socket
    }

    /// Binds a socket to a free port on 127.0.0.1 without listening: connections to it are
    /// refused, and the port stays reserved (no parallel test can take it) while it lives.
    static func bindOnly() throws -> (RawSocket, Endpoint) {
        let address = TetherSocketAddress(ipAddress: "127.0.0.1", port: 0)!
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard address.withSockAddr({ bind(fd, $0, $1) }) == 0 else {
            Glibc.close(fd)
            throw Errno.current
        }
        let bound = try Syscall.localAddress(fd)
        return (RawSocket(fd: fd), Endpoint(host: "127.0.0.1", port: bound.port))
    }

    /// Opens a listening socket on 127.0.0.1 (or `host`) with a free port (or `port`).
    static func listen(host: String = "127.0.0.1", port: Int = 0, backlog: Int32 = 16) throws -> (RawSocket, Endpoint) {
        let address = TetherSocketAddress(ipAddress: host, port: port)!
        let fd = socket(address.isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(4))
        guard address.withSockAddr({ bind(fd, $0, $1) }) == 0, Glibc.listen(fd, backlog) == 0 else {
            Glibc.close(fd)
            throw Errno.current
        }
        let bound = try Syscall.localAddress(fd)
        return (RawSocket(fd: fd), Endpoint(host: host, port: bound.port))
    }

    private func poll(_ events: Int16, timeout: Duration) -> Bool {
        var descriptor = pollfd(fd: fd, events: events, revents: 0)
        let millis = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        return Glibc.poll(&descriptor, 1, millis) > 0
    }

    /// Accepts one connection within `timeout`.
    func accept(timeout: Duration = eventBound) async throws -> RawSocket {
        try await offThread { try self.acceptBlocking(timeout: timeout) }
    }

    private func acceptBlocking(timeout: Duration) throws -> RawSocket {
        guard poll(Int16(POLLIN), timeout: timeout) else { throw TimedOut(what: "a connection to accept") }
        let client = Glibc.accept(fd, nil, nil)
        guard client >= 0 else { throw Errno.current }
        return RawSocket(fd: client)
    }

    func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written >= 0 else { throw Errno.current }
            offset += written
        }
    }

    /// Reads exactly `count` bytes, or fewer if the peer closes; bounded by `timeout`.
    func read(_ count: Int, timeout: Duration = eventBound) throws -> [UInt8] {
        try readBlocking(count, timeout: timeout)
    }

    private func readBlocking(_ count: Int, timeout: Duration) throws -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        // One chunk of at most 64 KiB, reused: a zeroed buffer of everything still to come
        // on every read made reading a 15 MiB frame quadratic, minutes on a busy machine.
        var chunk = [UInt8](repeating: 0, count: min(count, 65_536))
        while bytes.count < count {
            guard poll(Int16(POLLIN), timeout: timeout) else { throw TimedOut(what: "\(count) bytes") }
            let want = min(chunk.count, count - bytes.count)
            let got = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, want, 0) }
            if got <= 0 { break }
            bytes += chunk.prefix(got)
        }
        return bytes
    }

    /// Reads one seed frame.
    func readFrame(timeout: Duration = eventBound) async throws -> Frame? {
        try await offThread { try self.readFrameBlocking(timeout: timeout) }
    }

    func readFrameBlocking(timeout: Duration = eventBound) throws -> Frame? {
        let header = try read(12, timeout: timeout)
        guard header.count == 12 else { return nil }
        var buffer = FrameBuffer(bytes: header)
        let length = Int(buffer.peekInteger(at: 8, as: UInt32.self)!)
        let payload = try read(length, timeout: timeout)
        buffer.writeBytes(payload)
        var codec = SeedCodec()
        return try codec.decode(&buffer)
    }

    /// Waits for the peer to close: returns true on EOF (or reset) within `timeout`.
    func waitForClose(timeout: Duration = eventBound) async throws -> Bool {
        try await offThread { try self.waitForCloseBlocking(timeout: timeout) }
    }

    func waitForCloseBlocking(timeout: Duration) throws -> Bool {
        while true {
            guard poll(Int16(POLLIN), timeout: timeout) else { throw TimedOut(what: "the peer to close") }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let got = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if got <= 0 { return true }
        }
    }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Closes with a reset (`SO_LINGER` of zero): the peer reads `ECONNRESET`.
    func reset() {
        guard fd >= 0 else { return }
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }
}
