/// The frame layer of RFC 6455: opcodes, close codes, the encoder, and a reader that checks
/// every frame before it takes its payload.
///
/// Tether frames travel as a byte stream inside binary messages, so message boundaries
/// carry no meaning: the reader appends each binary payload (a whole message or one of its
/// fragments) to the stream as soon as the frame is complete, and never holds a message.
/// What it holds is bounded by the largest frame it accepts, which is the maximum message
/// size, checked on the header before any of the payload is waited for.
package enum WebSocketOpcode: UInt8, Sendable {
    case continuation = 0x0
    case text = 0x1
    case binary = 0x2
    case close = 0x8
    case ping = 0x9
    case pong = 0xA

    /// Whether this is a control frame (close, ping, pong).
    var isControl: Bool { rawValue & 0x8 != 0 }
}

/// The status codes of a WebSocket close frame that Tether sends or names.
package enum WebSocketCloseCode {
    static let normal: UInt16 = 1000
    static let goingAway: UInt16 = 1001
    static let protocolError: UInt16 = 1002
    static let unsupportedData: UInt16 = 1003
    static let invalidPayload: UInt16 = 1007
    static let policyViolation: UInt16 = 1008
    static let messageTooBig: UInt16 = 1009

    /// A short name for a code, for error messages.
    static func name(_ code: UInt16) -> String {
        switch code {
        case 1000: "normal closure"
        case 1001: "going away"
        case 1002: "protocol error"
        case 1003: "unsupported data"
        case 1007: "invalid payload data"
        case 1008: "policy violation"
        case 1009: "message too big"
        case 1010: "mandatory extension"
        case 1011: "internal error"
        default: "code \(code)"
        }
    }

    /// Whether a peer may send `code` in a close frame (RFC 6455 section 7.4).
    static func isSendable(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014: true
        case 3000...4999: true
        default: false
        }
    }
}

/// Why the WebSocket layer ends a connection: the close code it sends and what was wrong.
package struct WebSocketFailure: Error, Sendable, Equatable {
    /// The close code to send: 1002, 1003, 1007 or 1009.
    package var code: UInt16
    /// What was wrong, for the close frame (truncated) and the error.
    package var reason: String

    package init(_ code: UInt16, _ reason: String) {
        self.code = code
        self.reason = reason
    }
}

/// One thing the reader found in the stream.
package enum WebSocketEvent: Sendable, Equatable {
    /// Binary payload bytes, this many, were appended to the data buffer.
    case data(Int)
    /// A ping with its payload: answer with a pong carrying the same bytes.
    case ping([UInt8])
    /// A pong with its payload.
    case pong([UInt8])
    /// The peer's close frame: its code (`nil` when it sent none) and reason.
    case close(code: UInt16?, reason: String)
}

