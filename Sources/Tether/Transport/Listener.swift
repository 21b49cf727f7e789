/// A listening TCP socket registered with an event loop. Loop thread only.
final class Listener: IOHandler, @unchecked Sendable {
    // @unchecked Sendable: after `open`, touched only on `loop`'s thread.

    let loop: EventLoop
    let address: TetherSocketAddress
    /// The listening socket, until ``close()``.
    private var socket: Socket?
    private let fd: Int32
    private let onAccept: (consuming Socket, TetherSocketAddress) -> Void
    /// While the process is out of descriptors: the timer that watches the socket again.
    private var pause: LoopTimer?

    /// How long the listener stops watching its socket when the process (or the system) is
    /// out of descriptors or memory for a new one: the pending connection stays in the
    /// backlog, and a level-triggered socket that is still readable would otherwise wake
    /// the loop again at once, for ever.
    static let descriptorBackoff: Duration = .milliseconds(100)

    /// Opens, binds and listens (any thread); call ``start()`` on the loop to accept.
    /// `onAccept` owns each accepted socket from then on; `bound` runs between the bind and
    /// the listen, when nobody can connect yet (to set a socket file's permissions).
    init(
        binding address: TetherSocketAddress,
        backlog: Int32,
        loop: EventLoop,
        bound: (() throws(Errno) -> Void)? = nil,
        onAccept: @escaping (consuming Socket, TetherSocketAddress) -> Void
    ) throws(TetherError) {
        self.loop = loop
        self.onAccept = onAccept
        let socket: Socket
        do {
            socket = try Socket(family: address.family, type: SocketOptions.streamType)
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot open a socket to listen on \(address): \(error)", underlying: error)
        }
        let fd = socket.descriptor
        do {
            try Syscall.setOption(fd, level: SocketOptions.socketLevel, name: SocketOptions.reuseAddress, value: 1)
            if address.isIPv6 {
                try? Syscall.setOption(fd, level: SocketOptions.ipv6Level, name: SocketOptions.ipv6Only, value: 1)
            }
            try Syscall.bindAddress(fd, address)
            try bound?()
            try Syscall.startListening(fd, backlog: backlog)
            self.address = try Syscall.localAddress(fd)
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot listen on \(address): \(error)", underlying: error)
        }
        self.fd = fd
        self.socket = .some(socket)
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
            guard socket != nil else { return }
            let result: IOResult<Int32>
            do {
                result = try Syscall.acceptConnection(fd)
            } catch {
                if Errno.acceptAborted.contains(error.rawValue) {
                    // That client is gone before it was taken: take the next.
                    continue
                }
                if Errno.outOfResources.contains(error.rawValue) { pauseAccepting() }
                // Anything else: skip this round; the loop tries again.
                return
            }
            guard case .processed(let descriptor) = result else { return }
            let client = Socket(adopting: descriptor)
            // A client that is already gone is dropped, which closes its socket.
            guard let peer = try? Syscall.peerAddress(descriptor) else { continue }
            onAccept(client, peer)
        }
    }

    /// Stops watching the socket for ``descriptorBackoff``, then watches it again.
    private func pauseAccepting() {
        guard pause == nil else { return }
        loop.deregister(fd)
        pause = loop.schedule(after: Self.descriptorBackoff) { [weak self] in
            guard let self else { return }
            self.pause = nil
            guard self.socket != nil else { return }
            try? self.loop.register(self.fd, interest: .read, handler: self)
        }
    }

    /// Stops listening and closes the socket. Idempotent.
    ///
    /// The socket is shut down before its descriptor is closed: a child process this one is
    /// starting holds a copy of every descriptor between its fork and its exec, and while a
    /// copy is open a closed listener still queues connections, which are reset once the
    /// copy goes. Shut down, it refuses them at once, whoever holds a descriptor of it.
    func close() {
        guard let socket = socket.take() else { return }
        if let pause {
            loop.cancel(pause)
            self.pause = nil
        } else {
            loop.deregister(fd)
        }
        Syscall.shutDown(fd)
        socket.close()
    }
}
