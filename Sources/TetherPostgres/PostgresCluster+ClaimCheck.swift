internal import Tether

/// What a node does about one client connected to it, once it has read the client's
/// mailbox row: the decision of a claim check, apart from the database.
///
/// The row is the truth of who holds the client. A connection here whose row names this
/// node with the same generation is intact. Any other state was left by a step that lost a
/// race or a database that was away, and the node puts it right, comparing generations so
/// that it never takes a client from a node that claimed it later:
///
/// | the row | the repair |
/// |---|---|
/// | this node, the connection's generation | none: write what is stored through its last sequence |
/// | this node, a later generation | the connection holds that claim (a claim made here for another of the client's connections) |
/// | no holder, or this node with an earlier generation | claim it again for this node, if the row is still as it was read |
/// | another node | close the connection here: the client comes back where its pushes go |
/// | none (the mailbox is gone) | close the connection here, for the client to come back |
enum ClaimRepair: Equatable, Sendable {
    /// The claim stands: have the connection write what was stored through `through`.
    case intact(through: UInt64)
    /// The row names this node with a later claim: the connection holds `generation`, and
    /// writes what was stored through `through`.
    case adopt(generation: UInt64, through: UInt64)
    /// The row names no holder (or an older claim of this node) at generation `seen`:
    /// claim it again, only if it still does.
    case reclaim(seen: UInt64)
    /// The row names another node (`holder`), or is gone: close the connection here, as a
    /// takeover with `generation` would.
    case close(generation: UInt64, holder: String)

    /// The repair for the connection of `held` on node `node`, whose mailbox row reads `row`.
    init(held: ClusterSession, row: PostgresCluster.HeldRow?, node: String) {
        guard let row else {
            self = .close(generation: held.generation + 1, holder: "none")
            return
        }
        switch row.holder {
        case node? where row.generation == held.generation:
            self = .intact(through: row.lastSequence)
        case node? where row.generation > held.generation:
            self = .adopt(generation: row.generation, through: row.lastSequence)
        case node?, nil:
            self = .reclaim(seen: row.generation)
        case let other?:
            self = .close(generation: max(row.generation, held.generation + 1), holder: other)
        }
    }
}

/// What claim checks found: how many connections they looked at, and how many of each
/// repair they made.
struct ClaimCheck: Equatable, Sendable {
    /// Connections compared with their rows.
    var checked = 0
    /// Rows that named a later claim of this node, taken on by the connection.
    var adopted = 0
    /// Rows that named no holder, claimed again.
    var reclaimed = 0
    /// Connections closed because their row named another node or was gone.
    var closed = 0

    /// Whether anything was repaired.
    var repaired: Bool { adopted + reclaimed + closed > 0 }

    /// Adds the counts of `other`.
    mutating func add(_ other: ClaimCheck) {
        checked += other.checked
        adopted += other.adopted
        reclaimed += other.reclaimed
        closed += other.closed
    }
}
