/// The body of a keyed request (``SessionWireTypes/keyedRequest``): the request of a caller
/// that gave an idempotency key, wrapped so that any profile carries it. One byte of key
/// length, the key, the wrapped request's type (four bytes, big-endian), one byte of epoch
/// length and the session epoch the request was first written in (empty when none was
/// known), then the wrapped request's content.
///
/// The answer is the wrapped request's response, of its type. When the server cannot tell
/// whether an earlier copy ran (the record is gone, the session's history began again, the
/// copy is running elsewhere and did not finish in time), the answer has the keyed request's
/// own type and a JSON body `{"error": …}` that says why: the client reports
/// ``TetherError/Code/outcomeUnknown``.
enum KeyedWire {
    /// The longest idempotency key, in bytes.
    static let maximumKeyLength = 128

    struct Keyed: Sendable {
        var key: String
        var type: UInt32
        var epoch: String?
        var payload: [UInt8]
    }

    /// What is wrong with `key`, if anything.
    static func keyProblem(_ key: String) -> String? {
        let bytes = key.utf8
        if bytes.isEmpty { return "an idempotency key cannot be empty" }
        if bytes.count > maximumKeyLength { return "an idempotency key of \(bytes.count) bytes is longer than \(maximumKeyLength)" }
        if bytes.contains(where: { $0 < 0x21 || $0 > 0x7E }) { return "an idempotency key is printable ASCII without spaces" }
        return nil
    }

    static func envelope(_ keyed: Keyed) -> [UInt8] {
        let epoch = Array((keyed.epoch ?? "").utf8.prefix(255))
        var bytes: [UInt8] = []
        bytes.reserveCapacity(keyed.payload.count + keyed.key.utf8.count + epoch.count + 6)
        bytes.append(UInt8(keyed.key.utf8.count))
        bytes += keyed.key.utf8
        bytes += [UInt8(keyed.type >> 24), UInt8(truncatingIfNeeded: keyed.type >> 16), UInt8(truncatingIfNeeded: keyed.type >> 8), UInt8(truncatingIfNeeded: keyed.type)]
        bytes.append(UInt8(epoch.count))
        bytes += epoch
        bytes += keyed.payload
        return bytes
    }

    /// The keyed request in `payload`, or `nil` when it is malformed.
    static func open(_ payload: [UInt8]) -> Keyed? {
        guard let keyLength = payload.first.map(Int.init), keyLength > 0, payload.count >= 1 + keyLength + 5 else { return nil }
        let key = String(decoding: payload[1...keyLength], as: UTF8.self)
        guard keyProblem(key) == nil else { return nil }
        var index = 1 + keyLength
        let type = payload[index..<index + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        index += 4
        let epochLength = Int(payload[index])
        index += 1
        guard payload.count >= index + epochLength else { return nil }
        let epoch = epochLength == 0 ? nil : String(decoding: payload[index..<index + epochLength], as: UTF8.self)
        index += epochLength
        return Keyed(key: key, type: type, epoch: epoch, payload: Array(payload[index...]))
    }
}
