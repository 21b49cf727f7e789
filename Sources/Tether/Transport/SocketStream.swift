/// A connected stream socket (TCP, or a Unix domain socket), not yet a transport: it
/// becomes a ``TCPTransport``, which reads and writes any stream socket.
package struct SocketStream: OpenedStream {
    /// The socket, until it becomes a transport or is refused; dropped, the box closes it.
    let box: SocketBox
    package let remoteAddress: TetherSocketAddress
    /// Whether the transport sets `TCP_NODELAY` (ignored by a Unix domain socket).
    let noDelay: Bool

    /// - Parameters:
    ///   - box: The connected socket.
    ///   - remoteAddress: The peer's address.
    ///   - noDelay: Whether to set `TCP_NODELAY`.
    package init(_ box: SocketBox, remoteAddress: TetherSocketAddress, noDelay: Bool) {
        self.box = box
        self.remoteAddress = remoteAddress
        self.noDelay = noDelay
    }

    package func makeTransport(on loop: EventLoop, reading use: ReadBufferUse) throws(TetherError) -> any ByteTransport {
        TCPTransport(socket: box.take(), remoteAddress: remoteAddress, loop: loop, noDelay: noDelay, sealed: use == .sealed)
    }

    /// One small write into an empty socket buffer: it never blocks, and if it does not fit
    /// it is dropped. Then the socket closes.
    package func refuse(notice: [UInt8]?, drainTimeout: Duration, on loop: EventLoop) {
        let socket = box.take()
        if let notice {
            let fd = socket.descriptor
            _ = notice.withUnsafeBytes { try? Syscall.sendBytes(fd, $0.baseAddress!, $0.count) }
        }
        socket.close()
    }
}

/// Listens on a TCP port: resolves the endpoint's host to the first address, binds it and
/// accepts on the accepting loop.
struct TCPListener: StreamListener {
    let endpoint: Endpoint

    func listen(in context: ListenContext, accept: @escaping @Sendable (any OpenedStream) -> Void) async throws(TetherError) -> any ListeningPort {
        let address: TetherSocketAddress
        do throws(TetherError) {
            guard let first = try await Resolver.resolve(endpoint).first else {
                throw TetherError(code: .bindFailed, message: "cannot listen on \(endpoint): no address")
            }
            address = first
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot listen on \(endpoint): \(error.message)", underlying: error)
        }
        let noDelay = context.noDelay
        let listener = try Listener(binding: address, backlog: Int32(context.backlog), loop: context.acceptLoop) { socket, peer in
            accept(SocketStream(SocketBox(socket), remoteAddress: peer, noDelay: noDelay))
        }
        try await listener.startOnLoop()
        return listener
    }
}

extension Listener: ListeningPort {
    /// Starts accepting, on the loop; closes the listener when it cannot.
    func startOnLoop() async throws(TetherError) {
        do throws(TetherError) {
            try await loop.submit { () throws(TetherError) in try self.start() }
        } catch {
            try? await loop.submit { self.close() }
            throw error
        }
    }
}
