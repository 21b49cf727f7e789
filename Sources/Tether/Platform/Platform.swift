// The one import ladder for the C library; every other file imports this module's
// wrappers instead of the platform.
#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#else
#error("Tether supports Linux and Darwin.")
#endif
import CTetherShims

/// An `errno` value captured right after a failed system call.
package struct Errno: Error, Equatable, Sendable, CustomStringConvertible {
    package var rawValue: Int32

    package static var current: Errno { Errno(rawValue: ctether_errno()) }

    package static let interrupted = Errno(rawValue: EINTR)
    static let wouldBlock = Errno(rawValue: EAGAIN)
    static let inProgress = Errno(rawValue: EINPROGRESS)
    package static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    /// A client that was gone before `accept(2)` took it.
    static let acceptAborted: Set<Int32> = [ECONNABORTED, EPROTO]
    /// Out of descriptors, or of memory for a new socket: the process's, or the system's.
    static let outOfResources: Set<Int32> = [EMFILE, ENFILE, ENOBUFS, ENOMEM]
    static let connectionReset = Errno(rawValue: ECONNRESET)
    static let brokenPipe = Errno(rawValue: EPIPE)
    static let timedOut = Errno(rawValue: ETIMEDOUT)

    package var isWouldBlock: Bool { rawValue == EAGAIN || rawValue == EWOULDBLOCK }

    package var description: String {
        guard let text = strerror(rawValue) else { return "errno \(rawValue)" }
        return String(cString: text).lowercased()
    }
}

/// The outcome of a nonblocking I/O call: bytes processed, or "try again later".
package enum IOResult<Value: Sendable>: Sendable {
    case processed(Value)
    case wouldBlock
}

