/// The parts of rtnetlink (`rtnetlink(7)`) the Linux path monitor reads, parsed from bytes
/// with every length checked: a message, attribute or header that does not fit where it
/// says it does is skipped (or ends the walk), never read past.
///
/// Pure, so that tests feed it malformed input; the layouts are the kernel's, fixed by its
/// ABI (`linux/netlink.h`, `linux/rtnetlink.h`, `linux/if_link.h`), native byte order.
enum Netlink {
    // MARK: Constants

    /// `nlmsghdr` is 16 bytes; messages and attributes align to 4.
    static let headerSize = 16
    static let alignment = 4

    static let messageNoop: UInt16 = 1
    static let messageError: UInt16 = 2
    static let messageDone: UInt16 = 3
    static let messageOverrun: UInt16 = 4
    static let newLink: UInt16 = 16
    static let deleteLink: UInt16 = 17
    static let getLink: UInt16 = 18
    static let newAddress: UInt16 = 20
    static let deleteAddress: UInt16 = 21
    static let getAddress: UInt16 = 22
    static let newRoute: UInt16 = 24
    static let deleteRoute: UInt16 = 25
    static let getRoute: UInt16 = 26

    static let flagRequest: UInt16 = 0x1
    static let flagDump: UInt16 = 0x300

    /// Multicast groups: links, IPv4 and IPv6 addresses and routes.
    static let groupLink: UInt32 = 0x1
    static let groupIPv4Address: UInt32 = 0x10
    static let groupIPv4Route: UInt32 = 0x40
    static let groupIPv6Address: UInt32 = 0x100
    static let groupIPv6Route: UInt32 = 0x400
    static let watchedGroups = groupLink | groupIPv4Address | groupIPv4Route | groupIPv6Address | groupIPv6Route

    static let familyIPv4: UInt8 = 2
    static let familyIPv6: UInt8 = 10

    /// `rtmsg` is 12 bytes; `ifinfomsg` 16; `ifaddrmsg` 8.
    static let routeHeaderSize = 12
    static let linkHeaderSize = 16
    static let addressHeaderSize = 8

    static let routeAttributeOutputInterface: UInt16 = 4
    static let routeAttributeGateway: UInt16 = 5
    static let routeAttributePriority: UInt16 = 6
    static let routeAttributeTable: UInt16 = 15
    static let linkAttributeName: UInt16 = 3
    static let addressAttributeAddress: UInt16 = 1
    static let addressAttributeLocal: UInt16 = 2
    /// `IFA_FLAGS`: the address's flags in 32 bits, where the header has only 8.
    static let addressAttributeFlags: UInt16 = 8

    /// `IFA_F_SECONDARY` (IPv4; the same bit is `IFA_F_TEMPORARY` for IPv6).
    static let addressFlagSecondary: UInt32 = 0x01
    /// `RT_SCOPE_LINK` and `RT_SCOPE_HOST`.
    static let scopeLink: UInt8 = 253
    static let scopeHost: UInt8 = 254
    /// The longest IPv6 prefix that names a network: a /64 subnet's addresses (SLAAC, their
    /// temporary siblings, a DHCPv6 /128 in it) all name it alike.
    static let networkPrefixLength: UInt8 = 64

    static let routeTypeUnicast: UInt8 = 1
    static let tableMain: UInt32 = 254
    static let tableLocal: UInt32 = 255
    /// `RTNH_F_DEAD` and `RTNH_F_LINKDOWN`: a next hop the kernel will not use.
    static let routeFlagsUnusable: UInt32 = 0x1 | 0x10

    static let interfaceUp: UInt32 = 0x1
    static let interfaceLoopback: UInt32 = 0x8
    static let interfaceRunning: UInt32 = 0x40

    // MARK: Messages

    /// One netlink message: its header's fields and the payload after the header.
    struct Message: Equatable {
        var type: UInt16
        var flags: UInt16
        var sequence: UInt32
        var payload: ArraySlice<UInt8>
    }

