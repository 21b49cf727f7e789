import BenchCore
import Tether

/// Many identified clients reaching one node at once, as they do when the node they were
/// on dies: each hello is a claim in the cluster's engine. Timed from the first connect
/// until every client's connect has returned (a session's connect returns once the server
/// has answered its hello, so once its claim is made), with at most `concurrency` connects
/// under way at once.
enum Claims {
    static func run(node mailboxes: MailboxConfiguration, clients: Int, concurrency: Int, timeout: Double) async throws -> Double {
        // Both ends of every connection are in this process.
        let needed = clients * 2 + 256
        if needed > openFileLimit() {
            fail("\(clients) clients need about \(needed) open files here (both ends of each connection), past the limit of \(openFileLimit()): give fewer with --clients")
        }
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.mailboxes = mailboxes
        configuration.maximumConnections = max(configuration.maximumConnections, clients + 16)
        configuration.handshakeTimeout = nil
        let server = Server(configuration: configuration)
        let (task, endpoint) = try await start(server)
        let ids = (0..<clients).map { "claim\($0)" }
        let began = monotonicNanoseconds()
        let connections = try await PushFanOut.connect(ids, to: { _ in endpoint }, acknowledgeDelay: nil, concurrency: concurrency)
        let ended = monotonicNanoseconds()
        for id in ids where server.peer(forClient: id) == nil {
            fail("client \(id) connected but is not identified on the node")
        }
        if seconds(from: began, to: ended) > timeout {
            fail("the claims took more than \(format(timeout, decimals: 0)) s")
        }
        for connection in connections { await connection.close() }
        task.cancel()
        await task.value
        return seconds(from: began, to: ended)
    }
}
