#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
@testable import Tether
@testable import TetherHTTP

/// Runs a Tether server that forwards HTTP with `configuration`, and a connection to it.
private func withForwarding<T: Sendable>(
    _ configuration: HTTPForwardingConfiguration,
    limits: (inout Limits) -> Void = { _ in },
    _ body: @escaping @Sendable (Connection) async throws -> T
) async throws -> T {
    try await withServer(configure: { limits(&$0.limits) }, handlers: { $0.forwardHTTP(configuration) }) { _, endpoint in
        let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
        defer { Task { await connection.close() } }
        return try await bounded("the HTTP exchange") { try await body(connection) }
    }
}

/// The forwarding failure a call throws, or a test failure if it throws something else.
private func forwardingFailure(_ call: @Sendable () async throws -> HTTPResponse) async -> (TetherError, HTTPForwardingError)? {
    do {
        let response = try await call()
        Issue.record("expected a forwarding failure, got HTTP \(response.status)")
    } catch let error as TetherError {
        guard error.code == .httpFailed, let failure = error.underlying as? HTTPForwardingError else {
            Issue.record("expected httpFailed, got \(error.code): \(error.message)")
            return nil
        }
        return (error, failure)
    } catch {
        Issue.record("unexpected error \(error)")
    }
    return nil
}

/// Whether a connection is waiting in a listening socket's queue: a connection attempt to
/// it would have completed its handshake and be sitting there.
private func hasPendingConnection(_ listener: RawSocket) -> Bool {
    var descriptor = pollfd(fd: listener.fd, events: Int16(POLLIN), revents: 0)
    return poll(&descriptor, 1, 0) > 0
}

