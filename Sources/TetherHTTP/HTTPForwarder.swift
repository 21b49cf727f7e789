public import Tether
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// Performs the HTTP requests that clients send with ``Tether/Connection/http(_:timeout:type:)``,
/// with the system's `URLSession`, within an allow-list and bounds.
///
/// Register it on a server with ``Tether/Server/forwardHTTP(_:observer:)``:
///
/// ```swift
/// let server = Server(configuration: ServerConfiguration(host: "0.0.0.0", port: 9000))
/// try server.forwardHTTP(HTTPForwardingConfiguration(allowing: ["api.example.com", "127.0.0.1:8080"]))
/// ```
///
/// For each request it:
/// - checks the URL (absolute `http`/`https`, no user info) and its host and port against
///   the allow-list *before* any connection is made;
/// - drops hop-by-hop header fields (`Connection` and the fields it names, `Keep-Alive`,
///   `Proxy-Authorization`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, `Expect`),
///   and lets `Host` and `Content-Length` follow from the URL and the body;
/// - stores no cookies and uses no cache, so clients never see each other's state;
/// - follows redirects only to allowed hosts, dropping `Authorization` and `Cookie` when
///   the host changes;
/// - bounds the whole exchange by ``HTTPForwardingConfiguration/timeout`` and the body by
///   ``HTTPForwardingConfiguration/maximumResponseBodySize``, cancelling the transfer
///   as soon as either is passed.
///
/// A request that cannot be performed is answered with a structured failure
/// (`{"error": "<sentence>", "reason": "hostNotAllowed"}`), which the client throws as
/// ``Tether/TetherError/Code/httpFailed``. Proxy settings come from the process
/// environment (`http_proxy`, `https_proxy`, `no_proxy`), as for any `URLSession`.
public final class HTTPForwarder: Sendable {
    /// The allow-list and bounds.
    public let configuration: HTTPForwardingConfiguration
    /// The largest frame payload an answer may fill: the server's frame limit.
    let maximumPayloadLength: Int
    private let session: URLSession
    private let delegate: SessionDelegate

    /// Creates a forwarder.
    ///
    /// - Parameters:
    ///   - configuration: The allow-list and bounds.
    ///   - maximumPayloadLength: The largest answer payload, headers and body together; a
    ///     server passes its ``Tether/Limits/maximumPayloadLength``. Default 16 MiB.
    public init(configuration: HTTPForwardingConfiguration, maximumPayloadLength: Int = 16 << 20) {
        self.configuration = configuration
        self.maximumPayloadLength = maximumPayloadLength
        let sessionConfiguration = URLSessionConfiguration.ephemeral
        sessionConfiguration.httpCookieAcceptPolicy = .never
        sessionConfiguration.httpShouldSetCookies = false
        sessionConfiguration.httpCookieStorage = nil
        sessionConfiguration.urlCache = nil
        sessionConfiguration.requestCachePolicy = .reloadIgnoringLocalCacheData
        // URLSession's own timers are a backstop: they count whole seconds on Linux (a
        // timeout under 1 s fires at once), so the exchange's deadline is kept by
        // `Exchange.armDeadline`, and these are set a little beyond it.
        sessionConfiguration.timeoutIntervalForRequest = backstop(configuration.timeout)
        sessionConfiguration.timeoutIntervalForResource = backstop(configuration.timeout)
        let delegate = SessionDelegate(configuration: configuration)
        self.delegate = delegate
        self.session = URLSession(configuration: sessionConfiguration, delegate: delegate, delegateQueue: nil)
    }

    deinit {
        session.invalidateAndCancel()
    }

    /// Answers one request frame: reads the HTTP request from its payload, performs it and
    /// encodes the response, or the failure, as the answer's payload.
    ///
    /// - Parameter request: A request frame of ``HTTPForwardingConfiguration/requestType``.
    /// - Returns: The answer to send back.
    public func answer(_ request: Request) async -> Response {
        await exchange(request).response
    }

    /// Answers one request frame and says what happened, for ``Tether/Server/forwardHTTP(_:observer:)``.
    func exchange(_ request: Request) async -> (response: Response, request: HTTPRequest?, outcome: Result<HTTPResponse, HTTPForwardingError>) {
        var http: HTTPRequest?
        do throws(HTTPForwardingError) {
            let decoded = try HTTPWire.decodeRequest(request.payload)
            http = decoded
            let response = try await perform(decoded)
            let payload = HTTPWire.encode(response)
            guard payload.count <= maximumPayloadLength else {
                throw HTTPForwardingError(
                    reason: .responseTooLarge,
                    message: "HTTP \(decoded.method) \(decoded.url): the response (\(payload.count) bytes with its headers) is larger than the frame limit of \(describeBytes(maximumPayloadLength))")
            }
            return (Response(payload: payload), decoded, .success(response))
        } catch {
            return (Response(payload: HTTPWire.encode(error)), http, .failure(error))
        }
    }

