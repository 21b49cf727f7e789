import Tether
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What the reader of a ``DatagramSocket`` gets next.
enum DatagramEvent: Sendable {
    case datagram(Datagram)
    case failure(TetherError)
    /// The socket closed: the sequence ends.
    case end
}

/// The received datagrams held for the reader, bounded, with the tasks waiting for one.
///
/// A pure value: the socket's lock guards it, and what it returns says which waiter to
/// resume with what, so nothing is resumed while the lock is held.
struct DatagramInbox {
    /// Datagrams held, oldest first, from `head`.
    private var held: [Datagram] = []
    private var head = 0
    /// A receive error and how many held datagrams come before it; one at a time, the first
    /// kept, so a peer cannot make the socket hold more than one.
    private var failure: (error: TetherError, after: Int)?
    /// Tasks waiting in `next()`, first come first served. Non-empty only while nothing is
    /// held and no failure waits.
    private var waiters: [(id: UInt64, continuation: CheckedContinuation<DatagramEvent, Never>)] = []
    private var nextWaiterID: UInt64 = 0
    /// Tasks waiting for the socket to have read a number of datagrams, for tests.
    private var readWaiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    let capacity: Int
    private(set) var isClosed = false
    /// Datagrams read from the kernel: delivered, held, dropped and truncated alike.
    private(set) var readCount = 0
    private(set) var droppedCount = 0
    private(set) var truncatedCount = 0
    /// Receive failures passed over because one was already waiting for the reader.
    private(set) var droppedFailures = 0

    init(capacity: Int) {
        self.capacity = capacity
    }

    var heldCount: Int { held.count - head }

    /// A resumption to carry out once the lock is released.
    struct Resume {
        var waiter: CheckedContinuation<DatagramEvent, Never>?
        var event: DatagramEvent = .end
        var readWaiters: [CheckedContinuation<Void, Never>] = []

        func run() {
            waiter?.resume(returning: event)
            for waiter in readWaiters { waiter.resume() }
        }
    }

    /// A datagram arrived: handed to the first waiter, held, or dropped when `capacity` are held.
    mutating func arrived(_ datagram: Datagram) -> Resume {
        readCount += 1
        var resume = Resume(readWaiters: takeReadWaiters())
        if isClosed { return resume }
        if !waiters.isEmpty {
            resume.waiter = waiters.removeFirst().continuation
            resume.event = .datagram(datagram)
        } else if heldCount < capacity {
            held.append(datagram)
        } else {
            droppedCount += 1
        }
        return resume
    }

    /// A datagram arrived cut by the kernel: counted and dropped.
    mutating func arrivedTruncated() -> Resume {
        readCount += 1
        truncatedCount += 1
        return Resume(readWaiters: takeReadWaiters())
    }

    /// The socket reported an error: handed to the first waiter, or kept for the reader
    /// after the datagrams held now.
    mutating func failed(_ error: TetherError) -> Resume {
        var resume = Resume()
        if isClosed { return resume }
        if !waiters.isEmpty {
            resume.waiter = waiters.removeFirst().continuation
            resume.event = .failure(error)
        } else if failure == nil {
            failure = (error, heldCount)
        } else {
            droppedFailures += 1
        }
        return resume
    }

    /// The next event if there is one now: a held datagram, a failure whose turn it is, or
    /// the end once closed; `nil` when the reader must wait.
    mutating func take() -> DatagramEvent? {
        if isClosed { return .end }
        if let pending = failure, pending.after == 0 {
            failure = nil
            return .failure(pending.error)
        }
        guard heldCount > 0 else { return nil }
        let datagram = held[head]
        head += 1
        if head == held.count {
            held.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 && head * 2 >= held.count {
            held.removeFirst(head)
            head = 0
        }
        if let pending = failure { failure = (pending.error, pending.after - 1) }
        return .datagram(datagram)
    }

    /// Takes the next event, or registers `continuation` to get the next one.
    ///
    /// - Returns: The waiter's id, to cancel it with, or `nil` when the event is in
    ///   `resume` already.
    mutating func wait(_ continuation: CheckedContinuation<DatagramEvent, Never>, resume: inout Resume) -> UInt64? {
        if let event = take() {
            resume.waiter = continuation
            resume.event = event
            return nil
        }
        let id = nextWaiterID
        nextWaiterID += 1
        waiters.append((id, continuation))
        return id
    }

    /// Removes a waiting task whose `next()` was cancelled: it ends with the end of the sequence.
    mutating func cancel(_ id: UInt64) -> Resume {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return Resume() }
        return Resume(waiter: waiters.remove(at: index).continuation, event: .end)
    }

    /// Registers a wait until `count` datagrams were read from the kernel, for tests.
    mutating func waitForReads(_ count: Int, _ continuation: CheckedContinuation<Void, Never>) -> Resume {
        if readCount >= count || isClosed { return Resume(readWaiters: [continuation]) }
        readWaiters.append((count, continuation))
        return Resume()
    }

    private mutating func takeReadWaiters() -> [CheckedContinuation<Void, Never>] {
        guard !readWaiters.isEmpty else { return [] }
        let due = readWaiters.filter { $0.count <= readCount }.map(\.continuation)
        readWaiters.removeAll { $0.count <= readCount }
        return due
    }

    /// Closes: drops what is held and ends every wait.
    ///
    /// - Returns: The waiters to resume with the end.
    mutating func close() -> [CheckedContinuation<DatagramEvent, Never>]? {
        guard !isClosed else { return nil }
        isClosed = true
        held.removeAll()
        head = 0
        failure = nil
        defer {
            waiters.removeAll()
        }
        return waiters.map(\.continuation)
    }

    /// The tasks waiting for reads, resumed when the socket closes.
    mutating func takeAllReadWaiters() -> [CheckedContinuation<Void, Never>] {
        defer { readWaiters.removeAll() }
        return readWaiters.map(\.continuation)
    }
}
