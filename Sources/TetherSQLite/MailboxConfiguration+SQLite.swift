public import Tether

extension MailboxConfiguration {
    /// Mailboxes in a SQLite file, created if absent: they survive a restart of the server.
    ///
    /// The same as `MailboxConfiguration(store: try SQLiteMailboxStore(path: path,
    /// synchronous: durability))`; see ``TetherSQLite/SQLiteMailboxStore`` for what the
    /// file holds and how calls to it are run.
    ///
    /// ```swift
    /// import TetherSQLite
    ///
    /// var configuration = ServerConfiguration(port: 9000)
    /// configuration.mailboxes = try .sqlite(path: "/var/lib/chat/mailboxes.sqlite")
    /// ```
    ///
    /// - Parameters:
    ///   - path: The database file.
    ///   - durability: What a write survives once it has returned.
    /// - Returns: The configuration, with the default limits.
    /// - Throws: ``TetherError`` with ``TetherError/Code/storeFailed`` when the file cannot
    ///   be opened or created, or is not a usable Tether mailbox store (corrupt, truncated,
    ///   or another application's database).
    public static func sqlite(path: String, durability: SQLiteMailboxStore.Durability = .normal) throws(TetherError) -> MailboxConfiguration {
        MailboxConfiguration(store: try SQLiteMailboxStore(path: path, synchronous: durability))
    }
}
