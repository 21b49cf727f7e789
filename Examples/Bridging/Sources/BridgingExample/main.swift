// An echo server run by a service group: SIGTERM or SIGINT shut it down gracefully.
// `swift run BridgingExample [PORT]` (9000 unless given; 0 picks a free port).

import Logging
import Metrics
import ServiceLifecycle
import Tether

LoggingSystem.bootstrap(StreamLogHandler.standardError)
// MetricsSystem.bootstrap(…)         // your backend: Prometheus, StatsD, OpenTelemetry…
let logger = Logger(label: "echo-server")
let port = CommandLine.arguments.dropFirst().first.flatMap { Int($0) } ?? 9000
// InstrumentationSystem.bootstrap(…) // your tracer: swift-otel…
var configuration = ServerConfiguration(host: "127.0.0.1", port: port)
configuration.observer = TracingObserver(logger: logger)   // a span per handled request
let server = Server(configuration: configuration)
server.handle(type: 0x402) { request, peer in
    Response(json: ["echo": request.json ?? .null])
}
let services = ServiceGroup(
    services: [TetherServerService(server: server, logger: logger), ServerMetricsService(server: server)],
    gracefulShutdownSignals: [.sigterm, .sigint],
    logger: logger
)
try await services.run()
