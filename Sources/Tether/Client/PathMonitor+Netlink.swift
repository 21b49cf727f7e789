#if os(Linux) || os(Android)
@preconcurrency import Glibc
import CTetherShims

extension SystemPathMonitor {
    /// Starts the process's rtnetlink watcher on a loop of ``EventLoopGroup/shared``, after
    /// publishing the path it reads first.
    static func startWatching(_ publish: @escaping @Sendable (NetworkPath) -> Void) throws(TetherError) -> any Sendable {
        try NetlinkPathWatcher.start(on: EventLoopGroup.shared.next(), publish: publish)
    }
}

/// Watches the kernel's routing tables for the default path.
///
/// One socket joins the multicast groups of links, addresses and routes (IPv4 and IPv6);
/// it is nonblocking and registered with an event loop. Whatever arrives on it (its
/// content does not matter, nor a lost burst: `ENOBUFS`) only says that something changed:
/// the watcher drains it and, ``settleDelay`` after the first message of a burst, dumps the
/// links and the IPv4 and IPv6 routes on a second socket, computes the path (``Netlink/path(routes:links:)``) and publishes it, which
/// reaches the observers only when it differs from the last one. Each dump is bounded by
/// ``dumpTimeout``; a dump that fails keeps the last path, and the next message tries again.
final class NetlinkPathWatcher: IOHandler, @unchecked Sendable {
    // @unchecked Sendable: after `start`, every field is touched only on `loop`'s thread
    // (the first dump runs on the starting thread before the loop knows the watcher).

    /// How long one dump (links, or one family's routes) may take. The kernel answers at
    /// once; the bound is against a kernel that does not, never expected to pass.
    static let dumpTimeout: Duration = .seconds(1)

    private let loop: EventLoop
    private let events: Int32
    private let queries: Int32
    private let publish: @Sendable (NetworkPath) -> Void
    private var sequence: UInt32 = 0
    private var buffer = [UInt8](repeating: 0, count: 64 << 10)
    private var stopped = false
    /// The timer of the dump that follows a burst of messages, while one is due.
    private var pendingDump: LoopTimer?

    /// How long after the first message of a burst the tables are read: a change (an
    /// interface going away takes its addresses and routes with it) comes as several
    /// messages, and one dump after them all is enough.
    static let settleDelay: Duration = .milliseconds(20)

    private init(loop: EventLoop, events: Int32, queries: Int32, publish: @escaping @Sendable (NetworkPath) -> Void) {
        self.loop = loop
        self.events = events
        self.queries = queries
        self.publish = publish
    }

    /// Opens the sockets, publishes the path they show now, and registers with `loop`.
    ///
    /// - Throws: ``TetherError/Code/systemCall`` when a netlink socket cannot be opened or
    ///   the first dump fails.
    static func start(on loop: EventLoop, publish: @escaping @Sendable (NetworkPath) -> Void) throws(TetherError) -> NetlinkPathWatcher {
        // Subscribed first, so that a change during the first dump is not missed.
        let events = ctether_netlink_open(Netlink.watchedGroups)
        guard events >= 0 else {
            throw TetherError(code: .systemCall, message: "cannot watch the network path: opening a netlink route socket failed: \(Errno.current)")
        }
        let queries = ctether_netlink_open(0)
        guard queries >= 0 else {
            let error = Errno.current
            Syscall.closeDescriptor(events)
            throw TetherError(code: .systemCall, message: "cannot watch the network path: opening a netlink route socket failed: \(error)")
        }
        let watcher = NetlinkPathWatcher(loop: loop, events: events, queries: queries, publish: publish)
        do throws(TetherError) {
            publish(try watcher.readPath())
        } catch {
            watcher.closeSockets()
            throw error
        }
        loop.execute { watcher.register() }
        return watcher
    }

    private func register() {
        guard !stopped else { return }
        do throws(Errno) {
            try loop.register(events, interest: .read, handler: self)
        } catch {
            stopped = true
            closeSockets()
        }
    }

