#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CPostgres
internal import Tether

/// One connection to PostgreSQL, used by one thread at a time: a pooled connection's thread
/// (``PostgresDatabase``) or a listener's (``PostgresListener``).
///
/// It connects on first use and again after it broke. Every wait for the server is bounded
/// (``PostgresConfiguration/connectTimeout`` to connect,
/// ``PostgresConfiguration/queryTimeout`` plus that to answer a statement): libpq runs in
/// its nonblocking mode and the thread waits in `poll`, so a server that went silent costs
/// a failed call, never a thread stuck for ever.
final class PostgresSession {
    let configuration: PostgresConfiguration
    /// `host:port`, for messages.
    let endpoint: String
    /// The connection; `nil` until connected and after it broke.
    private(set) var connection: OpaquePointer?
    /// Statements prepared on this connection, by text and parameter types.
    private var prepared: [String: String] = [:]
    /// A descriptor whose readability ends any wait at once (a listener's wake pipe).
    private let wake: Int32?

    /// How many statements one connection keeps prepared; others are sent unprepared.
    static let preparedLimit = 128

    init(configuration: PostgresConfiguration, endpoint: String, wake: Int32? = nil) {
        self.configuration = configuration
        self.endpoint = endpoint
        self.wake = wake
    }

    deinit { disconnect() }

    /// Closes the connection, if any.
    func disconnect() {
        if let connection { PQfinish(connection) }
        connection = nil
        prepared = [:]
    }

    // MARK: Connecting

    /// Connects unless connected, and reconnects a connection that broke while idle (the
    /// server restarted, or closed it): the next statement then runs on a sound one.
    func connectIfNeeded() throws(TetherError) {
        if let connection {
            if PQstatus(connection) == CONNECTION_OK, PQtransactionStatus(connection) == PQTRANS_IDLE, !idleConnectionBroke(connection) {
                return
            }
            disconnect()
        }
        try connect()
    }

