/// The order in which a connection tries the addresses a host resolves to (RFC 8305,
/// section 4): the system's order, with the address families interleaved, starting with
/// the family of the system's first address.
enum AddressRace {
    /// `addresses` with IPv6 and IPv4 alternating, each family in its own order, starting
    /// with the family of the first; once one family runs out, the rest of the other.
    static func interleaved(_ addresses: [TetherSocketAddress]) -> [TetherSocketAddress] {
        guard let first = addresses.first else { return [] }
        return interleaved(addresses, preferring: AddressFamily(of: first))
    }

    /// `addresses` with IPv6 and IPv4 alternating, each family in its own order, starting
    /// with `family` when there is an address of it; once one family runs out, the rest of
    /// the other.
    static func interleaved(_ addresses: [TetherSocketAddress], preferring family: AddressFamily) -> [TetherSocketAddress] {
        let primary = addresses.filter { AddressFamily(of: $0) == family }
        let secondary = addresses.filter { AddressFamily(of: $0) != family }
        var ordered: [TetherSocketAddress] = []
        ordered.reserveCapacity(addresses.count)
        for index in 0..<max(primary.count, secondary.count) {
            if index < primary.count { ordered.append(primary[index]) }
            if index < secondary.count { ordered.append(secondary[index]) }
        }
        return ordered
    }
}
