// The code of Documentation.docc/RunningSeveralServers.md, compiled.
import Tether
import TetherPostgres
import TetherRedis

func runningSeveralServersNode() async throws {
    let cluster = try await PostgresCluster(url: "postgresql://tether@db.internal/chat", node: "gw-1")
    var configuration = ServerConfiguration(host: "0.0.0.0", port: 9000)
    configuration.mailboxes = .postgres(cluster)
    let server = Server(configuration: configuration)
    try await server.run()          // joins the cluster, then accepts clients
    await cluster.close()
}

func runningSeveralServersPublisher(body: [UInt8]) async throws -> UInt64 {
    let publisher = try await PostgresPublisher(url: "postgresql://tether@db.internal/chat")
    let sequence = try await publisher.push(Frame(type: 0x10, payload: body), toClient: "alice")
    return sequence
}

// The cluster section of Documentation.docc/ChannelsWithHistory.md.
func channelsAcrossACluster() async throws -> (Server, UInt64) {
    let cluster = try await PostgresCluster(url: "postgresql://tether@db.internal/chat", node: "gw-1")
    var configuration = ServerConfiguration(port: 9000)
    configuration.mailboxes = .postgres(cluster)
    configuration.channels = ChannelConfiguration()
    let server = Server(configuration: configuration)

    let publisher = try await PostgresPublisher(url: "postgresql://tether@db.internal/chat")
    let offset = try await publisher.publish(Array("deploy finished".utf8), to: "ops/deploys")
    return (server, offset)
}

// "On Redis".
func runningSeveralServersOnRedis(body: [UInt8]) async throws -> UInt64 {
    let cluster = try await RedisCluster(url: "redis://cache.internal:6379", node: "gw-1")
    var configuration = ServerConfiguration(host: "0.0.0.0", port: 9000)
    configuration.mailboxes = .redis(cluster)
    let server = Server(configuration: configuration)
    try await server.run()
    await cluster.close()
    let publisher = try await RedisPublisher(url: "redis://cache.internal:6379")
    let sequence = try await publisher.push(Frame(type: 0x10, payload: body), toClient: "alice")
    return sequence
}
