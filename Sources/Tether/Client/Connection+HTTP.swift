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
    ///   - timeout: How long to wait for the answer; `nil` waits for the request's own
    ///     ``HTTPRequest/timeout`` plus 2 s, or else ``ConnectionConfiguration/requestTimeout``.
    ///     When the request sets no timeout of its own, the server is asked to give up on the
    ///     upstream exchange after this long too.
    ///   - type: The frame type the server forwards HTTP requests on. Default `0x403`.
    /// - Returns: The upstream server's response.
    /// - Throws: ``TetherError`` with ``TetherError/Code/httpFailed`` when the server could not
    ///   get a response (its ``TetherError/underlying`` is an ``HTTPForwardingError`` with
    ///   the reason: a host not allowed, a timeout, a body over the limit, an unreachable
    ///   host); ``TetherError/Code/remoteError`` when the server does not forward HTTP;
    ///   ``TetherError/Code/invalidArgument`` for an invalid method; and whatever
    ///   ``request(_:timeout:)`` throws.
    public func http(_ request: HTTPRequest, timeout: Duration? = nil, type: UInt32 = 0x403) async throws -> HTTPResponse {
        guard request.method.isValid else {
            throw TetherError(code: .invalidArgument, message: "\"\(request.method)\" is not a valid HTTP method")
        }
        var outgoing = request
        let limit: Duration?
        if let timeout {
            limit = timeout
            if outgoing.timeout == nil { outgoing.timeout = timeout }
        } else if let own = request.timeout {
            limit = own + .seconds(2)
        } else {
            limit = configuration.requestTimeout
            outgoing.timeout = limit
        }
        let reply = try await self.request(Request(type: type, payload: HTTPWire.encode(outgoing)), timeout: limit)
        return try HTTPWire.decodeResponse(reply.payload, for: request)
    }
}
