#if canImport(Darwin)
import Darwin
import CTetherShims

/// Readiness notification with `kqueue(2)` and an `EVFILT_USER` event to wake the loop.
final class Selector {
    private let queue: Int32
    private var events: UnsafeMutableBufferPointer<kevent>
    private static let wakeIdent: UInt = 0x7e7e

    init(capacity: Int = 256) throws(Errno) {
        queue = try Syscall.retrying { kqueue() }
        events = .allocate(capacity: capacity)
        var change = kevent(ident: Self.wakeIdent, filter: Int16(EVFILT_USER), flags: UInt16(EV_ADD | EV_CLEAR),
                            fflags: 0, data: 0, udata: nil)
        _ = try Syscall.retrying { kevent(queue, &change, 1, nil, 0, nil) }
    }

    deinit {
        Syscall.closeDescriptor(queue)
        events.deallocate()
    }

    private func apply(_ fd: Int32, filter: Int32, enable: Bool) {
        var change = kevent(ident: UInt(fd), filter: Int16(filter), flags: UInt16(enable ? EV_ADD : EV_DELETE),
                            fflags: 0, data: 0, udata: nil)
        _ = kevent(queue, &change, 1, nil, 0, nil)
    }

    func register(_ fd: Int32, interest: Interest) throws(Errno) {
        try reregister(fd, interest: interest)
    }

    func reregister(_ fd: Int32, interest: Interest) throws(Errno) {
        apply(fd, filter: EVFILT_READ, enable: interest.contains(.read))
        apply(fd, filter: EVFILT_WRITE, enable: interest.contains(.write))
    }

    func deregister(_ fd: Int32) {
        apply(fd, filter: EVFILT_READ, enable: false)
        apply(fd, filter: EVFILT_WRITE, enable: false)
    }

    func wakeup() {
        var change = kevent(ident: Self.wakeIdent, filter: Int16(EVFILT_USER), flags: 0,
                            fflags: UInt32(NOTE_TRIGGER), data: 0, udata: nil)
        _ = kevent(queue, &change, 1, nil, 0, nil)
    }

    func wait(timeoutNanoseconds: Int64?, _ handler: (ReadinessEvent) -> Void) throws(Errno) -> Bool {
        var spec = timespec()
        let count: Int32
        if let nanos = timeoutNanoseconds {
            let clamped = max(0, nanos)
            spec.tv_sec = Int(clamped / 1_000_000_000)
            spec.tv_nsec = Int(clamped % 1_000_000_000)
            count = kevent(queue, nil, 0, events.baseAddress, Int32(events.count), &spec)
        } else {
            count = kevent(queue, nil, 0, events.baseAddress, Int32(events.count), nil)
        }
        if count < 0 {
            let error = Errno.current
            if error == .interrupted { return false }
            throw error
        }
        var woke = false
        for index in 0..<Int(count) {
            let event = events[index]
            if event.filter == Int16(EVFILT_USER) {
                woke = true
                continue
            }
            let isRead = event.filter == Int16(EVFILT_READ)
            let eof = event.flags & UInt16(EV_EOF) != 0
            handler(ReadinessEvent(fd: Int32(event.ident), readable: isRead, writable: !isRead, hangup: eof && !isRead))
        }
        return woke
    }
}
#endif