    /// The messages in one datagram, in order. The walk stops at the first header that is
    /// short, says it is shorter than a header, or says it is longer than what is left.
    static func messages(in bytes: ArraySlice<UInt8>) -> [Message] {
        var messages: [Message] = []
        var offset = bytes.startIndex
        while bytes.endIndex - offset >= headerSize {
            guard let length = readUInt32(bytes, at: offset).map(Int.init),
                  length >= headerSize, length <= bytes.endIndex - offset,
                  let type = readUInt16(bytes, at: offset + 4),
                  let flags = readUInt16(bytes, at: offset + 6),
                  let sequence = readUInt32(bytes, at: offset + 8)
            else { break }
            messages.append(Message(type: type, flags: flags, sequence: sequence, payload: bytes[(offset + headerSize)..<(offset + length)]))
            // The last message of a datagram may be unpadded: stop at the end either way.
            offset += min(aligned(length), bytes.endIndex - offset)
        }
        return messages
    }

    /// The attributes (`rtattr`) in `bytes`: type and value, in order. The walk stops at the
    /// first attribute whose length is under its 4-byte header or past the end.
    static func attributes(in bytes: ArraySlice<UInt8>) -> [(type: UInt16, value: ArraySlice<UInt8>)] {
        var attributes: [(type: UInt16, value: ArraySlice<UInt8>)] = []
        var offset = bytes.startIndex
        while bytes.endIndex - offset >= 4 {
            guard let length = readUInt16(bytes, at: offset).map(Int.init), length >= 4, length <= bytes.endIndex - offset,
                  let type = readUInt16(bytes, at: offset + 2)
            else { break }
            // The top two bits are flags (nested, byte order), not part of the type.
            attributes.append((type & 0x3FFF, bytes[(offset + 4)..<(offset + length)]))
            offset += min(aligned(length), bytes.endIndex - offset)
        }
        return attributes
    }

    // MARK: Routes and links

    /// What a route message says of one route.
    struct Route: Equatable {
        var family: UInt8
        var destinationLength: UInt8
        var table: UInt32
        var type: UInt8
        var flags: UInt32
        var outputInterface: Int?
        var gateway: [UInt8]?
        var priority: UInt32

        /// A unicast default route (no destination prefix) the kernel can use.
        var isUsableDefault: Bool {
            destinationLength == 0 && type == routeTypeUnicast && flags & routeFlagsUnusable == 0
                && table != tableLocal && outputInterface != nil
                && (family == familyIPv4 || family == familyIPv6)
        }
    }

    /// The route in the payload of an `RTM_NEWROUTE`, or `nil` when it is too short.
    static func route(in payload: ArraySlice<UInt8>) -> Route? {
        let start = payload.startIndex
        guard payload.count >= routeHeaderSize, let flags = readUInt32(payload, at: start + 8) else { return nil }
        var route = Route(
            family: payload[start], destinationLength: payload[start + 1], table: UInt32(payload[start + 4]),
            type: payload[start + 7], flags: flags, outputInterface: nil, gateway: nil, priority: 0
        )
        for (type, value) in attributes(in: payload.dropFirst(routeHeaderSize)) {
            switch type {
            case routeAttributeOutputInterface:
                if value.count == 4, let index = readUInt32(value, at: value.startIndex) { route.outputInterface = Int(index) }
            case routeAttributeGateway:
                if value.count == 4 || value.count == 16 { route.gateway = Array(value) }
            case routeAttributePriority:
                if value.count == 4, let priority = readUInt32(value, at: value.startIndex) { route.priority = priority }
            case routeAttributeTable:
                if value.count == 4, let table = readUInt32(value, at: value.startIndex) { route.table = table }
            default:
                break
            }
        }
        return route
    }

    /// What a link message says of one interface.
    struct Link: Equatable {
        var index: Int
        var flags: UInt32
        var name: String?

        /// Up, running (carrier, or operationally up) and not the loopback interface.
        var isUsable: Bool {
            flags & interfaceUp != 0 && flags & interfaceRunning != 0 && flags & interfaceLoopback == 0
        }
    }

