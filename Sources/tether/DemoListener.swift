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

/// A listening TCP socket on a free port of 127.0.0.1 whose connections a thread of its own
/// hands to `serve`, one at a time, until ``stop()``. Every wait is a `poll` with a timeout,
/// so `stop()` returns promptly. The demo's stand-ins for other hosts are made of it.
final class DemoListener: Sendable {
    let port: Int
    private let stopping = Atomic<Bool>(false)

    /// Listens, and starts the thread that accepts.
    ///
    /// - Parameter serve: Called with each accepted connection's descriptor, which is
    ///   closed when it returns.
    init(serving serve: @escaping @Sendable (Int32) -> Void) throws {
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
                serve(client.descriptor)
                client.close()
            }
        }.start()
    }

    /// Stops accepting: the accept loop closes the listening socket within 20 ms.
    func stop() {
        stopping.store(true, ordering: .releasing)
    }
}

/// The demo's firewall: a middlebox on 127.0.0.1 that lets the TCP handshake through and
/// then resets the connection as soon as the client sends anything, as networks that let
/// only web traffic pass do to other ports.
final class DemoFirewall: Sendable {
    private final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    private let listener: DemoListener
    private let resets = Counter()

    var port: Int { listener.port }
    /// How many connections it has reset.
    var resetCount: Int { resets.value.load(ordering: .acquiring) }

    init() throws {
        let resets = self.resets
        listener = try DemoListener { fd in
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, 2_000)
            // A linger of zero: the close that follows sends a reset.
            var abort = linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
            resets.value.add(1, ordering: .releasing)
        }
    }

    func stop() { listener.stop() }
}