    /// Performs one request against the upstream server.
    ///
    /// - Parameter request: The method, URL, headers, body and timeout.
    /// - Returns: The upstream server's response, with hop-by-hop fields removed.
    /// - Throws: ``HTTPForwardingError`` with the reason when the request is refused
    ///   or no complete response arrives in time and within the size limit.
    public func perform(_ request: HTTPRequest) async throws(HTTPForwardingError) -> HTTPResponse {
        guard request.method.isValid else {
            throw HTTPForwardingError(reason: .invalidRequest, message: "HTTP request refused: \"\(request.method)\" is not a valid method")
        }
        let url = try checkURL(request.url, method: request.method, configuration: configuration)
        var limit = configuration.timeout
        if let asked = request.timeout, asked < limit { limit = asked }
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = request.method.rawValue
        urlRequest.timeoutInterval = backstop(limit)
        urlRequest.httpShouldHandleCookies = false
        for field in try forwardedFields(of: request.headers, method: request.method, url: request.url) {
            urlRequest.addValue(field.value, forHTTPHeaderField: field.name)
        }
        if !request.body.isEmpty {
            urlRequest.httpBody = Data(request.body)
        }
        let bodyLimit = min(configuration.maximumResponseBodySize, maximumPayloadLength)
        let exchange = Exchange(method: request.method, url: request.url, bodyLimit: bodyLimit, timeout: limit)
        let task = session.dataTask(with: urlRequest)
        delegate.register(exchange, for: task.taskIdentifier)

        let outcome: Result<(HTTPURLResponse, [UInt8]), HTTPForwardingError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                guard exchange.start(continuation) else { return }
                task.resume()
                exchange.armDeadline(after: limit) { task.cancel() }
            }
        } onCancel: {
            exchange.fail(HTTPForwardingError(reason: .upstreamFailed, message: "HTTP \(request.method) \(request.url) was cancelled"))
            task.cancel()
        }
        delegate.unregister(task.taskIdentifier)
        let (response, body) = try outcome.get()
        return HTTPResponse(status: response.statusCode, headers: returnedFields(of: response),
                            body: body, url: response.url?.absoluteString ?? request.url)
    }
}

/// Parses and checks a URL before anything touches the network, and rebuilds it from its
/// parsed parts so the transfer connects to exactly the host that was checked; for the first
/// request and every redirect.
func checkURL(_ text: String, method: TetherHTTPMethod, configuration: HTTPForwardingConfiguration) throws(HTTPForwardingError) -> URL {
    func refuse(_ why: String) -> HTTPForwardingError {
        HTTPForwardingError(reason: .invalidRequest, message: "HTTP \(method) \(text) refused: \(why)")
    }
    guard let components = URLComponents(string: text),
          let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
        throw refuse("not an absolute http or https URL")
    }
    guard components.user == nil, components.password == nil else {
        throw refuse("user info in the URL is not forwarded")
    }
    guard let rawHost = components.host, !rawHost.isEmpty else {
        throw refuse("the URL has no host")
    }
    var host = rawHost
    if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    guard host.utf8.allSatisfy(isHostByte) else {
        throw refuse("the host \"\(rawHost)\" is not a name or an address")
    }
    let port = components.port ?? (scheme == "https" ? 443 : 80)
    guard (1...65_535).contains(port) else {
        throw refuse("the port \(port) is out of range")
    }
    guard configuration.allows(host: host, port: port) else {
        let shown = host.contains(":") ? "[\(host)]" : host
        throw HTTPForwardingError(
            reason: .hostNotAllowed,
            message: "HTTP \(method) \(text) refused: \(shown):\(port) is not on this server's allow-list")
    }
    let authority = (host.contains(":") ? "[\(host)]" : host) + (components.port.map { ":\($0)" } ?? "")
    var rebuilt = "\(scheme)://\(authority)"
    let path = components.percentEncodedPath
    rebuilt += path.isEmpty ? "/" : path
    if let query = components.percentEncodedQuery { rebuilt += "?" + query }
    guard let url = URL(string: rebuilt) else { throw refuse("the URL cannot be rebuilt from its parts") }
    return url
}

/// Header fields that describe one hop, never the message: they are not forwarded in
/// either direction. `Host` and `Content-Length` are set from the URL and the body.
let hopByHopFields: Set<String> = [
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade", "expect", "host", "content-length",
]

