import Testing
@testable import Tether

/// The rtnetlink parsing of the Linux path monitor, on bytes built here: the default path it
/// computes, and malformed input skipped without a crash.
@Suite("Netlink messages")
struct NetlinkTests {
    // MARK: Building messages

    static func attribute(_ type: UInt16, _ value: [UInt8]) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 4)
        Netlink.store(UInt16(4 + value.count), into: &bytes, at: 0)
        Netlink.store(type, into: &bytes, at: 2)
        bytes += value
        while bytes.count % 4 != 0 { bytes.append(0) }
        return bytes
    }

    static func uint32(_ value: UInt32) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 4)
        Netlink.store(value, into: &bytes, at: 0)
        return bytes
    }

    static func message(_ type: UInt16, sequence: UInt32 = 1, _ payload: [UInt8]) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: Netlink.headerSize)
        Netlink.store(UInt32(Netlink.headerSize + payload.count), into: &bytes, at: 0)
        Netlink.store(type, into: &bytes, at: 4)
        Netlink.store(UInt16(2), into: &bytes, at: 6)
        Netlink.store(sequence, into: &bytes, at: 8)
        return bytes + payload
    }

    static func link(index: Int32, name: String, flags: UInt32 = Netlink.interfaceUp | Netlink.interfaceRunning) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: Netlink.linkHeaderSize)
        Netlink.store(UInt32(bitPattern: index), into: &header, at: 4)
        Netlink.store(flags, into: &header, at: 8)
        return message(Netlink.newLink, header + attribute(Netlink.linkAttributeName, Array(name.utf8) + [0]))
    }

    static func route(
        family: UInt8 = Netlink.familyIPv4, destinationLength: UInt8 = 0, table: UInt8 = 254, type: UInt8 = 1,
        flags: UInt32 = 0, interface: UInt32? = 2, gateway: [UInt8]? = [192, 0, 2, 1], metric: UInt32? = nil
    ) -> [UInt8] {
        var header: [UInt8] = [family, destinationLength, 0, 0, table, 3, 0, type] + uint32(flags)
        if let interface { header += attribute(Netlink.routeAttributeOutputInterface, uint32(interface)) }
        if let gateway { header += attribute(Netlink.routeAttributeGateway, gateway) }
        if let metric { header += attribute(Netlink.routeAttributePriority, uint32(metric)) }
        return message(Netlink.newRoute, header)
    }

    static func path(_ datagrams: [UInt8]...) -> NetworkPath {
        var routes: [Netlink.Route] = []
        var links: [Netlink.Link] = []
        for datagram in datagrams {
            for message in Netlink.messages(in: datagram[...]) {
                if message.type == Netlink.newRoute, let route = Netlink.route(in: message.payload) { routes.append(route) }
                if message.type == Netlink.newLink, let link = Netlink.link(in: message.payload) { links.append(link) }
            }
        }
        return Netlink.path(routes: routes, links: links)
    }

    static let v6Gateway: [UInt8] = [0xFE, 0x80] + [UInt8](repeating: 0, count: 13) + [1]

    // MARK: The path

    @Test("the default routes of both families, each on its interface, with the gateway as text")
    func defaultPath() {
        let links = Self.link(index: 1, name: "lo", flags: Netlink.interfaceUp | Netlink.interfaceRunning | Netlink.interfaceLoopback)
            + Self.link(index: 2, name: "wlan0") + Self.link(index: 5, name: "eth1")
        let routes = Self.route(destinationLength: 24, interface: 2)
            + Self.route(interface: 2)
            + Self.route(family: Netlink.familyIPv6, interface: 5, gateway: Self.v6Gateway, metric: 1024)
        let path = Self.path(links, routes)
        #expect(path == NetworkPath(isUsable: true, routes: [
            .init(family: .ipv4, interfaceName: "wlan0", interfaceIndex: 2, gateway: "192.0.2.1"),
            .init(family: .ipv6, interfaceName: "eth1", interfaceIndex: 5, gateway: "fe80::1"),
        ]))
        #expect(path.description == "usable: IPv4 via 192.0.2.1 on wlan0 (index 2); IPv6 via fe80::1 on eth1 (index 5)")
        #expect(path.identity == "IPv4 wlan0#2 via 192.0.2.1, IPv6 eth1#5 via fe80::1")
    }

    @Test("of several defaults, the main table's lowest metric wins; an unusable route or interface does not count")
    func choosingTheRoute() {
        let links = Self.link(index: 2, name: "eth0") + Self.link(index: 3, name: "wlan0")
            + Self.link(index: 4, name: "down0", flags: Netlink.interfaceUp) + Self.link(index: 6, name: "off0", flags: 0)
        let routes = Self.route(interface: 2, gateway: [10, 0, 0, 1], metric: 600)
            + Self.route(interface: 3, gateway: [10, 0, 1, 1], metric: 100)
            + Self.route(table: 200, interface: 2, gateway: [10, 9, 9, 9], metric: 1)
            + Self.route(interface: 4, gateway: [10, 0, 4, 1], metric: 1)
            + Self.route(interface: 6, gateway: [10, 0, 6, 1], metric: 1)
            + Self.route(flags: 0x10, interface: 2, gateway: [10, 0, 7, 1], metric: 1)
            + Self.route(type: 7, interface: 2, gateway: nil, metric: 1)
            + Self.route(table: 255, interface: 2, gateway: [10, 0, 8, 1], metric: 1)
        #expect(Self.path(links, routes).routes == [.init(family: .ipv4, interfaceName: "wlan0", interfaceIndex: 3, gateway: "10.0.1.1")])
        // Only routes outside the main table: the best of them.
        #expect(Self.path(links, Self.route(table: 200, interface: 2, gateway: [10, 9, 9, 9], metric: 1)).routes.first?.gateway == "10.9.9.9")
        // Only unusable ones: no path.
        #expect(Self.path(links, Self.route(interface: 4), Self.route(interface: 7)) == .unusable)
        #expect(Self.path(links) == .unusable)
    }

    @Test("a point-to-point default route without a gateway")
    func noGateway() {
        let path = Self.path(Self.link(index: 7, name: "ppp0"), Self.route(interface: 7, gateway: nil))
        #expect(path.description == "usable: IPv4 on ppp0 (index 7)")
    }

    // MARK: Malformed input

    @Test("malformed headers end the walk at the first bad message; what came before it stands")
    func malformedHeaders() {
        let good = Self.link(index: 2, name: "eth0")
        #expect(Netlink.messages(in: good[...]).count == 1)
        // Shorter than a header.
        #expect(Netlink.messages(in: good.prefix(15)).isEmpty)
        // A length under the header's own size, zero, or past the end.
        for length: UInt32 in [0, 8, 15, UInt32(good.count + 1), .max] {
            var bad = good
            Netlink.store(length, into: &bad, at: 0)
            #expect(Netlink.messages(in: (good + bad)[...]).count == 1, "length \(length)")
        }
        // Cut anywhere: never a message that overruns what is there.
        let two = good + Self.route(interface: 2)
        for end in 0...two.count {
            for message in Netlink.messages(in: two[..<end]) {
                #expect(message.payload.endIndex <= end)
            }
        }
    }

    @Test("malformed attributes and short bodies are skipped: no route, no link, or one without the bad field")
    func malformedBodies() {
        // A route body shorter than rtmsg, a link body shorter than ifinfomsg.
        #expect(Netlink.route(in: [2, 0, 0, 0, 254][...]) == nil)
        #expect(Netlink.link(in: [UInt8](repeating: 0, count: 15)[...]) == nil)
        // An attribute whose length is under its header, or past the end: the walk stops.
        var header: [UInt8] = [2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0]
        header += Self.attribute(Netlink.routeAttributeOutputInterface, Self.uint32(2))
        for length: UInt16 in [0, 3, 200] {
            var bytes = header + [0, 0, 5, 0, 192, 0, 2, 1]
            Netlink.store(length, into: &bytes, at: header.count)
            let route = Netlink.route(in: bytes[...])
            #expect(route?.outputInterface == 2 && route?.gateway == nil, "length \(length)")
        }
        // Values of the wrong size are ignored.
        let odd = header + Self.attribute(Netlink.routeAttributeGateway, [1, 2, 3]) + Self.attribute(Netlink.routeAttributePriority, [1, 2])
        #expect(Netlink.route(in: odd[...])?.gateway == nil)
        #expect(Netlink.route(in: odd[...])?.priority == 0)
        // A name that is empty or too long is no name; the interface is then named by index.
        let unnamed = Self.message(Netlink.newLink, [UInt8](repeating: 0, count: 4) + Self.uint32(9) + Self.uint32(0x41) + [0, 0, 0, 0]
            + Self.attribute(Netlink.linkAttributeName, [0]))
        let path = Self.path(unnamed, Self.route(interface: 9))
        #expect(path.routes.first?.interfaceName == "if9")
    }

    @Test("random bytes and every single-byte corruption of a valid dump parse without a crash", .timeLimit(.guarded))
    func corruptedInput() {
        let valid = Self.link(index: 2, name: "wlan0") + Self.route(interface: 2, metric: 5)
            + Self.route(family: Netlink.familyIPv6, interface: 2, gateway: Self.v6Gateway)
        func parse(_ bytes: [UInt8]) {
            var routes: [Netlink.Route] = []
            var links: [Netlink.Link] = []
            for message in Netlink.messages(in: bytes[...]) {
                if let route = Netlink.route(in: message.payload) { routes.append(route) }
                if let link = Netlink.link(in: message.payload) { links.append(link) }
                _ = Netlink.attributes(in: message.payload)
            }
            _ = Netlink.path(routes: routes, links: links)
        }
        for offset in valid.indices {
            for value: UInt8 in [0, 1, 3, 4, 0x7F, 0xFF] {
                var corrupted = valid
                corrupted[offset] = value
                parse(corrupted)
            }
        }
        var random = BackoffRandom(seed: 21)
        for _ in 0..<2_000 {
            let count = Int(random.next() % 200)
            parse((0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        }
    }

    @Test("a dump request is one header and the family's body")
    func dumpRequest() {
        let request = Netlink.dumpRequest(Netlink.getRoute, family: Netlink.familyIPv6, sequence: 7)
        let messages = Netlink.messages(in: request[...])
        #expect(messages == [Netlink.Message(type: Netlink.getRoute, flags: 0x301, sequence: 7, payload: request[16...])])
        #expect(request.count == 28 && request[16] == Netlink.familyIPv6)
        #expect(Netlink.dumpRequest(Netlink.getLink, family: 0, sequence: 1).count == 32)
    }
}