/// Reads WebSocket frames from a byte stream: checks each header against the rules and
/// bounds of RFC 6455, unmasks, appends binary payloads to a data buffer and returns control
/// frames. Pure: no I/O, no clock.
package struct WebSocketReader: Sendable {
    /// Whether frames must be masked (a server reading a client) or must not be (a client).
    package let expectsMasked: Bool
    /// The largest message accepted, summed over its fragments: 1009 beyond it.
    package let maximumMessageSize: Int
    /// Payload bytes of the fragmented binary message under way; `nil` when none is.
    private var messageSoFar: Int?

    /// A reader for one end.
    ///
    /// - Parameters:
    ///   - expectsMasked: `true` on a server, `false` on a client.
    ///   - maximumMessageSize: The bound on one message's payload.
    package init(expectsMasked: Bool, maximumMessageSize: Int) {
        self.expectsMasked = expectsMasked
        self.maximumMessageSize = max(125, maximumMessageSize)
    }

    /// Whether part of a frame, or a fragmented message, is under way.
    package var isInsideMessage: Bool { messageSoFar != nil }

    /// Reads the next complete frame at the start of `input`.
    ///
    /// - Parameters:
    ///   - input: The received bytes; the frame is consumed from it when complete.
    ///   - data: Where binary payloads are appended.
    /// - Returns: What the frame was, or `nil` when `input` does not hold a whole frame yet.
    /// - Throws: ``WebSocketFailure`` for a frame that breaks the protocol or a bound.
    package mutating func next(_ input: inout FrameBuffer, data: inout FrameBuffer) throws(WebSocketFailure) -> WebSocketEvent? {
        guard let first = input.peekInteger(at: 0, as: UInt8.self), let second = input.peekInteger(at: 1, as: UInt8.self) else { return nil }
        let fin = first & 0x80 != 0
        guard first & 0x70 == 0 else {
            throw WebSocketFailure(WebSocketCloseCode.protocolError, "reserved bits \(hex(first & 0x70)) set without an extension")
        }
        guard let opcode = WebSocketOpcode(rawValue: first & 0x0F) else {
            throw WebSocketFailure(WebSocketCloseCode.protocolError, "reserved opcode \(hex(first & 0x0F))")
        }
        let masked = second & 0x80 != 0
        if masked != expectsMasked {
            throw WebSocketFailure(
                WebSocketCloseCode.protocolError,
                expectsMasked ? "a client frame that is not masked" : "a server frame that is masked"
            )
        }
        var headerLength = 2
        var length = UInt64(second & 0x7F)
        if length == 126 {
            guard let extended = input.peekInteger(at: 2, as: UInt16.self) else { return nil }
            guard extended >= 126 else {
                throw WebSocketFailure(WebSocketCloseCode.protocolError, "length \(extended) in the 16-bit form, which is for 126 or more")
            }
            length = UInt64(extended)
            headerLength = 4
        } else if length == 127 {
            guard let extended = input.peekInteger(at: 2, as: UInt64.self) else { return nil }
            guard extended & (1 << 63) == 0 else {
                throw WebSocketFailure(WebSocketCloseCode.protocolError, "64-bit length with its top bit set")
            }
            guard extended > 0xFFFF else {
                throw WebSocketFailure(WebSocketCloseCode.protocolError, "length \(extended) in the 64-bit form, which is for more than 65535")
            }
            length = extended
            headerLength = 10
        }
        if opcode.isControl {
            guard fin else { throw WebSocketFailure(WebSocketCloseCode.protocolError, "a fragmented \(opcode) frame") }
            guard length <= 125 else {
                throw WebSocketFailure(WebSocketCloseCode.protocolError, "a \(opcode) frame of \(length) bytes (at most 125)")
            }
        } else {
            switch opcode {
            case .continuation:
                guard messageSoFar != nil else {
                    throw WebSocketFailure(WebSocketCloseCode.protocolError, "a continuation frame with no message to continue")
                }
            case .text:
                throw WebSocketFailure(WebSocketCloseCode.unsupportedData, "a text message: Tether is carried in binary messages only")
            default:
                guard messageSoFar == nil else {
                    throw WebSocketFailure(WebSocketCloseCode.protocolError, "a new \(opcode) message inside a fragmented one")
                }
            }
            let before = UInt64(messageSoFar ?? 0)
            guard length <= UInt64(maximumMessageSize) - before else {
                throw WebSocketFailure(
                    WebSocketCloseCode.messageTooBig,
                    "a message of \(before &+ length) bytes or more, over the limit of \(maximumMessageSize)"
                )
            }
        }
        let maskOffset = headerLength
        if masked { headerLength += 4 }
        let count = Int(length)
        guard input.readableBytes - headerLength >= count else { return nil }
        let key: UInt32 = masked ? input.peekInteger(at: maskOffset, as: UInt32.self)! : 0
        if opcode.isControl {
            var payload = Array(input.peekBytes(at: headerLength, count: count)!)
            if masked { Self.unmask(&payload, key: key, phase: 0) }
            input.moveReaderIndex(forwardBy: headerLength + count)
            return try control(opcode, payload)
        }
        if count > 0 {
            input.withReadableBytes { source in
                _ = data.withWritableSpace(minimum: count) { target in
                    target.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[headerLength..<(headerLength + count)]))
                    if masked { Self.unmask(UnsafeMutableRawBufferPointer(rebasing: target[0..<count]), key: key) }
                    return count
                }
            }
        }
        input.moveReaderIndex(forwardBy: headerLength + count)
        messageSoFar = fin ? nil : (messageSoFar ?? 0) + count
        return .data(count)
    }

    /// A control frame's event, its close payload checked.
    private func control(_ opcode: WebSocketOpcode, _ payload: [UInt8]) throws(WebSocketFailure) -> WebSocketEvent {
        switch opcode {
        case .ping: return .ping(payload)
        case .pong: return .pong(payload)
        default:
            if payload.isEmpty { return .close(code: nil, reason: "") }
            guard payload.count >= 2 else {
                throw WebSocketFailure(WebSocketCloseCode.protocolError, "a close frame of one byte")
            }
            let code = UInt16(payload[0]) << 8 | UInt16(payload[1])
            guard WebSocketCloseCode.isSendable(code) else {
                throw WebSocketFailure(WebSocketCloseCode.protocolError, "close code \(code), which may not be sent")
            }
            let reason = String(decoding: payload[2...], as: UTF8.self)
            guard reason.utf8.elementsEqual(payload[2...]) else {
                throw WebSocketFailure(WebSocketCloseCode.invalidPayload, "a close reason that is not UTF-8")
            }
            return .close(code: code, reason: reason)
        }
    }

    /// XORs `bytes` with the masking key, starting `phase` bytes into the key.
    static func unmask(_ bytes: inout [UInt8], key: UInt32, phase: Int) {
        bytes.withUnsafeMutableBytes { unmask($0, key: key, phase: phase) }
    }

    /// XORs `bytes` with the masking key (big-endian, as on the wire), in place.
    static func unmask(_ bytes: UnsafeMutableRawBufferPointer, key: UInt32, phase: Int = 0) {
        let keyBytes: [UInt8] = [UInt8(key >> 24), UInt8((key >> 16) & 0xFF), UInt8((key >> 8) & 0xFF), UInt8(key & 0xFF)]
        var index = 0
        // Eight bytes at a time with the key repeated, then the tail.
        let rotated = (0..<8).map { keyBytes[($0 + phase) & 3] }
        let wide = rotated.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
        while index + 8 <= bytes.count {
            let word = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ wide
            bytes.storeBytes(of: word, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < bytes.count {
            bytes[index] ^= keyBytes[(index + phase) & 3]
            index += 1
        }
    }
}

/// Writes WebSocket frames.
package enum WebSocketWriter {
    /// Appends one frame to `output`: masked with `maskKey` when it is given (a client's
    /// frames), unmasked otherwise.
    ///
    /// - Parameters:
    ///   - opcode: The frame's opcode.
    ///   - payload: The payload bytes.
    ///   - fin: Whether it is the last frame of its message.
    ///   - maskKey: The masking key; `nil` for a server's frames.
    ///   - output: Where the frame is appended.
    package static func write<Bytes: Collection<UInt8>>(
        _ opcode: WebSocketOpcode,
        _ payload: Bytes,
        fin: Bool = true,
        maskKey: UInt32?,
        into output: inout FrameBuffer
    ) {
        let count = payload.count
        output.writeInteger(UInt8((fin ? 0x80 : 0) | opcode.rawValue))
        let maskBit: UInt8 = maskKey == nil ? 0 : 0x80
        if count < 126 {
            output.writeInteger(maskBit | UInt8(count))
        } else if count <= 0xFFFF {
            output.writeInteger(maskBit | 126)
            output.writeInteger(UInt16(count))
        } else {
            output.writeInteger(maskBit | 127)
            output.writeInteger(UInt64(count))
        }
        guard let maskKey else {
            output.writeBytes(payload)
            return
        }
        output.writeInteger(maskKey)
        output.writeBytes(payload)
        // Where the payload landed is known only now: writing it may have compacted or
        // grown the buffer, which moves the bytes already in it.
        output.maskWritten(from: output.writerIndex - count, key: maskKey)
    }

    /// The payload of a close frame: the code, then the reason cut to fit 123 bytes on a
    /// character boundary.
    package static func closePayload(code: UInt16, reason: String) -> [UInt8] {
        var bytes: [UInt8] = [UInt8(code >> 8), UInt8(code & 0xFF)]
        var reason = Substring(reason)
        while reason.utf8.count > 123 { reason = reason.dropLast() }
        bytes.append(contentsOf: reason.utf8)
        return bytes
    }
}

extension FrameBuffer {
    /// XORs the bytes written from `start` to the writer index with a masking key.
    mutating func maskWritten(from start: Int, key: UInt32) {
        let end = writerIndex
        guard end > start else { return }
        storage.withUnsafeMutableBytes { raw in
            WebSocketReader.unmask(UnsafeMutableRawBufferPointer(rebasing: raw[start..<end]), key: key)
        }
    }
}

/// A byte as `0x..`, for error messages.
private func hex(_ byte: UInt8) -> String {
    let digits = String(byte, radix: 16)
    return "0x" + (digits.count == 1 ? "0" + digits : digits)
}
