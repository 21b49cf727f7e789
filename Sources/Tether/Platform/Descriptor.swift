import Synchronization

/// A file descriptor with one owner that closes it exactly once: at ``close()``, or when
/// the last reference goes. For descriptors that no ``Socket`` on a loop owns: pipes, a
/// netlink socket, the sockets a thread of its own drives (the fault proxy's), a socket a
/// test holds.
///
/// ``raw`` is for the system calls that use it; it must not be used after ``close()``, when
/// the number may already name another file.
package final class Descriptor: Sendable {
    /// The descriptor number.
    package let raw: Int32
    private let open = Atomic<Bool>(true)

    /// Owns `raw` from now on.
    ///
    /// - Parameter raw: An open descriptor.
    package init(adopting raw: Int32) {
        self.raw = raw
    }

    /// Whether ``close()`` has not run yet.
    package var isOpen: Bool { open.load(ordering: .acquiring) }

    /// Closes the descriptor; later calls do nothing.
    package func close() {
        guard open.exchange(false, ordering: .acquiringAndReleasing) else { return }
        Syscall.closeDescriptor(raw)
    }

    deinit {
        close()
    }
}
