// Tether's counters through swift-metrics. Tether keeps totals; swift-metrics counters are
// incremented: each export adds what changed since the previous one.

import Metrics
import Tether

/// Exports a connection's ``ConnectionMetrics`` as counters and gauges.
struct ConnectionMetricsExporter {
    private let counters: [(KeyPath<ConnectionMetrics, Int>, Counter)]
    private let inFlight: Gauge
    private let queued: Gauge
    private var last = ConnectionMetrics()
    init(endpoint: Endpoint) {
        let dimensions = [("endpoint", endpoint.description)]
        counters = [
            (\.bytesIn, Counter(label: "tether_client_bytes_in", dimensions: dimensions)),
            (\.bytesOut, Counter(label: "tether_client_bytes_out", dimensions: dimensions)),
            (\.requestsCompleted, Counter(label: "tether_client_requests_completed", dimensions: dimensions)),
            (\.requestsTimedOut, Counter(label: "tether_client_requests_timed_out", dimensions: dimensions)),
            (\.requestsFailed, Counter(label: "tether_client_requests_failed", dimensions: dimensions)),
            (\.lateResponses, Counter(label: "tether_client_late_responses", dimensions: dimensions)),
            (\.notificationsReceived, Counter(label: "tether_client_pushes", dimensions: dimensions)),
            (\.droppedElements, Counter(label: "tether_client_dropped_elements", dimensions: dimensions)),
            (\.notificationsTurnedAway, Counter(label: "tether_client_pushes_turned_away", dimensions: dimensions)),
            (\.reconnectAttempts, Counter(label: "tether_client_reconnect_attempts", dimensions: dimensions)),
        ]
        inFlight = Gauge(label: "tether_client_requests_in_flight", dimensions: dimensions)
        queued = Gauge(label: "tether_client_requests_queued", dimensions: dimensions)
    }
    /// Adds what changed since the last call to the counters, and sets the gauges.
    mutating func export(_ metrics: ConnectionMetrics) {
        for (field, counter) in counters where metrics[keyPath: field] > last[keyPath: field] {
            counter.increment(by: metrics[keyPath: field] - last[keyPath: field])
        }
        inFlight.record(metrics.inFlightRequests)
        queued.record(metrics.queuedRequests)
        last = metrics
    }
}

/// Exports a connection's metrics every `interval`, until the task is cancelled.
func exportMetrics(of connection: Connection, every interval: Duration = .seconds(10)) async {
    var exporter = ConnectionMetricsExporter(endpoint: connection.endpoint)
    while !Task.isCancelled {
        exporter.export(await connection.metrics)
        try? await Task.sleep(for: interval)
    }
}

/// Records each heartbeat's round trip in a timer, until the connection closes for good.
func recordRoundTrips(of connection: Connection) async {
    let timer = Timer(label: "tether_client_heartbeat_round_trip", dimensions: [("endpoint", connection.endpoint.description)])
    for await beat in connection.heartbeats {
        if let roundTrip = beat.roundTripTime { timer.record(duration: roundTrip) }
    }
}

/// Exports a server's ``ServerMetrics`` as counters and a gauge of the peers connected.
struct ServerMetricsExporter {
    private let counters: [(KeyPath<ServerMetrics, Int>, Counter)] = [
        (\.acceptedConnections, Counter(label: "tether_server_connections_accepted")),
        (\.rejectedConnections, Counter(label: "tether_server_connections_rejected")),
        (\.idleTimeouts, Counter(label: "tether_server_idle_timeouts")),
        (\.handshakeTimeouts, Counter(label: "tether_server_handshake_timeouts")),
        (\.frameTimeouts, Counter(label: "tether_server_frame_timeouts")),
        (\.readPauses, Counter(label: "tether_server_read_pauses")),
        (\.bytesIn, Counter(label: "tether_server_bytes_in")),
        (\.bytesOut, Counter(label: "tether_server_bytes_out")),
        (\.requestsHandled, Counter(label: "tether_server_requests_handled")),
        (\.heartbeatsAcked, Counter(label: "tether_server_heartbeats_acked")),
    ]
    private let peers = Gauge(label: "tether_server_peers")
    private var last: ServerMetrics?
    /// Adds what changed since the last call to the counters, and sets the gauge.
    mutating func export(_ metrics: ServerMetrics) {
        for (field, counter) in counters {
            let added = metrics[keyPath: field] - (last?[keyPath: field] ?? 0)
            if added > 0 { counter.increment(by: added) }
        }
        peers.record(metrics.connectedPeers)
        last = metrics
    }
}
