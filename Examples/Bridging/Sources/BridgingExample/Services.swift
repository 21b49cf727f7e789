// A Tether server as a Swift Service Lifecycle service. Tether stops a server when the task
// running it is cancelled; a service group asks its services to shut down gracefully first.
// cancelWhenGracefulShutdown turns the one into the other.

import Logging
import ServiceLifecycle
import Tether

/// Runs a server until the service group shuts down, and logs its events.
struct TetherServerService: Service {
    let server: Server
    let logger: Logger
    func run() async throws {
        let events = server.events                    // before run(), to log `listening`
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await logEvents(events, to: logger) }     // ends when the server stops
            try await cancelWhenGracefulShutdown {
                try await server.run()                 // every peer flushed and closed
            }
            try await group.waitForAll()
        }
    }
}

/// Exports a server's metrics every `interval`, until the service group shuts down.
struct ServerMetricsService: Service {
    let server: Server
    var interval: Duration = .seconds(10)
    func run() async throws {
        await cancelWhenGracefulShutdown {
            var exporter = ServerMetricsExporter()
            while !Task.isCancelled {
                exporter.export(await server.metrics())
                try? await Task.sleep(for: interval)
            }
        }
    }
}
