import BenchCore
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SeedNIO

/// The SwiftNIO client as most Swift code is written today: a `NIOAsyncChannel`, K tasks
/// per connection each awaiting its response through a `CheckedContinuation` kept in a
/// lock-protected table keyed by serial, and one reader task that resumes them.
enum NIOAsyncClient {
    typealias FrameChannel = NIOAsyncChannel<SeedFrame, SeedFrame>

    static func run(_ load: Load) async throws -> (Stats, Window) {
        var channels: [FrameChannel] = []
        for _ in 0..<load.connections {
            channels.append(try await connect(load))
        }
        var payload = ByteBufferAllocator().buffer(capacity: load.size)
        payload.writeRepeatingByte(0x61, count: load.size)
        let window = Window(warmup: load.warmup, duration: load.duration)
        let watchdog = Watchdog(window: window)
        let stats = await withTaskGroup(of: Stats.self) { group in
            for channel in channels {
                group.addTask { [payload] in
                    do {
                        return try await drive(channel, inFlight: load.inFlight, payload: payload, window: window)
                    } catch {
                        var stats = Stats()
                        stats.fail("\(error)")
                        return stats
                    }
                }
            }
            var total = Stats()
            for await stats in group {
                total.merge(stats)
            }
            return total
        }
        watchdog.disarm()
        return (stats, window)
    }

    static func connect(_ load: Load) async throws -> FrameChannel {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: load.host, port: load.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers(
                        ByteToMessageHandler(SeedFrameDecoder()),
                        MessageToByteHandler(SeedFrameEncoder())
                    )
                    return try FrameChannel(wrappingChannelSynchronously: channel)
                }
            }
    }

    /// Runs one connection's closed loop and closes it.
    static func drive(_ channel: FrameChannel, inFlight: Int, payload: ByteBuffer, window: Window) async throws -> Stats {
        try await channel.executeThenClose { inbound, outbound in
            let table = PendingRequests()
            return await withTaskGroup(of: Stats?.self) { group in
                group.addTask {
                    do {
                        for try await frame in inbound {
                            table.complete(frame)
                        }
                        table.failAll(ConnectionClosed())
                    } catch {
                        table.failAll(error)
                    }
                    return nil
                }
                for _ in 0..<inFlight {
                    group.addTask {
                        var stats = Stats()
                        while true {
                            let sent = monotonicNanoseconds()
                            do {
                                let response = try await table.request(payload: payload, on: outbound)
                                let received = monotonicNanoseconds()
                                if response.payload.readableBytes != payload.readableBytes {
                                    stats.fail("response serial \(response.serial) has \(response.payload.readableBytes) payload bytes")
                                }
                                stats.record(sent: sent, received: received, in: window)
                                if received >= window.end { return stats }
                            } catch {
                                stats.fail("\(error)")
                                return stats
                            }
                        }
                    }
                }
                var total = Stats()
                var finished = 0
                while finished < inFlight, let result = await group.next() {
                    if let stats = result {
                        total.merge(stats)
                        finished += 1
                    }
                }
                group.cancelAll()
                return total
            }
        }
    }
}

struct ConnectionClosed: Error, CustomStringConvertible {
    var description: String { "the connection closed" }
}

/// The requests of one connection waiting for their responses, by serial.
final class PendingRequests: Sendable {
    private enum Entry {
        /// The request's task waits here.
        case waiting(CheckedContinuation<SeedFrame, any Error>)
        /// The response came before its task started waiting.
        case arrived(SeedFrame)
    }

    private struct State {
        var nextSerial: UInt32 = 0
        var entries: [UInt32: Entry] = [:]
        var failure: (any Error)?
    }

    private let state = NIOLockedValueBox(State())

    /// Sends a request and waits for the response with its serial.
    func request(payload: ByteBuffer, on outbound: NIOAsyncChannelOutboundWriter<SeedFrame>) async throws -> SeedFrame {
        let serial = state.withLockedValue { state in
            state.nextSerial = state.nextSerial == .max ? 1 : state.nextSerial + 1
            return state.nextSerial
        }
        try await outbound.write(SeedFrame(type: 0x402, serial: serial, payload: payload))
        return try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLockedValue { state -> Result<SeedFrame, any Error>? in
                if case .arrived(let frame) = state.entries.removeValue(forKey: serial) { return .success(frame) }
                if let failure = state.failure { return .failure(failure) }
                state.entries[serial] = .waiting(continuation)
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    /// Resumes the request a response answers, or keeps the response for it.
    func complete(_ frame: SeedFrame) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<SeedFrame, any Error>? in
            if case .waiting(let continuation) = state.entries.removeValue(forKey: frame.serial) { return continuation }
            state.entries[frame.serial] = .arrived(frame)
            return nil
        }
        waiter?.resume(returning: frame)
    }

    /// Fails every waiting request and every later one.
    func failAll(_ error: any Error) {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<SeedFrame, any Error>] in
            state.failure = error
            defer { state.entries.removeAll() }
            return state.entries.values.compactMap {
                if case .waiting(let continuation) = $0 { return continuation }
                return nil
            }
        }
        for waiter in waiters { waiter.resume(throwing: error) }
    }
}
