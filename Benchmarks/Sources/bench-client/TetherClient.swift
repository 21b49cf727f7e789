import BenchCore
import Tether
import TetherTLS

/// Tether's client as an application writes it: one `Connection` per connection, and K
/// tasks per connection each looping `try await connection.request(…)`. With
/// `--executor loop` the tasks prefer their connection's event loop
/// (``Connection/taskExecutor``), so a request needs no executor hop. With a WebSocket
/// path the endpoint is `ws://host:port/path` (`Endpoint(host:port:webSocketPath:)`), and
/// nothing else changes.
enum TetherClient {
    static func run(_ load: Load, pipelined: Bool = false) async throws -> (Stats, Window) {
        var configuration = ConnectionConfiguration()
        configuration.heartbeat = .disabled
        if let ca = load.tlsCA {
            configuration.tls = .client(trustRoots: .file(ca), serverName: "localhost")
        }
        let endpoint = load.webSocketPath.map { Endpoint(host: load.host, port: load.port, webSocketPath: $0) }
            ?? Endpoint(host: load.host, port: load.port)
        var connections: [Connection] = []
        for index in 0..<load.connections {
            var configuration = configuration
            if load.session != "off" {
                configuration.session = SessionConfiguration(clientID: "bench-\(index)")
                if load.session == "whole" { configuration.limits.chunkSize = nil }
                if load.session == "chunks", load.chunkSize > 0 { configuration.limits.chunkSize = load.chunkSize }
            }
            connections.append(try await Connection.connect(to: endpoint, configuration: configuration))
        }
        let window = Window(warmup: load.warmup, duration: load.duration)
        let watchdog = Watchdog(window: window)
        let payload = [UInt8](repeating: 0x61, count: load.size)
        let stats = await withTaskGroup(of: Stats.self) { group in
            for connection in connections {
                let executor: (any TaskExecutor)? = load.preferLoopExecutor ? connection.taskExecutor : nil
                if pipelined {
                    let count = load.inFlight
                    group.addTask(executorPreference: executor) { await pipelineWorker(connection, count: count, payload: payload, window: window) }
                    continue
                }
                for lane in 0..<load.inFlight {
                    let keys = load.keyed ? "lane\(lane)-" : nil
                    group.addTask(executorPreference: executor) { await worker(connection, payload: payload, window: window, keys: keys) }
                }
            }
            var total = Stats()
            for await stats in group {
                total.merge(stats)
            }
            return total
        }
        watchdog.disarm()
        for connection in connections {
            await connection.close()
        }
        return (stats, window)
    }

    /// One lane's closed loop; with `keys`, each request's idempotency key is that prefix and
    /// the lane's count.
    static func worker(_ connection: Connection, payload: [UInt8], window: Window, keys: String? = nil) async -> Stats {
        var stats = Stats()
        let request = Request(type: 0x402, payload: payload)
        var count = 0
        while true {
            let sent = monotonicNanoseconds()
            do {
                let response: Response
                if let keys {
                    count += 1
                    response = try await connection.request(request, idempotencyKey: keys + String(count))
                } else {
                    response = try await connection.request(request)
                }
                let received = monotonicNanoseconds()
                if response.payload.count != payload.count {
                    stats.fail("response serial \(response.serial) has \(response.payload.count) payload bytes, not \(payload.count)")
                }
                stats.record(sent: sent, received: received, in: window)
                if received >= window.end { return stats }
            } catch {
                stats.fail("\(error)")
                return stats
            }
        }
    }

    /// One task per connection: K requests at a time with `Connection.pipeline`, the next K
    /// once all are answered. Each request's latency runs from the pipeline's start to the
    /// caller's wake-up with every outcome.
    static func pipelineWorker(_ connection: Connection, count: Int, payload: [UInt8], window: Window) async -> Stats {
        var stats = Stats()
        let requests = Array(repeating: Request(type: 0x402, payload: payload), count: count)
        while true {
            let sent = monotonicNanoseconds()
            let outcomes = await connection.pipeline(requests)
            let received = monotonicNanoseconds()
            for outcome in outcomes {
                switch outcome {
                case .success(let response):
                    if response.payload.count != payload.count {
                        stats.fail("response serial \(response.serial) has \(response.payload.count) payload bytes, not \(payload.count)")
                    }
                    stats.record(sent: sent, received: received, in: window)
                case .failure(let error):
                    stats.fail("\(error)")
                    return stats
                }
            }
            if received >= window.end { return stats }
        }
    }
}
