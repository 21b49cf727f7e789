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
/// the one used least recently. It lives in the process; to keep what it learned across
/// launches, save its ``snapshot()`` (a `Codable` value) and ``restore(_:)`` it.
public final class HeartbeatMemory: Sendable, Hashable {
    /// The memory connections use unless their ``AdaptiveHeartbeat/memory`` says otherwise.
    public static let shared = HeartbeatMemory()

    /// The most networks remembered; the least recently used is forgotten first.
    public let capacity: Int

    struct Key: Hashable, Sendable {
        var network: String
        /// The endpoint's ``Endpoint/description``.
        var endpoint: String
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
        Key(network: path.identity, endpoint: endpoint.description)
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

    /// What the memory holds now, to save and ``restore(_:)`` later: every entry, the one
    /// used least recently first.
    ///
    /// - Returns: The snapshot.
    public func snapshot() -> Snapshot {
        storage.withLock { storage in
            Snapshot(entries: storage.entries.sorted { $0.value.lastUse < $1.value.lastUse }.map { key, entry in
                Snapshot.Entry(
                    network: key.network,
                    endpoint: key.endpoint,
                    lastGoodInterval: entry.record.lastGood.map { MonotonicTime.duration(nanoseconds: $0) },
                    failedInterval: entry.record.failure.map { MonotonicTime.duration(nanoseconds: $0.interval) }
                )
            })
        }
    }

    /// Adds the entries of `snapshot`, in its order, replacing those of the same network and
    /// server; beyond ``capacity`` the least recently used go, as always. A failed interval
    /// in it is held again for ``AdaptiveHeartbeat/retryFailedAfter`` from when a connection
    /// first reads the entry: how long it was held before the snapshot is not kept, since the
    /// connections' clocks do not run across launches.
    ///
    /// - Parameter snapshot: What ``snapshot()`` returned, perhaps in an earlier launch.
    public func restore(_ snapshot: Snapshot) {
        for entry in snapshot.entries {
            let record = AdaptiveHeartbeatState.Record(
                lastGood: entry.lastGoodInterval.map { MonotonicTime.nanoseconds(of: $0) },
                failure: entry.failedInterval.map { .init(interval: MonotonicTime.nanoseconds(of: $0), at: nil) }
            )
            store(record, for: Key(network: entry.network, endpoint: entry.endpoint))
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

extension HeartbeatMemory {
    /// What a ``HeartbeatMemory`` holds, as a value to save between launches: from
    /// ``HeartbeatMemory/snapshot()``, for ``HeartbeatMemory/restore(_:)``.
    ///
    /// ```swift
    /// let data = try JSONEncoder().encode(HeartbeatMemory.shared.snapshot())
    /// ```
    public struct Snapshot: Sendable, Hashable, Codable {
        /// What is remembered of one network and server.
        struct Entry: Sendable, Hashable, Codable {
            /// The network: ``NetworkPath/identity`` of its path; empty when none was known.
            var network: String
            /// The server, as its ``Endpoint/description`` (`host:port`, or a WebSocket URL).
            var endpoint: String
            /// The last interval that worked there, to start from.
            var lastGoodInterval: Duration?
            /// The shortest interval that failed there and is not tried again for now.
            var failedInterval: Duration?

            /// Creates an entry.
            ///
            /// - Parameters:
            ///   - network: The network's identity.
            ///   - endpoint: The server's description.
            ///   - lastGoodInterval: The last interval that worked.
            ///   - failedInterval: The shortest interval that failed.
            init(network: String, endpoint: String, lastGoodInterval: Duration?, failedInterval: Duration? = nil) {
                self.network = network
                self.endpoint = endpoint
                self.lastGoodInterval = lastGoodInterval
                self.failedInterval = failedInterval
            }
        }

        /// The entries, the one used least recently first.
        var entries: [Entry]

        /// A snapshot of `entries`.
        ///
        /// - Parameter entries: The entries, the one used least recently first.
        init(entries: [Entry] = []) {
            self.entries = entries
        }
    }
}
