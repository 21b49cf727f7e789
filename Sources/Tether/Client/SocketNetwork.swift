/// The system's sockets: TCP for `host:port`, a Unix domain socket for `unix://` paths.
package struct SocketNetwork: StreamNetwork {
    package init() {}

    package func connector(for endpoint: Endpoint) -> any StreamConnector {
        if let path = endpoint.unixSocketPath { return UnixConnector(path: path) }
        return TCPConnector()
    }

    package func listener(for endpoint: Endpoint) -> any StreamListener {
        if let path = endpoint.unixSocketPath { return UnixListener(path: path, permissions: UnixListener.defaultPermissions) }
        return TCPListener(endpoint: endpoint)
    }
}
