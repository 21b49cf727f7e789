/// A listening TCP socket registered with an event loop. Loop thread only.
final class Listener: IOHandler, @unchecked Sendable {
    // @unchecked Sendable: after `open`, touched only on `loop`'s thread.

    let loop: EventLoop
    let address: SocketAddress
    private var fd: Int32
    private let onAccept: (Int32, SocketAddress) -> Void

    /// Opens, binds and listens (any thread); call ``start()`` on the loop to accept.
    init(binding address: SocketAddress, backlog: Int32, loop: EventLoop, onAccept: @escaping (Int32, SocketAddress) -> Void) throws(TetherError) {
        self.loop = loop
        self.onAccept = onAccept
        let fd: Int32
        do {
            fd = try Syscall.makeSocket(family: address.family, type: SocketOptions.streamType)
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot open a socket to listen on \(address): \(error)", underlying: error)
        }
        do {
            try Syscall.setOption(fd, level: SocketOptions.socketLevel, name: SocketOptions.reuseAddress, value: 1)
            if address.isIPv6 {
                try? Syscall.setOption(fd, level: SocketOptions.ipv6Level, name: SocketOptions.ipv6Only, value: 1)
            }
            try Syscall.bindAddress(fd, address)
            try Syscall.startListening(fd, backlog: backlog)
            self.address = try Syscall.localAddress(fd)
        } catch {
            Syscall.closeDescriptor(fd)
            throw TetherError(code: .bindFailed, message: "cannot listen on \(address): \(error)", underlying: error)
        }
        self.fd = fd
    }

    deinit {
        if fd >= 0 { Syscall.closeDescriptor(fd) }
    }

    func start() throws(TetherError) {
        do {
            try loop.register(fd, interest: .read, handler: self)
        } catch {
            throw TetherError(code: .systemCall, message: "cannot watch the listening socket on \(address): \(error)")
        }
    }

    func handleReadiness(_ event: ReadinessEvent) {
        // Accept everything pending, bounded so one busy listener cannot starve the loop.
        for _ in 0..<256 {
            guard fd >= 0 else { return }
            let result: IOResult<Int32>
            do {
                result = try Syscall.acceptConnection(fd)
            } catch {
                // ECONNABORTED, EMFILE and friends: skip this round; the loop tries again.
                return
            }
            guard case .processed(let client) = result else { return }
            guard let peer = try? Syscall.peerAddress(client) else {
                Syscall.closeDescriptor(client)
                continue
            }
            onAccept(client, peer)
        }
    }

    func close() {
        guard fd >= 0 else { return }
        loop.deregister(fd)
        Syscall.closeDescriptor(fd)
        fd = -1
    }
}
