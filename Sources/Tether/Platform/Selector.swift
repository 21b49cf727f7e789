/// What a registered descriptor wants to hear about.
struct Interest: OptionSet, Sendable {
    let rawValue: UInt8
    static let read = Interest(rawValue: 1)
    static let write = Interest(rawValue: 2)
}

/// One readiness event from the selector.
struct ReadinessEvent {
    var fd: Int32
    var readable: Bool
    var writable: Bool
    /// The peer hung up or the descriptor is in error; a read reports which.
    var hangup: Bool
}
