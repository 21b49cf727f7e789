// The code of Documentation.docc/WritingAServer.md, compiled, and run where the example is
// self-contained.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization
import Testing
import Tether
import TetherTesting

private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    recordAndPrint(items, separator: separator, terminator: terminator)
}

// MARK: The article's code

private func overviewExample() async throws {
    var configuration = ServerConfiguration(host: "0.0.0.0", port: 9000)   // every interface
    configuration.idleTimeout = .seconds(90)
    let server = Server(configuration: configuration)
    server.handle(type: 0x402) { request, peer in
        Response(json: ["echo": request.json ?? .null])
    }
    try await server.run()              // serves until the task is cancelled
}

private func unixSocketExample(socketPath: String) -> (Server, Connection) {
    var configuration = ServerConfiguration(host: "127.0.0.1", port: 9000)
    configuration.unixSocket = UnixSocketConfiguration(path: socketPath, permissions: 0o660)
    let server = Server(configuration: configuration)
    // A client on this machine:
    let connection = Connection(to: Endpoint(unixSocket: socketPath))
    return (server, connection)
}

private func drainExample(server: Server) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await server.run() }
        // … serve until it is time to stop …
        await server.drain(deadline: .seconds(10))   // run() has returned
        try await group.waitForAll()                 // its error, if it had one
    }
}

struct AccountLookup: Codable, Sendable {
    var userID: Int
}
struct Account: Codable, Sendable {
    var userID: Int
    var name: String
}

private func installAccountHandler(on server: Server, directory: [Int: String]) {
    server.handle(type: 0x440) { request, peer in
        let lookup = try request.decode(AccountLookup.self)
        guard let name = directory[lookup.userID] else {
            throw TetherError(code: .invalidArgument, message: "no user \(lookup.userID)")
        }
        return try Response(encoding: Account(userID: lookup.userID, name: name))
    }
}

private func installWhoAmIHandler(on server: Server) {
    server.handle(type: 0x442) { request, peer in
        Response(json: ["peer": .string(peer.id.description),
                        "address": .string(peer.remoteAddress.ipAddress)])
    }
}

private func authenticateExample(server: Server, tokens: [String: String]) {
    server.authenticate { hello in
        guard tokens[hello.clientID] == hello.token else {
            throw TetherError(code: .sessionRejected, message: "bad token")
        }
    }
}

/// Work that takes the processor for a while: it must not run on an event loop.
@concurrent
func checksum(of bytes: [UInt8]) async -> UInt32 {
    bytes.reduce(UInt32(2166136261)) { ($0 ^ UInt32($1)) &* 16777619 }
}

private func installChecksumHandler(on server: Server) {
    server.handle(type: 0x441) { request, peer in
        let sum = await withTaskExecutorPreference(globalConcurrentExecutor) {
            await checksum(of: request.payload)
        }
        return Response(json: ["checksum": .int(Int(sum))])
    }
}

private func closePeersExample(server: Server) async {
    for peer in server.peers where peer.remoteAddress.ipAddress == "203.0.113.7" {
        await peer.close()
    }
}

/// Runs the server and prints what happens to it, until the task is cancelled.
func serveLoggingEvents(_ server: Server) async throws {
    let events = server.events              // before run(), so `listening` is seen too
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask {
            for await event in events {     // ends when run() returns
                print(event)   // listening on 127.0.0.1:9000, peer#1 connected from 127.0.0.1:53422, …
            }
        }
        try await server.run()
    }
}

private func metricsExample(server: Server) async {
    let metrics = await server.metrics()
    print("peers: \(metrics.connectedPeers), requests: \(metrics.requestsHandled), idle: \(metrics.idleTimeouts)")
}

private func limitsExample() {
    var configuration = ServerConfiguration(host: "0.0.0.0", port: 9000)
    configuration.maximumConnections = 2_000
    configuration.idleTimeout = .seconds(90)               // nil keeps quiet peers forever
    configuration.handshakeTimeout = .seconds(5)           // nil waits forever
    configuration.limits.maximumPayloadLength = 1 << 20    // 1 MiB per frame
    configuration.limits.maximumOutboundBytes = 8 << 20    // 8 MiB waiting for each peer
    configuration.maximumRequestsPerPeer = 64              // then the peer is not read
    configuration.maximumHandlers = 4_000                  // over all peers
    configuration.frameCompletionTimeout = .seconds(10)    // nil waits forever
    _ = configuration
}

