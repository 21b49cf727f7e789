import Testing
@testable import Tether

@Suite("Seed codec")
struct SeedCodecTests {
    static let frames: [Frame] = [
        Frame(type: 0x402, serial: 1, payload: Array(#"{"hello":"world"}"#.utf8)),
        Frame(type: 0x1, serial: 7),
        Frame(type: 0x2, serial: 0, payload: [0, 1, 2, 3, 255]),
        Frame(type: 0xFFFF_FFFF, serial: 0xFFFF_FFFF, payload: Array(repeating: 0xAB, count: 300)),
        Frame(type: 0x403, serial: 2, payload: Array("x".utf8)),
    ]

    static var stream: [UInt8] {
        frames.flatMap { seedBytes(type: $0.type, serial: $0.serial, payload: $0.payload) }
    }

    /// Feeds `chunks` one after the other, decoding everything after each, like reads from a socket.
    static func decode(chunks: [ArraySlice<UInt8>], maximum: Int = 16 << 20) throws -> [Frame] {
        var codec = SeedCodec(maximumPayloadLength: maximum)
        var buffer = FrameBuffer()
        var decoded: [Frame] = []
        for chunk in chunks {
            buffer.writeBytes(chunk)
            while let frame = try codec.decode(&buffer) { decoded.append(frame) }
        }
        if let last = try codec.decodeLast(&buffer) { decoded.append(last) }
        return decoded
    }

    @Test("encodes the 12-byte big-endian header then the payload")
    func encodesHeader() throws {
        var buffer = FrameBuffer()
        try SeedCodec().encode(Frame(type: 0x402, serial: 17, payload: [0x7B, 0x7D]), into: &buffer)
        #expect(Array(buffer.readableBytesView) == [0, 0, 0x04, 0x02, 0, 0, 0, 17, 0, 0, 0, 2, 0x7B, 0x7D])
    }

    @Test("round trips every frame")
    func roundTrip() throws {
        #expect(try Self.decode(chunks: [Self.stream[...]]) == Self.frames)
    }

    @Test("one byte at a time yields the same frames")
    func dripFeed() throws {
        let stream = Self.stream
        let chunks = stream.indices.map { stream[$0...$0] }
        #expect(try Self.decode(chunks: chunks) == Self.frames)
    }

    @Test("every single split point of the stream yields the same frames")
    func everySplit() throws {
        let stream = Self.stream
        for cut in 0...stream.count {
            let decoded = try Self.decode(chunks: [stream[..<cut], stream[cut...]])
            #expect(decoded == Self.frames, "split at \(cut)")
        }
    }

    @Test("every pair of split points yields the same frames", arguments: [1, 5, 11, 12, 13, 40])
    func everyPairOfSplits(step: Int) throws {
        let stream = Self.stream
        for first in stride(from: 0, through: stream.count, by: step) {
            for second in stride(from: first, through: stream.count, by: 7) {
                let decoded = try Self.decode(chunks: [stream[..<first], stream[first..<second], stream[second...]])
                #expect(decoded == Self.frames, "splits at \(first) and \(second)")
            }
        }
    }

    @Test("an incomplete frame waits without consuming bytes")
    func waitsForMore() throws {
        var codec = SeedCodec()
        var buffer = FrameBuffer(bytes: seedBytes(type: 0x402, serial: 3, payload: [1, 2, 3]).dropLast())
        #expect(try codec.decode(&buffer) == nil)
        #expect(buffer.readableBytes == 14)
    }

    @Test("a length above the limit is rejected from the header alone, before allocating")
    func oversizeRejectedEarly() throws {
        var codec = SeedCodec()
        // Only the 12-byte header: no payload bytes at all, so the error cannot depend on them.
        var buffer = FrameBuffer(bytes: [0, 0, 0x04, 0x02, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF])
        let capacityBefore = buffer.capacity
        let error = try #require(throws: TetherError.self) { try codec.decode(&buffer) }
        #expect(error.code == .frameTooLarge)
        #expect(error.message == "frame length 4294967295 exceeds the 16 MiB limit")
        #expect(buffer.capacity == capacityBefore)
    }

    @Test("a configured limit is enforced exactly")
    func exactLimit() throws {
        let atLimit = seedBytes(type: 0x402, serial: 1, payload: Array(repeating: 1, count: 1024))
        #expect(try Self.decode(chunks: [atLimit[...]], maximum: 1024).count == 1)
        let over = seedBytes(type: 0x402, serial: 1, payload: Array(repeating: 1, count: 1025))
        let error = try #require(throws: TetherError.self) { try Self.decode(chunks: [over[...]], maximum: 1024) }
        #expect(error.message == "frame length 1025 exceeds the 1 KiB limit")
    }

    @Test("a stream that ends inside a frame is reported as truncated")
    func truncated() throws {
        let stream = Self.stream
        let error = try #require(throws: TetherError.self) {
            try Self.decode(chunks: [stream.dropLast(3)])
        }
        #expect(error.code == .truncatedFrame)
        #expect(error.message == "stream ended inside a frame: 10 bytes of an incomplete frame")
    }

    @Test("encoding refuses a payload above the limit")
    func encodeLimit() throws {
        var buffer = FrameBuffer()
        let error = try #require(throws: TetherError.self) {
            try SeedCodec(maximumPayloadLength: 4).encode(Frame(type: 0x402, payload: [1, 2, 3, 4, 5]), into: &buffer)
        }
        #expect(error.code == .frameTooLarge)
        #expect(buffer.readableBytes == 0)
    }

