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
    /// The profile whose codec frames the bytes; `nil` for a channel made with a codec of
    /// its own.
    let profile: Profile?
    /// The payload bound, for the codec.
    let limits: Limits
    /// Whether to set `TCP_NODELAY` on a socket.
    let noDelay: Bool
    /// TLS settings, or `nil` for none.
    let tls: TLSConfiguration?
    /// The profile's name, for errors.
    let profileName: String
    /// The bound on bytes waiting to be written.
    let maximumOutboundBytes: Int
    /// How long a graceful close waits for the peer to take what is pending.
    let drainTimeout: Duration
    /// Which frames report their progress to the owner; `nil` for none.
    let progress: ProgressConfiguration?
    /// The size on the wire from which a frame reports its progress; `Int.max` for none.
    let largeFrameSize: Int

    /// - Parameters:
    ///   - role: Client or server.
    ///   - profileName: The profile's name, for errors.
    ///   - maximumOutboundBytes: The bound on bytes waiting to be written.
    ///   - drainTimeout: How long a graceful close waits for the peer.
    init(role: ChannelRole, profileName: String, maximumOutboundBytes: Int, drainTimeout: Duration) {
        self.role = role
        self.profile = nil
        self.limits = Limits()
        self.noDelay = true
        self.tls = nil
        self.profileName = profileName
        self.maximumOutboundBytes = maximumOutboundBytes
        self.drainTimeout = drainTimeout
        self.progress = nil
        self.largeFrameSize = .max
    }

    /// The settings of one end of a connection.
    ///
    /// - Parameters:
    ///   - role: Client or server.
    ///   - profile: The profile whose codec frames the bytes.
    ///   - limits: The payload and outbound bounds.
    ///   - noDelay: Whether to set `TCP_NODELAY`.
    ///   - tls: TLS settings, or `nil` for plain TCP.
    ///   - drainTimeout: How long a graceful close waits for the peer.
    ///   - progress: Which frames report their progress; `nil` for none.
    init(_ role: ChannelRole, profile: Profile, limits: Limits, noDelay: Bool, tls: TLSConfiguration?, drainTimeout: Duration, progress: ProgressConfiguration? = nil) {
        self.role = role
        self.profile = profile
        self.limits = limits
        self.noDelay = noDelay
        self.tls = tls
        self.profileName = profile.name
        self.maximumOutboundBytes = limits.maximumOutboundBytes
        self.drainTimeout = drainTimeout
        self.progress = progress
        self.largeFrameSize = progress?.minimumFrameSize ?? .max
    }
}
