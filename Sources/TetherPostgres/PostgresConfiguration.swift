/// Where a PostgreSQL database is and how Tether talks to it.
///
/// ```swift
/// var configuration = PostgresConfiguration(url: "postgresql://tether@db.internal:5432/tether")
/// configuration.connections = 8
/// let store = try await PostgresMailboxStore(configuration: configuration)
/// ```
///
/// Every connection runs on a thread of its own, never on an event loop: a slow or
/// unreachable database holds up only the calls waiting for it.
public struct PostgresConfiguration: Sendable {
    /// The database: a libpq connection string (`host=db port=5432 dbname=tether user=tether`)
    /// or a `postgresql://` URL. Settings it leaves out come from libpq's defaults and the
    /// `PG…` environment variables.
    public var url: String
    /// How many connections, each on its own thread, run calls at once. Default 4.
    public var connections: Int = 4
    /// How long connecting (and reconnecting) may take before it fails. Default 5 s.
    public var connectTimeout: Duration = .seconds(5)
    /// How long one statement may run: the connection's `statement_timeout`. It also bounds
    /// how long a call waits for a free connection, and, together with
    /// ``connectTimeout``, for an answer from the server before the connection is given up.
    /// Default 30 s.
    public var queryTimeout: Duration = .seconds(30)
    /// How long a listener waits before its first attempt to reconnect; each failed attempt
    /// doubles it, up to 5 s. Default 200 ms.
    public var reconnectDelay: Duration = .milliseconds(200)
    /// The `application_name` the connections report, as `pg_stat_activity` shows it.
    /// Default `tether`.
    public var applicationName: String = "tether"

    /// A configuration with the defaults, for the database at `url`.
    ///
    /// - Parameter url: A libpq connection string or a `postgresql://` URL.
    public init(url: String) {
        self.url = url
    }
}

extension Duration {
    /// Whole milliseconds, rounded up, at least 1 (0 for a zero or negative duration).
    var postgresMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return max(0, milliseconds)
    }
}
