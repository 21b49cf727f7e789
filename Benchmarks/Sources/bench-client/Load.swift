import BenchCore
import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What to run: the closed loop's shape and how long to measure it.
struct Load: Sendable {
    var host: String
    var port: Int
    var connections: Int
    var inFlight: Int
    var size: Int
    var duration: Double
    var warmup: Double
    /// Tether only: run the request tasks on their connection's event loop.
    var preferLoopExecutor = false
    /// `off`, or a session per connection whose large frames go in `chunks` or `whole`.
    var session = "off"
    /// The chunk size a session announces; 0 for the default.
    var chunkSize = 0
    /// Tether with a session only: every request carries an idempotency key of its own, so
    /// the server runs it once through its mailbox store's request records.
    var keyed = false
    /// With TLS: the PEM file of the CA to trust; the server's name is `localhost`.
    var tlsCA: String?
    /// Over WebSocket: the request path of the upgrade to `ws://host:port`.
    var webSocketPath: String?
}

/// Ends the process if the run has not finished 10 s after its window closed: a server
/// that stalls must not hang the whole matrix.
final class Watchdog {
    private let timer: any DispatchSourceTimer

    init(window: Window) {
        let seconds = Double(window.end - monotonicNanoseconds()) / 1e9 + 10
        timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + seconds)
        timer.setEventHandler {
            printError("bench-client: stalled: the run did not finish 10 s after its window closed")
            exit(3)
        }
        timer.resume()
    }

    func disarm() {
        timer.cancel()
    }
}