    /// Whether the server closed an idle connection: what it sent meanwhile (a FATAL
    /// notice as it shuts down, the end of the stream) leaves the connection broken.
    private func idleConnectionBroke(_ connection: OpaquePointer) -> Bool {
        while true {
            var descriptor = pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 0) > 0 else { break }
            // Reads what arrived, or finds the end of the stream; parsing it (PQisBusy)
            // hands an error sent while idle to the notice receiver.
            if PQconsumeInput(connection) == 0 { return true }
            _ = PQisBusy(connection)
            if terminated || PQstatus(connection) != CONNECTION_OK { return true }
        }
        return terminated || PQstatus(connection) != CONNECTION_OK
    }

    /// Set when the server sent a FATAL or PANIC message outside any statement: it is
    /// closing the connection (it shuts down, or an administrator ended the backend).
    private var terminated = false

    /// Notices the server sends (warnings, and errors outside a statement) go here instead
    /// of libpq's default, which prints them on stderr.
    private func receiveNotice(_ result: OpaquePointer) {
        guard let severity = PQresultErrorField(result, Int32(UInt8(ascii: "V"))) else { return }
        let text = String(cString: severity)
        if text == "FATAL" || text == "PANIC" { terminated = true }
    }

    /// Makes a new connection in place of the current one.
    func reconnect() throws(TetherError) {
        disconnect()
        try connect()
    }

    private func connect() throws(TetherError) {
        let keywords = ["dbname", "application_name", "client_encoding"]
        let values = [configuration.url, configuration.applicationName, "UTF8"]
        let started: OpaquePointer? = withCStrings(keywords) { keywordPointers in
            withCStrings(values) { valuePointers in
                // expand_dbname: the first "dbname" may be a whole connection string or URL;
                // the keywords after it override what it says.
                PQconnectStartParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let started else { throw unreachable("libpq could not allocate a connection") }
        let deadline = ContinuousClock.now + configuration.connectTimeout
        var status = PGRES_POLLING_WRITING
        do throws(TetherError) {
            guard PQstatus(started) != CONNECTION_BAD else { throw unreachable(errorMessage(started)) }
            while status != PGRES_POLLING_OK {
                switch status {
                case PGRES_POLLING_READING, PGRES_POLLING_WRITING:
                    let events = status == PGRES_POLLING_READING ? POLLIN : POLLOUT
                    switch waitFor(PQsocket(started), events: Int16(events), until: deadline) {
                    case .ready: break
                    case .timedOut: throw unreachable("no connection within \(configuration.connectTimeout)")
                    case .woken: throw unreachable("stopped while connecting")
                    }
                case PGRES_POLLING_FAILED:
                    throw unreachable(errorMessage(started))
                default:
                    break
                }
                status = PQconnectPoll(started)
            }
            guard PQsetnonblocking(started, 1) == 0 else { throw unreachable(errorMessage(started)) }
        } catch {
            PQfinish(started)
            throw error
        }
        connection = started
        prepared = [:]
        terminated = false
        // The session outlives the connection: `disconnect` finishes it first.
        PQsetNoticeReceiver(started, { context, result in
            guard let context, let result else { return }
            Unmanaged<PostgresSession>.fromOpaque(context).takeUnretainedValue().receiveNotice(result)
        }, Unmanaged.passUnretained(self).toOpaque())
        let timeout = configuration.queryTimeout.postgresMilliseconds
        try execute("SET statement_timeout = \(timeout)")
    }

    private func unreachable(_ reason: String) -> TetherError {
        let failure = PostgresFailure(sqlState: nil, message: reason, connectionLost: true)
        return TetherError(code: .storeFailed, message: "PostgreSQL at \(endpoint) is unreachable: \(reason)", underlying: failure)
    }

    private func errorMessage(_ connection: OpaquePointer?) -> String {
        guard let connection, let text = PQerrorMessage(connection) else { return "unknown error" }
        let message = oneLine(String(cString: text))
        return message.isEmpty ? "unknown error" : message
    }

    // MARK: Statements

    /// Runs one statement, or a script of several when there are no parameters, and
    /// returns the rows of the last.
    ///
    /// - Parameters:
    ///   - sql: The statement; `$1`, `$2`… stand for the parameters.
    ///   - parameters: The values of `$1`, `$2`…
    /// - Returns: The rows (binary columns when there are parameters, text otherwise).
    /// - Throws: ``Tether/TetherError`` with ``Tether/TetherError/Code/storeFailed``, naming
    ///   the server and what it said; its ``Tether/TetherError/underlying`` error is a
    ///   ``PostgresFailure``.
    @discardableResult
    func execute(_ sql: String, _ parameters: [PostgresValue] = []) throws(TetherError) -> PostgresRows {
        try execute(sql, parameters: parameters.map(PostgresParameter.init))
    }

    /// ``execute(_:_:)`` with parameters in wire form, arrays among them.
    @discardableResult
    func execute(_ sql: String, parameters: [PostgresParameter]) throws(TetherError) -> PostgresRows {
        guard let connection else {
            // Reached only when a statement runs after a failure broke the connection in
            // the same call: it is not reconnected behind the caller's back.
            throw lost("the connection was lost earlier in this call")
        }
        if parameters.isEmpty {
            guard PQsendQuery(connection, sql) == 1 else { throw brokenSend(connection) }
            return try results(of: connection)
        }
        let key = sql + "\u{0}" + parameters.map { String($0.type) }.joined(separator: ",")
        var name = prepared[key]
        if name == nil, prepared.count < Self.preparedLimit {
            let newName = "tether_\(prepared.count + 1)"
            let types = parameters.map(\.type)
            guard PQsendPrepare(connection, newName, sql, Int32(types.count), types) == 1 else { throw brokenSend(connection) }
            _ = try results(of: connection)
            prepared[key] = newName
            name = newName
        }
        let sent = withParameters(parameters) { values, lengths, formats in
            if let name {
                return PQsendQueryPrepared(connection, name, Int32(parameters.count), values, lengths, formats, 1)
            }
            let types = parameters.map(\.type)
            return PQsendQueryParams(connection, sql, Int32(parameters.count), types, values, lengths, formats, 1)
        }
        guard sent == 1 else { throw brokenSend(connection) }
        return try results(of: connection)
    }

    /// Sends what libpq buffered and collects every result of the statement sent, each
    /// wait bounded. Returns the last result with rows (or the last one); throws for the
    /// first error, after reading the rest so the connection is ready for the next.
    private func results(of connection: OpaquePointer) throws(TetherError) -> PostgresRows {
        let deadline = ContinuousClock.now + configuration.queryTimeout + configuration.connectTimeout
        // Send everything, reading meanwhile so a server that answers early never blocks.
        while true {
            let flushed = PQflush(connection)
            if flushed == 0 { break }
            if flushed < 0 { throw brokenConnection(connection) }
            try waitUntilReady(connection, events: POLLIN | POLLOUT, until: deadline)
            if PQconsumeInput(connection) == 0 { throw brokenConnection(connection) }
        }
        var last: OpaquePointer?
        var failure: TetherError?
        while true {
            while PQisBusy(connection) == 1 {
                try waitUntilReady(connection, events: POLLIN, until: deadline)
                if PQconsumeInput(connection) == 0 { throw brokenConnection(connection) }
            }
            guard let result = PQgetResult(connection) else { break }
            switch PQresultStatus(result) {
            case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
                if let last { PQclear(last) }
                last = result
            case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
                PQclear(result)
                if let last { PQclear(last) }
                throw brokenConnection(connection, reason: "COPY is not supported here")
            default:
                if failure == nil { failure = serverError(result, connection) }
                PQclear(result)
            }
        }
        if let failure {
            if let last { PQclear(last) }
            if PQstatus(connection) != CONNECTION_OK { disconnect() }
            throw failure
        }
        return PostgresRows(last)
    }

    /// Waits until the connection's socket is ready for `events`, at most until `deadline`;
    /// past it the connection is closed (the server's state is unknown) and this throws.
    private func waitUntilReady(_ connection: OpaquePointer, events: Int32, until deadline: ContinuousClock.Instant) throws(TetherError) {
        switch waitFor(PQsocket(connection), events: Int16(events), until: deadline) {
        case .ready:
            return
        case .timedOut:
            let waited = configuration.queryTimeout + configuration.connectTimeout
            throw brokenConnection(connection, reason: "no answer within \(waited); the connection was closed, and a statement in flight may or may not have taken effect")
        case .woken:
            throw brokenConnection(connection, reason: "stopped while waiting for an answer")
        }
    }

    private enum Wait { case ready, timedOut, woken }

    /// `poll` on `socket` (and the wake descriptor), retried after signals, until ready or
    /// `deadline`.
    private func waitFor(_ socket: Int32, events: Int16, until deadline: ContinuousClock.Instant) -> Wait {
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else { return .timedOut }
            var descriptors = [pollfd(fd: socket, events: events, revents: 0)]
            if let wake { descriptors.append(pollfd(fd: wake, events: Int16(POLLIN), revents: 0)) }
            let ready = poll(&descriptors, nfds_t(descriptors.count), Int32(clamping: remaining.postgresMilliseconds))
            if ready < 0 {
                if errno == EINTR { continue }
                return .ready  // libpq's next call reports what is wrong with the socket
            }
            if descriptors.count > 1, descriptors[1].revents != 0 { return .woken }
            if ready > 0 { return .ready }
        }
    }

    private func serverError(_ result: OpaquePointer, _ connection: OpaquePointer) -> TetherError {
        func field(_ code: Int32) -> String? {
            PQresultErrorField(result, code).map { String(cString: $0) }
        }
        let severity = field(Int32(UInt8(ascii: "V"))) ?? field(Int32(UInt8(ascii: "S"))) ?? "ERROR"
        let primary = field(Int32(UInt8(ascii: "M"))).map(oneLine) ?? oneLine(String(cString: PQresultErrorMessage(result)))
        let lostConnection = PQstatus(connection) != CONNECTION_OK
        let text = primary.isEmpty ? errorMessage(connection) : "\(severity): \(primary)"
        let failure = PostgresFailure(sqlState: field(Int32(UInt8(ascii: "C"))), message: text, connectionLost: lostConnection)
        return TetherError(code: .storeFailed, message: "PostgreSQL at \(endpoint): \(text)", underlying: failure)
    }

    private func brokenSend(_ connection: OpaquePointer) -> TetherError {
        brokenConnection(connection)
    }

    /// The connection failed: closes it, and describes why.
    private func brokenConnection(_ connection: OpaquePointer, reason: String? = nil) -> TetherError {
        let message = reason ?? errorMessage(connection)
        disconnect()
        return lost(message)
    }

    private func lost(_ message: String) -> TetherError {
        let failure = PostgresFailure(sqlState: nil, message: message, connectionLost: true)
        return TetherError(code: .storeFailed, message: "PostgreSQL at \(endpoint): connection lost: \(message)", underlying: failure)
    }

    // MARK: After a call

    /// Leaves the connection ready for the next call: a transaction the call left open is
    /// rolled back, and a connection in an unknown state is closed.
    func settle() {
        guard let connection else { return }
        switch PQtransactionStatus(connection) {
        case PQTRANS_IDLE:
            return
        case PQTRANS_INTRANS, PQTRANS_INERROR:
            if (try? execute("ROLLBACK")) == nil { disconnect() }
        default:
            disconnect()
        }
    }
}