    @Test("the seed profile classifies types by range")
    func profileRanges() {
        let classify = Profile.seed.classify
        #expect(classify(0x1) == .heartbeat)
        #expect(classify(0x2) == .notification)
        #expect(classify(0x400) == .notification)
        #expect(classify(0x401) == .message)
        #expect(classify(0x402) == .message)
        #expect(classify(0) == .invalid)
    }
}

@Suite("Frame buffer")
struct FrameBufferTests {
    @Test("integers round trip in both byte orders")
    func integers() {
        var buffer = FrameBuffer()
        buffer.writeInteger(UInt16(0x0102))
        buffer.writeInteger(UInt32(0x0304_0506), endianness: .little)
        buffer.writeInteger(UInt64.max)
        #expect(Array(buffer.readableBytesView.prefix(6)) == [1, 2, 6, 5, 4, 3])
        #expect(buffer.readInteger(as: UInt16.self) == 0x0102)
        #expect(buffer.readInteger(as: UInt32.self, endianness: .little) == 0x0304_0506)
        #expect(buffer.readInteger(as: UInt64.self) == .max)
        #expect(buffer.readInteger(as: UInt8.self) == nil)
    }

    @Test("reading past the end consumes nothing")
    func shortRead() {
        var buffer = FrameBuffer(bytes: [1, 2, 3])
        #expect(buffer.readBytes(4) == nil)
        #expect(buffer.readInteger(as: UInt32.self) == nil)
        #expect(buffer.readableBytes == 3)
        #expect(buffer.readBytes(3) == [1, 2, 3])
    }

    @Test("writes after reads compact instead of growing without bound")
    func compacts() {
        var buffer = FrameBuffer(capacity: 64)
        for round in 0..<1000 {
            buffer.writeBytes(Array(repeating: UInt8(round % 256), count: 40))
            #expect(buffer.readBytes(40) == Array(repeating: UInt8(round % 256), count: 40))
        }
        #expect(buffer.capacity <= 128)
    }
}

@Suite("Request table")
struct RequestTableTests {
    @Test("serials wrap past UInt32.max and skip 0")
    func wraps() {
        var table = RequestTable<Int>(firstSerial: UInt32.max - 1)
        #expect(table.allocate().serial == UInt32.max - 1)
        #expect(table.allocate().serial == UInt32.max)
        #expect(table.allocate().serial == 1)
    }

    @Test("serials still in use are skipped, also across the wrap")
    func skipsInUse() {
        var table = RequestTable<Int>(firstSerial: UInt32.max)
        table.insert(serial: 1, entry: .init(waiter: 0, id: 100, type: 0x402))
        table.insert(serial: 2, entry: .init(waiter: 0, id: 101, type: 0x402))
        #expect(table.allocate().serial == UInt32.max)
        #expect(table.allocate().serial == 3)
    }

    @Test("ids are unique, so a late timeout or cancellation cannot end a newer request on the same serial")
    func idsGuardReuse() {
        var table = RequestTable<String>()
        let old = table.allocate()
        table.insert(serial: old.serial, entry: .init(waiter: "old", id: old.id, type: 0x402))
        #expect(table.removeAnswered(serial: old.serial)?.waiter == "old")
        let newer = table.allocate()
        #expect(newer.id != old.id)
        table.insert(serial: old.serial, entry: .init(waiter: "new", id: newer.id, type: 0x402))
        #expect(table.remove(serial: old.serial, id: old.id) == nil)
        #expect(table.count == 1)
        #expect(table.remove(serial: old.serial, id: newer.id)?.waiter == "new")
        #expect(table.isEmpty)
    }

