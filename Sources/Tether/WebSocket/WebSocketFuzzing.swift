/// The WebSocket frame reader under a fuzzer: one input through both roles, with the
/// invariants the reader must keep. Not part of the API (`@_spi(Fuzzing)`).
@_spi(Fuzzing)
public enum WebSocketFuzzing {
    /// The message bound the fuzzer runs with: small, so that inputs can cross it.
    public static let maximumMessageSize = 512

    /// Seed inputs for the corpus: each kind of frame, masked and not, fragments with a
    /// control frame between them, the 16- and 64-bit length forms, a text message, and a
    /// message one byte over the bound.
    ///
    /// - Returns: Named inputs.
    public static func seeds() -> [(name: String, bytes: [UInt8])] {
        func frames(_ body: (inout FrameBuffer) -> Void) -> [UInt8] {
            var buffer = FrameBuffer()
            body(&buffer)
            return Array(buffer.readableBytesView)
        }
        let request: [UInt8] = [0, 0, 4, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0x7B, 0x7D]
        return [
            ("binary-masked", frames { WebSocketWriter.write(.binary, request, maskKey: 0x1122_3344, into: &$0) }),
            ("binary-plain", frames { WebSocketWriter.write(.binary, request, maskKey: nil, into: &$0) }),
            ("fragments", frames {
                WebSocketWriter.write(.binary, [1, 2, 3], fin: false, maskKey: 1, into: &$0)
                WebSocketWriter.write(.ping, [9], maskKey: 2, into: &$0)
                WebSocketWriter.write(.continuation, [4, 5, 6], maskKey: 3, into: &$0)
            }),
            ("close", frames { WebSocketWriter.write(.close, WebSocketWriter.closePayload(code: 1000, reason: "bye"), maskKey: 5, into: &$0) }),
            ("ping-pong", frames {
                WebSocketWriter.write(.ping, [1, 2], maskKey: nil, into: &$0)
                WebSocketWriter.write(.pong, [3, 4], maskKey: nil, into: &$0)
            }),
            ("length-16", frames { WebSocketWriter.write(.binary, [UInt8](repeating: 7, count: 300), maskKey: 7, into: &$0) }),
            ("length-64", [0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 3, 4]),
            ("text", frames { WebSocketWriter.write(.text, Array("hi".utf8), maskKey: 9, into: &$0) }),
            ("over-bound", frames { WebSocketWriter.write(.binary, [UInt8](repeating: 1, count: maximumMessageSize + 1), maskKey: nil, into: &$0) }),
        ]
    }

    /// Reads `input` as a server and as a client would, and checks that the reader never
    /// takes more than it was given, never lets a message exceed the bound, fails only with
    /// the close codes it may send, and reads its own writer's frames back to the same data
    /// and control frames.
    ///
    /// - Parameter input: The fuzzer's bytes.
    /// - Returns: A description of a broken invariant, or `nil` when every one held.
    public static func check(_ input: [UInt8]) -> String? {
        for server in [true, false] {
            var reader = WebSocketReader(expectsMasked: server, maximumMessageSize: maximumMessageSize)
            var buffer = FrameBuffer(bytes: input)
            var data = FrameBuffer()
            var events: [WebSocketEvent] = []
            var message = 0
            do {
                while let event = try reader.next(&buffer, data: &data) {
                    events.append(event)
                    if case .data(let count) = event {
                        message += count
                        if message > maximumMessageSize { return "a message of \(message) bytes passed the bound of \(maximumMessageSize)" }
                        if !reader.isInsideMessage { message = 0 }
                    }
                }
            } catch {
                guard [1002, 1003, 1007, 1009].contains(error.code) else { return "failed with close code \(error.code)" }
            }
            if data.readableBytes + buffer.readableBytes > input.count {
                return "read \(data.readableBytes) data bytes and left \(buffer.readableBytes) of \(input.count)"
            }
            let total = events.reduce(0) { sum, event in if case .data(let count) = event { return sum + count } else { return sum } }
            if total != data.readableBytes { return "events count \(total) data bytes, the buffer holds \(data.readableBytes)" }
            // The writer's frames for what was read read back to the same.
            var written = FrameBuffer()
            var offset = 0
            let bytes = Array(data.readableBytesView)
            for event in events {
                let key: UInt32? = server ? 0x5A5A_A5A5 : nil
                switch event {
                case .data(let count):
                    WebSocketWriter.write(.binary, bytes[offset..<(offset + count)], maskKey: key, into: &written)
                    offset += count
                case .ping(let payload): WebSocketWriter.write(.ping, payload, maskKey: key, into: &written)
                case .pong(let payload): WebSocketWriter.write(.pong, payload, maskKey: key, into: &written)
                case .close(let code, let reason):
                    WebSocketWriter.write(.close, code.map { WebSocketWriter.closePayload(code: $0, reason: reason) } ?? [], maskKey: key, into: &written)
                }
            }
            var again = WebSocketReader(expectsMasked: server, maximumMessageSize: maximumMessageSize)
            var reread = FrameBuffer()
            var replayed: [WebSocketEvent] = []
            do {
                while let event = try again.next(&written, data: &reread) { replayed.append(event) }
            } catch {
                return "its own frames failed to read back: \(error.code) \(error.reason)"
            }
            if replayed != events || Array(reread.readableBytesView) != bytes || !written.isEmpty {
                return "its own frames read back differently: \(replayed) for \(events)"
            }
        }
        return nil
    }
}