@Suite("HTTP through the channel, against a real HTTP server", .timeLimit(.guarded))
struct HTTPForwardingTests {
    @Test("a GET goes through the channel: status, headers, body, and the fields the upstream saw")
    func get() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let response = try await withForwarding(configuration) { connection in
            try await connection.http(.get(upstream.url("/echo?x=1&y=two"), headers: ["X-Trace": "7f3a", "Accept": "application/json"]))
        }
        #expect(response.status == 200)
        #expect(response.isSuccess)
        #expect(response.url == upstream.url("/echo?x=1&y=two"))
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.headers["Connection"] == nil)
        let echo = try #require(response.json)
        #expect(echo["method"] == "GET")
        #expect(echo["path"] == "/echo")
        #expect(echo["query"] == "x=1&y=two")
        let seen = try #require(upstream.requests.first)
        #expect(upstream.requests.count == 1)
        #expect(seen.header("X-Trace") == "7f3a")
        #expect(seen.header("Accept") == "application/json")
        #expect(seen.header("Host") == upstream.hostAndPort)
        #expect(seen.header("Cookie") == nil)
    }

    @Test("every status is a response, not an error: 200, 302 unfollowed, 404, 500")
    func statusCodes() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let statuses = try await withForwarding(configuration) { connection in
            var seen: [Int: String] = [:]
            for code in [200, 404, 500, 503] {
                let response = try await connection.http(.get(upstream.url("/status/\(code)")))
                seen[response.status] = response.text
            }
            return seen
        }
        #expect(statuses == [200: "status 200", 404: "status 404", 500: "status 500", 503: "status 503"])
    }

    @Test("POST, PUT, PATCH, DELETE carry their bodies; HEAD gets headers only")
    func methods() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let results = try await withForwarding(configuration) { connection in
            var results: [String: JSONValue] = [:]
            let post = try await connection.http(.post(upstream.url("/echo"), json: ["name": "tether"]))
            results["POST"] = post.json
            for method in [TetherHTTPMethod.put, .patch, .delete] {
                let response = try await connection.http(HTTPRequest(method: method, url: upstream.url("/echo"), body: Array("body of \(method)".utf8)))
                results[method.rawValue] = response.json
            }
            let head = try await connection.http(HTTPRequest(method: .head, url: upstream.url("/echo")))
            results["HEAD"] = .object(["status": .int(head.status), "body": .int(head.body.count)])
            return results
        }
        #expect(results["POST"]?["method"] == "POST")
        #expect(results["POST"]?["body"] == #"{"name":"tether"}"#)
        for method in ["PUT", "PATCH", "DELETE"] {
            #expect(results[method]?["method"] == .string(method))
            #expect(results[method]?["body"] == .string("body of \(method)"))
        }
        #expect(results["HEAD"] == ["status": 200, "body": 0])
        let post = try #require(upstream.requests.first { $0.method == "POST" })
        #expect(post.header("Content-Type") == "application/json")
        #expect(post.header("Content-Length") == "17")
    }

    @Test("hop-by-hop fields are not forwarded either way; Host and Content-Length come from the URL and body")
    func hopByHop() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let headers: TetherHTTPHeaders = [
            "Connection": "keep-alive, X-Secret", "X-Secret": "named by Connection", "Keep-Alive": "timeout=5",
            "TE": "trailers", "Upgrade": "websocket", "Proxy-Authorization": "Basic Zm9vOmJhcg==",
            "Host": "internal.example", "Content-Length": "999", "X-Kept": "yes",
        ]
        let response = try await withForwarding(configuration) { connection in
            _ = try await connection.http(HTTPRequest(method: .post, url: upstream.url("/echo"), headers: headers, body: Array("abc".utf8)))
            return try await connection.http(.get(upstream.url("/hop")))
        }
        let seen = try #require(upstream.requests.first)
        for name in ["X-Secret", "Keep-Alive", "TE", "Upgrade", "Proxy-Authorization"] {
            #expect(seen.header(name) == nil, "\(name) was forwarded")
        }
        #expect(seen.header("Connection") != "keep-alive, X-Secret")
        #expect(seen.header("Host") == upstream.hostAndPort)
        #expect(seen.header("Content-Length") == "3")
        #expect(seen.header("X-Kept") == "yes")
        #expect(seen.body == Array("abc".utf8))
        #expect(response.text == "hop")
        #expect(response.headers["X-Kept"] == "yes")
        for name in ["Connection", "X-Hop", "Keep-Alive", "Content-Length"] {
            #expect(response.headers[name] == nil, "\(name) came back")
        }
    }

    @Test("a 3 MB body arrives whole, with a Content-Length and chunked")
    func largeBody() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let (sized, chunked) = try await withForwarding(configuration) { connection in
            (try await connection.http(.get(upstream.url("/large/3000000"))),
             try await connection.http(.get(upstream.url("/stream/3000000"))))
        }
        let expected = pattern(3_000_000)
        #expect(sized.status == 200)
        #expect(sized.body.count == 3_000_000)
        #expect(sized.body == expected)
        #expect(chunked.body.count == 3_000_000)
        #expect(chunked.body == expected)
        #expect(chunked.headers["Transfer-Encoding"] == nil)
    }

    @Test("a body over the limit is refused, from its Content-Length or while it streams")
    func tooLarge() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        var configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        configuration.maximumResponseBodySize = 1 << 20
        let (sized, streamed, justFits) = try await withForwarding(configuration) { connection in
            (await forwardingFailure { try await connection.http(.get(upstream.url("/large/2097152"))) },
             await forwardingFailure { try await connection.http(.get(upstream.url("/stream/2097152"))) },
             try await connection.http(.get(upstream.url("/large/1048576"))))
        }
        #expect(sized?.1.reason == .responseTooLarge)
        #expect(sized?.0.message == "HTTP GET \(upstream.url("/large/2097152")): the response body (Content-Length 2097152) is larger than the limit of 1 MiB")
        #expect(streamed?.1.reason == .responseTooLarge)
        #expect(streamed?.0.message == "HTTP GET \(upstream.url("/stream/2097152")): the response body is larger than the limit of 1 MiB")
        #expect(justFits.body.count == 1 << 20)
    }

    @Test("the server's frame limit bounds the answer too")
    func frameLimit() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let failure = try await withForwarding(configuration, limits: { $0.maximumPayloadLength = 64 << 10 }) { connection in
            await forwardingFailure { try await connection.http(.get(upstream.url("/large/100000"))) }
        }
        #expect(failure?.1.reason == .responseTooLarge)
        #expect(failure?.0.message == "HTTP GET \(upstream.url("/large/100000")): the response body (Content-Length 100000) is larger than the limit of 64 KiB")
    }

    @Test("a slow upstream hits the server's timeout, or the shorter one the client asks for")
    func slowUpstream() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        var configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        configuration.timeout = .milliseconds(400)
        let slow = upstream.url("/slow/30000")
        let (serverLimit, clientLimit, elapsed) = try await withForwarding(configuration) { connection in
            let clock = ContinuousClock()
            let start = clock.now
            let first = await forwardingFailure { try await connection.http(.get(slow)) }
            // The request's own 150 ms is what the server enforces; the wait for its answer
            // gets a margin no busy machine reaches.
            let second = await forwardingFailure {
                try await connection.http(HTTPRequest(url: slow, timeout: .milliseconds(150)), timeout: .seconds(60))
            }
            return (first, second, clock.now - start)
        }
        #expect(serverLimit?.1.reason == .timedOut)
        #expect(serverLimit?.0.message == "HTTP GET \(slow) timed out after 400 ms")
        #expect(clientLimit?.1.reason == .timedOut)
        #expect(clientLimit?.0.message == "HTTP GET \(slow) timed out after 150 ms")
        // Delays only lengthen a wait, so this holds on a busy machine too.
        #expect(elapsed >= .milliseconds(550), "a timeout fired early: \(elapsed)")
        // The upstream's 30 s were not waited out: it saw both requests arrive and both
        // clients leave before its answer, an order of events rather than a time.
        #expect(try await collect(2, from: upstream.arrivals, "the upstream requests") == ["/slow/30000", "/slow/30000"])
        #expect(try await collect(2, from: upstream.hangups, "the upstream transfers to be dropped") == ["/slow/30000", "/slow/30000"])
    }

    @Test("a host not on the allow-list is refused before any connection is made")
    func notAllowed() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let (listener, other) = try RawSocket.listen()
        defer { listener.close() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let refusals = try await withForwarding(configuration) { connection in
            var refusals: [(TetherError, HTTPForwardingError)?] = []
            for url in [
                "http://127.0.0.1:\(other.port)/", "http://localhost:\(other.port)/",
                "http://[::1]:\(other.port)/", "https://127.0.0.1:\(other.port)/",
                "http://127.0.0.1:\(upstream.port)@127.0.0.1:\(other.port)/", "file:///etc/passwd",
                "http://127.0.0.1/",
            ] {
                refusals.append(await forwardingFailure { try await connection.http(.get(url)) })
            }
            // The allowed host still works through the same forwarder.
            _ = try await connection.http(.get(upstream.url("/status/200")))
            return refusals
        }
        #expect(refusals.map { $0?.1.reason } == [.hostNotAllowed, .hostNotAllowed, .hostNotAllowed, .hostNotAllowed,
                                                   .invalidRequest, .invalidRequest, .hostNotAllowed])
        #expect(refusals[0]?.0.message == "HTTP GET http://127.0.0.1:\(other.port)/ refused: 127.0.0.1:\(other.port) is not on this server's allow-list")
        #expect(refusals[2]?.0.message == "HTTP GET http://[::1]:\(other.port)/ refused: [::1]:\(other.port) is not on this server's allow-list")
        #expect(refusals[4]?.0.message == "HTTP GET http://127.0.0.1:\(upstream.port)@127.0.0.1:\(other.port)/ refused: user info in the URL is not forwarded")
        #expect(refusals[5]?.0.message == "HTTP GET file:///etc/passwd refused: not an absolute http or https URL")
        #expect(refusals[6]?.0.message == "HTTP GET http://127.0.0.1/ refused: 127.0.0.1:80 is not on this server's allow-list")
        #expect(!hasPendingConnection(listener), "a connection reached the host that is not allowed")
        #expect(upstream.requests.count == 1)
    }

    @Test("a client that leaves mid-exchange cancels the upstream transfer")
    func clientLeaves() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let (records, recordSink) = AsyncStream<HTTPExchangeRecord>.makeStream()
        try await withServer(handlers: { $0.forwardHTTP(configuration) { recordSink.yield($0) } }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            let call = Task { try await connection.http(.get(upstream.url("/slow/30000"))) }
            #expect(try await collect(1, from: upstream.arrivals, "the upstream request") == ["/slow/30000"])
            await connection.close()
            #expect(try await collect(1, from: upstream.hangups, "the upstream transfer to be dropped") == ["/slow/30000"])
            let record = try #require(try await collect(1, from: records, "the exchange record").first)
            guard case .failure(let failure) = record.outcome else {
                Issue.record("the exchange succeeded")
                return
            }
            #expect(failure == HTTPForwardingError(reason: .upstreamFailed, message: "HTTP GET \(upstream.url("/slow/30000")) was cancelled"))
            #expect(record.request?.url == upstream.url("/slow/30000"))
            await #expect(throws: TetherError.self) { try await call.value }
        }
    }

    @Test("an empty allow-list refuses everything")
    func emptyAllowList() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let failure = try await withForwarding(HTTPForwardingConfiguration()) { connection in
            await forwardingFailure { try await connection.http(.get(upstream.url("/status/200"))) }
        }
        #expect(failure?.1.reason == .hostNotAllowed)
        #expect(upstream.connections == 0)
    }

    @Test("redirects are followed to allowed hosts only, without credentials across hosts")
    func redirects() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let (listener, other) = try RawSocket.listen()
        defer { listener.close() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort, "localhost:\(upstream.port)"])
        let toEcho = "http://localhost:\(upstream.port)/echo"
        let elsewhere = "http://127.0.0.1:\(other.port)/secret"
        let (followed, refused) = try await withForwarding(configuration) { connection in
            (try await connection.http(.get(upstream.url("/redirect?to=\(toEcho)"), headers: ["Authorization": "Bearer abc"])),
             try await connection.http(.get(upstream.url("/redirect?to=\(elsewhere)"))))
        }
        #expect(followed.status == 200)
        #expect(followed.url == toEcho)
        #expect(followed.json?["path"] == "/echo")
        let echoed = try #require(upstream.requests.last { $0.target == "/echo" })
        #expect(echoed.header("Authorization") == nil)
        #expect(upstream.requests.first?.header("Authorization") == "Bearer abc")
        #expect(refused.status == 302)
        #expect(refused.headers["Location"] == elsewhere)
        #expect(!hasPendingConnection(listener))
    }

    @Test("an upstream that refuses connections is reported as unreachable")
    func unreachable() async throws {
        let (reserved, closed) = try RawSocket.bindOnly()
        defer { reserved.close() }
        let configuration = try HTTPForwardingConfiguration(allowing: ["127.0.0.1:\(closed.port)"])
        let failure = try await withForwarding(configuration) { connection in
            await forwardingFailure { try await connection.http(.get("http://127.0.0.1:\(closed.port)/")) }
        }
        #expect(failure?.1.reason == .upstreamUnreachable)
        #expect(failure?.0.message == "HTTP GET http://127.0.0.1:\(closed.port)/ failed: could not connect to the host")
    }

    @Test("a gzip-encoded body comes back decoded, without its Content-Encoding")
    func gzipBody() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let response = try await withForwarding(configuration) { connection in
            try await connection.http(.get(upstream.url("/gzip")))
        }
        #expect(response.text == String(repeating: "compressible text ", count: 200))
        #expect(response.headers["Content-Encoding"] == nil)
    }

    @Test("a server that does not forward HTTP answers with the seed's error, thrown as remoteError")
    func notForwarding() async throws {
        let error = try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            defer { Task { await connection.close() } }
            do {
                _ = try await connection.http(.get("http://127.0.0.1:1/"))
                return nil as TetherError?
            } catch let error as TetherError {
                return error
            }
        }
        #expect(error?.code == .remoteError)
        #expect(error?.message == "HTTP GET http://127.0.0.1:1/ failed on the server: unknown type 0x403")
    }

    @Test("the seed's own form, {\"url\": …}, is answered")
    func seedForm() async throws {
        let upstream = try TestHTTPServer()
        defer { upstream.stop() }
        let configuration = try HTTPForwardingConfiguration(allowing: [upstream.hostAndPort])
        let reply = try await withForwarding(configuration) { connection in
            try await connection.request(Request(type: 0x403, json: ["url": .string(upstream.url("/status/200"))]))
        }
        let zero = try #require(reply.payload.firstIndex(of: 0))
        let head = try JSONValue(parsing: reply.payload[..<zero])
        #expect(head["status"] == 200)
        #expect(Array(reply.payload[(zero + 1)...]) == Array("status 200".utf8))
    }
}