    @Test("a response naming a serial that shares a slot with a waiting request does not end it")
    func slotSharingSerialIsNotAnswered() {
        var table = RequestTable<String>()
        let first = table.allocate()
        table.insert(serial: first.serial, entry: .init(waiter: "first", id: first.id, type: 0x402))
        // Serials a power of two apart share a slot in any table of that size or smaller.
        for shift in [1, 4, 8, 16, 24, 31] as [UInt32] {
            #expect(table.removeAnswered(serial: first.serial &+ (1 << shift)) == nil)
            #expect(!table.contains(serial: first.serial &+ (1 << shift), id: first.id))
        }
        #expect(table.removeAnswered(serial: first.serial)?.waiter == "first")
    }

    @Test("every serial of a short serial space can be in use at once, and a freed one is found")
    func shortSerialSpaceFillsUp() {
        var table = RequestTable<Int>(maximumSerial: 1000)
        var seen = Set<UInt32>()
        for waiter in 0..<999 {
            let (serial, id) = table.allocate()
            #expect(serial >= 1 && serial <= 1000 && seen.insert(serial).inserted)
            table.insert(serial: serial, entry: .init(waiter: waiter, id: id, type: 1))
        }
        #expect(table.count == 999)
        let (last, lastID) = table.allocate()
        #expect(last == 1000)
        table.insert(serial: last, entry: .init(waiter: 999, id: lastID, type: 1))
        #expect(table.removeAnswered(serial: 517)?.waiter == 516)
        #expect(table.allocate().serial == 517)
    }

    @Test("random requests, responses, timeouts, queueing and reconnects agree with a plain dictionary")
    func agreesWithAModel() {
        var generator = BackoffRandom(seed: 0x7E7E)
        for maximumSerial in [UInt32.max, 300, 7] {
            var table = RequestTable<Int>(firstSerial: maximumSerial == .max ? .max - 50 : 1, maximumSerial: maximumSerial)
            // serial -> (id, queued)
            var model: [UInt32: (id: UInt64, queued: Bool)] = [:]
            var queue: [(serial: UInt32, id: UInt64)] = []
            let limit = min(Int(maximumSerial) - 1, 200)
            for step in 0..<5_000 {
                let roll = Int.random(in: 0..<100, using: &generator)
                if roll < 45, model.count < limit {
                    let (serial, id) = table.allocate()
                    #expect(serial != 0 && serial <= maximumSerial && model[serial] == nil, "step \(step)")
                    let queued = roll < 10
                    table.insert(serial: serial, entry: .init(waiter: step, id: id, type: 1), pending: queued ? Frame(type: 1, serial: serial) : nil)
                    model[serial] = (id, queued)
                    if queued { queue.append((serial, id)) }
                } else if roll < 80, let serial = model.keys.sorted().randomElement(using: &generator) {
                    // A response for a waiting serial, and one for a serial sharing its slot.
                    let answered = table.removeAnswered(serial: serial)
                    #expect((answered != nil) == !model[serial]!.queued, "step \(step)")
                    if answered != nil { model[serial] = nil }
                    if model[serial &+ 0x1_0000] == nil {
                        #expect(table.removeAnswered(serial: serial &+ 0x1_0000) == nil, "step \(step)")
                    }
                } else if roll < 92, let serial = model.keys.sorted().randomElement(using: &generator) {
                    let id = model[serial]!.id
                    #expect(table.remove(serial: serial, id: id &+ 1) == nil)
                    #expect(table.remove(serial: serial, id: id)?.id == id, "step \(step)")
                    model[serial] = nil
                } else if roll < 98 {
                    let dequeued = table.dequeue()
                    while let next = queue.first, model[next.serial]?.id != next.id || model[next.serial]?.queued != true {
                        queue.removeFirst()
                    }
                    #expect(dequeued?.serial == queue.first?.serial, "step \(step)")
                    if let next = queue.first {
                        queue.removeFirst()
                        model[next.serial]!.queued = false
                    }
                } else {
                    let lost = table.removeInFlight()
                    let expected = model.filter { !$0.value.queued }.keys.sorted()
                    #expect(lost.map(\.serial) == expected, "step \(step)")
                    for serial in expected { model[serial] = nil }
                }
                #expect(table.count == model.count && table.queuedCount == model.values.filter(\.queued).count, "step \(step)")
            }
            #expect(table.removeAll().map(\.serial) == model.keys.sorted())
            #expect(table.isEmpty)
        }
    }
}

@Suite("Heartbeat state machine")
struct HeartbeatStateMachineTests {
    let ms: UInt64 = 1_000_000