private func shutdownExample(server: Server) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await server.run() }
        let address = try await server.listeningAddress()
        print("listening on \(address)")
        // … serve until it is time to stop …
        group.cancelAll()               // no new peers; every peer flushed and closed
    }                                   // run() has returned: the port is free again
}

// MARK: Running them

/// The thread this runs on.
private func currentThread() -> pthread_t {
    pthread_self()
}

@Suite("Writing a server, as the article shows it", .timeLimit(.guarded))
struct WritingAServerSnippets {
    @Test("the defaults the article states")
    func defaults() {
        let configuration = ServerConfiguration()
        #expect(configuration.host == "127.0.0.1")
        #expect(configuration.port == 9000)
        #expect(configuration.maximumConnections == 10_000)
        #expect(configuration.backlog == 1_024)
        #expect(configuration.noDelay)
        #expect(configuration.drainTimeout == .seconds(5))
        #expect(configuration.idleTimeout == .seconds(60))
        #expect(configuration.handshakeTimeout == .seconds(10))
        #expect(configuration.mailboxes == nil)
        #expect(configuration.tls == nil)
        #expect(configuration.limits == Limits())
        limitsExample()
    }

    @Test("a Codable handler answers, and what it throws comes back as an error answer")
    func handlers() async throws {
        try await withLocalServer(handlers: { server in
            installAccountHandler(on: server, directory: [42: "Ada"])
            installWhoAmIHandler(on: server)
        }) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                let found = try await connection.request(try Request(type: 0x440, encoding: AccountLookup(userID: 42)))
                let account = try found.decode(Account.self)
                #expect(account.name == "Ada")
                let missing = try await connection.request(try Request(type: 0x440, encoding: AccountLookup(userID: 7)))
                #expect(missing.errorMessage == "no user 7")
                let garbled = try await connection.request(Request(type: 0x440, json: ["user": "x"]))
                #expect(garbled.errorMessage?.hasPrefix("cannot decode request 0x440 content as AccountLookup: ") == true)
                let unknown = try await connection.request(Request(type: 0x999))
                #expect(unknown.errorMessage == "unknown type 0x999")
                let me = try await connection.request(Request(type: 0x442))
                #expect(me.json?["peer"] == "peer#1")
                #expect(me.json?["address"] == "127.0.0.1")
            }
        }
    }

    @Test("a handler runs on the peer's event loop; CPU-heavy work leaves it with a task executor preference")
    func offloading() async throws {
        let threads = Threads()
        try await withLocalServer(handlers: { server in
            installChecksumHandler(on: server)
            server.handle(type: 0x443) { _, _ in
                let handler = currentThread()
                let concurrent = await Self.thread()
                let preferred = await withTaskExecutorPreference(globalConcurrentExecutor) {
                    await Self.thread()
                }
                threads.set(handler: handler, concurrent: concurrent, preferred: preferred)
                return Response()
            }
        }) { _, endpoint in
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                // CPU-heavy by design: a machine busy with the thread sanitizer needs more than
                // the test configuration's 2 s for it.
                let reply = try await connection.request(Request(type: 0x441, payload: Array("abc".utf8)), timeout: .seconds(30))
                #expect(reply.json?["checksum"]?.intValue == 440_920_331)
                // It waits for a thread of the global pool, which the other suites keep busy.
                _ = try await connection.request(Request(type: 0x443), timeout: .seconds(30))
            }
        }
        let seen = try #require(threads.get())
        #expect(pthread_equal(seen.handler, seen.concurrent) != 0)   // @concurrent alone stays on the loop
        #expect(pthread_equal(seen.handler, seen.preferred) == 0)    // the preference moves it off
    }

    @concurrent
    private static func thread() async -> pthread_t { currentThread() }

    @Test("events tell of the server listening and of each peer; metrics count them")
    func eventsAndMetrics() async throws {
        let server = Server(configuration: .localTest)
        server.handle(type: 0x402) { request, _ in Response(json: request.json ?? .null) }
        // The bound covers a server's whole life, with a connection and a request, not one
        // event: three times the bound for one.
        let printed = try await withTimeLimit(testBound * 3) {
            try await withPrintedLines {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    let disconnected = server.events.filter { $0.kind == .peerDisconnected }
                    group.addTask { try await serveLoggingEvents(server) }
                    let address = try await server.listeningAddress()
                    let endpoint = Endpoint(host: "127.0.0.1", port: address.port)
                    try await Connection.withConnection(to: endpoint, configuration: .localTesting) { connection in
                        _ = try await connection.request(Request(type: 0x402))
                        await metricsExample(server: server)
                    }
                    // Stop once the logger has had the last event to print.
                    _ = try await firstElement(of: disconnected)
                    group.cancelAll()
                }
            }
        }
        #expect(printed.first?.hasPrefix("listening on 127.0.0.1:") == true)
        #expect(printed.contains("peers: 1, requests: 1, idle: 0"))
        #expect(printed.contains { $0.hasPrefix("peer#1 connected from 127.0.0.1:") })
    }

    @Test("closing the peers from one address")
    func closePeers() async throws {
        try await withLocalServer(handlers: { _ in }) { server, endpoint in
            let events = server.events
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { _ in
                _ = try await firstElement(of: events.filter { $0.kind == .peerConnected })
                await closePeersExample(server: server)
                #expect(server.peerCount == 1)             // not from 203.0.113.7
                for peer in server.peers { await peer.close() }
                let gone = try await firstElement(of: events.filter { $0.kind == .peerDisconnected })
                #expect(gone?.reason?.code == .connectionClosed)
                #expect(gone?.reason?.message.hasPrefix("server closed the connection with 127.0.0.1:") == true)
            }
        }
    }

    @Test("a connection over the limit is refused, and reported")
    func connectionLimit() async throws {
        try await withLocalServer(configure: { $0.maximumConnections = 1 }, handlers: { _ in }) { server, endpoint in
            let events = server.events
            try await Connection.withConnection(to: endpoint, configuration: .localTesting) { _ in
                _ = try await firstElement(of: events.filter { $0.kind == .peerConnected })
                var configuration = ConnectionConfiguration.localTesting
                configuration.reconnect = .disabled
                let second = Connection(to: endpoint, configuration: configuration)
                let states = second.states
                try? await second.connect()
                let refused = try await firstElement(of: events.filter { $0.kind == .peerRejected })
                #expect(refused?.reason?.code == .tooManyConnections)
                #expect(refused?.reason?.message == "the server is at its limit of 1 connection")
                let last = try await withTimeLimit(testBound) {
                    var last: ConnectionState?
                    for await state in states { last = state }
                    return last
                }
                #expect(last?.isFinal == true)
                #expect(last?.reason?.code == .tooManyConnections)
                #expect(last?.reason?.message == "\(endpoint) is at its connection limit and refused the connection: the server is at its limit of 1 connection")
                #expect(await server.metrics().rejectedConnections == 1)
            }
        }
    }

    @Test("a server that cannot listen throws bindFailed, from run() and listeningAddress()")
    func bindFailed() async throws {
        try await withLocalServer(handlers: { _ in }) { _, endpoint in
            let second = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: endpoint.port))
            let error = await #expect(throws: TetherError.self) { try await second.run() }
            #expect(error?.code == .bindFailed)
            #expect(error?.message.hasPrefix("cannot listen on 127.0.0.1:\(endpoint.port): ") == true)
            await #expect(throws: TetherError.self) { try await second.listeningAddress() }
        }
    }

    @Test("a peer that sends nothing is closed by the idle timeout, and one with no frame by the handshake timeout, each at its instant")
    func timeouts() async throws {
        try await withTestNetwork { network in
            var quiet = ConnectionConfiguration.testing(on: network)
            quiet.reconnect = .disabled                        // heartbeats are off too
            try await withNetworkServer(on: network, configure: { $0.idleTimeout = .milliseconds(50); $0.handshakeTimeout = nil }, handlers: { _ in }) { server, endpoint in
                let events = server.events
                try await Connection.withConnection(to: endpoint, configuration: quiet) { _ in
                    _ = try await firstElement(of: events.filter { $0.kind == .peerConnected })   // its timers run from now
                    await network.advance(by: .milliseconds(50) - .nanoseconds(1))
                    #expect(server.peerCount == 1)
                    await network.advance(by: .nanoseconds(1))
                    let gone = try await firstElement(of: events.filter { $0.kind == .peerDisconnected })
                    #expect(gone?.reason?.code == .idleTimeout)
                    #expect(gone?.reason?.message.hasSuffix(" sent nothing for 50 ms") == true)
                    #expect(await server.metrics().idleTimeouts == 1)
                }
            }
            try await withNetworkServer(on: network, configure: { $0.handshakeTimeout = .milliseconds(50) }, handlers: { _ in }) { server, endpoint in
                let events = server.events
                try await Connection.withConnection(to: endpoint, configuration: quiet) { _ in
                    _ = try await firstElement(of: events.filter { $0.kind == .peerConnected })
                    await network.advance(by: .milliseconds(50) - .nanoseconds(1))
                    #expect(server.peerCount == 1)
                    await network.advance(by: .nanoseconds(1))
                    let gone = try await firstElement(of: events.filter { $0.kind == .peerDisconnected })
                    #expect(gone?.reason?.code == .handshakeTimeout)
                    #expect(gone?.reason?.message.hasSuffix(" sent no complete frame within 50 ms of connecting") == true)
                    #expect(await server.metrics().handshakeTimeouts == 1)
                }
            }
            #expect(network.clock.elapsed == .milliseconds(100))
        }
    }

    @Test("cancelling run() closes every peer, cancels running handlers, and frees the port")
    func shutdown() async throws {
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.idleTimeout = nil
        // Not timed here: a busy machine may send the first frame after the default 10 s.
        configuration.handshakeTimeout = nil
        let server = Server(configuration: configuration)
        let (arrivals, arrival) = AsyncStream<Void>.makeStream()
        server.handle(type: 0x404) { _, _ in
            arrival.yield()
            try await suspendUntilCancelled()               // cancelled by the shutdown
        }
        let events = server.events
        try await withTimeLimit(testBound) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await server.run() }
                let address = try await server.listeningAddress()
                var configuration = ConnectionConfiguration.localTesting
                configuration.reconnect = .disabled
                let connection = try await Connection.connect(to: Endpoint(host: "127.0.0.1", port: address.port),
                                                              configuration: configuration)
                // No deadline of its own before the shutdown ends it, however slow the machine.
                let pending = Task { try await connection.request(Request(type: 0x404), timeout: .seconds(600)) }
                for await _ in arrivals { break }
                group.cancelAll()
                try await group.waitForAll()                 // run() has returned
                let error = await #expect(throws: TetherError.self) { try await pending.value }
                #expect(error?.code == .connectionLost)
                await connection.close()
            }
        }
        let reasons = try await withTimeLimit(testBound) {
            var reasons: [String] = []
            for await event in events where event.kind == .peerDisconnected {
                reasons.append(event.reason?.message ?? "")
            }
            return reasons
        }
        #expect(reasons == ["server shut down"])
        // The example as written, then a second server on the port the first one freed.
        let first = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: 0))
        let lines = try await withTimeLimit(testBound) {
            try await withPrintedLines { try await shutdownExample(server: first) }
        }
        let port = Int(lines.first?.split(separator: ":").last ?? "") ?? 0
        #expect(port > 0)
        let second = Server(configuration: ServerConfiguration(host: "127.0.0.1", port: port))
        try await withTimeLimit(testBound) { try await shutdownExample(server: second) }
    }
}

/// The threads a handler saw, for the test to read.
private final class Threads: Sendable {
    struct Seen: @unchecked Sendable {   // pthread_t is a plain thread id, compared only
        var handler: pthread_t
        var concurrent: pthread_t
        var preferred: pthread_t
    }
    private let seen = Mutex<Seen?>(nil)
    func set(handler: pthread_t, concurrent: pthread_t, preferred: pthread_t) {
        seen.withLock { $0 = Seen(handler: handler, concurrent: concurrent, preferred: preferred) }
    }
    func get() -> Seen? { seen.withLock { $0 } }
}
