#if os(Linux) || os(Android)
@preconcurrency import Glibc
import CTetherShims

/// Readiness notification with `epoll(7)` and an `eventfd(2)` to wake the loop.
final class Selector {
    private let epoll: Int32
    private let wakeFD: Int32
    private var events: UnsafeMutableBufferPointer<epoll_event>

    init(capacity: Int = 256) throws(Errno) {
        epoll = try Syscall.retrying { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        wakeFD = try Syscall.retrying { eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC)) }
        events = .allocate(capacity: capacity)
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeFD
        _ = try Syscall.retrying { epoll_ctl(epoll, EPOLL_CTL_ADD, wakeFD, &event) }
    }

    deinit {
        Syscall.closeDescriptor(wakeFD)
        Syscall.closeDescriptor(epoll)
        events.deallocate()
    }

    private func mask(_ interest: Interest) -> UInt32 {
        // Half-close is a read event: a socket not being read must not report it, or the
        // level-triggered loop would wake for it at every turn.
        var bits: UInt32 = 0
        if interest.contains(.read) { bits |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue }
        if interest.contains(.write) { bits |= EPOLLOUT.rawValue }
        return bits
    }

    /// `epoll_ctl(EPOLL_CTL_ADD)`.
    func register(_ fd: Int32, interest: Interest) throws(Errno) {
        var event = epoll_event()
        event.events = mask(interest)
        event.data.fd = fd
        _ = try Syscall.retrying { epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) }
    }

    /// `epoll_ctl(EPOLL_CTL_MOD)`.
    func reregister(_ fd: Int32, interest: Interest) throws(Errno) {
        var event = epoll_event()
        event.events = mask(interest)
        event.data.fd = fd
        _ = try Syscall.retrying { epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event) }
    }

    /// `epoll_ctl(EPOLL_CTL_DEL)`.
    func deregister(_ fd: Int32) {
        var event = epoll_event()
        _ = epoll_ctl(epoll, EPOLL_CTL_DEL, fd, &event)
    }

    /// Wakes a thread blocked in ``wait(timeoutNanoseconds:_:)`` (`write(2)` to the eventfd).
    func wakeup() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// `epoll_wait(2)`: blocks until readiness, a wake-up or the timeout (`nil` waits forever),
    /// then calls `handler` for each ready descriptor.
    /// - Returns: whether a wake-up was received.
    func wait(timeoutNanoseconds: Int64?, _ handler: (ReadinessEvent) -> Void) throws(Errno) -> Bool {
        let timeout: Int32
        if let nanos = timeoutNanoseconds {
            timeout = nanos <= 0 ? 0 : Int32(clamping: (nanos + 999_999) / 1_000_000)
        } else {
            timeout = -1
        }
        let count = epoll_wait(epoll, events.baseAddress, Int32(events.count), timeout)
        if count < 0 {
            let error = Errno.current
            if error == .interrupted { return false }
            throw error
        }
        var woke = false
        for index in 0..<Int(count) {
            let event = events[index]
            let fd = event.data.fd
            if fd == wakeFD {
                var value: UInt64 = 0
                _ = read(wakeFD, &value, 8)
                woke = true
                continue
            }
            let bits = event.events
            handler(
                ReadinessEvent(
                    fd: fd,
                    readable: bits & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0,
                    writable: bits & (EPOLLOUT.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0,
                    hangup: bits & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
                )
            )
        }
        if Int(count) == events.count {
            let bigger = UnsafeMutableBufferPointer<epoll_event>.allocate(capacity: events.count * 2)
            events.deallocate()
            events = bigger
        }
        return woke
    }
}
#endif
