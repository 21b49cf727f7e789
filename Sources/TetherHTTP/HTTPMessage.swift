public import Tether

/// An HTTP request method, such as `GET` or `POST`.
///
/// Methods are case-sensitive tokens; the common ones are static members, and any other
/// token can be written as a string literal: `let method: TetherHTTPMethod = "PROPFIND"`.
public struct TetherHTTPMethod: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The method's name as it goes on the request line.
    public let rawValue: String

    /// Creates a method from its name.
    ///
    /// - Parameter rawValue: The method's name, such as `"GET"`.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// Creates a method from a string literal.
    ///
    /// - Parameter value: The method's name.
    public init(stringLiteral value: String) {
        self.rawValue = value
    }

    /// `GET`: reads a resource.
    public static let get: TetherHTTPMethod = "GET"
    /// `HEAD`: reads a resource's headers only.
    public static let head: TetherHTTPMethod = "HEAD"
    /// `POST`: submits a body.
    public static let post: TetherHTTPMethod = "POST"
    /// `PUT`: replaces a resource with the body.
    public static let put: TetherHTTPMethod = "PUT"
    /// `PATCH`: changes part of a resource.
    public static let patch: TetherHTTPMethod = "PATCH"
    /// `DELETE`: removes a resource.
    public static let delete: TetherHTTPMethod = "DELETE"
    /// `OPTIONS`: asks what a resource supports.
    public static let options: TetherHTTPMethod = "OPTIONS"

    /// Whether the name is a valid HTTP token: letters, digits and a few symbols, without
    /// spaces or control characters.
    public var isValid: Bool {
        !rawValue.isEmpty && rawValue.utf8.allSatisfy(isTokenByte)
    }

    /// The method's name.
    public var description: String { rawValue }
}

/// An HTTP request that a Tether server performs on the client's behalf, sent with
/// ``Tether/Connection/http(_:timeout:type:)``.
///
/// Shaped like Foundation's `URLRequest`: a method, an absolute `http` or `https` URL,
/// headers and a body. The server decides which hosts it reaches; see
/// <doc:HTTPThroughTheChannel>.
///
/// ```swift
/// let response = try await connection.http(.get("https://api.example.com/users/42"))
/// print(response.status, response.text)
/// ```
public struct HTTPRequest: Sendable, Hashable {
    /// The method. Default `GET`.
    public var method: TetherHTTPMethod
    /// The absolute URL, `http://` or `https://`.
    public var url: String
    /// The header fields to send. Hop-by-hop fields (`Connection`, `Keep-Alive`,
    /// `Transfer-Encoding`, `Upgrade`, …) are not forwarded; `Host` and `Content-Length`
    /// are set by the server from the URL and the body.
    public var headers: TetherHTTPHeaders
    /// The body bytes; empty for none.
    public var body: [UInt8]
    /// How long the server may spend on the exchange with the upstream server, redirects
    /// included; `nil` leaves it to the server's limit. The server never waits longer than
    /// its own limit, whatever is asked.
    public var timeout: Duration?

    /// Creates a request.
    ///
    /// - Parameters:
    ///   - method: The method. Default `GET`.
    ///   - url: The absolute `http` or `https` URL.
    ///   - headers: The header fields to send.
    ///   - body: The body bytes.
    ///   - timeout: How long the server may spend on the upstream exchange; `nil` leaves it
    ///     to the server.
    public init(method: TetherHTTPMethod = .get, url: String, headers: TetherHTTPHeaders = [:], body: [UInt8] = [], timeout: Duration? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }

    /// A `GET` request.
    ///
    /// - Parameters:
    ///   - url: The absolute `http` or `https` URL.
    ///   - headers: The header fields to send.
    /// - Returns: The request.
    public static func get(_ url: String, headers: TetherHTTPHeaders = [:]) -> HTTPRequest {
        HTTPRequest(method: .get, url: url, headers: headers)
    }