/// The lower-case names of the fields not passed on: the hop-by-hop ones, and those the
/// `Connection` field names.
func droppedFields(connection values: [String]) -> Set<String> {
    var dropped = hopByHopFields
    for value in values {
        for token in value.split(separator: ",") {
            dropped.insert(token.trimmingCharacters(in: .whitespaces).lowercased())
        }
    }
    return dropped
}

/// The request's fields that go upstream, after checking each one.
func forwardedFields(of headers: TetherHTTPHeaders, method: TetherHTTPMethod, url: String) throws(HTTPForwardingError) -> [TetherHTTPHeaders.Field] {
    let dropped = droppedFields(connection: headers.values(for: "Connection"))
    var kept: [TetherHTTPHeaders.Field] = []
    for field in headers {
        guard !field.name.isEmpty, field.name.utf8.allSatisfy(isTokenByte) else {
            throw HTTPForwardingError(reason: .invalidRequest, message: "HTTP \(method) \(url) refused: \"\(field.name)\" is not a valid header name")
        }
        guard !field.value.utf8.contains(where: { $0 == 0 || $0 == 10 || $0 == 13 }) else {
            throw HTTPForwardingError(reason: .invalidRequest, message: "HTTP \(method) \(url) refused: the value of \(field.name) holds a line break or NUL")
        }
        if !dropped.contains(field.name.lowercased()) { kept.append(field) }
    }
    return kept
}

/// The upstream response's fields that go back to the client. The body arrives decoded
/// and complete, so the fields that described its transfer go too.
func returnedFields(of response: HTTPURLResponse) -> TetherHTTPHeaders {
    var dropped = droppedFields(connection: response.value(forHTTPHeaderField: "Connection").map { [$0] } ?? [])
    dropped.remove("host")
    dropped.insert("content-encoding")
    var headers = TetherHTTPHeaders()
    let pairs = response.allHeaderFields.compactMap { key, value -> (String, String)? in
        guard let name = key as? String else { return nil }
        return (name, value as? String ?? String(describing: value))
    }
    for (name, value) in pairs.sorted(by: { $0.0.lowercased() < $1.0.lowercased() }) where !dropped.contains(name.lowercased()) {
        headers.add(name: name, value: value)
    }
    return headers
}

/// A URLSession timeout that cannot fire before the exchange's own deadline: whole seconds,
/// rounded up, plus one.
func backstop(_ duration: Duration) -> TimeInterval {
    let (seconds, attoseconds) = duration.components
    return TimeInterval(seconds + (attoseconds > 0 ? 1 : 0) + 1)
}

/// One transfer in progress: its body so far and the one continuation it resumes.
final class Exchange: Sendable {
    typealias Outcome = Result<(HTTPURLResponse, [UInt8]), HTTPForwardingError>

    struct State {
        var continuation: CheckedContinuation<Outcome, Never>?
        var failure: HTTPForwardingError?
        var body: [UInt8] = []
        var response: HTTPURLResponse?
        var redirects = 0
        var finished = false
        var deadline: Task<Void, Never>?
    }

    let method: TetherHTTPMethod
    let url: String
    let bodyLimit: Int
    let timeout: Duration
    let state = Mutex(State())

    init(method: TetherHTTPMethod, url: String, bodyLimit: Int, timeout: Duration) {
        self.method = method
        self.url = url
        self.bodyLimit = bodyLimit
        self.timeout = timeout
    }

    /// Stores the continuation; returns `false` (and resumes it) when the exchange already
    /// failed, so the transfer is never started.
    func start(_ continuation: CheckedContinuation<Outcome, Never>) -> Bool {
        let early: HTTPForwardingError? = state.withLock { state in
            if let failure = state.failure {
                state.finished = true
                return failure
            }
            state.continuation = continuation
            return nil
        }
        if let early {
            continuation.resume(returning: .failure(early))
            return false
        }
        return true
    }

    func armDeadline(after limit: Duration, cancel: @escaping @Sendable () -> Void) {
        let timer = Task { [self] in
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            fail(HTTPForwardingError(reason: .timedOut, message: "HTTP \(method) \(url) timed out after \(describe(limit))"))
            cancel()
        }
        let finished = state.withLock { state in
            if !state.finished { state.deadline = timer }
            return state.finished
        }
        if finished { timer.cancel() }
    }

    /// Records why the transfer is being stopped; the first reason wins.
    func fail(_ failure: HTTPForwardingError) {
        state.withLock { state in
            if state.failure == nil, !state.finished { state.failure = failure }
        }
    }