    /// The link in the payload of an `RTM_NEWLINK`, or `nil` when it is too short.
    static func link(in payload: ArraySlice<UInt8>) -> Link? {
        let start = payload.startIndex
        guard payload.count >= linkHeaderSize,
              let index = readUInt32(payload, at: start + 4),
              let flags = readUInt32(payload, at: start + 8)
        else { return nil }
        var link = Link(index: Int(Int32(bitPattern: index)), flags: flags, name: nil)
        for (type, value) in attributes(in: payload.dropFirst(linkHeaderSize)) where type == linkAttributeName {
            // A C string: up to its first NUL, which the kernel always sends.
            let name = value.prefix { $0 != 0 }
            if !name.isEmpty, name.count <= 64 { link.name = String(decoding: name, as: UTF8.self) }
        }
        return link
    }

    /// What an address message says of one of an interface's addresses.
    struct Address: Equatable {
        var family: UInt8
        var prefixLength: UInt8
        var flags: UInt32
        var scope: UInt8
        var interface: Int
        /// `IFA_LOCAL` when there is one (the local end of a point-to-point link), else
        /// `IFA_ADDRESS`.
        var bytes: [UInt8]?

        /// What the address contributes to the network's identity, or `nil` when nothing:
        /// an IPv4 primary address with its prefix length (`192.0.2.10/24`); the prefix of a
        /// global IPv6 address, cut to ``networkPrefixLength`` (`2001:db8:1:2::/64`), which
        /// every address of a subnet shares, so that a new temporary address is the same
        /// network. Secondary IPv4 addresses, link-local IPv6 ones (the same on every
        /// network) and host-scoped ones name no network.
        var networkKey: (bytes: [UInt8], prefixLength: UInt8)? {
            guard scope != scopeHost, let bytes else { return nil }
            switch (family, bytes.count) {
            case (familyIPv4, 4):
                guard flags & addressFlagSecondary == 0 else { return nil }
                return (bytes, min(prefixLength, 32))
            case (familyIPv6, 16):
                guard scope != scopeLink, !(bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80) else { return nil }
                let length = min(prefixLength, networkPrefixLength)
                return (masked(bytes, to: Int(length)), length)
            default:
                return nil
            }
        }
    }

    /// The address in the payload of an `RTM_NEWADDR`, or `nil` when it is too short.
    static func address(in payload: ArraySlice<UInt8>) -> Address? {
        let start = payload.startIndex
        guard payload.count >= addressHeaderSize, let index = readUInt32(payload, at: start + 4) else { return nil }
        var address = Address(
            family: payload[start], prefixLength: payload[start + 1], flags: UInt32(payload[start + 2]),
            scope: payload[start + 3], interface: Int(Int32(bitPattern: index)), bytes: nil
        )
        var local: [UInt8]?
        var remote: [UInt8]?
        for (type, value) in attributes(in: payload.dropFirst(addressHeaderSize)) {
            switch type {
            case addressAttributeLocal:
                if value.count == 4 || value.count == 16 { local = Array(value) }
            case addressAttributeAddress:
                if value.count == 4 || value.count == 16 { remote = Array(value) }
            case addressAttributeFlags:
                if value.count == 4, let flags = readUInt32(value, at: value.startIndex) { address.flags = flags }
            default:
                break
            }
        }
        address.bytes = local ?? remote
        return address
    }

    /// `bytes` with every bit after the first `length` cleared.
    static func masked(_ bytes: [UInt8], to length: Int) -> [UInt8] {
        bytes.enumerated().map { offset, byte in
            let kept = length - offset * 8
            if kept >= 8 { return byte }
            if kept <= 0 { return 0 }
            return byte & ~(UInt8.max >> kept)
        }
    }

    /// The network keys of `addresses` on interface `index` of `family`, as text, each once,
    /// in numeric order: what ``NetworkPath/Route/localAddresses`` holds.
    static func localAddresses(_ addresses: [Address], interface index: Int, family: UInt8) -> [String] {
        var keys: [(bytes: [UInt8], prefixLength: UInt8)] = []
        for address in addresses where address.interface == index && address.family == family {
            guard let key = address.networkKey, !keys.contains(where: { $0 == key }) else { continue }
            keys.append(key)
        }
        keys.sort { $0.bytes.lexicographicallyPrecedes($1.bytes) || ($0.bytes == $1.bytes && $0.prefixLength < $1.prefixLength) }
        return keys.compactMap { key in addressText(key.bytes).map { "\($0)/\(key.prefixLength)" } }
    }

