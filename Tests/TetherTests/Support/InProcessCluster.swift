import Synchronization
@testable import Tether

/// A cluster engine whose nodes are servers of one process: one shared in-memory store, a
/// presence table and routing by direct calls. It tests what the server does with a
/// cluster (claims, takeovers, wake-ups, broadcasts) without a database.
final class InProcessCluster: Sendable {
    struct Presence {
        var node: String
        var generation: UInt64
    }

    struct State {
        var nodes: [String: ClusterNode] = [:]
        var presence: [String: Presence] = [:]
        var generations: [String: UInt64] = [:]
        /// Nodes cut off from the broker: wake-ups and notices to them are dropped, and
        /// their claims fail.
        var deaf: Set<String> = []
        var broadcastsFailing = false
        /// Clients whose next claim is overtaken at once by a claim of another node, whose
        /// notice reaches the claiming node before its claim returns.
        var overtaken: [String: String] = [:]
    }

    let store = InMemoryMailboxStore()
    let state = Mutex(State())

    /// The engine one server uses to join as `name`.
    func node(_ name: String) -> Engine { Engine(cluster: self, nodeName: name) }

    /// Which node holds `clientID` now.
    func holder(of clientID: String) -> String? {
        state.withLock { $0.presence[clientID]?.node }
    }

    /// Stops or restores wake-ups and takeover notices to `node`.
    func setDeaf(_ node: String, _ deaf: Bool) {
        state.withLock { state in
            if deaf { state.deaf.insert(node) } else { state.deaf.remove(node) }
        }
    }

    func setBroadcastsFailing(_ failing: Bool) {
        state.withLock { $0.broadcastsFailing = failing }
    }

    /// The connected node `name`, unless it is deaf.
    fileprivate func reachable(_ name: String, in state: State) -> ClusterNode? {
        state.deaf.contains(name) ? nil : state.nodes[name]
    }

    struct Engine: SessionCluster {
        let cluster: InProcessCluster
        let nodeName: String

        var store: any MailboxStore { cluster.store }

        func join(_ node: ClusterNode) async throws {
            cluster.state.withLock { $0.nodes[nodeName] = node }
        }

        func leave() async {
            cluster.state.withLock { state in
                state.nodes.removeValue(forKey: nodeName)
                state.presence = state.presence.filter { $0.value.node != nodeName }
            }
        }

        func claim(_ clientID: String, limits: MailboxLimits, now: MailboxTime) async throws -> ClusterClaim {
            // Presence first, then the mailbox: a push stored after this point wakes this
            // node; one stored before is in the summary.
            let (generation, previous) = try cluster.state.withLock { state -> (UInt64, ClusterNode?) in
                if state.deaf.contains(nodeName) {
                    throw TetherError(code: .storeFailed, message: "\(nodeName) cannot reach the cluster")
                }
                let generation = (state.generations[clientID] ?? 0) + 1
                state.generations[clientID] = generation
                let before = state.presence[clientID]
                state.presence[clientID] = Presence(node: nodeName, generation: generation)
                guard let before, before.node != nodeName else { return (generation, nil) }
                return (generation, cluster.reachable(before.node, in: state))
            }
            previous?.takenOver(clientID: clientID, generation: generation, by: nodeName)
            let summary = try await cluster.store.openMailbox(for: clientID, limits: limits, now: now)
            let overtaking = cluster.state.withLock { state -> (String, ClusterNode?)? in
                guard let other = state.overtaken.removeValue(forKey: clientID) else { return nil }
                state.generations[clientID] = generation + 1
                state.presence[clientID] = Presence(node: other, generation: generation + 1)
                return (other, state.nodes[nodeName])
            }
            if let (other, me) = overtaking {
                me?.takenOver(clientID: clientID, generation: generation + 1, by: other)
            }
            return ClusterClaim(summary: summary, generation: generation)
        }

        func release(_ clientID: String, generation: UInt64) async {
            cluster.state.withLock { state in
                if let current = state.presence[clientID], current.node == nodeName, current.generation == generation {
                    state.presence.removeValue(forKey: clientID)
                }
            }
        }

        func stored(_ pushes: [MailboxMessage]) async {
            let targets = cluster.state.withLock { state in
                pushes.compactMap { push -> (ClusterNode, MailboxMessage)? in
                    guard let holder = state.presence[push.clientID], holder.node != nodeName,
                          let node = cluster.reachable(holder.node, in: state) else { return nil }
                    return (node, push)
                }
            }
            for (node, push) in targets { node.deliver(push) }
        }

        func broadcast(_ frame: Frame) async throws {
            let others = try cluster.state.withLock { state -> [ClusterNode] in
                if state.broadcastsFailing { throw TetherError(code: .storeFailed, message: "the broker is down") }
                return state.nodes.filter { $0.key != nodeName && !state.deaf.contains($0.key) }.map(\.value)
            }
            for node in others { node.broadcastLocally(frame) }
        }
    }
}