@Suite("HTTP forwarding rules")
struct HTTPForwardingRuleTests {
    @Test("allow-list entries parse and match host, port and wildcard")
    func allowList() throws {
        let exact = try HTTPAllowedHost(parsing: "API.Example.com")
        #expect(exact.matches(host: "api.example.com", port: 443))
        #expect(exact.matches(host: "api.example.com.", port: 80))
        #expect(!exact.matches(host: "api.example.com.evil.net", port: 443))
        let withPort = try HTTPAllowedHost(parsing: "127.0.0.1:8080")
        #expect(withPort.matches(host: "127.0.0.1", port: 8080))
        #expect(!withPort.matches(host: "127.0.0.1", port: 8081))
        let wildcard = try HTTPAllowedHost(parsing: "*.example.com")
        #expect(wildcard.matches(host: "a.b.example.com", port: 1))
        #expect(!wildcard.matches(host: "example.com", port: 1))
        #expect(!wildcard.matches(host: "badexample.com", port: 1))
        let v6 = try HTTPAllowedHost(parsing: "[::1]:9000")
        #expect(v6.host == "::1" && v6.port == 9000)
        #expect(v6.description == "[::1]:9000")
        #expect(v6.matches(host: "::1", port: 9000))
    }

    @Test("unreadable allow-list entries are refused with the reason")
    func badEntries() {
        let cases: [(String, String)] = [
            ("::1", "cannot read the allowed host \"::1\": write an IPv6 address in brackets: [::1]:8080"),
            ("host:0", "cannot read the allowed host \"host:0\": the port must be 1…65535"),
            ("host:http", "cannot read the allowed host \"host:http\": the port must be 1…65535"),
            ("ho st", "cannot read the allowed host \"ho st\": a host is letters, digits, dots, hyphens, or an IPv6 address in brackets"),
            ("[::1", "cannot read the allowed host \"[::1\": no closing ]"),
            ("", "cannot read the allowed host \"\": a host is letters, digits, dots, hyphens, or an IPv6 address in brackets"),
        ]
        for (entry, message) in cases {
            #expect(throws: TetherError(code: .invalidArgument, message: message)) { try HTTPAllowedHost(parsing: entry) }
        }
    }

