import CPostgres
internal import Tether

/// A statement parameter, as ``PostgresSession/execute(_:_:)`` sends it.
enum PostgresValue: Sendable, Hashable {
    case null
    /// Sent as text, its type left for the server to infer from the statement.
    case text(String)
    /// Sent as a binary `bigint`.
    case int(Int64)
    /// Sent as a binary `bytea`.
    case bytes([UInt8])
}

/// Type ids (`pg_type.oid`) of the types parameters and results use.
enum PostgresType {
    static let bool: Oid = 16
    static let bytea: Oid = 17
    static let name: Oid = 19
    static let int8: Oid = 20
    static let int2: Oid = 21
    static let int4: Oid = 23
    static let text: Oid = 25
    static let oid: Oid = 26
    static let varchar: Oid = 1043
    static let uuid: Oid = 2950
    static let boolArray: Oid = 1000
    static let byteaArray: Oid = 1001
    static let textArray: Oid = 1009
    static let int8Array: Oid = 1016
}

/// A parameter as it goes on the wire: its type (0 to let the server infer it), format and
/// bytes. Arrays go as PostgreSQL's binary array format, so a statement can take a whole
/// batch of rows in a few parameters (`unnest($1::text[], $2::bigint[])`).
struct PostgresParameter: Sendable, Hashable {
    var type: Oid
    /// `nil` is SQL NULL.
    var bytes: [UInt8]?
    var isBinary: Bool

    init(_ value: PostgresValue) {
        switch value {
        case .null:
            self.init(type: 0, bytes: nil, isBinary: false)
        case .text(let text):
            self.init(type: 0, bytes: Array(text.utf8), isBinary: false)
        case .int(let value):
            self.init(type: PostgresType.int8, bytes: Self.bigEndian(value), isBinary: true)
        case .bytes(let bytes):
            self.init(type: PostgresType.bytea, bytes: bytes, isBinary: true)
        }
    }

    init(type: Oid, bytes: [UInt8]?, isBinary: Bool) {
        self.type = type
        self.bytes = bytes
        self.isBinary = isBinary
    }

    /// A `text[]`.
    static func textArray(_ values: [String]) -> PostgresParameter {
        array(of: PostgresType.text, values.map { Array($0.utf8) }, typed: PostgresType.textArray)
    }

    /// A `bigint[]`.
    static func intArray(_ values: [Int64]) -> PostgresParameter {
        array(of: PostgresType.int8, values.map { bigEndian($0) }, typed: PostgresType.int8Array)
    }

    /// A `bytea[]`.
    static func bytesArray(_ values: [[UInt8]]) -> PostgresParameter {
        array(of: PostgresType.bytea, values, typed: PostgresType.byteaArray)
    }

    /// A one-dimensional array without NULLs in the binary format: dimensions, NULL flag,
    /// element type, length and lower bound, then each element's length and bytes.
    private static func array(of element: Oid, _ items: [[UInt8]], typed arrayType: Oid) -> PostgresParameter {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20 + items.reduce(0) { $0 + 4 + $1.count })
        func append(_ value: Int32) { bytes += bigEndian(Int64(value)).suffix(4) }
        append(items.isEmpty ? 0 : 1)
        append(0)
        append(Int32(bitPattern: element))
        if !items.isEmpty {
            append(Int32(items.count))
            append(1)
        }
        for item in items {
            append(Int32(item.count))
            bytes += item
        }
        return PostgresParameter(type: arrayType, bytes: bytes, isBinary: true)
    }

    private static func bigEndian(_ value: Int64) -> [UInt8] {
        withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }
}

/// The rows a statement returned. Columns come in binary for statements with parameters
/// and as text for those without; the accessors read either.
///
/// Safe to pass between threads: libpq never changes a result once it has returned it.
struct PostgresRows: Sendable {
    /// Owns the `PGresult`; `nil` for a statement that returned no rows.
    private final class Result: @unchecked Sendable {
        // @unchecked Sendable: the PGresult is read-only after libpq returned it, and
        // libpq documents reading one from several threads as safe.
        let handle: OpaquePointer
        init(_ handle: OpaquePointer) { self.handle = handle }
        deinit { PQclear(handle) }
    }

    private let result: Result?
    /// How many rows there are.
    let count: Int
    /// The rows a data-changing statement without `RETURNING` changed (`UPDATE 3` → 3).
    let affected: Int

    init(_ handle: OpaquePointer?) {
        if let handle {
            result = Result(handle)
            count = Int(PQntuples(handle))
            affected = Int(String(cString: PQcmdTuples(handle))) ?? 0
        } else {
            result = nil
            count = 0
            affected = 0
        }
    }

    /// How many columns each row has.
    var columns: Int { result.map { Int(PQnfields($0.handle)) } ?? 0 }

    /// Whether a value is SQL NULL (or out of range).
    func isNull(_ row: Int, _ column: Int) -> Bool {
        raw(row, column) == nil
    }

