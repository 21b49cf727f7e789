public import Tether

extension Connection {
    /// Performs an HTTP request through the server at the other end of this connection.
    ///
    /// The request travels as one frame of `type` (`0x403` in the seed profile); the server
    /// performs it against the upstream HTTP server and answers with the status, headers and
    /// body. An app can so send its HTTP traffic through its one long connection, encrypted
    /// when the connection uses TLS. The server decides which hosts it reaches (it allows
    /// none by default); see <doc:HTTPThroughTheChannel>.
    ///
    /// ```swift
    /// let response = try await connection.http(.get("https://api.example.com/users/42"))
    /// guard response.isSuccess else { throw AppError.status(response.status) }
    /// let user = try response.decode(User.self)
    /// ```
    ///
    /// Every status the upstream server answers with is returned, `404` and `500` included.
    ///
    /// - Parameters:
    ///   - request: The method, URL, headers and body.
    ///   - timeout: How long to wait for the answer. ``Tether/RequestTimeout/configured`` (the
    ///     default) waits for the request's own ``TetherHTTP/HTTPRequest/timeout`` plus 2 s, or else
    ///     ``Tether/ConnectionConfiguration/requestTimeout``; a duration of its own waits that long;
    ///     ``Tether/RequestTimeout/unlimited`` waits until the answer comes, the task is cancelled
    ///     or the connection ends. When the request sets no timeout of its own, the server is
    ///     asked to give up on the upstream exchange after the limit this gives, if any
    ///     (with none, the server's own limit applies).
    ///   - type: The frame type the server forwards HTTP requests on. Default `0x403`.
    /// - Returns: The upstream server's response.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/httpFailed`` when the server could not
    ///   get a response (its ``Tether/TetherError/underlying`` is an ``TetherHTTP/HTTPForwardingError`` with
    ///   the reason: a host not allowed, a timeout, a body over the limit, an unreachable
    ///   host); ``Tether/TetherError/Code/remoteError`` when the server does not forward HTTP;
    ///   ``Tether/TetherError/Code/invalidArgument`` for an invalid method; and whatever
    ///   ``request(_:timeout:)`` throws.
    public func http(_ request: HTTPRequest, timeout: RequestTimeout = .configured, type: UInt32 = 0x403) async throws -> HTTPResponse {
        guard request.method.isValid else {
            throw TetherError(code: .invalidArgument, message: "\"\(request.method)\" is not a valid HTTP method")
        }
        var outgoing = request
        let limit: RequestTimeout
        switch timeout.kind {
        case .after(let duration):
            limit = timeout
            if outgoing.timeout == nil { outgoing.timeout = duration }
        case .unlimited:
            limit = .unlimited
        case .configured:
            if let own = request.timeout {
                limit = .after(own + .seconds(2))
            } else {
                limit = configuration.requestTimeout.map(RequestTimeout.after) ?? .unlimited
                outgoing.timeout = configuration.requestTimeout
            }
        }
        let reply = try await self.request(Request(type: type, payload: HTTPWire.encode(outgoing)), timeout: limit)
        return try HTTPWire.decodeResponse(reply.payload, for: request)
    }
}