    @Test("header fields with line breaks or invalid names are refused, not forwarded")
    func headerInjection() throws {
        let injected: TetherHTTPHeaders = ["X-A": "ok\r\nX-Injected: yes"]
        #expect(throws: HTTPForwardingError(reason: .invalidRequest, message: "HTTP GET http://h/ refused: the value of X-A holds a line break or NUL")) {
            try forwardedFields(of: injected, method: .get, url: "http://h/")
        }
        let badName: TetherHTTPHeaders = ["Bad Name": "x"]
        #expect(throws: HTTPForwardingError(reason: .invalidRequest, message: "HTTP GET http://h/ refused: \"Bad Name\" is not a valid header name")) {
            try forwardedFields(of: badName, method: .get, url: "http://h/")
        }
    }

    @Test("requests and responses survive the wire, binary bodies included")
    func wire() throws {
        let body = (0..<1000).map { UInt8($0 % 256) }
        let request = HTTPRequest(method: .put, url: "https://a.example/x?y=1", headers: ["A": "1", "a": "2"], body: body, timeout: .milliseconds(2500))
        let decoded = try HTTPWire.decodeRequest(HTTPWire.encode(request))
        #expect(decoded == request)
        let response = HTTPResponse(status: 201, headers: ["Set-Cookie": "a=1"], body: body, url: "https://a.example/x")
        #expect(try HTTPWire.decodeResponse(HTTPWire.encode(response), for: request) == response)
        #expect(throws: HTTPForwardingError(reason: .invalidRequest, message: "the HTTP request has no \"url\"")) {
            try HTTPWire.decodeRequest(Array(#"{"method":"GET"}"#.utf8))
        }
        #expect(throws: HTTPForwardingError(reason: .invalidRequest, message: "the HTTP request's head is not a JSON object")) {
            try HTTPWire.decodeRequest([0xFF, 0x00, 0x01])
        }
        #expect(throws: TetherError(code: .decodingFailed, message: "the answer to HTTP PUT https://a.example/x?y=1 has no \"status\"")) {
            try HTTPWire.decodeResponse(Array("{}".utf8), for: request)
        }
    }

    @Test("headers look up without regard to case and keep repeated names in order")
    func headers() {
        var headers: TetherHTTPHeaders = ["Set-Cookie": "a=1", "Accept": "*/*"]
        headers.add(name: "set-cookie", value: "b=2")
        #expect(headers["SET-COOKIE"] == "a=1")
        #expect(headers.values(for: "Set-Cookie") == ["a=1", "b=2"])
        headers["set-cookie"] = "c=3"
        #expect(headers.values(for: "Set-Cookie") == ["c=3"])
        #expect(headers.map(\.name) == ["Set-Cookie", "Accept"])
        headers["accept"] = nil
        #expect(headers.count == 1)
        #expect(!headers.contains(name: "Accept"))
    }
}