    func received(_ response: HTTPURLResponse) -> Bool {
        state.withLock { state in
            state.response = response
            let expected = response.expectedContentLength
            if expected > Int64(bodyLimit) {
                state.failure = state.failure ?? HTTPForwardingError(
                    reason: .responseTooLarge,
                    message: "HTTP \(method) \(url): the response body (Content-Length \(expected)) is larger than the limit of \(describeBytes(bodyLimit))")
                return false
            }
            if expected > 0 { state.body.reserveCapacity(Int(expected)) }
            return true
        }
    }

    func received(_ data: Data) -> Bool {
        state.withLock { state in
            guard state.failure == nil else { return false }
            if state.body.count + data.count > bodyLimit {
                state.failure = HTTPForwardingError(
                    reason: .responseTooLarge,
                    message: "HTTP \(method) \(url): the response body is larger than the limit of \(describeBytes(bodyLimit))")
                return false
            }
            data.withUnsafeBytes { state.body.append(contentsOf: $0) }
            return true
        }
    }

    /// Counts a redirect; `false` when it is one too many.
    func redirect(maximum: Int) -> Bool {
        state.withLock { state in
            state.redirects += 1
            return state.redirects <= maximum
        }
    }

    func completed(response: URLResponse?, error: (any Error)?) {
        let (continuation, outcome, deadline): (CheckedContinuation<Outcome, Never>?, Outcome, Task<Void, Never>?) = state.withLock { state in
            let continuation = state.continuation
            state.continuation = nil
            state.finished = true
            let deadline = state.deadline
            state.deadline = nil
            if let failure = state.failure { return (continuation, .failure(failure), deadline) }
            if let error {
                return (continuation, .failure(classify(error)), deadline)
            }
            guard let http = (response as? HTTPURLResponse) ?? state.response else {
                return (continuation, .failure(HTTPForwardingError(reason: .upstreamFailed, message: "HTTP \(method) \(url) got no HTTP response")), deadline)
            }
            let body = state.body
            state.body = []
            return (continuation, .success((http, body)), deadline)
        }
        deadline?.cancel()
        continuation?.resume(returning: outcome)
    }

    private func classify(_ error: any Error) -> HTTPForwardingError {
        let reason: HTTPForwardingError.Reason
        var detail = error.localizedDescription
        if let urlError = error as? URLError {
            switch urlError.code {
            case .timedOut:
                return HTTPForwardingError(reason: .timedOut, message: "HTTP \(method) \(url) timed out after \(describe(timeout))")
            case .cannotFindHost, .dnsLookupFailed:
                reason = .upstreamUnreachable
                detail = "the host name did not resolve"
            case .cannotConnectToHost:
                reason = .upstreamUnreachable
                detail = "could not connect to the host"
            case .networkConnectionLost, .notConnectedToInternet:
                reason = .upstreamUnreachable
                detail = "the connection to the host was lost"
            default:
                reason = .upstreamFailed
            }
        } else {
            reason = .upstreamFailed
        }
        return HTTPForwardingError(reason: reason, message: "HTTP \(method) \(url) failed: \(detail)")
    }
}

/// The session's delegate: routes each task's events to its ``Exchange``.
final class SessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
    let configuration: HTTPForwardingConfiguration
    private let exchanges = Mutex<[Int: Exchange]>([:])

    init(configuration: HTTPForwardingConfiguration) {
        self.configuration = configuration
    }

    func register(_ exchange: Exchange, for task: Int) {
        exchanges.withLock { $0[task] = exchange }
    }

    func unregister(_ task: Int) {
        _ = exchanges.withLock { $0.removeValue(forKey: task) }
    }

    private func exchange(_ task: URLSessionTask) -> Exchange? {
        exchanges.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        guard let exchange = exchange(dataTask), let http = response as? HTTPURLResponse else {
            completionHandler(.allow)
            return
        }
        completionHandler(exchange.received(http) ? .allow : .cancel)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let exchange = exchange(dataTask) else { return }
        if !exchange.received(data) { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        guard let exchange = exchange(task), let target = request.url?.absoluteString,
              exchange.redirect(maximum: configuration.maximumRedirects),
              let url = try? checkURL(target, method: exchange.method, configuration: configuration) else {
            completionHandler(nil)   // the 3xx itself goes back to the client
            return
        }
        var next = request
        next.url = url
        if let previous = task.currentRequest?.url ?? task.originalRequest?.url,
           previous.host?.lowercased() != url.host?.lowercased() {
            next.setValue(nil, forHTTPHeaderField: "Authorization")
            next.setValue(nil, forHTTPHeaderField: "Cookie")
        }
        completionHandler(next)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        exchange(task)?.completed(response: task.response, error: error)
    }
}
