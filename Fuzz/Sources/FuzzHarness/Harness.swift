// The decoder fuzzing harness: one input through one profile's codec, with the invariants
// every codec must keep. Shared, as this one file, by the libFuzzer target `tether-fuzz`
// (Fuzz package, module FuzzHarness) and by the root package's FuzzRegressionTests,
// which compile it through the symlink Tests/TetherTests/Support/FuzzHarness.swift.
// It therefore imports nothing but Tether and the standard library.
public import Tether

/// An invariant a codec broke on a fuzz input: a bug, unlike a thrown decode error.
///
/// The fuzz target turns it into a trap (a crash libFuzzer saves as a reproducer); the
/// regression tests report it as a failure.
public struct FuzzViolation: Error, Sendable, CustomStringConvertible {
    /// The profile whose codec broke the invariant.
    public var profile: String
    /// Which invariant, and the frames or bytes involved.
    public var message: String

    public var description: String { "profile \(profile): \(message)" }
}

/// What decoding one input produced: the frames, then the error that stopped the decoder, if any.
public struct FuzzOutcome: Sendable, Equatable {
    /// The frames decoded, in order.
    public var frames: [Frame]
    /// The error `decode` or `decodeLast` threw, ending the stream; `nil` when it ended cleanly.
    public var error: TetherError?
}

/// Runs fuzz inputs through a profile's codec and checks its invariants.
///
/// An input's first byte seeds the chunking; the rest is the byte stream. The stream is
/// decoded twice, each time with a fresh codec:
///
/// - fed in chunks of pseudo-random sizes (from the seed byte), calling `decode` after each
///   chunk until it returns `nil`, as a connection does with socket reads;
/// - fed all at once.
///
/// Each run stops at the first thrown error, which is allowed: malformed input may throw.
/// Otherwise it ends with `decodeLast` until that returns `nil`. The invariants:
///
/// 1. `decode` returning `nil` consumes nothing, and returning a frame consumes at least
///    one byte (otherwise a connection's decode loop would never end);
/// 2. both runs give the same frames and both throw or neither does;
/// 3. every decoded frame that the profile can encode (encode may throw) encodes, with a
///    fresh codec, to bytes that decode to the same frame: the same type, serial, payload and
///    fields, a verified checksum where the profile carries one, and nothing skipped. (What
///    the first decode said of the wire, a failed checksum or bytes skipped before the frame,
///    is not part of the frame's content: encoding writes a fresh checksum and no garbage.)
public enum FuzzHarness {
    /// The payload limit the codecs are made with: small enough that inputs can declare
    /// lengths above it, large enough for any frame an input of `-max_len` bytes holds.
    public static let maximumPayloadLength = 1 << 20

    /// Parses one input as JSON text, checking that a value it parses to is written as text
    /// that parses back to the same value, and that writing that value again gives the same
    /// bytes. Anything may be refused.
    ///
    /// - Parameter input: A fuzz input, taken whole as JSON text.
    /// - Returns: Whether the input parsed.
    /// - Throws: ``FuzzViolation`` (profile `json`) when an invariant is broken.
    @discardableResult
    public static func runJSON(_ input: [UInt8]) throws(FuzzViolation) -> Bool {
        guard let value = try? JSONValue(parsing: input) else { return false }
        let text = value.encoded
        guard let again = try? JSONValue(parsing: text) else {
            throw FuzzViolation(profile: "json", message: "written text does not parse: \(String(decoding: text, as: UTF8.self))")
        }
        guard again == value else {
            throw FuzzViolation(profile: "json", message: "\(value) came back as \(again)")
        }
        guard again.encoded == text else {
            throw FuzzViolation(profile: "json", message: "writing is not stable: \(String(decoding: text, as: UTF8.self))")
        }
        return true
    }

    /// Decodes one input with `profile`'s codec, checking the invariants.
    ///
    /// - Parameters:
    ///   - input: A fuzz input: a chunking seed byte, then the stream. Empty is allowed.
    ///   - profile: The profile whose codec to test.
    /// - Returns: What the stream decoded to.
    /// - Throws: ``FuzzViolation`` when the codec breaks an invariant.
    @discardableResult
    public static func run(_ input: [UInt8], profile: Profile) throws(FuzzViolation) -> FuzzOutcome {
        guard let seed = input.first else { return FuzzOutcome(frames: [], error: nil) }
        let stream = input[1...]

        var chunked = CheckedDecoder(profile: profile, stage: "chunked feed")
        var sizes = ChunkSizes(seed: seed)
        var offset = stream.startIndex
        while offset < stream.endIndex, chunked.error == nil {
            let end = min(offset + sizes.next(), stream.endIndex)
            try chunked.feed(stream[offset..<end])
            offset = end
        }
        try chunked.finish()

        var whole = CheckedDecoder(profile: profile, stage: "all-at-once feed")
        try whole.feed(stream)
        try whole.finish()

        if chunked.frames != whole.frames {
            let index = zip(chunked.frames, whole.frames).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                ?? min(chunked.frames.count, whole.frames.count)
            throw FuzzViolation(
                profile: profile.name,
                message: """
                    fed in chunks of at most \(sizes.limit) bytes the stream decodes to \
                    \(chunked.frames.count) frames, fed at once to \(whole.frames.count); \
                    they differ from frame \(index): \
                    \(describe(chunked.frames, at: index)) vs \(describe(whole.frames, at: index)) \
                    (errors: \(describe(chunked.error)) vs \(describe(whole.error)))
                    """
            )
        }
        if (chunked.error == nil) != (whole.error == nil) {
            throw FuzzViolation(
                profile: profile.name,
                message: """
                    after the same \(whole.frames.count) frames the chunked feed (chunks of at \
                    most \(sizes.limit) bytes) ended with \(describe(chunked.error)), \
                    the all-at-once feed with \(describe(whole.error))
                    """
            )
        }

        for frame in whole.frames {
            try checkRoundTrip(frame, profile: profile)
        }
        return FuzzOutcome(frames: whole.frames, error: whole.error)
    }

