import Tether
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The machinery of a ``DatagramSocket``: the UDP socket registered with an event loop, the
/// reads on the loop, the sends from any thread, and the inbox between the loop and the reader.
///
/// The loop reads what the socket holds at each readiness event, at most
/// ``readsPerEvent`` datagrams, so one busy socket cannot starve the loop; datagrams go to
/// the inbox, which drops the newest once ``DatagramConfiguration/receiveBufferCount`` are
/// held. Sends run on the caller's thread with the lock held, so they never overlap the
/// close: once ``close()`` has marked the channel closed, only the loop touches the
/// descriptor, and it closes it.
final class DatagramChannel: IOHandler, @unchecked Sendable {
    // @unchecked Sendable: `state` is behind a lock; `socket` and `readSpace` are touched
    // only on `loop`'s thread (after `init`, which hands them over before registering);
    // the rest is immutable.

    struct State {
        var inbox: DatagramInbox
        var remote: TetherSocketAddress?
    }

    let loop: EventLoop
    let localAddress: TetherSocketAddress
    let maximumDatagramSize: Int
    let descriptor: Int32
    let state: Lock<State>
    /// The socket, until the loop closes it.
    private var socket: Socket?
    /// Where datagrams are read: one buffer of the largest datagram, for this socket's life.
    private var readSpace: UnsafeMutableRawBufferPointer
    private var registered = false

    /// Datagrams read at one readiness event, at most.
    static let readsPerEvent = 64

    /// Opens a UDP socket bound to `address` (any thread); ``start()`` registers it.
    ///
    /// - Throws: ``Tether/TetherError/Code/bindFailed`` when the socket cannot be opened or bound.
    init(binding address: TetherSocketAddress, configuration: DatagramConfiguration, loop: EventLoop) throws(TetherError) {
        let socket: Socket
        do {
            socket = try Socket(family: address.family, type: SocketOptions.datagramType)
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot open a udp socket for \(address): \(error)", underlying: error)
        }
        let fd = socket.descriptor
        do {
            if address.isIPv6 {
                try? Syscall.setOption(fd, level: SocketOptions.ipv6Level, name: SocketOptions.ipv6Only, value: 1)
            }
            try Syscall.bindAddress(fd, address)
            localAddress = try Syscall.localAddress(fd)
        } catch {
            throw TetherError(code: .bindFailed, message: "cannot bind a udp socket to \(address): \(error)", underlying: error)
        }
        self.loop = loop
        self.descriptor = fd
        self.maximumDatagramSize = configuration.maximumDatagramSize
        self.state = Lock(State(inbox: DatagramInbox(capacity: configuration.receiveBufferCount)))
        self.readSpace = .allocate(byteCount: configuration.maximumDatagramSize, alignment: 16)
        self.socket = .some(socket)
    }

    deinit {
        readSpace.deallocate()
    }

    /// Registers the socket for reading. Loop thread only.
    func start() throws(TetherError) {
        do {
            try loop.register(descriptor, interest: .read, handler: self)
            registered = true
        } catch {
            close()
            throw TetherError(code: .systemCall, message: "cannot watch the udp socket on \(localAddress): \(error)", underlying: error)
        }
    }

    // MARK: Reading (loop thread)

    func handleReadiness(_ event: ReadinessEvent) {
        guard event.readable else { return }
        for _ in 0..<Self.readsPerEvent {
            guard socket != nil else { return }
            let result: IOResult<(count: Int, sender: TetherSocketAddress, truncated: Bool)>
            do {
                result = try Syscall.receiveDatagram(descriptor, into: readSpace)
            } catch {
                let failure = receiveFailure(error)
                state.withLock { $0.inbox.failed(failure) }.run()
                // A refusal is reported once and cleared by the kernel; anything else may
                // persist, and waits for the next turn rather than spinning in this one.
                if error == .connectionRefused { continue }
                return
            }
            guard case .processed(let received) = result else { return }
            if received.truncated {
                state.withLock { $0.inbox.arrivedTruncated() }.run()
                continue
            }
            let bytes = Array(UnsafeRawBufferPointer(rebasing: readSpace[..<received.count]))
            let datagram = Datagram(bytes: bytes, sender: received.sender)
            state.withLock { $0.inbox.arrived(datagram) }.run()
        }
    }

    private func receiveFailure(_ error: Errno) -> TetherError {
        let remote = state.withLock { $0.remote }
        let peer = remote.map { " connected to \($0)" } ?? ""
        if error == .connectionRefused {
            return TetherError(
                code: .connectionRefused,
                message: "udp socket \(localAddress)\(peer): the peer refused a datagram (its port is closed)",
                underlying: error
            )
        }
        return TetherError(code: .systemCall, message: "receiving on udp socket \(localAddress)\(peer) failed: \(error)", underlying: error)
    }