/// Thin wrappers over the system calls Tether makes. Each one captures `errno`
/// immediately, retries `EINTR`, and reports `EAGAIN` as ``IOResult/wouldBlock``.
package enum Syscall {
    /// Runs `body` until it stops failing with `EINTR`; throws any other `errno`.
    @inline(__always)
    static func retrying<T: BinaryInteger>(_ body: () -> T) throws(Errno) -> T {
        while true {
            let result = body()
            if result >= 0 { return result }
            let error = Errno.current
            if error != .interrupted { throw error }
        }
    }

    /// Like ``retrying(_:)`` but maps `EAGAIN`/`EWOULDBLOCK` to ``IOResult/wouldBlock``.
    @inline(__always)
    package static func nonblocking<T: BinaryInteger & Sendable>(_ body: () -> T) throws(Errno) -> IOResult<T> {
        while true {
            let result = body()
            if result >= 0 { return .processed(result) }
            let error = Errno.current
            if error == .interrupted { continue }
            if error.isWouldBlock { return .wouldBlock }
            throw error
        }
    }

    /// `read(2)`.
    static func readBytes(_ fd: Int32, _ pointer: UnsafeMutableRawPointer, _ count: Int) throws(Errno) -> IOResult<Int> {
        try nonblocking { read(fd, pointer, count) }
    }

    /// `send(2)` with `MSG_NOSIGNAL` where the platform has it, so a closed peer never raises `SIGPIPE`.
    static func sendBytes(_ fd: Int32, _ pointer: UnsafeRawPointer, _ count: Int) throws(Errno) -> IOResult<Int> {
        try nonblocking { send(fd, pointer, count, noSignalFlag) }
    }

    /// `sendmsg(2)` of several pieces with `MSG_NOSIGNAL` where the platform has it: one
    /// system call for bytes that lie in several places (a frame's header and its payload).
    ///
    /// - Parameters:
    ///   - fd: The socket.
    ///   - pieces: The pieces, in order; at most ``maximumPieces``.
    /// - Returns: How many bytes the kernel took, or would-block.
    /// - Throws: The `errno` of a failure other than `EINTR` and `EAGAIN`.
    static func sendPieces(_ fd: Int32, _ pieces: UnsafeBufferPointer<UnsafeRawBufferPointer>) throws(Errno) -> IOResult<Int> {
        precondition(pieces.count <= maximumPieces, "\(pieces.count) pieces, over the \(maximumPieces) of one call")
        return try withUnsafeTemporaryAllocation(of: iovec.self, capacity: maximumPieces) { (vectors) throws(Errno) -> IOResult<Int> in
            for (index, piece) in pieces.enumerated() {
                vectors[index] = iovec(iov_base: UnsafeMutableRawPointer(mutating: piece.baseAddress), iov_len: piece.count)
            }
            var message = msghdr()
            message.msg_iov = vectors.baseAddress
            message.msg_iovlen = .init(pieces.count)
            return try nonblocking { sendmsg(fd, &message, noSignalFlag) }
        }
    }

    /// `sendto(2)` of one datagram to `address`, or to the connected peer when `address` is
    /// `nil`, with `MSG_NOSIGNAL` where the platform has it.
    ///
    /// - Parameters:
    ///   - fd: A datagram socket.
    ///   - bytes: The whole datagram.
    ///   - address: Where to send it; `nil` for the address the socket is connected to.
    /// - Returns: How many bytes the kernel took (all of them: a datagram is never split),
    ///   or would-block.
    /// - Throws: The `errno` of a failure other than `EINTR` and `EAGAIN`.
    package static func sendDatagram(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, to address: TetherSocketAddress?) throws(Errno) -> IOResult<Int> {
        guard let address else {
            return try nonblocking { send(fd, bytes.baseAddress, bytes.count, noSignalFlag) }
        }
        return try nonblocking {
            address.withSockAddr { pointer, length in sendto(fd, bytes.baseAddress, bytes.count, noSignalFlag, pointer, length) }
        }
    }

    /// `recvmsg(2)` of one datagram into `space`, with its sender and whether the kernel
    /// cut it to fit (`MSG_TRUNC` in the message's flags).
    ///
    /// - Parameters:
    ///   - fd: A datagram socket.
    ///   - space: Where the datagram's bytes go.
    /// - Returns: The byte count stored, the sender, and whether the datagram was longer
    ///   than `space` (its rest is lost); or would-block.
    /// - Throws: The `errno` of a failure other than `EINTR` and `EAGAIN`, such as
    ///   `ECONNREFUSED` on a connected socket whose peer's port is closed.
    package static func receiveDatagram(_ fd: Int32, into space: UnsafeMutableRawBufferPointer) throws(Errno) -> IOResult<(count: Int, sender: TetherSocketAddress, truncated: Bool)> {
        var storage = sockaddr_storage()
        var vector = iovec(iov_base: space.baseAddress, iov_len: space.count)
        var message = msghdr()
        let result = try withUnsafeMutablePointer(to: &storage) { (address) throws(Errno) -> IOResult<Int> in
            try withUnsafeMutablePointer(to: &vector) { (vector) throws(Errno) -> IOResult<Int> in
                message.msg_name = UnsafeMutableRawPointer(address)
                message.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
                message.msg_iov = vector
                message.msg_iovlen = 1
                return try nonblocking { recvmsg(fd, &message, 0) }
            }
        }
        guard case .processed(let count) = result else { return .wouldBlock }
        let truncated = message.msg_flags & Int32(MSG_TRUNC) != 0
        return .processed((count, TetherSocketAddress(storage: storage), truncated))
    }

    /// The most pieces one ``sendPieces(_:_:)`` call takes.
    static let maximumPieces = 16

    /// `close(2)`. `EINTR` is not retried: on Linux the descriptor is gone either way.
    package static func closeDescriptor(_ fd: Int32) {
        _ = close(fd)
    }

    /// `socket(2)`, nonblocking and close-on-exec.
    package static func makeSocket(family: Int32, type: Int32) throws(Errno) -> Int32 {
        #if canImport(Darwin)
        let fd = try retrying { socket(family, type, 0) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        return fd
        #else
        return try retrying { socket(family, type | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        #endif
    }

    /// `shutdown(2)` both ways: a listening socket stops listening, whatever other
    /// descriptors of it (a child's, between fork and exec) are still open.
    package static func shutDown(_ fd: Int32) {
        #if canImport(Glibc)
        _ = shutdown(fd, Int32(SHUT_RDWR))
        #else
        _ = shutdown(fd, SHUT_RDWR)
        #endif
    }

    /// `setsockopt(2)` for an `Int32` option.
    package static func setOption(_ fd: Int32, level: Int32, name: Int32, value: Int32) throws(Errno) {
        var value = value
        _ = try retrying { setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size)) }
    }

    /// The bytes of a socket's send queue the peer has not acknowledged yet
    /// (`ioctl(2)` `SIOCOUTQ` on Linux, `getsockopt(2)` `SO_NWRITE` on Darwin); 0 when the
    /// kernel cannot say.
    package static func unacknowledgedBytes(_ fd: Int32) -> Int {
        Int(max(0, ctether_unacknowledged_bytes(fd)))
    }

    /// `getsockopt(2)` for an `Int32` option.
    package static func getOption(_ fd: Int32, level: Int32, name: Int32) throws(Errno) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = try retrying { getsockopt(fd, level, name, &value, &length) }
        return value
    }

    /// `connect(2)` on a nonblocking socket: `true` when connected at once, `false` when in progress.
    package static func startConnect(_ fd: Int32, _ address: TetherSocketAddress) throws(Errno) -> Bool {
        let result = address.withSockAddr { pointer, length in connect(fd, pointer, length) }
        if result == 0 { return true }
        let error = Errno.current
        if error == .inProgress || error == .interrupted { return false }
        throw error
    }

    /// `bind(2)`.
    package static func bindAddress(_ fd: Int32, _ address: TetherSocketAddress) throws(Errno) {
        let result = address.withSockAddr { pointer, length in bind(fd, pointer, length) }
        if result != 0 { throw Errno.current }
    }

    /// `listen(2)`.
    package static func startListening(_ fd: Int32, backlog: Int32) throws(Errno) {
        _ = try retrying { listen(fd, backlog) }
    }

    /// `accept4(2)` (or `accept` plus `fcntl` on Darwin): a nonblocking, close-on-exec descriptor.
    package static func acceptConnection(_ fd: Int32) throws(Errno) -> IOResult<Int32> {
        #if canImport(Darwin)
        let result = try nonblocking { accept(fd, nil, nil) }
        if case .processed(let client) = result {
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
            var one: Int32 = 1
            _ = setsockopt(client, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        return result
        #else
        return try nonblocking { ctether_accept4(fd) }
        #endif
    }

    /// `getsockname(2)`.
    package static func localAddress(_ fd: Int32) throws(Errno) -> TetherSocketAddress {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        if result != 0 { throw Errno.current }
        return TetherSocketAddress(storage: storage)
    }

    /// `getpeername(2)`.
    static func peerAddress(_ fd: Int32) throws(Errno) -> TetherSocketAddress {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        if result != 0 { throw Errno.current }
        return TetherSocketAddress(storage: storage)
    }

    /// Makes sure a write to a closed socket never kills the process with `SIGPIPE`.
    package static let ignoreBrokenPipe: Void = {
        _ = signal(SIGPIPE, SIG_IGN)
    }()

    #if canImport(Darwin)
    package static let noSignalFlag: Int32 = 0
    #else
    package static let noSignalFlag: Int32 = Int32(MSG_NOSIGNAL)
    #endif
}


/// The number of processors online (`sysconf(_SC_NPROCESSORS_ONLN)`).
enum ProcessorCount {
    static var online: Int {
        Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }
}

/// Socket option numbers that differ in spelling between platforms.
package enum SocketOptions {
    package static let tcpLevel = Int32(IPPROTO_TCP)
    package static let noDelay = Int32(TCP_NODELAY)
    /// The bound on bytes a socket keeps that it has not sent yet (`TCP_NOTSENT_LOWAT`).
    package static let unsentLowWater = Int32(TCP_NOTSENT_LOWAT)
    package static let socketLevel = SOL_SOCKET
    package static let error = SO_ERROR
    package static let reuseAddress = SO_REUSEADDR
    package static let receiveBuffer = SO_RCVBUF
    package static let maximumSegment = Int32(TCP_MAXSEG)
}

extension SocketOptions {
    #if canImport(Darwin)
    package static let streamType = SOCK_STREAM
    #else
    package static let streamType = Int32(SOCK_STREAM.rawValue)
    #endif
}

extension SocketOptions {
    #if canImport(Darwin)
    package static let datagramType = SOCK_DGRAM
    #else
    package static let datagramType = Int32(SOCK_DGRAM.rawValue)
    #endif
}

extension SocketOptions {
    package static let ipv6Level = Int32(IPPROTO_IPV6)
    package static let ipv6Only = IPV6_V6ONLY
}

/// Monotonic time in nanoseconds (`clock_gettime(CLOCK_MONOTONIC)`), the loop's clock for deadlines.
package enum MonotonicTime {
    package static func now() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
    }

    package static func nanoseconds(of duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        if seconds < 0 { return 0 }
        return UInt64(seconds) &* 1_000_000_000 &+ UInt64(max(0, attoseconds) / 1_000_000_000)
    }

    package static func duration(nanoseconds: UInt64) -> Duration {
        .nanoseconds(Int64(clamping: nanoseconds))
    }
}

/// Wall-clock time (`clock_gettime(CLOCK_REALTIME)`), for timestamps that must outlive the process.
enum WallClock {
    static func millisecondsSince1970() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }
}
