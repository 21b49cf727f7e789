import Tether

/// `--profile NAME`: the wire format of the commands that speak the protocol (`serve`,
/// `request`, `listen`, `ping`, `bench`), one of ``Profile/builtIn``.
enum ProfileOption {
    /// For the synopsis of each command.
    static let synopsis = "[--profile NAME]"

    /// `seed, seed-extended, marker, compact, lines`.
    static var names: String {
        Profile.builtIn.map(\.name).joined(separator: ", ")
    }

    /// Takes `--profile` from `arguments`.
    ///
    /// - Returns: The profile named, or ``Profile/seed`` when the option is absent.
    static func parse(_ arguments: inout Arguments) throws(ArgumentError) -> Profile {
        guard let name = try arguments.option("--profile") else { return .seed }
        guard let profile = Profile.named(name) else {
            throw ArgumentError("unknown profile \(name): choose \(names)")
        }
        return profile
    }

    /// The option's line for a command's help, its description starting at `column`.
    static func help(column: Int) -> String {
        optionHelp(
            [("--profile NAME", "the wire format: \(names) (default seed); `tether profiles` describes them")],
            column: column
        )
    }
}

// MARK: What the commands ask of a profile

extension Profile {
    /// The largest type the wire can carry: the type field's maximum, or any 32-bit type
    /// when the header has no type field (the profile's ``classify`` then allows the one it implies).
    var largestWireType: UInt32 {
        guard let field = layout?.fields.first(where: { $0.role == .type }), field.width < 4 else { return .max }
        return UInt32((1 << (field.width * 8)) - 1)
    }

    /// What a frame of `type` is, counting a type the wire cannot carry as invalid.
    func kind(of type: UInt32) -> FrameKind {
        type <= largestWireType ? classify(type) : .invalid
    }

    /// The types of one kind as ranges, in order: scanned up to `0xffff`, with the last range
    /// open when it goes on to the largest type. `nil` as an upper bound means no end.
    func typeRanges(of kind: FrameKind) -> [(lower: UInt32, upper: UInt32?)] {
        let scanned = min(largestWireType, 0xFFFF)
        var ranges: [(lower: UInt32, upper: UInt32?)] = []
        var start: UInt32?
        for type in 0...scanned {
            let matches = classify(type) == kind
            if matches, start == nil { start = type }
            if !matches, let lower = start {
                ranges.append((lower, type - 1))
                start = nil
            }
        }
        if let lower = start {
            let open = scanned < largestWireType && classify(largestWireType) == kind
            ranges.append((lower, open ? nil : scanned))
        }
        return ranges
    }

    /// `0x2…0x400`, `0x401 and above`, `0x401`: the types of one kind, for messages; `nil`
    /// when there are none.
    func typeList(of kind: FrameKind) -> String? {
        let ranges = typeRanges(of: kind)
        guard !ranges.isEmpty else { return nil }
        return ranges.map { range in
            switch range.upper {
            case nil: "\(hex(range.lower)) and above"
            case .some(range.lower): hex(range.lower)
            case let upper?: "\(hex(range.lower))…\(hex(upper))"
            }
        }.joined(separator: ", ")
    }

    /// Whether the profile has notification types: pushes.
    var hasPushes: Bool { !typeRanges(of: .notification).isEmpty }

    /// Whether sessions and mailboxes work: responses are matched by serial.
    var supportsSessions: Bool { correlation == .bySerial }

    /// The profile's one request type, when it has only one (`0x401` in marker and lines).
    var onlyRequestType: UInt32? {
        let ranges = typeRanges(of: .message)
        guard ranges.count == 1, ranges[0].upper == ranges[0].lower else { return nil }
        return ranges[0].lower
    }

    /// The type of the demo server's echo in this profile: `0x402` when it is a request
    /// type, otherwise the profile's one request type, if it has only one.
    var echoType: UInt32? {
        kind(of: SeedService.echoType) == .message ? SeedService.echoType : onlyRequestType
    }

    /// The header fields a request may set with `--field`: the layout's value fields, less
    /// the compression flag, which the codec owns.
    var settableFields: [FrameLayout.Field] {
        guard let layout else { return [] }
        return layout.fields.filter { field in
            guard case .value = field.role else { return false }
            return field.name != layout.compression?.flagField
        }
    }

    /// `destination=1 source=2`: the settable fields of `fields` in wire order, then any
    /// others the layout does not name, sorted; `nil` when there are none.
    func describeFields(_ fields: [String: UInt64]) -> String? {
        let known = settableFields.map(\.name)
        let flag = layout?.compression?.flagField
        let others = fields.keys.filter { !known.contains($0) && $0 != flag }.sorted()
        let parts = (known + others).compactMap { name in fields[name].map { "\(name)=\($0)" } }
        return parts.isEmpty ? nil : parts.joined(separator: " ")
    }
}

extension Parse {
    /// `--field NAME=VALUE`, each occurrence: values for the profile's header fields, in
    /// decimal or hex, each within its field's width.
    static func fields(_ items: [String], profile: Profile) throws(ArgumentError) -> [String: UInt64] {
        guard !items.isEmpty else { return [:] }
        let settable = profile.settableFields
        guard !settable.isEmpty else {
            throw ArgumentError("--field: the \(profile.name) profile has no header fields to set")
        }
        let valid = settable.map(\.name).joined(separator: ", ")
        var fields: [String: UInt64] = [:]
        for item in items {
            guard let equals = item.firstIndex(of: "=") else {
                throw ArgumentError("--field '\(item)' is not NAME=VALUE")
            }
            let name = String(item[..<equals])
            let text = String(item[item.index(after: equals)...])
            guard let field = settable.first(where: { $0.name == name }) else {
                throw ArgumentError("--field: the \(profile.name) profile has no field '\(name)': choose \(valid)")
            }
            let maximum: UInt64 = field.width >= 8 ? .max : (1 << (UInt64(field.width) * 8)) - 1
            let lower = text.lowercased()
            let value = lower.hasPrefix("0x") ? UInt64(lower.dropFirst(2), radix: 16) : UInt64(lower, radix: 10)
            guard let value, value <= maximum else {
                throw ArgumentError("--field \(name)='\(text)' is not a number from 0 to \(maximum) (\(field.width) byte\(field.width == 1 ? "" : "s"))")
            }
            fields[name] = value
        }
        return fields
    }
}