    // MARK: Sending (any thread)

    /// Sends one datagram to `address`, or to the connected peer when it is `nil`.
    func send(_ bytes: [UInt8], to address: TetherSocketAddress?) throws(TetherError) {
        let destination = address.map(\.description) ?? "the connected peer"
        guard bytes.count <= maximumDatagramSize else {
            throw TetherError(
                code: .frameTooLarge,
                message: "datagram of \(bytes.count) bytes to \(destination) is over the maximum datagram size of \(maximumDatagramSize) bytes"
            )
        }
        try state.withLock { (state) throws(TetherError) in
            guard !state.inbox.isClosed else {
                throw TetherError(code: .connectionClosed, message: "udp socket \(localAddress) is closed: a datagram to \(destination) was not sent")
            }
            if address == nil, state.remote == nil {
                throw TetherError(code: .notConnected, message: "udp socket \(localAddress) is not connected: give the datagram an address or connect first")
            }
            let result: IOResult<Int>
            do throws(Errno) {
                let outcome = bytes.withUnsafeBytes { raw in
                    Result { () throws(Errno) -> IOResult<Int> in try Syscall.sendDatagram(descriptor, raw, to: address) }
                }
                result = try outcome.get()
            } catch {
                let to = address.map { " to \($0)" } ?? state.remote.map { " to \($0)" } ?? ""
                if error == .connectionRefused {
                    throw TetherError(
                        code: .connectionRefused,
                        message: "udp socket \(localAddress)\(to): the peer refused a datagram (its port is closed)",
                        underlying: error
                    )
                }
                throw TetherError(code: .systemCall, message: "sending \(bytes.count) bytes on udp socket \(localAddress)\(to) failed: \(error)", underlying: error)
            }
            guard case .processed = result else {
                throw TetherError(
                    code: .outboundBufferFull,
                    message: "the send buffer of udp socket \(localAddress) is full: a datagram of \(bytes.count) bytes to \(destination) was not sent"
                )
            }
        }
    }

    /// Connects the socket to `address`: sends without an address go there, and only its
    /// datagrams are received.
    func connect(to address: TetherSocketAddress) throws(TetherError) {
        try state.withLock { (state) throws(TetherError) in
            guard !state.inbox.isClosed else {
                throw TetherError(code: .connectionClosed, message: "udp socket \(localAddress) is closed: it cannot connect to \(address)")
            }
            do {
                _ = try Syscall.startConnect(descriptor, address)
            } catch {
                throw TetherError(code: .connectFailed, message: "udp socket \(localAddress) cannot connect to \(address): \(error)", underlying: error)
            }
            state.remote = address
        }
    }

    // MARK: Closing

    /// Ends the reader's sequence and closes the socket on the loop. Idempotent; any thread.
    func close() {
        let (waiters, readWaiters) = state.withLock { state in
            (state.inbox.close(), state.inbox.takeAllReadWaiters())
        }
        guard let waiters else { return }
        for waiter in waiters { waiter.resume(returning: .end) }
        for waiter in readWaiters { waiter.resume() }
        if loop.inLoop {
            closeOnLoop()
        } else {
            loop.execute { [self] in closeOnLoop() }
        }
    }

    private func closeOnLoop() {
        guard let socket = socket.take() else { return }
        if registered { loop.deregister(descriptor) }
        socket.close()
    }

    // MARK: Reader

    /// The next event for the reader, waiting for one; the end when the waiting task is cancelled.
    func next() async -> DatagramEvent {
        if let event = state.withLock({ $0.inbox.take() }) { return event }
        let id = Lock<UInt64?>(nil)
        let cancelled = Lock(false)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<DatagramEvent, Never>) in
                var resume = DatagramInbox.Resume()
                state.withLock { state in
                    if cancelled.withLock({ $0 }) {
                        resume.waiter = continuation
                        resume.event = .end
                        return
                    }
                    id.withLock { $0 = state.inbox.wait(continuation, resume: &resume) }
                }
                resume.run()
            }
        } onCancel: {
            state.withLock { state -> DatagramInbox.Resume in
                cancelled.withLock { $0 = true }
                guard let waiter = id.withLock({ $0 }) else { return DatagramInbox.Resume() }
                return state.inbox.cancel(waiter)
            }.run()
        }
    }

    /// Waits until `count` datagrams were read from the kernel (delivered, held, dropped or
    /// truncated) or the socket closed.
    func waitForReads(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            state.withLock { $0.inbox.waitForReads(count, continuation) }.run()
        }
    }
}
