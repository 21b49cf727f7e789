import Tether

/// `tether profiles`: the built-in wire formats that `--profile` chooses from.
struct ProfilesCommand: Command {
    static let name = "profiles"
    static let summary = "describe the wire formats that --profile chooses from"
    static let synopsis = "tether profiles"
    static let help = """
        Prints each built-in wire format (profile): its header field by field, with widths
        (u8, u16, u32: unsigned, 1, 2 or 4 bytes), any checksum, compression or delimiter,
        how responses find their requests, and which frame types are heartbeats, pushes and
        requests. serve, request, listen, ping and bench speak one with --profile NAME
        (default seed); client and server must use the same.

        options:
          -h, --help   show this help
        """

    init(parsing arguments: inout Arguments) throws(ArgumentError) {}

    func run() async throws -> ExitStatus {
        let blocks = Profile.builtIn.map(Self.describe)
        Console.out(blocks.joined(separator: "\n\n"))
        return .success
    }

    /// Where the descriptions start.
    private static let column = 15

    /// One profile: its name, a line about it, then one row per property.
    static func describe(_ profile: Profile) -> String {
        var lines = [profile.name + (profile.name == Profile.seed.name ? " (default)" : "")]
        if let summary = summaries[profile.name] { lines.append("  " + wrap(summary, width: helpWidth - 2, indent: 2)) }
        var rows: [(String, String)] = []
        // The seed profile has a codec of its own; its bytes are those of FrameLayout.seed.
        let layout = profile.layout ?? (profile.name == Profile.seed.name ? FrameLayout.seed : nil)
        if let layout {
            if let delimiter = layout.delimiter {
                rows.append(("framing", "no header: every frame ends with \(escaped(delimiter))"))
            } else {
                rows.append(("header", "\(layout.headerLength) bytes: \(header(layout))"))
            }
            if let checksum = layout.checksum { rows.append(("checksum", describe(checksum))) }
            if let compression = layout.compression {
                rows.append(("compression", "zlib, for bodies of \(compression.threshold) bytes or more when that makes them smaller; flagged in the \(compression.flagField) field"))
            }
        }
        rows.append(("responses", responses(profile.correlation)))
        rows.append(("heartbeats", profile.heartbeatType.map { "type \(hex($0))" } ?? "none"))
        rows.append(("pushes", profile.typeList(of: .notification).map { "types \($0)" } ?? "none"))
        rows.append(("requests", requests(profile, layout: layout)))
        if profile.supportsSessions {
            // With --mailboxes these two are the session's, and no handler can take them.
            let types = SessionWireTypes()
            rows.append(("sessions", "\(hex(types.hello)) hello, \(hex(types.acknowledgement)) acknowledgement, with --mailboxes"))
        }
        if let fields = fields(profile) { rows.append(("fields", fields)) }
        for (label, text) in rows {
            let name = "  " + label
            let wrapped = wrap(text, width: helpWidth - column, indent: column).replacing(unbreakable, with: " ")
            lines.append(name + String(repeating: " ", count: column - name.count) + wrapped)
        }
        return lines.joined(separator: "\n")
    }

    /// One line about each built-in profile.
    private static let summaries: [String: String] = [
        "seed": "a 12-byte header with a type and a serial",
        "seed-extended": "the seed plus a version, a content type and a SHA-256 of each body",
        "marker": "a start marker, two addresses, a CRC-16 trailer; skips garbage to the next marker",
        "compact": "a 7-byte header with a function code; bodies zlib-compressed; no serial",
        "lines": "text lines: each line is a request, or the answer to one",
    ]

    /// A space that ``wrap(_:width:indent:)`` does not break at: the header is broken
    /// between fields, never inside one.
    private static let unbreakable = "\u{A0}"

