#if os(Linux) || os(Android)
@preconcurrency import Glibc
import CTetherShims

extension SystemPathMonitor {
    /// Starts the process's rtnetlink watcher on a thread of its own; its first path is
    /// published from there, or `failed` is told why it could not be read.
    static func startWatching(
        _ publish: @escaping @Sendable (NetworkPath) -> Void,
        failed: @escaping @Sendable (TetherError) -> Void
    ) throws(TetherError) -> any Sendable {
        try NetlinkPathWatcher.start(source: NetlinkSockets(), publish: publish, failed: failed)
    }
}

/// What ``NetlinkPathWatcher`` reads the kernel through: the netlink sockets, or in tests a
/// source that plays the kernel. Only the watcher's thread calls it, except ``wake()``.
protocol NetlinkPathSource: AnyObject, Sendable {
    /// Blocks until the kernel says that something changed, until `deadline` (monotonic
    /// nanoseconds; `nil`: none) passes, or until ``wake()`` was called.
    ///
    /// - Parameter deadline: When to give up waiting.
    /// - Returns: What ended the wait.
    /// - Throws: ``TetherError/Code/systemCall`` when the source is broken.
    func waitForChange(until deadline: UInt64?) throws(TetherError) -> NetlinkWait

    /// The path the kernel's links, addresses and default routes make now.
    ///
    /// - Returns: The path.
    /// - Throws: ``TetherError/Code/systemCall`` when the tables cannot be read.
    func readPath() throws(TetherError) -> NetworkPath

    /// Makes the wait under way, and every later one, return ``NetlinkWait/stopped``; any thread.
    func wake()

    /// Releases what the source holds; called once, by the watcher's thread, as it ends.
    func close()
}

/// What ended a ``NetlinkPathSource/waitForChange(until:)``.
enum NetlinkWait: Equatable {
    /// The kernel sent something (its content does not matter, nor a lost burst).
    case changed
    /// The deadline passed.
    case timedOut
    /// The watcher is stopping.
    case stopped
}

/// Watches the kernel's routing tables for the default path, on a thread of its own: never
/// on an event loop, so a slow kernel answer holds up no connection.
///
/// The thread reads the path once and publishes it, then waits for the kernel's messages of
/// links, addresses and routes. ``settleDelay`` after the first message of a burst it reads
/// the tables again (``NetlinkPathSource/readPath()``) and publishes what it finds, which
/// reaches the observers only when it differs from the last path. A read that fails keeps
/// the last path, and the next message tries again; a first read that fails ends the watcher.
final class NetlinkPathWatcher: Sendable {
    /// How long after the first message of a burst the tables are read: a change (an
    /// interface going away takes its addresses and routes with it) comes as several
    /// messages, and one read after them all is enough.
    static let settleDelay: Duration = .milliseconds(20)

    private let source: any NetlinkPathSource
    private let finished = Semaphore()

    private init(source: any NetlinkPathSource) {
        self.source = source
    }

    /// Starts the watcher's thread on `source`.
    ///
    /// - Parameters:
    ///   - source: Where the thread reads the kernel; the watcher owns it from now on.
    ///   - settleDelay: How long after the first message of a burst the tables are read.
    ///   - publish: Told each path read, on the watcher's thread.
    ///   - failed: Told why, when the first read fails; the watcher has ended then.
    /// - Returns: The watcher.
    static func start(
        source: any NetlinkPathSource,
        settleDelay: Duration = settleDelay,
        publish: @escaping @Sendable (NetworkPath) -> Void,
        failed: @escaping @Sendable (TetherError) -> Void = { _ in }
    ) -> NetlinkPathWatcher {
        let watcher = NetlinkPathWatcher(source: source)
        BlockingThread.run {
            watcher.run(settleDelay: settleDelay, publish: publish, failed: failed)
            watcher.finished.signal()
        }
        return watcher
    }

    /// Stops the thread and waits until it has ended and closed the source; the path stays
    /// what it last was. Blocks for as long as a read under way takes to give up: never call
    /// it on an event loop. Once only.
    func stop() {
        source.wake()
        finished.wait()
    }

    private func run(settleDelay: Duration, publish: (NetworkPath) -> Void, failed: (TetherError) -> Void) {
        defer { source.close() }
        do throws(TetherError) {
            publish(try source.readPath())
        } catch {
            failed(error)
            return
        }
        let settle = MonotonicTime.nanoseconds(of: settleDelay)
        while true {
            // A broken source ends the watcher: the path stays what it last was.
            guard (try? source.waitForChange(until: nil)) == .changed else { return }
            let deadline = MonotonicTime.now() &+ settle
            settling: while true {
                switch try? source.waitForChange(until: deadline) {
                case .changed: continue
                case .timedOut: break settling
                case .stopped, nil: return
                }
            }
            if let path = try? source.readPath() { publish(path) }
        }
    }
}

/// The watcher's netlink sockets: one joined to the multicast groups of links, addresses
/// and routes (IPv4 and IPv6), one for dumps, and an `eventfd(2)` that wakes the thread to
/// stop. All nonblocking; the thread waits in `poll(2)`.
///
/// Each dump (links, addresses, one family's routes) is bounded by ``dumpTimeout``. Only
/// default routes are kept as a dump goes by, so a router's full table costs time, not memory.
final class NetlinkSockets: NetlinkPathSource, @unchecked Sendable {
    // @unchecked Sendable: `sequence` and `buffer` are touched only by the watcher's thread;
    // `wake()` only writes to the eventfd, which any thread may.

