/// Where a server listens on a Unix domain socket (``ServerConfiguration/unixSocket``): a
/// socket file on this machine, for a sidecar or a local daemon. The same frames, TLS when
/// ``ServerConfiguration/tls`` is set, and the same limits as the TCP port.
///
/// ```swift
/// var configuration = ServerConfiguration(host: "127.0.0.1", port: 9000)
/// configuration.unixSocket = UnixSocketConfiguration(path: "/run/app/tether.sock")
/// ```
///
/// Clients reach it with ``Endpoint/init(unixSocket:)`` or `unix:///run/app/tether.sock`.
/// The file is made when the server starts listening, with ``permissions``, and removed
/// when it stops; a file left at the path by a server that died is replaced, but a socket
/// something still listens on, or a file that is not a socket, fails the start with
/// ``TetherError/Code/bindFailed``.
public struct UnixSocketConfiguration: Sendable, Hashable {
    /// The socket file's path: at most 107 bytes on Linux, 103 on Darwin.
    public var path: String
    /// The socket file's permission bits: who may connect. Default `0o600`, the server's
    /// user only; `0o660` lets its group in too.
    public var permissions: Int
    /// Whether the server listens on the Unix domain socket only, and not on
    /// ``ServerConfiguration/host`` and ``ServerConfiguration/port``. Default `false`: both.
    public var replacesPort: Bool

    /// - Parameters:
    ///   - path: The socket file's path.
    ///   - permissions: Its permission bits. Default `0o600`.
    ///   - replacesPort: Whether the TCP port is not listened on. Default `false`.
    public init(path: String, permissions: Int = 0o600, replacesPort: Bool = false) {
        self.path = path
        self.permissions = permissions
        self.replacesPort = replacesPort
    }
}

/// Connects to a Unix domain socket: one attempt, no resolving, within the connect timeout.
struct UnixConnector: StreamConnector {
    let path: String

    func connect(to endpoint: Endpoint, in context: ConnectContext, isolation: isolated any Actor) async -> Result<ConnectedStream, TetherError> {
        guard let address = TetherSocketAddress(unixPath: path) else {
            return .failure(TetherError(code: .invalidArgument, message: "cannot connect to \(endpoint): the path is longer than a socket address holds"))
        }
        let loop = context.loop
        let started = loop.now
        let result = await ConnectAttempt.connect(to: address, timeout: context.remaining, on: loop, isolation: isolation)
        let elapsed = MonotonicTime.duration(nanoseconds: loop.now &- started)
        switch result {
        case .failure(let error):
            // The error names the socket's path already.
            return .failure(error)
        case .success(let box):
            let attempt = ConnectReport.Attempt(address: address, startedAfter: .zero, outcome: .connected, duration: elapsed)
            let report = ConnectReport(
                endpoint: endpoint,
                address: address,
                resolutionTime: .zero,
                connectTime: MonotonicTime.duration(nanoseconds: loop.now &- context.began),
                attempts: [attempt]
            )
            return .success(ConnectedStream(stream: SocketStream(box, remoteAddress: address, noDelay: false), report: report))
        }
    }
}

/// Listens on a Unix domain socket's path: makes the socket file with the permissions,
/// replaces one left by a listener that is gone, and removes its own file on close.
struct UnixListener: StreamListener {
    let path: String
    let permissions: Int

    /// The user only.
    static let defaultPermissions = 0o600

    func listen(in context: ListenContext, accept: @escaping @Sendable (any OpenedStream) -> Void) async throws(TetherError) -> any ListeningPort {
        guard let address = TetherSocketAddress(unixPath: path) else {
            throw TetherError(code: .bindFailed, message: "cannot listen on unix://\(path): the path is longer than a socket address holds")
        }
        try removeStaleSocket(at: address)
        let listener = try Listener(
                binding: address,
                backlog: Int32(context.backlog),
                loop: context.acceptLoop,
                bound: { [path, permissions] () throws(Errno) in try Syscall.changeMode(path, permissions) }
            ) { socket, _ in
                // The client's end of a Unix domain socket is unnamed: it is known by the
                // file it connected to.
                accept(SocketStream(SocketBox(socket), remoteAddress: TetherSocketAddress(unixPath: "")!, noDelay: false))
            }
        let identity = try? Syscall.fileIdentity(path)
        try await listener.startOnLoop()
        return UnixPort(listener: listener, path: path, identity: identity)
    }

    /// A socket file at the path that nothing listens on (its server died) is removed; a
    /// socket something listens on, or any other file, is left and fails the start.
    private func removeStaleSocket(at address: TetherSocketAddress) throws(TetherError) {
        let existing: FileIdentity?
        do {
            existing = try Syscall.fileIdentity(path)
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot listen on unix://\(path): \(error)", underlying: error)
        }
        guard let existing else { return }
        guard existing.isSocket else {
            throw TetherError(code: .bindFailed, message: "cannot listen on unix://\(path): a file that is not a socket is there")
        }
        // Connecting to a Unix domain socket never waits: it connects (or finds the queue
        // full) when something listens, and is refused when nothing does.
        let listening: Bool
        do throws(Errno) {
            let socket = try Socket(family: address.family, type: SocketOptions.streamType)
            listening = try Syscall.startConnect(socket.descriptor, address)
        } catch {
            guard error == .connectionRefused || error.isWouldBlock else {
                throw TetherError(code: .bindFailed, message: "cannot listen on unix://\(path): \(error)", underlying: error)
            }
            listening = error.isWouldBlock
        }
        if listening {
            throw TetherError(code: .bindFailed, message: "cannot listen on unix://\(path): another server listens there")
        }
        do {
            try Syscall.removeFile(path)
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot remove the stale socket unix://\(path): \(error)", underlying: error)
        }
    }
}

/// A listening Unix domain socket; closing it removes its file, unless another file has
/// taken the path since.
final class UnixPort: ListeningPort, @unchecked Sendable {
    // @unchecked Sendable: `close()` runs on the listener's loop only.
    let listener: Listener
    let path: String
    let identity: FileIdentity?
    private var closed = false

    init(listener: Listener, path: String, identity: FileIdentity?) {
        self.listener = listener
        self.path = path
        self.identity = identity
    }

    var address: TetherSocketAddress { listener.address }

    func close() {
        guard !closed else { return }
        closed = true
        listener.close()
        if let identity, (try? Syscall.fileIdentity(path)) == identity {
            try? Syscall.removeFile(path)
        }
    }
}