    /// Stops watching and closes the sockets; the path stays what it last was. Idempotent.
    func stop() {
        loop.execute { [self] in
            guard !stopped else { return }
            stopped = true
            if let pendingDump { loop.cancel(pendingDump) }
            pendingDump = nil
            loop.deregister(events)
            closeSockets()
        }
    }

    private func closeSockets() {
        Syscall.closeDescriptor(events)
        Syscall.closeDescriptor(queries)
    }

    func handleReadiness(_ event: ReadinessEvent) {
        guard !stopped else { return }
        // Drain what arrived: any message, or a lost burst, means "look again".
        drain: while true {
            let count = buffer.withUnsafeMutableBytes { recv(events, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count >= 0 { continue }
            let error = Errno.current
            switch error {
            case .interrupted, Errno(rawValue: ENOBUFS):
                continue
            case _ where error.isWouldBlock:
                break drain
            default:
                // The socket is broken: stop, rather than wake the loop for it forever.
                stopped = true
                loop.deregister(events)
                closeSockets()
                return
            }
        }
        guard pendingDump == nil else { return }
        pendingDump = loop.schedule(after: Self.settleDelay) { [self] in
            pendingDump = nil
            guard !stopped else { return }
            if let path = try? readPath() { publish(path) }
        }
    }

    // MARK: Dumps

    /// The path the kernel's links and default routes make now. Only default routes are
    /// kept as the dump goes by, so a router's full table costs time, not memory.
    private func readPath() throws(TetherError) -> NetworkPath {
        var links: [Netlink.Link] = []
        try dump(Netlink.getLink, family: 0) { message in
            if message.type == Netlink.newLink, let link = Netlink.link(in: message.payload) { links.append(link) }
        }
        var routes: [Netlink.Route] = []
        for family in [Netlink.familyIPv4, Netlink.familyIPv6] {
            try dump(Netlink.getRoute, family: family) { message in
                if message.type == Netlink.newRoute, let route = Netlink.route(in: message.payload), route.isUsableDefault {
                    routes.append(route)
                }
            }
        }
        return Netlink.path(routes: routes, links: links)
    }

    /// Sends one dump request and hands each message of its answer to `visit`, up to
    /// `NLMSG_DONE`, within ``dumpTimeout``. Messages of other sequence numbers (a late
    /// answer to an earlier dump) are skipped.
    private func dump(_ type: UInt16, family: UInt8, _ visit: (Netlink.Message) -> Void) throws(TetherError) {
        sequence &+= 1
        let sequence = sequence
        let request = Netlink.dumpRequest(type, family: family, sequence: sequence)
        let sent = request.withUnsafeBytes { send(queries, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        guard sent == request.count else {
            throw TetherError(code: .systemCall, message: "cannot read the network path: sending a netlink dump request failed: \(Errno.current)")
        }
        let deadline = MonotonicTime.now() &+ MonotonicTime.nanoseconds(of: Self.dumpTimeout)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(queries, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count < 0 {
                let error = Errno.current
                if error == .interrupted { continue }
                guard error.isWouldBlock else {
                    throw TetherError(code: .systemCall, message: "cannot read the network path: reading a netlink dump failed: \(error)")
                }
                let now = MonotonicTime.now()
                guard now < deadline else {
                    throw TetherError(code: .systemCall, message: "cannot read the network path: the kernel did not answer a netlink dump within \(describe(Self.dumpTimeout))")
                }
                var descriptor = pollfd(fd: queries, events: Int16(POLLIN), revents: 0)
                _ = poll(&descriptor, 1, Int32(clamping: (deadline - now + 999_999) / 1_000_000))
                continue
            }
            for message in Netlink.messages(in: buffer[..<count]) where message.sequence == sequence {
                switch message.type {
                case Netlink.messageDone:
                    return
                case Netlink.messageError:
                    let code = Netlink.readUInt32(message.payload, at: message.payload.startIndex).map { -Int32(bitPattern: $0) } ?? 0
                    throw TetherError(code: .systemCall, message: "cannot read the network path: the kernel refused a netlink dump: \(Errno(rawValue: code))")
                default:
                    visit(message)
                }
            }
        }
    }
}
#endif
