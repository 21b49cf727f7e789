// bench-codec: decode and encode throughput of every built-in profile's codec, in process,
// with SwiftNIO's ByteBuffer parsing the seed format beside it for reference.
//
//   bench-codec [--sizes 64,1024,16384] [--stream-bytes N] [--repeat R] [--min-seconds S]
//
// Each case decodes a stream of frames (about --stream-bytes of wire bytes) from one buffer
// again and again for at least --min-seconds, and reports the median of --repeat runs as MB/s
// of wire bytes and frames/s. Payloads are JSON text, so the compact profile compresses them.
import BenchCore
import NIOCore
import Tether

struct Options {
    var sizes = [64, 1024, 16384]
    var streamBytes = 4 << 20
    var repeats = 5
    var minimumSeconds = 0.3

    init() {
        var arguments = CommandLine.arguments.dropFirst().makeIterator()
        while let argument = arguments.next() {
            guard let value = arguments.next() else { fatalError("\(argument) needs a value") }
            switch argument {
            case "--sizes": sizes = value.split(separator: ",").compactMap { Int($0) }
            case "--stream-bytes": streamBytes = Int(value)!
            case "--repeat": repeats = Int(value)!
            case "--min-seconds": minimumSeconds = Double(value)!
            default: fatalError("unknown option \(argument)")
            }
        }
    }
}

/// A JSON payload of exactly `size` bytes, with some variety so compression is realistic.
func payload(size: Int, index: Int) -> [UInt8] {
    let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"].map { Array($0.utf8) }
    var bytes = Array(#"{"id":\#(index),"text":""#.utf8)
    var word = UInt(index)
    while bytes.count < size - 2 {
        bytes += words[Int(word % UInt(words.count))]
        bytes.append(UInt8(ascii: " "))
        word = word &* 31 &+ 7
    }
    return Array(bytes.prefix(size - 2)) + Array(#""}"#.utf8)
}

struct Measurement {
    var megabytesPerSecond: Double
    var framesPerSecond: Double
}

/// Runs `body` (one pass over the stream) until `minimumSeconds` pass; returns the rate.
func measure(bytes: Int, frames: Int, minimumSeconds: Double, _ body: () -> Int) -> Measurement {
    precondition(body() == frames, "decoded the wrong number of frames")
    var passes = 0
    let start = monotonicNanoseconds()
    var elapsed = 0.0
    repeat {
        let decoded = body()
        precondition(decoded == frames)
        passes += 1
        elapsed = Double(monotonicNanoseconds() - start) / 1e9
    } while elapsed < minimumSeconds
    return Measurement(
        megabytesPerSecond: Double(bytes * passes) / elapsed / 1e6,
        framesPerSecond: Double(frames * passes) / elapsed
    )
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

let options = Options()
var cases: [(name: String, profile: Profile)] = Profile.builtIn.map { ($0.name, $0) }
let seedLayout = try! Profile(name: "seed (layout)", layout: .header([.type(), .serial(), .length()]), heartbeatType: 0x1, classify: Profile.seedKind(of:))
cases.insert(("seed (layout)", seedLayout), at: 1)

print("| profile | payload | decode MB/s (wire) | decode MB/s (payload) | decode frames/s | encode MB/s (payload) | wire bytes per frame |")
print("|---|---|---|---|---|---|---|")
for size in options.sizes {
    for (name, profile) in cases {
        let type: UInt32 = profile.classify(0x402) == .message ? 0x402 : 0x401
        let codec = profile.makeCodec(16 << 20)
        var frames: [Frame] = []
        var stream = FrameBuffer()
        var index = 0
        while stream.readableBytes < options.streamBytes {
            let frame = Frame(type: type, serial: UInt32(index + 1), payload: payload(size: size, index: index))
            do {
                try codec.encode(frame, into: &stream)
            } catch {
                fatalError("\(name): \(error)")
            }
            frames.append(frame)
            index += 1
        }
        let wire = Array(stream.readableBytesView)
        var decodeRuns: [Measurement] = []
        var encodeRuns: [Measurement] = []
        for _ in 0..<options.repeats {
            decodeRuns.append(measure(bytes: wire.count, frames: frames.count, minimumSeconds: options.minimumSeconds) {
                var decoder = profile.makeCodec(16 << 20)
                var buffer = FrameBuffer(bytes: wire)
                var count = 0
                while let frame = try! decoder.decode(&buffer) {
                    count += frame.payload.isEmpty ? 0 : 1
                }
                return count
            })
            encodeRuns.append(measure(bytes: wire.count, frames: frames.count, minimumSeconds: options.minimumSeconds) {
                var buffer = FrameBuffer(capacity: wire.count)
                for frame in frames { try! codec.encode(frame, into: &buffer) }
                return frames.count
            })
        }
        let decode = median(decodeRuns.map(\.megabytesPerSecond))
        let rate = median(decodeRuns.map(\.framesPerSecond))
        let encode = median(encodeRuns.map(\.megabytesPerSecond))
        let payloadShare = Double(size * frames.count) / Double(wire.count)
        print("| \(name) | \(size) B | \(Int(decode)) | \(Int(decode * payloadShare)) | \(Int(rate)) | \(Int(encode * payloadShare)) | \(wire.count / frames.count) |")
    }
    // SwiftNIO's ByteBuffer reading the same seed stream the way SeedFrameDecoder does
    // (header, length check, then the payload), without a channel pipeline.
    var frames = 0
    var seed = FrameBuffer()
    let seedCodec = Profile.seed.makeCodec(16 << 20)
    while seed.readableBytes < options.streamBytes {
        try! seedCodec.encode(Frame(type: 0x402, serial: UInt32(frames + 1), payload: payload(size: size, index: frames)), into: &seed)
        frames += 1
    }
    let wire = ByteBuffer(bytes: Array(seed.readableBytesView))
    let runs = (0..<options.repeats).map { _ in
        measure(bytes: wire.readableBytes, frames: frames, minimumSeconds: options.minimumSeconds) {
            var buffer = wire
            var count = 0
            while let (_, _, length) = buffer.getMultipleIntegers(at: buffer.readerIndex, as: (UInt32, UInt32, UInt32).self),
                  buffer.readableBytes >= 12 + Int(length) {
                precondition(Int(length) <= 16 << 20)
                buffer.moveReaderIndex(forwardBy: 12)
                // Copied out as [UInt8], as Tether hands payloads on: a slice alone
                // costs nothing and would measure nothing.
                let payload = buffer.readBytes(length: Int(length))!
                count += payload.isEmpty ? 0 : 1
            }
            return count
        }
    }
    let nio = median(runs.map(\.megabytesPerSecond))
    let nioShare = Double(size * frames) / Double(wire.readableBytes)
    print("| NIO ByteBuffer (seed) | \(size) B | \(Int(nio)) | \(Int(nio * nioShare)) | \(Int(median(runs.map(\.framesPerSecond)))) | – | \(wire.readableBytes / frames) |")
}
