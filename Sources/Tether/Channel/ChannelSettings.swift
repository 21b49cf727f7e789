/// Which end of a connection a framed channel is, for how it explains bytes it cannot read.
enum ChannelRole: Sendable {
    case client
    case server
}

/// What the framed channels of one client or one server have in common, kept once in an
/// object they share rather than in every channel: an idle connection holds a reference
/// instead of a copy.
final class ChannelSettings: Sendable {
    let role: ChannelRole
    /// The profile's name, for errors.
    let profileName: String
    /// The bound on bytes waiting to be written.
    let maximumOutboundBytes: Int
    /// How long a graceful close waits for the peer to take what is pending.
    let drainTimeout: Duration

    /// - Parameters:
    ///   - role: Client or server.
    ///   - profileName: The profile's name, for errors.
    ///   - maximumOutboundBytes: The bound on bytes waiting to be written.
    ///   - drainTimeout: How long a graceful close waits for the peer.
    init(role: ChannelRole, profileName: String, maximumOutboundBytes: Int, drainTimeout: Duration) {
        self.role = role
        self.profileName = profileName
        self.maximumOutboundBytes = maximumOutboundBytes
        self.drainTimeout = drainTimeout
    }
}
