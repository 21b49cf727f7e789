/// An HTTP proxy that opens tunnels with `CONNECT` (RFC 9110, section 9.3.6): the way out of
/// networks where only a proxy reaches the internet. The value of
/// ``WebSocketClientConfiguration/proxy``.
///
/// A connection through the proxy dials the proxy (the same address race and connect
/// timeout as any endpoint), sends `CONNECT host:port HTTP/1.1` for the endpoint with the
/// extra ``headers``, and waits for a `2xx` answer; then TLS (for `wss://`), the WebSocket
/// upgrade and Tether's frames go through the tunnel unchanged. The answer must arrive
/// within what is left of ``ConnectionConfiguration/connectTimeout`` and fit in
/// ``maximumResponseHeadSize``. Any other answer fails the attempt with
/// ``TetherError/Code/connectFailed`` and a message that quotes the proxy's status line
/// (`407 Proxy Authentication Required` when it wants credentials), a proxy that closes or
/// stays silent fails it too, and the fallback and reconnect policies treat it as an
/// endpoint that cannot connect.
///
/// ```swift
/// var configuration = ConnectionConfiguration()
/// configuration.webSocket.proxy = HTTPProxy(url: "http://alice:secret@proxy.example.com:3128")
/// ```
public struct HTTPProxy: Sendable, Hashable, CustomStringConvertible {
    /// The proxy's host name or numeric address.
    public var host: String
    /// The proxy's TCP port.
    public var port: Int
    /// Extra header fields of the `CONNECT` request, such as `Proxy-Authorization`. The
    /// `Host` field is always sent and must not be repeated here. Default: none.
    public var headers: HTTPHeaders
    /// The largest head of the proxy's answer accepted; a larger one fails the attempt.
    /// Default 8 KiB.
    public var maximumResponseHeadSize: Int = 8 << 10

    /// A proxy at `host:port`.
    ///
    /// - Parameters:
    ///   - host: The proxy's host name or numeric address.
    ///   - port: The proxy's TCP port.
    ///   - headers: Extra header fields of the `CONNECT` request. Default: none.
    public init(host: String, port: Int, headers: HTTPHeaders = [:]) {
        self.host = host
        self.port = port
        self.headers = headers
    }

    /// A proxy from an `http://[user:password@]host[:port]` URL; credentials become a
    /// `Proxy-Authorization: Basic …` field. The port defaults to 8080.
    ///
    /// - Parameter url: The proxy's URL.
    /// - Returns: The proxy, or `nil` when the text is not an `http://` URL with a host and a
    ///   valid port.
    public init?(url: String) {
        guard url.lowercased().hasPrefix("http://") else { return nil }
        var rest = url.dropFirst(7)
        if let slash = rest.firstIndex(of: "/") {
            guard rest[slash...].allSatisfy({ $0 == "/" }) else { return nil }
            rest = rest[..<slash]
        }
        var headers: HTTPHeaders = [:]
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            guard credentials.contains(":") else { return nil }
            headers = ["Proxy-Authorization": "Basic \(Base64.encode(Array(credentials.utf8)))"]
            rest = rest[rest.index(after: at)...]
        }
        guard !rest.isEmpty else { return nil }
        if let parsed = Endpoint(parsing: String(rest)) {
            self.init(host: parsed.host, port: parsed.port, headers: headers)
        } else if !rest.contains(":") || (rest.hasPrefix("[") && rest.hasSuffix("]")) {
            let host = rest.hasPrefix("[") ? String(rest.dropFirst().dropLast()) : String(rest)
            self.init(host: host, port: 8080, headers: headers)
        } else {
            return nil
        }
    }

    /// The proxy's endpoint.
    var endpoint: Endpoint { Endpoint(host: host, port: port) }

    /// `http://host:port`, without credentials.
    public var description: String { "http://\(endpoint)" }
}

/// The `CONNECT` exchange with a proxy on a connected socket, with a deadline. Loop thread
/// only.
final class ProxyTunnel: IOHandler, @unchecked Sendable {
    // @unchecked Sendable: touched only on `loop`'s thread; Sendable so the cancellation
    // handler can send it to the loop.

    private let loop: EventLoop
    private let proxy: HTTPProxy
    private var socket: Socket?
    private let fd: Int32
    private var request: [UInt8]
    /// `host:port` of the endpoint, as the request names it.
    private let authority: String
    private var sent = 0
    private var answer: [UInt8] = []
    private var timer: LoopTimer?
    private var continuation: CheckedContinuation<Result<SocketBox, TetherError>, Never>?

    private init(loop: EventLoop, proxy: HTTPProxy, target: Endpoint, socket: consuming Socket) {
        self.loop = loop
        self.proxy = proxy
        self.fd = socket.descriptor
        self.socket = .some(socket)
        self.authority = Self.authority(of: target)
        self.request = Self.request(for: target, headers: proxy.headers)
    }

    /// `host:port`, with brackets around an IPv6 address.
    static func authority(of target: Endpoint) -> String {
        target.host.contains(":") ? "[\(target.host)]:\(target.port)" : "\(target.host):\(target.port)"
    }

