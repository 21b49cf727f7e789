extension Profile.Correlation {
    /// The line a frame of `type` waits in when responses are matched in order: its type, or
    /// one line (0) for all; `nil` when responses are matched by serial.
    func key(for type: UInt32) -> UInt32? {
        switch self {
        case .bySerial: nil
        case .inOrderPerType: type
        case .inOrder: 0
        }
    }
}

/// For profiles whose wire has no serial (``Profile/Correlation/inOrderPerType`` and
/// ``Profile/Correlation/inOrder``): the serials of the requests written and not yet
/// answered, oldest first, per key (the type, or one key for all).
///
/// A request that times out or is cancelled keeps its place: its response, when it comes,
/// is consumed by that place and dropped as late, so it cannot be taken for the answer to a
/// later request.
struct InOrderReplies {
    private struct Queue {
        var serials: [UInt32] = []
        var head = 0
    }

    private var queues: [UInt32: Queue] = [:]

    /// A request with `serial` was written under `key`.
    mutating func sent(serial: UInt32, key: UInt32) {
        queues[key, default: Queue()].serials.append(serial)
    }

    /// A response arrived under `key`: the serial of the oldest request it answers, or `nil`
    /// when no request waits under that key.
    mutating func answer(key: UInt32) -> UInt32? {
        guard var queue = queues[key], queue.head < queue.serials.count else { return nil }
        let serial = queue.serials[queue.head]
        queue.head += 1
        if queue.head == queue.serials.count {
            queues[key] = nil
        } else {
            if queue.head >= 64, queue.head * 2 >= queue.serials.count {
                queue.serials.removeFirst(queue.head)
                queue.head = 0
            }
            queues[key] = queue
        }
        return serial
    }

    /// The connection broke: nothing written on it will be answered.
    mutating func removeAll() {
        queues.removeAll()
    }
}

/// On a server, for profiles whose wire has no serial: numbers the requests of each key as
/// they arrive, and holds back a response until those of every earlier request under the
/// same key are written, so the client can match them in order.
struct ResponseSequencer {
    private var assigned: [UInt32: UInt32] = [:]
    private var due: [UInt32: UInt32] = [:]
    private var ready: [UInt64: Frame] = [:]

    /// The number of the request arriving under `key`: 1, 2, 3… (never 0, wrapping).
    mutating func assign(key: UInt32) -> UInt32 {
        let last = assigned[key] ?? 0
        let number = last == .max ? 1 : last + 1
        assigned[key] = number
        return number
    }

    /// The response to request `number` under `key` is ready: returns the frames that may be
    /// written now, in order (none while an earlier response is still missing).
    mutating func complete(key: UInt32, number: UInt32, frame: Frame) -> [Frame] {
        var expected = due[key] ?? 1
        guard number == expected else {
            ready[UInt64(key) << 32 | UInt64(number)] = frame
            return []
        }
        var frames = [frame]
        expected = expected == .max ? 1 : expected + 1
        while let next = ready.removeValue(forKey: UInt64(key) << 32 | UInt64(expected)) {
            frames.append(next)
            expected = expected == .max ? 1 : expected + 1
        }
        due[key] = expected
        return frames
    }

    /// Responses held back, waiting for an earlier one.
    var heldBack: Int { ready.count }
}