    /// The path that `routes`, `links` and `addresses` make: per family, the default route of
    /// the lowest metric (the main table's first) whose interface is usable, with the
    /// interface's addresses of that family that name the network; usable when there is one.
    static func path(routes: [Route], links: [Link], addresses: [Address] = []) -> NetworkPath {
        var byIndex: [Int: Link] = [:]
        for link in links { byIndex[link.index] = link }
        var chosen: [UInt8: Route] = [:]
        for route in routes where route.isUsableDefault {
            guard let index = route.outputInterface, let link = byIndex[index], link.isUsable else { continue }
            if let current = chosen[route.family] {
                let rank = (route.table == tableMain ? 0 : 1, route.priority, index)
                let currentRank = (current.table == tableMain ? 0 : 1, current.priority, current.outputInterface ?? 0)
                guard rank < currentRank else { continue }
            }
            chosen[route.family] = route
        }
        let found = chosen.values.compactMap { route -> NetworkPath.Route? in
            guard let index = route.outputInterface else { return nil }
            return NetworkPath.Route(
                family: route.family == familyIPv4 ? .ipv4 : .ipv6,
                interfaceName: byIndex[index]?.name ?? "if\(index)",
                interfaceIndex: index,
                gateway: route.gateway.flatMap(addressText),
                localAddresses: localAddresses(addresses, interface: index, family: route.family)
            )
        }
        return NetworkPath(isUsable: !found.isEmpty, routes: found)
    }

    /// A dump request: `RTM_GETROUTE` or `RTM_GETADDR` of one family (0: every family), or
    /// `RTM_GETLINK`, with sequence `sequence`.
    static func dumpRequest(_ type: UInt16, family: UInt8, sequence: UInt32) -> [UInt8] {
        let body = switch type {
        case getLink: linkHeaderSize
        case getAddress: addressHeaderSize
        default: routeHeaderSize
        }
        var bytes = [UInt8](repeating: 0, count: headerSize + body)
        store(UInt32(bytes.count), into: &bytes, at: 0)
        store(type, into: &bytes, at: 4)
        store(flagRequest | flagDump, into: &bytes, at: 6)
        store(sequence, into: &bytes, at: 8)
        bytes[headerSize] = family
        return bytes
    }

    // MARK: Bytes

    static func aligned(_ length: Int) -> Int { (length + alignment - 1) & ~(alignment - 1) }

    static func readUInt16(_ bytes: ArraySlice<UInt8>, at offset: Int) -> UInt16? {
        guard offset >= bytes.startIndex, offset + 2 <= bytes.endIndex else { return nil }
        var value: UInt16 = 0
        withUnsafeMutableBytes(of: &value) { raw in
            raw[0] = bytes[offset]
            raw[1] = bytes[offset + 1]
        }
        return value
    }

    static func readUInt32(_ bytes: ArraySlice<UInt8>, at offset: Int) -> UInt32? {
        guard offset >= bytes.startIndex, offset + 4 <= bytes.endIndex else { return nil }
        var value: UInt32 = 0
        withUnsafeMutableBytes(of: &value) { raw in
            for index in 0..<4 { raw[index] = bytes[offset + index] }
        }
        return value
    }

    static func store<T: FixedWidthInteger>(_ value: T, into bytes: inout [UInt8], at offset: Int) {
        withUnsafeBytes(of: value) { raw in
            for index in 0..<raw.count { bytes[offset + index] = raw[index] }
        }
    }

    /// An address that arrived as 4 or 16 bytes, as text.
    static func addressText(_ bytes: [UInt8]) -> String? {
        switch bytes.count {
        case 4: return TetherSocketAddress(raw: .v4(host: bytes, port: 0)).ipAddress
        case 16: return TetherSocketAddress(raw: .v6(host: bytes, port: 0, scope: 0)).ipAddress
        default: return nil
        }
    }
}

extension TetherSocketAddress {
    /// The address of `storage`, for text of an address that arrived as bytes.
    fileprivate init(raw storage: Storage) {
        self.storage = storage
    }
}
