/// What adaptive heartbeats learned, per network and server: the last interval that worked
/// and the shortest that failed. Shared by every connection that uses it, safe from any
/// thread.
///
/// An entry is keyed by the network the connection went out on (``NetworkPath/identity``
/// of the path its ``ConnectionConfiguration/pathMonitor`` reported when the connection came
/// up) together with the endpoint it reached: the interval a connection survives is the
/// shortest idle timeout on its way, which the phone's NAT and the server's load balancer
/// both set. Without a known path (no monitor, loopback, a monitor that cannot tell) the
/// endpoint alone is the key. A connection reads its entry when it comes up and writes it
/// after every healthy interval and every silent death; connections to the same server on
/// the same network share it, the last to write winning.
///
/// The memory is bounded: it keeps at most ``capacity`` entries (64 by default) and evicts
/// the one used least recently. It lives in the process; instants are those of the
/// connections' event loops, so it is not meant to be saved across launches.
public final class HeartbeatMemory: Sendable, Hashable {
    /// The memory connections use unless their ``AdaptiveHeartbeat/memory`` says otherwise.
    public static let shared = HeartbeatMemory()

    /// The most networks remembered; the least recently used is forgotten first.
    public let capacity: Int

    struct Key: Hashable, Sendable {
        var network: String
        var endpoint: Endpoint
    }

    private struct Entry {
        var record: AdaptiveHeartbeatState.Record
        var lastUse: UInt64
    }

    private struct Storage {
        var entries: [Key: Entry] = [:]
        var uses: UInt64 = 0
    }

    private let storage = Lock(Storage())

    /// An empty memory.
    ///
    /// - Parameter capacity: The most networks remembered; at least 1. Default 64.
    public init(capacity: Int = 64) {
        self.capacity = max(1, capacity)
    }

    /// The key of a connection to `endpoint` over `path`.
    static func key(path: NetworkPath, endpoint: Endpoint) -> Key {
        Key(network: path.identity, endpoint: endpoint)
    }

    /// The interval a connection to `endpoint` over `path` would start from: the last that
    /// worked there.
    ///
    /// - Parameters:
    ///   - path: The network path, as a ``PathMonitor`` reports it; ``NetworkPath/assumedUsable``
    ///     for a connection that follows none.
    ///   - endpoint: The server.
    /// - Returns: The interval, or `nil` when nothing is remembered of that network and server.
    public func lastGoodInterval(on path: NetworkPath, to endpoint: Endpoint) -> Duration? {
        storage.withLock { $0.entries[Self.key(path: path, endpoint: endpoint)]?.record.lastGood }
            .map { MonotonicTime.duration(nanoseconds: $0) }
    }

    /// How many networks are remembered now; never more than ``capacity``.
    public var count: Int { storage.withLock { $0.entries.count } }

    /// Forgets everything.
    public func removeAll() {
        storage.withLock { $0.entries.removeAll() }
    }

    /// The record of `key`, marked as used now.
    func record(for key: Key) -> AdaptiveHeartbeatState.Record? {
        storage.withLock { storage in
            guard var entry = storage.entries[key] else { return nil }
            storage.uses += 1
            entry.lastUse = storage.uses
            storage.entries[key] = entry
            return entry.record
        }
    }

    /// Stores `record` for `key`, evicting the entry used least recently when full.
    func store(_ record: AdaptiveHeartbeatState.Record, for key: Key) {
        storage.withLock { storage in
            storage.uses += 1
            if storage.entries[key] == nil, storage.entries.count >= capacity,
               let oldest = storage.entries.min(by: { $0.value.lastUse < $1.value.lastUse })?.key {
                storage.entries[oldest] = nil
            }
            storage.entries[key] = Entry(record: record, lastUse: storage.uses)
        }
    }

    /// Whether two values are the same memory.
    ///
    /// - Parameters:
    ///   - lhs: A memory.
    ///   - rhs: Another memory.
    /// - Returns: `true` when both are the same instance.
    public static func == (lhs: HeartbeatMemory, rhs: HeartbeatMemory) -> Bool { lhs === rhs }

    /// Hashes the instance's identity.
    ///
    /// - Parameter hasher: The hasher.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(self))
    }
}
