#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch

/// Turns SIGINT and SIGTERM into an async sequence, so `serve` can stop its server task
/// and `listen` close its connection, and both exit 0.
///
/// The first signal is delivered to ``signals``; the default action is then restored, so a
/// second Ctrl-C ends a shutdown that hangs.
final class SignalWatcher {
    /// The signals received, in order; ends when the watcher is cancelled.
    let signals: AsyncStream<Int32>
    private let continuation: AsyncStream<Int32>.Continuation
    private var sources: [any DispatchSourceSignal] = []

    /// Starts watching.
    ///
    /// - Parameter numbers: The signals to catch, such as `[SIGINT, SIGTERM]`.
    init(_ numbers: [Int32]) {
        (signals, continuation) = AsyncStream<Int32>.makeStream()
        let queue = DispatchQueue(label: "tether.signals")
        for number in numbers {
            // The dispatch source sees the signal only if its default action (terminate) is off.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [continuation] in
                signal(number, SIG_DFL)
                continuation.yield(number)
            }
            source.resume()
            sources.append(source)
        }
    }

    /// Stops watching and ends ``signals``.
    func cancel() {
        for source in sources { source.cancel() }
        sources.removeAll()
        continuation.finish()
    }

    /// `SIGINT`, `SIGTERM` or `signal 10`.
    static func name(of number: Int32) -> String {
        switch number {
        case SIGINT: "SIGINT"
        case SIGTERM: "SIGTERM"
        default: "signal \(number)"
        }
    }
}