    /// `type u32 | serial u32 | length u32, big-endian`, with each field's spaces unbreakable.
    private static func header(_ layout: FrameLayout) -> String {
        let checksumWidth = layout.checksum?.algorithm.width ?? 0
        let littleEndian = layout.fields.contains { $0.endianness == .little && $0.width > 1 }
        let fields = layout.fields.map { field -> String in
            let integer = "u\(field.width * 8)" + (littleEndian && field.endianness == .little && field.width > 1 ? " little-endian" : "")
            switch field.role {
            case .checksum: return "\(field.name) (\(checksumWidth) bytes)"
            case .reserved: return "\(field.name) (\(field.width) byte\(field.width == 1 ? "" : "s"))"
            case .constant(let value): return "\(field.name) \(integer) = 0x\(String(value, radix: 16))"
            case .type, .serial, .length, .value: return "\(field.name) \(integer)"
            }
        }
        return fields.map { $0.replacing(" ", with: unbreakable) }.joined(separator: " | ") + (littleEndian ? "" : ", big-endian")
    }

    /// `SHA-256 of the body, in the header; …`.
    private static func describe(_ checksum: FrameLayout.Checksum) -> String {
        let coverage = checksum.coverage == .body ? "the body" : "the header and body"
        let placement = checksum.placement == .header ? "in the header" : "after the body"
        let mismatch = switch checksum.onMismatch {
        case .reject: "a frame that fails it ends the connection"
        case .report: "a frame that fails it is delivered, marked failed"
        case .resynchronize: "a frame that fails it is skipped, up to the next start marker"
        }
        return "\(checksum.algorithm) of \(coverage), \(placement); \(mismatch)"
    }

    private static func responses(_ correlation: Profile.Correlation) -> String {
        switch correlation {
        case .bySerial: "matched by serial, in any order; sessions and mailboxes work"
        case .inOrderPerType: "in order per type (no serial on the wire); no sessions"
        case .inOrder: "in order (no serial and no type on the wire); no sessions"
        }
    }

    private static func requests(_ profile: Profile, layout: FrameLayout?) -> String {
        guard let types = profile.typeList(of: .message) else { return "none" }
        if layout?.delimiter != nil { return "every line, as type \(types)" }
        if let layout, !layout.carriesType { return "type \(types), implied: the header has no type field" }
        return "types \(types)"
    }

    /// `destination u16, source u16: set with request --field NAME=VALUE; replies …`.
    private static func fields(_ profile: Profile) -> String? {
        let settable = profile.settableFields
        guard !settable.isEmpty else { return nil }
        let names = settable.map { field -> String in
            guard case .value(let defaultValue) = field.role, defaultValue != 0 else { return field.name }
            return "\(field.name) (default \(defaultValue))"
        }
        var text = names.joined(separator: ", ") + ": set with request --field NAME=VALUE"
        // Distinct values for each field show what the profile does to them in a reply.
        var sample: [String: UInt64] = [:]
        for (index, field) in settable.enumerated() { sample[field.name] = UInt64(index + 1) }
        let reply = profile.replyFields(sample)
        // Which request field each reply field comes from, where that is another field.
        let moved = settable.compactMap { field -> (to: String, from: String)? in
            guard let value = reply[field.name], value != sample[field.name],
                let source = settable.first(where: { sample[$0.name] == value })
            else { return nil }
            return (field.name, source.name)
        }
        if moved.count == 2, moved[0].to == moved[1].from, moved[1].to == moved[0].from {
            text += "; a reply swaps \(moved[0].to) and \(moved[1].to)"
        } else if !moved.isEmpty {
            text += "; a reply takes " + moved.map { "\($0.to) from the request's \($0.from)" }.joined(separator: ", ")
        }
        return text
    }

    /// `\r\n`: bytes as they would be written in a Swift or C string.
    static func escaped(_ bytes: [UInt8]) -> String {
        bytes.map { byte in
            switch byte {
            case 0x0D: "\\r"
            case 0x0A: "\\n"
            case 0x09: "\\t"
            case 0x20...0x7E: String(UnicodeScalar(byte))
            default: "\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
            }
        }.joined()
    }
}
