/// A stream that gets TLS when it becomes a transport: the session is made then, for the
/// host a client expects the certificate to name (`nil` on a server).
struct SecuredStream: LayeredStream {
    let below: any OpenedStream
    let tls: TLSConfiguration
    let serverName: String?

    var keepsBytes: Bool { false }

    func makeTransport(on loop: EventLoop, reading use: ReadBufferUse) throws(TetherError) -> any ByteTransport {
        let base = try below.makeTransport(on: loop, reading: .sealed)
        let session: any TLSSession
        do {
            session = try tls.provider.makeSession(host: serverName, remoteAddress: base.remoteAddress)
        } catch {
            base.close()
            throw error
        }
        return TLSTransport(over: base, session: session, loop: loop)
    }
}

/// Connects with another connector, then layers TLS made with `tls` over the stream,
/// verifying the certificate for the endpoint's host.
package struct TLSConnector: StreamConnector {
    let below: any StreamConnector
    let tls: TLSConfiguration

    package init(over below: any StreamConnector, tls: TLSConfiguration) {
        self.below = below
        self.tls = tls
    }

    package func connect(to endpoint: Endpoint, in context: ConnectContext, isolation: isolated any Actor) async -> Result<ConnectedStream, TetherError> {
        await below.connect(to: endpoint, in: context, isolation: isolation).map { [tls] connected in
            var connected = connected
            connected.stream = SecuredStream(below: connected.stream, tls: tls, serverName: endpoint.host)
            return connected
        }
    }
}

extension StreamListener {
    /// This listener with TLS made with `tls` over each stream it accepts.
    ///
    /// - Parameter tls: The server's TLS.
    /// - Returns: The layered listener.
    func secured(with tls: TLSConfiguration) -> any StreamListener {
        LayeringListener(over: self) { SecuredStream(below: $0, tls: tls, serverName: nil) }
    }
}
