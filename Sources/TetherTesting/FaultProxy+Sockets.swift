#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether

// The few socket and pipe calls of the fault proxy that Tether's syscall layer has no
// wrapper for.

/// Closes `socket` with `SO_LINGER` 0, so its peer sees an RST instead of a FIN.
func resetAndClose(_ socket: Descriptor) {
    guard socket.isOpen else { return }
    var option = linger(l_onoff: 1, l_linger: 0)
    _ = setsockopt(socket.raw, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    socket.close()
}

/// Sets a receive buffer of 64 KiB (`SO_RCVBUF`), so the kernel acknowledges little more
/// than the proxy has room for, and segments of at most 1,460 bytes (`TCP_MAXSEG`), as on
/// Ethernet rather than loopback's 64 KiB, so the window opens a little at a time and a
/// sender sees its bytes acknowledged smoothly: a listener's accepted sockets inherit both.
func limitReceiveBuffer(_ fd: Int32) {
    try? Syscall.setOption(fd, level: SocketOptions.socketLevel, name: SocketOptions.receiveBuffer, value: 1 << 16)
    try? Syscall.setOption(fd, level: SocketOptions.tcpLevel, name: SocketOptions.maximumSegment, value: 1_460)
}

/// Sets `TCP_NODELAY`, so each write leaves as a segment of its own.
func setNoDelay(_ fd: Int32) {
    try? Syscall.setOption(fd, level: SocketOptions.tcpLevel, name: SocketOptions.noDelay, value: 1)
}

/// Reads and drops what is waiting on `fd` (at most 1 MiB), so that closing it sends a FIN
/// rather than an RST.
func discardInput(_ fd: Int32) {
    var scratch = [UInt8](repeating: 0, count: 4096)
    for _ in 0..<256 {
        let got = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if got <= 0 { return }
    }
}

/// Shuts down the sending side of `fd` (`shutdown(2)` with `SHUT_WR`): the peer reads a FIN.
func shutdownSending(_ fd: Int32) {
    _ = shutdown(fd, Int32(SHUT_WR))
}

/// The outcome of one nonblocking `send` or `recv`.
enum TransferResult {
    case done(Int)
    case wouldBlock
    case failed
}

/// `recv(2)` on a nonblocking socket into `buffer`, at most `count` bytes.
func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, count: Int) -> TransferResult {
    transfer { recv(fd, buffer.baseAddress, min(count, buffer.count), 0) }
}

/// `send(2)` on a nonblocking socket, without `SIGPIPE`.
func sendSome(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> TransferResult {
    transfer { send(fd, bytes.baseAddress, bytes.count, Syscall.noSignalFlag) }
}

/// Runs a nonblocking transfer, retrying `EINTR`.
private func transfer(_ body: () -> Int) -> TransferResult {
    do {
        switch try Syscall.nonblocking(body) {
        case .processed(let count): return .done(count)
        case .wouldBlock: return .wouldBlock
        }
    } catch {
        return .failed
    }
}

/// Waits in `poll(2)` on `descriptors` for at most `milliseconds`.
///
/// - Returns: `false` when `poll` failed for another reason than a signal.
func pollDescriptors(_ descriptors: inout [pollfd], milliseconds: Int32) -> Bool {
    for index in descriptors.indices { descriptors[index].revents = 0 }
    let result = poll(&descriptors, nfds_t(descriptors.count), milliseconds)
    return result >= 0 || Errno.current == .interrupted
}

/// A nonblocking pipe used to wake a thread out of `poll(2)`.
struct WakePipe: Sendable {
    let readEnd: Descriptor
    let writeEnd: Descriptor

    init() throws {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw Errno.current }
        for fd in ends {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        readEnd = Descriptor(adopting: ends[0])
        writeEnd = Descriptor(adopting: ends[1])
    }

    func close() {
        readEnd.close()
        writeEnd.close()
    }

    /// Writes one byte; a full pipe already wakes the reader, so `EAGAIN` is fine.
    static func poke(_ writeEnd: Int32) {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Reads every byte waiting in the pipe.
    static func drain(_ readEnd: Int32) {
        var scratch = [UInt8](repeating: 0, count: 64)
        while scratch.withUnsafeMutableBytes({ read(readEnd, $0.baseAddress, $0.count) }) > 0 {}
    }
}
