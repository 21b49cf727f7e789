/// Where a connection looks up the addresses of a host name: one address family at a time,
/// so that connecting can start on the first answer (RFC 8305, section 3).
///
/// A connection asks for both families at once, each in a task of its own, within its
/// connect timeout; when it no longer wants an answer (one connection attempt won, the
/// timeout passed, the connect was cancelled), it cancels the tasks that still wait.
/// ``SystemResolver`` is the system's resolver; tests inject others through
/// ``ConnectionConfiguration/resolver``.
package protocol NameResolver: Sendable {
    /// The addresses of `endpoint`'s host in `family`, with `endpoint`'s port, in the
    /// order to try them.
    ///
    /// Must return promptly when the calling task is cancelled, with any result: the
    /// connection ignores it.
    ///
    /// - Parameters:
    ///   - endpoint: The host and port to resolve.
    ///   - family: The family asked for.
    /// - Returns: At least one address, each of `family`.
    /// - Throws: ``TetherError/Code/resolutionFailed`` when the host has no address in
    ///   `family`.
    func addresses(of endpoint: Endpoint, family: AddressFamily) async throws(TetherError) -> [TetherSocketAddress]
}

/// A resolver for tests that knows every address of a host at once: each family is answered
/// at once with the addresses of that family, in the closure's order.
package struct AddressListResolver: NameResolver {
    private let all: @Sendable (Endpoint) async throws(TetherError) -> [TetherSocketAddress]

    /// A resolver that answers from `addresses`.
    ///
    /// - Parameter addresses: Every address of an endpoint, both families.
    package init(_ addresses: @escaping @Sendable (Endpoint) async throws(TetherError) -> [TetherSocketAddress]) {
        self.all = addresses
    }

    /// The addresses of `family` that the closure returns for `endpoint`.
    package func addresses(of endpoint: Endpoint, family: AddressFamily) async throws(TetherError) -> [TetherSocketAddress] {
        let found = try await all(endpoint).filter { AddressFamily(of: $0) == family }
        guard !found.isEmpty else {
            throw TetherError(code: .resolutionFailed, message: "cannot resolve \(endpoint.host): no \(family) address")
        }
        return found
    }
}

extension NameResolver where Self == AddressListResolver {
    /// A resolver that answers both families at once from `addresses`.
    ///
    /// - Parameter addresses: Every address of an endpoint, both families.
    /// - Returns: The resolver.
    package static func list(_ addresses: @escaping @Sendable (Endpoint) async throws(TetherError) -> [TetherSocketAddress]) -> Self {
        AddressListResolver(addresses)
    }
}
