package import Tether

/// How HTTP requests and responses travel as frame payloads (type `0x403` in the seed
/// profile).
///
/// A payload is a UTF-8 JSON object, the head, optionally followed by one `0x00` byte and
/// the body's raw bytes. JSON text never holds a raw `0x00` (it is escaped as `\u0000`), so
/// the first `0x00` ends the head.
///
/// - Request head: `{"method":"GET","url":"https://…","headers":[["Accept","*/*"]],"timeout":5000}`;
///   only `url` is required (the seed's own form is `{"url": "…"}`), `timeout` is in
///   milliseconds. Without a `0x00`, a `"body"` string is taken as a UTF-8 body.
/// - Response head: `{"status":200,"headers":[["Content-Type","text/plain"]],"url":"https://…"}`.
/// - Failure: `{"error":"<sentence>","reason":"hostNotAllowed"}`, the seed's error answer
///   with the reason added.
package enum HTTPWire {
    /// The frame type of an HTTP request and its answer in the seed profile.
    package static let defaultType: UInt32 = 0x403

    package static func encode(_ request: HTTPRequest) -> [UInt8] {
        var head: [String: JSONValue] = [
            "method": .string(request.method.rawValue),
            "url": .string(request.url),
        ]
        if !request.headers.isEmpty {
            head["headers"] = encode(request.headers)
        }
        if let timeout = request.timeout {
            head["timeout"] = .int(Int(milliseconds(of: timeout)))
        }
        return join(head, request.body)
    }

    package static func encode(_ response: HTTPResponse) -> [UInt8] {
        let head: [String: JSONValue] = [
            "status": .int(response.status),
            "headers": encode(response.headers),
            "url": .string(response.url),
        ]
        return join(head, response.body)
    }

    package static func encode(_ failure: HTTPForwardingError) -> [UInt8] {
        JSONValue.object(["error": .string(failure.message), "reason": .string(failure.reason.rawValue)]).encoded
    }

    /// Reads a request payload.
    package static func decodeRequest(_ payload: [UInt8]) throws(HTTPForwardingError) -> HTTPRequest {
        let (head, body) = split(payload)
        guard let object = try? JSONValue(parsing: head), let fields = object.objectValue else {
            throw HTTPForwardingError(reason: .invalidRequest, message: "the HTTP request's head is not a JSON object")
        }
        guard let url = fields["url"]?.stringValue else {
            throw HTTPForwardingError(reason: .invalidRequest, message: "the HTTP request has no \"url\"")
        }
        var request = HTTPRequest(url: url)
        if let method = fields["method"] {
            guard let name = method.stringValue else {
                throw HTTPForwardingError(reason: .invalidRequest, message: "the HTTP request's \"method\" is not a string")
            }
            request.method = TetherHTTPMethod(rawValue: name)
        }
        if let headers = fields["headers"] {
            guard let decoded = decodeHeaders(headers) else {
                throw HTTPForwardingError(reason: .invalidRequest, message: "the HTTP request's \"headers\" is not a list of [name, value] pairs")
            }
            request.headers = decoded
        }
        if let timeout = fields["timeout"] {
            guard let milliseconds = timeout.intValue, milliseconds > 0 else {
                throw HTTPForwardingError(reason: .invalidRequest, message: "the HTTP request's \"timeout\" is not a positive number of milliseconds")
            }
            request.timeout = .milliseconds(milliseconds)
        }
        if let body {
            request.body = Array(body)
        } else if let text = fields["body"]?.stringValue {
            request.body = Array(text.utf8)
        }
        return request
    }

    /// Reads an answer payload: a response, or the server's structured failure.
    package static func decodeResponse(_ payload: [UInt8], for request: HTTPRequest) throws(TetherError) -> HTTPResponse {
        let (head, body) = split(payload)
        let what = "the answer to HTTP \(request.method) \(request.url)"
        guard let object = try? JSONValue(parsing: head), let fields = object.objectValue else {
            throw TetherError(code: .decodingFailed, message: "\(what) is not an HTTP response: its head is not a JSON object")
        }
        if let error = fields["error"] {
            let message = error.stringValue ?? error.description
            guard let reason = fields["reason"]?.stringValue else {
                // A server without HTTP forwarding answers with the seed's plain error.
                throw TetherError(code: .remoteError, message: "HTTP \(request.method) \(request.url) failed on the server: \(message)")
            }
            let failure = HTTPForwardingError(reason: HTTPForwardingError.Reason(rawValue: reason), message: message)
            throw TetherError(code: .httpFailed, message: message, underlying: failure)
        }
        guard let status = fields["status"]?.intValue else {
            throw TetherError(code: .decodingFailed, message: "\(what) has no \"status\"")
        }
        var headers = TetherHTTPHeaders()
        if let list = fields["headers"] {
            guard let decoded = decodeHeaders(list) else {
                throw TetherError(code: .decodingFailed, message: "\(what) has \"headers\" that are not [name, value] pairs")
            }
            headers = decoded
        }
        return HTTPResponse(status: status, headers: headers, body: body.map(Array.init) ?? [],
                            url: fields["url"]?.stringValue ?? request.url)
    }

    private static func encode(_ headers: TetherHTTPHeaders) -> JSONValue {
        .array(headers.map { .array([.string($0.name), .string($0.value)]) })
    }

    private static func decodeHeaders(_ value: JSONValue) -> TetherHTTPHeaders? {
        guard let list = value.arrayValue else { return nil }
        var headers = TetherHTTPHeaders()
        for pair in list {
            guard let items = pair.arrayValue, items.count == 2,
                  let name = items[0].stringValue, let value = items[1].stringValue else { return nil }
            headers.add(name: name, value: value)
        }
        return headers
    }

    private static func join(_ head: [String: JSONValue], _ body: [UInt8]) -> [UInt8] {
        var bytes = JSONValue.object(head).encoded
        if !body.isEmpty {
            bytes.reserveCapacity(bytes.count + 1 + body.count)
            bytes.append(0)
            bytes.append(contentsOf: body)
        }
        return bytes
    }

    private static func split(_ payload: [UInt8]) -> (head: ArraySlice<UInt8>, body: ArraySlice<UInt8>?) {
        guard let zero = payload.firstIndex(of: 0) else { return (payload[...], nil) }
        return (payload[..<zero], payload[(zero + 1)...])
    }

    static func milliseconds(of duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