    /// How long one dump may take. The kernel answers at once; the bound is against a
    /// kernel that does not, never expected to pass.
    static let dumpTimeout: Duration = .seconds(1)

    private let events: Descriptor
    private let queries: Descriptor
    private let wakeup: Descriptor
    private var sequence: UInt32 = 0
    private var buffer = [UInt8](repeating: 0, count: 64 << 10)

    /// Opens the sockets; the events socket is subscribed before any dump, so that a change
    /// during the first one is not missed.
    ///
    /// - Throws: ``TetherError/Code/systemCall`` when a socket cannot be opened.
    init() throws(TetherError) {
        // Each descriptor is owned once opened: a failure below closes those before it.
        let events = ctether_netlink_open(Netlink.watchedGroups)
        guard events >= 0 else {
            throw TetherError(code: .systemCall, message: "cannot watch the network path: opening a netlink route socket failed: \(Errno.current)")
        }
        self.events = Descriptor(adopting: events)
        let queries = ctether_netlink_open(0)
        guard queries >= 0 else {
            throw TetherError(code: .systemCall, message: "cannot watch the network path: opening a netlink route socket failed: \(Errno.current)")
        }
        self.queries = Descriptor(adopting: queries)
        let wakeup = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard wakeup >= 0 else {
            throw TetherError(code: .systemCall, message: "cannot watch the network path: eventfd failed: \(Errno.current)")
        }
        self.wakeup = Descriptor(adopting: wakeup)
    }

    func wake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeup.raw, $0.baseAddress, $0.count) }
    }

    func close() {
        events.close()
        queries.close()
        wakeup.close()
    }

    /// Waits in `poll(2)` for `descriptor` or the eventfd, until `deadline`.
    ///
    /// - Returns: Whether `descriptor` is readable; `nil` when woken to stop.
    private func poll(_ descriptor: Int32, until deadline: UInt64?) throws(TetherError) -> Bool? {
        while true {
            var descriptors = [
                pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeup.raw, events: Int16(POLLIN), revents: 0),
            ]
            var timeout: Int32 = -1
            if let deadline {
                let now = MonotonicTime.now()
                guard now < deadline else { return false }
                timeout = Int32(clamping: (deadline - now + 999_999) / 1_000_000)
            }
            let ready = Glibc.poll(&descriptors, 2, timeout)
            if ready < 0 {
                let error = Errno.current
                if error == .interrupted { continue }
                throw TetherError(code: .systemCall, message: "cannot watch the network path: poll failed: \(error)")
            }
            if descriptors[1].revents != 0 { return nil }
            if descriptors[0].revents != 0 { return true }
        }
    }

    func waitForChange(until deadline: UInt64?) throws(TetherError) -> NetlinkWait {
        switch try poll(events.raw, until: deadline) {
        case nil: return .stopped
        case false?: return .timedOut
        case true?: break
        }
        // Drain what arrived: any message, or a lost burst, means "look again".
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(events.raw, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count >= 0 { continue }
            let error = Errno.current
            switch error {
            case .interrupted, Errno(rawValue: ENOBUFS):
                continue
            case _ where error.isWouldBlock:
                return .changed
            default:
                throw TetherError(code: .systemCall, message: "cannot watch the network path: reading a netlink message failed: \(error)")
            }
        }
    }

    func readPath() throws(TetherError) -> NetworkPath {
        var links: [Netlink.Link] = []
        try dump(Netlink.getLink, family: 0) { message in
            if message.type == Netlink.newLink, let link = Netlink.link(in: message.payload) { links.append(link) }
        }
        var addresses: [Netlink.Address] = []
        try dump(Netlink.getAddress, family: 0) { message in
            if message.type == Netlink.newAddress, let address = Netlink.address(in: message.payload) { addresses.append(address) }
        }
        var routes: [Netlink.Route] = []
        for family in [Netlink.familyIPv4, Netlink.familyIPv6] {
            try dump(Netlink.getRoute, family: family) { message in
                if message.type == Netlink.newRoute, let route = Netlink.route(in: message.payload), route.isUsableDefault {
                    routes.append(route)
                }
            }
        }
        return Netlink.path(routes: routes, links: links, addresses: addresses)
    }

    /// Sends one dump request and hands each message of its answer to `visit`, up to
    /// `NLMSG_DONE`, within ``dumpTimeout``. Messages of other sequence numbers (a late
    /// answer to an earlier dump) are skipped.
    private func dump(_ type: UInt16, family: UInt8, _ visit: (Netlink.Message) -> Void) throws(TetherError) {
        sequence &+= 1
        let sequence = sequence
        let request = Netlink.dumpRequest(type, family: family, sequence: sequence)
        let sent = request.withUnsafeBytes { send(queries.raw, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        guard sent == request.count else {
            throw TetherError(code: .systemCall, message: "cannot read the network path: sending a netlink dump request failed: \(Errno.current)")
        }
        let deadline = MonotonicTime.now() &+ MonotonicTime.nanoseconds(of: Self.dumpTimeout)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(queries.raw, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count < 0 {
                let error = Errno.current
                if error == .interrupted { continue }
                guard error.isWouldBlock else {
                    throw TetherError(code: .systemCall, message: "cannot read the network path: reading a netlink dump failed: \(error)")
                }
                switch try poll(queries.raw, until: deadline) {
                case true?:
                    continue
                case false?:
                    throw TetherError(code: .systemCall, message: "cannot read the network path: the kernel did not answer a netlink dump within \(describe(Self.dumpTimeout))")
                case nil:
                    throw TetherError(code: .systemCall, message: "cannot read the network path: the watcher stopped during a netlink dump")
                }
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
