import Testing
@testable import Tether

/// What names a network: a path's interface, gateway and local addresses, with the rules
/// that keep an identity stable (secondary IPv4 addresses, IPv6 temporary addresses and
/// link-local addresses do not count), from netlink bytes built here.
@Suite("Network identity")
struct NetworkIdentityTests {
    static func wifi(_ addresses: String...) -> NetworkPath {
        NetworkPath(isUsable: true, routes: [
            .init(family: .ipv4, interfaceName: "wlan0", interfaceIndex: 3, gateway: "192.168.1.1", localAddresses: addresses),
        ])
    }

    /// An `RTM_NEWADDR` of interface `index`: `ifaddrmsg`, then `IFA_ADDRESS` (and `IFA_LOCAL`,
    /// `IFA_FLAGS` when given).
    static func address(
        family: UInt8 = Netlink.familyIPv4, prefixLength: UInt8, flags: UInt8 = 0, scope: UInt8 = 0, index: UInt32 = 3,
        _ bytes: [UInt8], local: [UInt8]? = nil, extendedFlags: UInt32? = nil
    ) -> [UInt8] {
        var body: [UInt8] = [family, prefixLength, flags, scope] + NetlinkTests.uint32(index)
        body += NetlinkTests.attribute(Netlink.addressAttributeAddress, bytes)
        if let local { body += NetlinkTests.attribute(Netlink.addressAttributeLocal, local) }
        if let extendedFlags { body += NetlinkTests.attribute(Netlink.addressAttributeFlags, NetlinkTests.uint32(extendedFlags)) }
        return NetlinkTests.message(Netlink.newAddress, body)
    }

    static func addresses(_ datagrams: [UInt8]...) -> [Netlink.Address] {
        datagrams.flatMap { datagram in
            Netlink.messages(in: datagram[...]).compactMap { Netlink.address(in: $0.payload) }
        }
    }

    /// The path of a link `wlan0` (index 3) with an IPv4 and an IPv6 default route, and `addresses`.
    static func path(_ addresses: [Netlink.Address]) -> NetworkPath {
        var routes: [Netlink.Route] = []
        var links: [Netlink.Link] = []
        let datagram = NetlinkTests.link(index: 3, name: "wlan0") + NetlinkTests.link(index: 4, name: "eth0")
            + NetlinkTests.route(interface: 3, gateway: [192, 168, 1, 1])
            + NetlinkTests.route(family: Netlink.familyIPv6, interface: 3, gateway: NetlinkTests.v6Gateway)
        for message in Netlink.messages(in: datagram[...]) {
            if message.type == Netlink.newRoute, let route = Netlink.route(in: message.payload) { routes.append(route) }
            if message.type == Netlink.newLink, let link = Netlink.link(in: message.payload) { links.append(link) }
        }
        return Netlink.path(routes: routes, links: links, addresses: addresses)
    }

    static func v6(_ prefix: [UInt8], _ suffix: [UInt8]) -> [UInt8] {
        prefix + [UInt8](repeating: 0, count: 16 - prefix.count - suffix.count) + suffix
    }

    static let prefix: [UInt8] = [0x20, 0x01, 0x0D, 0xB8, 0, 1, 0, 2]

    // MARK: The identity

    @Test("a new address on the same interface and gateway is another network: another identity, a change, another line")
    func addressIsPartOfIdentity() {
        let before = Self.wifi("10.9.9.2/24")
        let after = Self.wifi("10.9.9.3/24")
        #expect(before.identity == "IPv4 wlan0#3 via 192.168.1.1 from 10.9.9.2/24")
        #expect(after.identity == "IPv4 wlan0#3 via 192.168.1.1 from 10.9.9.3/24")
        #expect(before.differs(from: after))
        #expect(before.description == "usable: IPv4 via 192.168.1.1 on wlan0 (index 3) from 10.9.9.2/24")
        // The same address again is the same network; a path without addresses reads as before.
        #expect(!before.differs(from: Self.wifi("10.9.9.2/24")))
        #expect(Self.wifi().identity == "IPv4 wlan0#3 via 192.168.1.1")
        #expect(Self.wifi().description == "usable: IPv4 via 192.168.1.1 on wlan0 (index 3)")
        #expect(Self.wifi("10.9.9.2/24", "10.9.8.2/24").identity == "IPv4 wlan0#3 via 192.168.1.1 from 10.9.9.2/24 10.9.8.2/24")
        // Nothing known on one side is still no change.
        #expect(!NetworkPath.assumedUsable.differs(from: before))
    }

