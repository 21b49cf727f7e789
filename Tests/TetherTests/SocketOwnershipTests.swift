#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
@testable import Tether

/// A connected pair of local stream sockets: the test owns `other` as a plain descriptor and
/// hands `owned` to a ``Socket``. Reading `other` returns 0 (end of stream) once every copy
/// of `owned` is closed, which proves the close without racing on descriptor numbers that
/// other tests may reuse.
private func socketPair() throws -> (owned: Int32, other: Int32) {
    var pair: [Int32] = [-1, -1]
    #if canImport(Glibc)
    let type = Int32(SOCK_STREAM.rawValue)
    #else
    let type = SOCK_STREAM
    #endif
    guard socketpair(AF_UNIX, type, 0, &pair) == 0 else { throw Errno.current }
    // The test's end never blocks: a read of an open, silent peer returns EAGAIN.
    _ = fcntl(pair[1], F_SETFL, fcntl(pair[1], F_GETFL) | O_NONBLOCK)
    return (pair[0], pair[1])
}

/// Whether the peer of `fd` has closed: a read finds the end of the stream. `fd` is
/// nonblocking, so an open peer that sent nothing makes the read fail with EAGAIN at once.
private func peerClosed(_ fd: Int32) -> Bool {
    var byte: UInt8 = 0
    return read(fd, &byte, 1) == 0
}

@Suite("Owned sockets")
struct SocketOwnershipTests {
    @Test("a socket that goes out of scope closes its descriptor")
    func closesOnDeinit() throws {
        let (owned, other) = try socketPair()
        defer { _ = close(other) }
        do {
            let socket = Socket(adopting: owned)
            #expect(socket.descriptor == owned)
        }
        #expect(peerClosed(other))
    }

    @Test("close() closes the descriptor once; the value is gone afterwards")
    func closesOnClose() throws {
        let (owned, other) = try socketPair()
        defer { _ = close(other) }
        let socket = Socket(adopting: owned)
        socket.close()
        #expect(peerClosed(other))
    }

    @Test("release() hands the descriptor back open; the socket does not close it")
    func releaseKeepsOpen() throws {
        let (owned, other) = try socketPair()
        defer { _ = close(other) }
        let socket = Socket(adopting: owned)
        let descriptor = socket.release()
        #expect(descriptor == owned)
        #expect(fcntl(descriptor, F_GETFD) != -1)
        #expect(!peerClosed(other))
        _ = close(descriptor)
        #expect(peerClosed(other))
    }

    @Test("a box dropped with its socket inside closes it; a socket taken out is the taker's")
    func boxOwnsItsSocket() throws {
        let (first, firstOther) = try socketPair()
        defer { _ = close(firstOther) }
        do {
            let box = SocketBox(Socket(adopting: first))
            #expect(box.descriptor == first)
        }
        #expect(peerClosed(firstOther))

        let (second, secondOther) = try socketPair()
        defer { _ = close(secondOther) }
        let box = SocketBox(Socket(adopting: second))
        let socket = box.take()
        #expect(box.descriptor == nil)
        #expect(!peerClosed(secondOther))
        socket.close()
        #expect(peerClosed(secondOther))
    }

    @Test("after its owner is gone the descriptor is closed: fcntl reports EBADF")
    func descriptorInvalidAfterOwner() throws {
        // A descriptor number can be reused by another test's socket right after the close;
        // the end of the stream on the other end is the proof that does not race, and the
        // EBADF check runs only when the number was not taken again.
        let (owned, other) = try socketPair()
        defer { _ = close(other) }
        do { _ = Socket(adopting: owned) }
        #expect(peerClosed(other))
        if fcntl(owned, F_GETFD) == -1 {
            #expect(errno == EBADF)
        }
    }
}