// MARK: - C strings

/// Calls `body` with a NULL-terminated array of C strings.
private func withCStrings<Result>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> Result) -> Result {
    let copies = strings.map { strdup($0) }
    defer { for copy in copies { free(copy) } }
    let pointers = copies.map { UnsafePointer($0) } + [nil]
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// Calls `body` with libpq's parallel arrays of parameter values, lengths and formats.
private func withParameters(
    _ parameters: [PostgresParameter],
    _ body: (UnsafePointer<UnsafePointer<CChar>?>, UnsafePointer<Int32>, UnsafePointer<Int32>) -> Int32
) -> Int32 {
    // One buffer holds every value, so only one allocation is made.
    let total = parameters.reduce(0) { $0 + ($1.bytes?.count ?? 0) }
    let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, total))
    defer { buffer.deallocate() }
    var pointers: [UnsafePointer<CChar>?] = []
    var lengths: [Int32] = []
    var formats: [Int32] = []
    pointers.reserveCapacity(parameters.count)
    var offset = 0
    for parameter in parameters {
        formats.append(parameter.isBinary ? 1 : 0)
        guard let bytes = parameter.bytes else {
            pointers.append(nil)
            lengths.append(0)
            continue
        }
        let start = buffer + offset
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress, !source.isEmpty {
                UnsafeMutableRawPointer(start).copyMemory(from: base, byteCount: source.count)
            }
        }
        pointers.append(UnsafePointer(start))
        lengths.append(Int32(bytes.count))
        offset += bytes.count
    }
    // Text values must end in a NUL: libpq reads them as C strings.
    let texts = parameters.enumerated().filter { !$0.element.isBinary && $0.element.bytes != nil }
    if texts.isEmpty {
        return body(pointers, lengths, formats)
    }
    var owned: [UnsafeMutablePointer<CChar>] = []
    defer { for copy in owned { copy.deallocate() } }
    for (index, parameter) in texts {
        let bytes = parameter.bytes!
        let copy = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress, !source.isEmpty {
                UnsafeMutableRawPointer(copy).copyMemory(from: base, byteCount: source.count)
            }
        }
        copy[bytes.count] = 0
        owned.append(copy)
        pointers[index] = UnsafePointer(copy)
    }
    return body(pointers, lengths, formats)
}