    @Test("the adaptive heartbeat's memory keeps two networks behind the same router apart, and finds each again")
    func memoryKeepsNetworksApart() {
        let memory = HeartbeatMemory()
        let endpoint = Endpoint(host: "server", port: 9000)
        let home = Self.wifi("192.168.1.20/24")
        let cafe = Self.wifi("192.168.1.57/24")
        #expect(HeartbeatMemory.key(path: home, endpoint: endpoint) != HeartbeatMemory.key(path: cafe, endpoint: endpoint))
        memory.store(.init(lastGood: 270_000_000_000), for: HeartbeatMemory.key(path: home, endpoint: endpoint))
        #expect(memory.lastGoodInterval(on: cafe, to: endpoint) == nil)
        memory.store(.init(lastGood: 30_000_000_000), for: HeartbeatMemory.key(path: cafe, endpoint: endpoint))
        #expect(memory.count == 2)
        #expect(memory.lastGoodInterval(on: home, to: endpoint) == .seconds(270))
        #expect(memory.lastGoodInterval(on: cafe, to: endpoint) == .seconds(30))
        #expect(memory.snapshot().entries.map(\.network) == [
            "IPv4 wlan0#3 via 192.168.1.1 from 192.168.1.20/24",
            "IPv4 wlan0#3 via 192.168.1.1 from 192.168.1.57/24",
        ])
    }

    // MARK: From netlink

    @Test("the addresses of the route's interface and family, primary IPv4 ones with their prefix, in numeric order")
    func ipv4Addresses() {
        let path = Self.path(Self.addresses(
            Self.address(prefixLength: 24, [10, 9, 9, 10]),
            Self.address(prefixLength: 24, [10, 9, 9, 9]),
            Self.address(prefixLength: 24, [10, 9, 9, 9]),                       // the same one twice
            Self.address(prefixLength: 24, flags: 0x01, [10, 9, 9, 77]),         // secondary
            Self.address(prefixLength: 24, [10, 9, 9, 78], extendedFlags: 0x01), // secondary, in IFA_FLAGS
            Self.address(prefixLength: 8, scope: Netlink.scopeHost, [127, 0, 0, 1]),
            Self.address(prefixLength: 24, index: 4, [172, 16, 0, 2]),          // another interface
            // Point-to-point: the local end, not the peer.
            Self.address(prefixLength: 32, [10, 64, 0, 1], local: [10, 64, 0, 2])
        ))
        #expect(path.routes.first?.localAddresses == ["10.9.9.9/24", "10.9.9.10/24", "10.64.0.2/32"])
        #expect(path.routes.last?.localAddresses == [])
    }

    @Test("IPv6 counts by prefix: temporary addresses that rotate in it are the same network; link-local ones do not count")
    func ipv6Prefixes() {
        let stable = Self.address(family: Netlink.familyIPv6, prefixLength: 64, Self.v6(Self.prefix, [0x02, 0x11, 0x22, 0xFF, 0xFE, 0x33, 0x44, 0x55]))
        let temporary = Self.address(family: Netlink.familyIPv6, prefixLength: 64, flags: 0x01, Self.v6(Self.prefix, [0x5A, 0x17, 0x9C, 0x01]))
        let rotated = Self.address(family: Netlink.familyIPv6, prefixLength: 64, flags: 0x01, Self.v6(Self.prefix, [0x03, 0xE4, 0x21, 0x77]))
        let linkLocal = Self.address(family: Netlink.familyIPv6, prefixLength: 64, scope: Netlink.scopeLink, Self.v6([0xFE, 0x80], [0x11, 0x22]))
        let leased = Self.address(family: Netlink.familyIPv6, prefixLength: 128, Self.v6(Self.prefix, [0x10, 0x01]))
        let before = Self.path(Self.addresses(stable, temporary, linkLocal, leased))
        let after = Self.path(Self.addresses(stable, rotated, linkLocal))
        #expect(before.routes.last?.localAddresses == ["2001:db8:1:2::/64"])
        #expect(before == after)
        #expect(before.identity == after.identity)
        #expect(before.identity == "IPv4 wlan0#3 via 192.168.1.1, IPv6 wlan0#3 via fe80::1 from 2001:db8:1:2::/64")
        // A new prefix (another network, or a renumbering) is a change; a shorter prefix stays as it is.
        let renumbered = Self.path(Self.addresses(Self.address(family: Netlink.familyIPv6, prefixLength: 48, Self.v6([0x20, 0x01, 0x0D, 0xB8, 0, 9, 0xAB, 0xCD], [1]))))
        #expect(renumbered.routes.last?.localAddresses == ["2001:db8:9::/48"])
        #expect(before.differs(from: renumbered))
    }

    @Test("short or malformed address messages are skipped, or keep what is sound")
    func malformedAddresses() {
        #expect(Netlink.address(in: [2, 24, 0, 0, 3, 0, 0][...]) == nil)
        // An address of the wrong size names nothing.
        let odd = Self.addresses(Self.address(prefixLength: 24, [10, 9, 9]))
        #expect(odd.count == 1 && odd[0].bytes == nil && odd[0].networkKey == nil)
        // Of a family that does not match its size: nothing either.
        #expect(Self.addresses(Self.address(family: Netlink.familyIPv6, prefixLength: 64, [10, 9, 9, 2]))[0].networkKey == nil)
        // A prefix length past the address's size is cut to it.
        #expect(Self.path(Self.addresses(Self.address(prefixLength: 99, [10, 9, 9, 2]))).routes.first?.localAddresses == ["10.9.9.2/32"])
        #expect(Netlink.masked([0xFF, 0xFF, 0xFF], to: 12) == [0xFF, 0xF0, 0])
        #expect(Netlink.dumpRequest(Netlink.getAddress, family: 0, sequence: 9).count == Netlink.headerSize + Netlink.addressHeaderSize)
    }
}