    /// A `POST` request whose body is a JSON value, with `Content-Type: application/json`.
    ///
    /// - Parameters:
    ///   - url: The absolute `http` or `https` URL.
    ///   - json: The body, written with literals.
    ///   - headers: More header fields to send.
    /// - Returns: The request.
    public static func post(_ url: String, json: JSONValue, headers: TetherHTTPHeaders = [:]) -> HTTPRequest {
        var request = HTTPRequest(method: .post, url: url, headers: headers, body: json.encoded)
        if request.headers["Content-Type"] == nil {
            request.headers["Content-Type"] = "application/json"
        }
        return request
    }
}

/// The answer to an ``HTTPRequest``, as the upstream server gave it.
///
/// Any status the upstream server sends is a response, `404` and `500` included; only a
/// failure to get one at all (a host the server does not allow, a timeout, a body over the
/// limit, an unreachable host) throws.
public struct HTTPResponse: Sendable, Hashable {
    /// The status code, such as `200`.
    public var status: Int
    /// The header fields, without hop-by-hop fields.
    public var headers: TetherHTTPHeaders
    /// The body bytes, decoded from any content encoding the transfer used.
    public var body: [UInt8]
    /// The URL that answered: the request's, or the last one of the redirects the server
    /// followed.
    public var url: String

    /// Creates a response.
    ///
    /// - Parameters:
    ///   - status: The status code.
    ///   - headers: The header fields.
    ///   - body: The body bytes.
    ///   - url: The URL that answered.
    public init(status: Int, headers: TetherHTTPHeaders = [:], body: [UInt8] = [], url: String) {
        self.status = status
        self.headers = headers
        self.body = body
        self.url = url
    }

    /// Whether the status is in `200..<300`.
    public var isSuccess: Bool { (200..<300).contains(status) }

    /// The body as UTF-8 text, with invalid bytes replaced.
    public var text: String { String(decoding: body, as: UTF8.self) }

    /// The body parsed as JSON, or `nil` when it is empty or not JSON.
    public var json: JSONValue? { body.isEmpty ? nil : try? JSONValue(parsing: body) }

    /// Decodes the body as JSON into a `Decodable` type.
    ///
    /// - Parameter type: The type to decode.
    /// - Returns: The decoded value.
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/decodingFailed``.
    public func decode<T: Decodable>(_ type: T.Type) throws(TetherError) -> T {
        try JSONCoding.decode(type, from: body, what: "HTTP \(status) body from \(url)")
    }
}

/// Why a server could not perform an ``HTTPRequest``: the `underlying` error of the
/// ``Tether/TetherError/Code/httpFailed`` that ``Tether/Connection/http(_:timeout:type:)`` throws.
public struct HTTPForwardingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure, as the server reports it.
    public struct Reason: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The name that travels on the wire.
        public let rawValue: String

        /// Creates a reason from its wire name.
        ///
        /// - Parameter rawValue: The name, such as `"hostNotAllowed"`.
        public init(rawValue: String) {
            self.rawValue = rawValue
        }

        /// The URL's host and port are not on the server's allow-list. No connection was made.
        public static let hostNotAllowed = Reason(rawValue: "hostNotAllowed")
        /// The request is not one the server performs: not an absolute `http`/`https` URL,
        /// user info in the URL, an invalid method or header, an unreadable payload.
        public static let invalidRequest = Reason(rawValue: "invalidRequest")
        /// The upstream server did not answer completely within the time allowed.
        public static let timedOut = Reason(rawValue: "timedOut")
        /// The upstream response's body is larger than the server allows.
        public static let responseTooLarge = Reason(rawValue: "responseTooLarge")
        /// The upstream host could not be reached: its name did not resolve, or it refused
        /// or dropped the connection.
        public static let upstreamUnreachable = Reason(rawValue: "upstreamUnreachable")
        /// The exchange with the upstream server failed in another way (TLS, a malformed
        /// response).
        public static let upstreamFailed = Reason(rawValue: "upstreamFailed")

        /// The wire name.
        public var description: String { rawValue }
    }

    /// The kind of failure.
    public var reason: Reason
    /// The server's sentence about it, naming the method, URL and limit involved.
    public var message: String

    /// Creates a forwarding error.
    ///
    /// - Parameters:
    ///   - reason: The kind of failure.
    ///   - message: A sentence that says what happened and where.
    public init(reason: Reason, message: String) {
        self.reason = reason
        self.message = message
    }

    /// The message.
    public var description: String { message }
}