    /// Encodes `frame` with a fresh codec and decodes the bytes all at once with another.
    /// The built-in profiles whose frames carry a checksum: a frame they decode is verified.
    static let checksummed: Set<String> = [Profile.seedExtended.name, Profile.marker.name]

    static func checkRoundTrip(_ frame: Frame, profile: Profile) throws(FuzzViolation) {
        var encoded = FrameBuffer()
        do {
            try profile.makeCodec(maximumPayloadLength).encode(frame, into: &encoded)
        } catch {
            return  // a frame the format cannot express: not a bug
        }
        let bytes = encoded.readableBytesView
        var decoder = CheckedDecoder(profile: profile, stage: "decoding a re-encoded frame")
        try decoder.feed(bytes)
        try decoder.finish()
        let integrity: FrameIntegrity = checksummed.contains(profile.name) ? .verified : .unchecked
        guard decoder.error == nil, decoder.frames.count == 1, let back = decoder.frames.first,
              back.type == frame.type, back.serial == frame.serial, back.payload == frame.payload,
              back.fields == frame.fields, back.integrity == integrity, back.skippedBytes == 0
        else {
            throw FuzzViolation(
                profile: profile.name,
                message: """
                    \(describe(frame)) encodes to \(bytes.count) bytes \(describe(bytes)) that \
                    decode to \(decoder.frames.count) frames \
                    [\(decoder.frames.map(describe).joined(separator: "; "))] \
                    then \(describe(decoder.error))
                    """
            )
        }
    }

    /// A fresh codec and buffer that check every `decode` and `decodeLast` call.
    struct CheckedDecoder {
        let profile: String
        let stage: String
        var codec: any FrameCodec
        var buffer = FrameBuffer()
        var frames: [Frame] = []
        /// The error that ended decoding; nothing more is decoded once it is set.
        var error: TetherError?

        init(profile: Profile, stage: String) {
            self.profile = profile.name
            self.stage = stage
            self.codec = profile.makeCodec(FuzzHarness.maximumPayloadLength)
        }

        /// Appends `bytes` and decodes until `decode` returns `nil` or throws.
        mutating func feed(_ bytes: ArraySlice<UInt8>) throws(FuzzViolation) {
            guard error == nil else { return }
            buffer.writeBytes(bytes)
            try drain(last: false)
        }

        /// The end of the stream: `decodeLast` until it returns `nil` or throws.
        mutating func finish() throws(FuzzViolation) {
            try drain(last: true)
        }

        private mutating func drain(last: Bool) throws(FuzzViolation) {
            let call = last ? "decodeLast" : "decode"
            while error == nil {
                let before = buffer.readableBytes
                let frame: Frame?
                do {
                    frame = last ? try codec.decodeLast(&buffer) : try codec.decode(&buffer)
                } catch {
                    self.error = error
                    return
                }
                let consumed = before - buffer.readableBytes
                guard let frame else {
                    // decodeLast may drop what is left (a trailing separator, say): only
                    // decode promises to leave the buffer alone.
                    if !last, consumed != 0 {
                        throw violation("decode returned nil but consumed \(consumed) of \(before) bytes")
                    }
                    return
                }
                if consumed <= 0 {
                    throw violation(
                        "\(call) returned \(FuzzHarness.describe(frame)) but consumed \(consumed) of \(before) bytes, so a decode loop would never end"
                    )
                }
                frames.append(frame)
            }
        }

        private func violation(_ message: String) -> FuzzViolation {
            FuzzViolation(profile: profile, message: "\(stage), after \(frames.count) frames: \(message)")
        }
    }

    /// Chunk sizes for one input: `1...limit`, pseudo-random (SplitMix64) from the seed byte,
    /// whose low three bits pick `limit`, from one byte at a time up to 4 KiB reads.
    struct ChunkSizes {
        static let limits = [1, 2, 3, 5, 16, 64, 512, 4096]
        let limit: Int
        private var state: UInt64

        init(seed: UInt8) {
            limit = Self.limits[Int(seed & 7)]
            state = UInt64(seed) &* 0xA076_1D64_78BD_642F
        }

        mutating func next() -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            return 1 + Int(z % UInt64(limit))
        }
    }

    // MARK: Messages (built only once an invariant is broken)

    /// Every stored property of `frame`, so a difference shows even in properties the
    /// frame's description leaves out; long payloads are cut short.
    static func describe(_ frame: Frame) -> String {
        var text = ""
        dump(frame, to: &text, maxDepth: 3, maxItems: 40)
        return text.split(separator: "\n").map { $0.trimmingPrefix(while: \.isWhitespace) }.joined(separator: " ")
    }

    static func describe(_ frames: [Frame], at index: Int) -> String {
        index < frames.count ? describe(frames[index]) : "(no frame)"
    }

    static func describe(_ error: TetherError?) -> String {
        guard let error else { return "no error" }
        return "\(error.code) error \"\(error.message)\""
    }

    static func describe(_ bytes: ArraySlice<UInt8>) -> String {
        let shown = bytes.prefix(64).map { byte in
            let digits = String(byte, radix: 16)
            return byte < 16 ? "0" + digits : digits
        }
        return "[" + shown.joined(separator: " ") + (bytes.count > 64 ? " …" : "") + "]"
    }
}