    @Test("while an ack is awaited the next tick is the miss, never a time already past")
    func nextTickWhileWaiting() {
        var machine = HeartbeatStateMachine(interval: .milliseconds(20), timeout: .seconds(3), maximumMissed: 3)
        #expect(machine.tick(now: 0) == [.send(serial: 1)])
        #expect(machine.nextTick(after: 0) == 3000 * ms)
        #expect(machine.tick(now: 20 * ms) == [])
        #expect(machine.nextTick(after: 20 * ms) == 3000 * ms)
        #expect(machine.ack(serial: 1, now: 25 * ms) == 25 * ms)
        #expect(machine.nextTick(after: 25 * ms) == 25 * ms, "the next send is already due")
        #expect(machine.tick(now: 25 * ms) == [.send(serial: 2)])
    }

    @Test("sends at the interval and reports round-trip times")
    func acks() {
        var machine = HeartbeatStateMachine(interval: .milliseconds(100), timeout: .milliseconds(50), maximumMissed: 3)
        #expect(machine.tick(now: 0) == [.send(serial: 1)])
        #expect(machine.nextTick(after: 0) == 50 * ms)
        #expect(machine.ack(serial: 1, now: 7 * ms) == 7 * ms)
        #expect(machine.nextTick(after: 7 * ms) == 100 * ms)
        #expect(machine.tick(now: 50 * ms) == [])
        #expect(machine.tick(now: 100 * ms) == [.send(serial: 2)])
        #expect(machine.ack(serial: 1, now: 101 * ms) == nil, "an old serial is not an ack")
    }

    @Test("misses in a row give up; an ack resets the count")
    func misses() {
        var machine = HeartbeatStateMachine(interval: .milliseconds(100), timeout: .milliseconds(50), maximumMissed: 2)
        #expect(machine.tick(now: 0) == [.send(serial: 1)])
        #expect(machine.tick(now: 50 * ms) == [.missed(serial: 1)])
        #expect(machine.tick(now: 100 * ms) == [.send(serial: 2)])
        #expect(machine.ack(serial: 2, now: 110 * ms) == 10 * ms)
        #expect(machine.tick(now: 200 * ms) == [.send(serial: 3)])
        #expect(machine.tick(now: 250 * ms) == [.missed(serial: 3)])
        #expect(machine.tick(now: 300 * ms) == [.send(serial: 4)])
        #expect(machine.tick(now: 350 * ms) == [.missedAndGiveUp(serial: 4, misses: 2)])
    }

    @Test("a timeout longer than the interval delays the next heartbeat until the miss")
    func longTimeout() {
        var machine = HeartbeatStateMachine(interval: .milliseconds(10), timeout: .milliseconds(30), maximumMissed: 5)
        #expect(machine.tick(now: 0) == [.send(serial: 1)])
        #expect(machine.tick(now: 10 * ms) == [])
        #expect(machine.tick(now: 30 * ms) == [.missed(serial: 1), .send(serial: 2)])
    }

    @Test("queued requests leave in order, skip those that ended while queued, and are never answered")
    func queueOrder() {
        var table = RequestTable<String>()
        var ids: [UInt32: UInt64] = [:]
        for name in ["a", "b", "c", "d"] {
            let (serial, id) = table.allocate()
            ids[serial] = id
            table.insert(serial: serial, entry: .init(waiter: name, id: id, type: 0x402), pending: Frame(type: 0x402, serial: serial))
        }
        #expect(table.queuedCount == 4)
        #expect(table.inFlightCount == 0)
        // A response naming a serial that was never written is bogus.
        #expect(table.removeAnswered(serial: 1) == nil)
        // "b" times out while queued.
        #expect(table.remove(serial: 2, id: ids[2]!)?.waiter == "b")
        #expect(table.dequeue()?.serial == 1)
        #expect(table.dequeue()?.serial == 3)
        #expect(table.inFlightCount == 2)
        #expect(table.queuedCount == 1)
        #expect(table.removeAnswered(serial: 3)?.waiter == "c")
        // A lost connection fails what is in flight; the queued request stays.
        let lost = table.removeInFlight()
        #expect(lost.map(\.serial) == [1])
        #expect(table.queuedCount == 1)
        #expect(table.dequeue()?.frame.serial == 4)
        #expect(table.dequeue() == nil)
        #expect(table.removeAll().map(\.entry.waiter) == ["d"])
        #expect(table.inFlightCount == 0 && table.queuedCount == 0)
    }

    @Test("requests that end while queued do not pile up in the queue order")
    func queueCompacts() {
        var table = RequestTable<Int>()
        for round in 0..<10_000 {
            let (serial, id) = table.allocate()
            table.insert(serial: serial, entry: .init(waiter: round, id: id, type: 0x402), pending: Frame(type: 0x402, serial: serial))
            #expect(table.remove(serial: serial, id: id)?.waiter == round)
        }
        #expect(table.queuedCount == 0)
        #expect(table.dequeue() == nil)
        #expect(table.count == 0)
    }
}