    /// A value as text: text columns as they are, integers and booleans (`t`/`f`) and
    /// UUIDs written out; `nil` for NULL.
    func text(_ row: Int, _ column: Int) -> String? {
        guard let (pointer, length, binary, type) = raw(row, column) else { return nil }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        if binary {
            switch type {
            case PostgresType.int8, PostgresType.int4, PostgresType.int2, PostgresType.oid:
                return int(row, column).map(String.init)
            case PostgresType.bool:
                return bytes.first == 1 ? "t" : "f"
            case PostgresType.uuid where length == 16:
                let hex = bytes.map { String($0, radix: 16).leftPadded(to: 2) }
                return [hex[0..<4], hex[4..<6], hex[6..<8], hex[8..<10], hex[10..<16]].map { $0.joined() }.joined(separator: "-")
            default:
                break
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A value as an integer: `smallint`, `integer`, `bigint`, `oid` and `boolean` (1 or
    /// 0) columns, or text that holds a number; `nil` for NULL or anything else (cast
    /// `numeric` results, such as `sum(bigint)`, to `bigint` in the statement).
    func int(_ row: Int, _ column: Int) -> Int64? {
        guard let (pointer, length, binary, type) = raw(row, column) else { return nil }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        if !binary || [PostgresType.text, PostgresType.varchar, PostgresType.name].contains(type) {
            return Int64(String(decoding: bytes, as: UTF8.self))
        }
        func bigEndian(_ width: Int) -> Int64? {
            guard length == width else { return nil }
            var value: UInt64 = 0
            for byte in bytes { value = value << 8 | UInt64(byte) }
            // Sign-extend from the column's width.
            let shift = UInt64(64 - width * 8)
            return Int64(bitPattern: value << shift) >> Int64(shift)
        }
        switch type {
        case PostgresType.int8: return bigEndian(8)
        case PostgresType.int4: return bigEndian(4)
        case PostgresType.int2: return bigEndian(2)
        case PostgresType.oid: return bigEndian(4).map { Int64(UInt32(truncatingIfNeeded: $0)) }
        case PostgresType.bool: return length == 1 ? Int64(bytes[0]) : nil
        default: return nil
        }
    }

    /// A value's bytes: `bytea` columns decoded, anything else as the server sent it;
    /// `nil` for NULL.
    func bytes(_ row: Int, _ column: Int) -> [UInt8]? {
        guard let (pointer, length, binary, type) = raw(row, column) else { return nil }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        if !binary, type == PostgresType.bytea {
            // Text format: `\x` and two hex digits a byte.
            var decoded: [UInt8] = []
            decoded.reserveCapacity(max(0, length / 2 - 1))
            var index = 2
            while index + 1 < length {
                guard let high = hexDigit(bytes[index]), let low = hexDigit(bytes[index + 1]) else { return nil }
                decoded.append(high << 4 | low)
                index += 2
            }
            return decoded
        }
        return Array(bytes)
    }

    /// The value's location, length, format and type, or `nil` for NULL.
    private func raw(_ row: Int, _ column: Int) -> (UnsafeRawPointer, Int, Bool, Oid)? {
        guard let handle = result?.handle, row >= 0, row < count, column >= 0, column < columns else { return nil }
        let (r, c) = (Int32(row), Int32(column))
        guard PQgetisnull(handle, r, c) == 0, let pointer = PQgetvalue(handle, r, c) else { return nil }
        return (UnsafeRawPointer(pointer), Int(PQgetlength(handle, r, c)), PQfformat(handle, c) == 1, PQftype(handle, c))
    }
}

private func hexDigit(_ character: UInt8) -> UInt8? {
    switch character {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return character - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return character - UInt8(ascii: "A") + 10
    default: return nil
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

/// What went wrong in PostgreSQL or on the way to it, carried as the
/// ``Tether/TetherError/underlying`` error of the ``Tether/TetherError`` a statement throws.
struct PostgresFailure: Error, Sendable {
    /// The server's `SQLSTATE` (`40P01` for a deadlock, `57014` for a cancelled statement),
    /// when the server answered.
    var sqlState: String?
    /// The server's or libpq's message, on one line.
    var message: String
    /// Whether the connection is gone: the server was unreachable, closed it or did not
    /// answer in time.
    var connectionLost: Bool
}

/// libpq's messages end in a newline and sometimes span lines; errors want one line.
func oneLine(_ text: String) -> String {
    text.split(whereSeparator: { $0 == "\n" || $0 == "\t" || $0 == "\r" })
        .map { $0.trimmingSpaces() }
        .filter { !$0.isEmpty }
        .joined(separator: " ")
}

extension Substring {
    fileprivate func trimmingSpaces() -> Substring {
        var result = self
        while result.first == " " { result = result.dropFirst() }
        while result.last == " " { result = result.dropLast() }
        return result
    }
}
