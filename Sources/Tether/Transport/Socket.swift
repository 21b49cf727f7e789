/// A socket descriptor with exactly one owner, which closes it exactly once.
///
/// The descriptor is closed when the owner consumes the value with ``close()`` or lets it
/// go (its `deinit`). Being `~Copyable`, a socket cannot be closed twice or used after it
/// was closed: the compiler rejects both. Code that must watch the descriptor with an
/// event loop reads ``descriptor`` while it owns the value. Any descriptor can be owned
/// this way (the command-line tool's state files are), though sockets are what it is for.
package struct Socket: ~Copyable {
    /// The descriptor, valid for as long as this value lives.
    package let descriptor: Int32

    /// Takes ownership of `descriptor`: from now on only this value closes it.
    ///
    /// - Parameter descriptor: An open descriptor that nothing else will close.
    package init(adopting descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Opens a nonblocking, close-on-exec socket (`socket(2)`).
    ///
    /// - Parameters:
    ///   - family: The address family (`AF_INET`, `AF_INET6`).
    ///   - type: The socket type (``SocketOptions/streamType``).
    /// - Throws: `Errno` when the system refuses.
    package init(family: Int32, type: Int32) throws(Errno) {
        self.descriptor = try Syscall.makeSocket(family: family, type: type)
    }

    deinit {
        Syscall.closeDescriptor(descriptor)
    }

    /// Closes the descriptor now.
    package consuming func close() {
        // Ending the value's life runs deinit, which closes the descriptor.
    }

    /// Gives the descriptor up without closing it: the caller closes it from now on.
    ///
    /// - Returns: The descriptor.
    package consuming func release() -> Int32 {
        let descriptor = self.descriptor
        discard self
        return descriptor
    }
}

/// A ``Socket`` in a box, for the places that need a copyable, `Sendable` value: the element
/// of an `AsyncStream`, the result of a continuation.
///
/// The box owns the socket until ``take()`` moves it out; a box dropped with its socket
/// still inside closes it.
package final class SocketBox: @unchecked Sendable {
    // @unchecked Sendable: the box moves from one owner to the next (the accepting loop to
    // the server's task, a connect attempt to its caller) and is never used by two at once;
    // `take()` empties it, and a second `take()` is a programming error that traps.

    private var socket: Socket?

    /// Boxes `socket`.
    ///
    /// - Parameter socket: The socket the box owns from now on.
    package init(_ socket: consuming Socket) {
        self.socket = .some(socket)
    }

    /// The descriptor of the socket inside, while the box holds it.
    package var descriptor: Int32? {
        socket?.descriptor
    }

    /// Moves the socket out; the box is empty afterwards.
    ///
    /// - Returns: The socket, which the caller owns.
    package func take() -> Socket {
        guard let socket = socket.take() else {
            preconditionFailure("the socket was already taken out of its box")
        }
        return socket
    }
}
