#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#endif

/// An IP address family, and so a DNS question: AAAA records for IPv6, A records for IPv4.
package enum AddressFamily: Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case ipv6
    case ipv4

    /// The family of `address`.
    init(of address: TetherSocketAddress) {
        self = address.isIPv6 ? .ipv6 : .ipv4
    }

    /// `IPv6` or `IPv4`.
    package var description: String {
        switch self {
        case .ipv6: "IPv6"
        case .ipv4: "IPv4"
        }
    }
}

/// Name resolution with `getaddrinfo(3)`.
enum Resolver {
    /// Every address `endpoint` resolves to for TCP, in the order the system prefers, for
    /// a listening server: one lookup of both families.
    ///
    /// Numeric addresses are parsed without a lookup. Names are resolved with
    /// `getaddrinfo`, which blocks; it runs on a thread of its own so no event loop or
    /// cooperative thread waits on DNS.
    static func resolve(_ endpoint: Endpoint) async throws(TetherError) -> [TetherSocketAddress] {
        try checkPort(of: endpoint)
        if let numeric = TetherSocketAddress(ipAddress: endpoint.host, port: endpoint.port) {
            return [numeric]
        }
        let result: Result<[TetherSocketAddress], TetherError> = await withCheckedContinuation { continuation in
            BlockingThread.run {
                continuation.resume(returning: lookup(endpoint, family: nil))
            }
        }
        return try result.get()
    }

    /// Throws ``TetherError/Code/invalidArgument`` when the port of `endpoint` is not one.
    static func checkPort(of endpoint: Endpoint) throws(TetherError) {
        guard (0...65535).contains(endpoint.port) else {
            throw TetherError(code: .invalidArgument, message: "port \(endpoint.port) of \(endpoint) is out of range")
        }
    }

    /// The addresses of `endpoint` that need no lookup: a numeric address, or the loopback
    /// addresses of `localhost` (RFC 6761: `::1`, then `127.0.0.1`); `nil` for a name.
    static func immediateAddresses(of endpoint: Endpoint) -> [TetherSocketAddress]? {
        if let numeric = TetherSocketAddress(ipAddress: endpoint.host, port: endpoint.port) {
            return [numeric]
        }
        let host = endpoint.host.lowercased()
        guard host == "localhost" || host == "localhost." else { return nil }
        return ["::1", "127.0.0.1"].compactMap { TetherSocketAddress(ipAddress: $0, port: endpoint.port) }
    }

    /// Looks `endpoint` up with `getaddrinfo`, for addresses of `family` (`nil`: both).
    /// Blocks the calling thread for as long as the system's resolver takes.
    static func lookup(_ endpoint: Endpoint, family: AddressFamily?) -> Result<[TetherSocketAddress], TetherError> {
        var hints = addrinfo()
        switch family {
        case .ipv6: hints.ai_family = AF_INET6
        case .ipv4: hints.ai_family = AF_INET
        case nil: hints.ai_family = AF_UNSPEC
        }
        #if canImport(Darwin)
        hints.ai_socktype = SOCK_STREAM
        #else
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(endpoint.host, String(endpoint.port), &hints, &list)
        guard status == 0, let first = list else {
            let reason = status == 0 ? "no addresses" : String(cString: gai_strerror(status))
            return .failure(TetherError(code: .resolutionFailed, message: "cannot resolve \(endpoint.host): \(reason)"))
        }
        defer { freeaddrinfo(first) }
        var addresses: [TetherSocketAddress] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            if let raw = entry.pointee.ai_addr, entry.pointee.ai_family == AF_INET || entry.pointee.ai_family == AF_INET6 {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) {
                    $0.copyMemory(from: UnsafeRawBufferPointer(start: raw, count: Int(entry.pointee.ai_addrlen)))
                }
                let address = TetherSocketAddress(storage: storage)
                if !addresses.contains(address) { addresses.append(address) }
            }
            cursor = entry.pointee.ai_next
        }
        if addresses.isEmpty {
            return .failure(TetherError(code: .resolutionFailed, message: "cannot resolve \(endpoint.host): no addresses"))
        }
        return .success(addresses)
    }
}