    /// The `CONNECT` request for `target`.
    static func request(for target: Endpoint, headers: HTTPHeaders) -> [UInt8] {
        let authority = authority(of: target)
        var text = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
        for field in headers { text += "\(field.name): \(field.value)\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }

    /// Asks `proxy`, on the connected `box`, for a tunnel to `target` within `timeout`.
    ///
    /// Must be called on `loop`'s executor. Returns the socket, now a tunnel, or an error
    /// that names the proxy and quotes its answer; the socket is closed then.
    static func open(
        _ box: SocketBox,
        through proxy: HTTPProxy,
        to target: Endpoint,
        timeout: Duration,
        on loop: EventLoop,
        isolation: isolated any Actor
    ) async -> Result<SocketBox, TetherError> {
        loop.preconditionInLoop()
        let tunnel = ProxyTunnel(loop: loop, proxy: proxy, target: target, socket: box.take())
        return await withTaskCancellationHandler {
            _ = isolation
            return await withCheckedContinuation { continuation in
                tunnel.start(continuation, timeout: timeout)
            }
        } onCancel: {
            loop.execute {
                tunnel.finish(.failure(TetherError(code: .connectFailed, message: "connecting to \(Self.authority(of: target)) through the proxy \(proxy) was cancelled", underlying: CancellationError())))
            }
        }
    }

    private func start(_ continuation: CheckedContinuation<Result<SocketBox, TetherError>, Never>, timeout: Duration) {
        self.continuation = continuation
        do {
            try loop.register(fd, interest: .write, handler: self)
        } catch {
            finish(.failure(TetherError(code: .systemCall, message: "cannot watch the socket to the proxy \(proxy): \(error)")))
            return
        }
        timer = loop.schedule(after: timeout) { [self] in
            timer = nil
            finish(.failure(TetherError(code: .connectTimedOut, message: "the proxy \(proxy) did not answer CONNECT \(authority) within \(describe(timeout))")))
        }
    }

    func handleReadiness(_ event: ReadinessEvent) {
        if sent < request.count {
            guard event.writable || event.hangup else { return }
            writeRequest()
        } else {
            guard event.readable || event.hangup else { return }
            readAnswer()
        }
    }

    private func writeRequest() {
        do {
            while sent < request.count {
                let result = try request.withUnsafeBytes { bytes throws(Errno) in
                    try Syscall.sendBytes(fd, bytes.baseAddress! + sent, bytes.count - sent)
                }
                guard case .processed(let count) = result else { return }
                sent += count
            }
            try loop.reregister(fd, interest: .read)
        } catch {
            finish(.failure(TetherError(code: .connectFailed, message: "cannot send CONNECT \(authority) to the proxy \(proxy): \(error)", underlying: error)))
        }
    }

    private func readAnswer() {
        let limit = proxy.maximumResponseHeadSize
        var chunk = [UInt8](repeating: 0, count: 2048)
        while true {
            let result: IOResult<Int>
            do {
                result = try chunk.withUnsafeMutableBytes { bytes throws(Errno) in
                    try Syscall.readBytes(fd, bytes.baseAddress!, bytes.count)
                }
            } catch {
                finish(.failure(TetherError(code: .connectFailed, message: "the proxy \(proxy) broke the connection before answering CONNECT \(authority): \(error)", underlying: error)))
                return
            }
            guard case .processed(let count) = result else { return }
            if count == 0 {
                finish(.failure(TetherError(code: .connectFailed, message: "the proxy \(proxy) closed the connection without answering CONNECT \(authority)")))
                return
            }
            answer.append(contentsOf: chunk[..<count])
            if let end = answer.withUnsafeBytes({ WebSocketHandshake.endOfHead($0) }), end <= limit {
                // The server behind says nothing before the client speaks (TLS, the
                // WebSocket upgrade): bytes after the head cannot belong to the tunnel.
                finish(verdict(on: String(decoding: answer[..<(end - 4)], as: UTF8.self), extra: answer.count - end))
                return
            }
            if answer.count > limit {
                finish(.failure(TetherError(code: .connectFailed, message: "the proxy \(proxy) answered CONNECT \(authority) with a head over \(limit) bytes")))
                return
            }
        }
    }

    /// The tunnel for a `2xx` answer; the attempt's failure for any other.
    private func verdict(on head: String, extra: Int) -> Result<SocketBox, TetherError> {
        let (start, _) = WebSocketHandshake.parseHead(head)
        let parts = start.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            return .failure(TetherError(code: .connectFailed, message: "the proxy \(proxy) did not answer CONNECT \(authority) with HTTP (first line \"\(start.prefix(80))\")"))
        }
        guard (200...299).contains(status) else {
            let hint = status == 407 ? ": it wants credentials (HTTPProxy.headers, Proxy-Authorization)" : ""
            return .failure(TetherError(code: .connectFailed, message: "the proxy \(proxy) refused CONNECT \(authority) with \"\(start.prefix(80))\"\(hint)"))
        }
        // The server behind says nothing before the client speaks (TLS, the WebSocket
        // upgrade): bytes after the head cannot belong to the tunnel.
        guard extra == 0 else {
            return .failure(TetherError(code: .protocolError, message: "the proxy \(proxy) sent \(extra) bytes after its answer to CONNECT \(authority), before the tunnel carried anything"))
        }
        guard let socket = socket.take() else { preconditionFailure("the tunnel's socket was already handed over") }
        return .success(SocketBox(socket))
    }

    /// Ends the exchange exactly once; later calls do nothing. A failure closes the socket.
    private func finish(_ outcome: Result<SocketBox, TetherError>) {
        guard let continuation else { return }
        self.continuation = nil
        if let timer { loop.cancel(timer) }
        timer = nil
        loop.deregister(fd)
        if case .failure = outcome, let socket = socket.take() { socket.close() }
        continuation.resume(returning: outcome)
    }
}
