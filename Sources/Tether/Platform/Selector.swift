/// What a registered descriptor wants to hear about.
package struct Interest: OptionSet, Sendable {
    package let rawValue: UInt8
    package init(rawValue: UInt8) { self.rawValue = rawValue }
    package static let read = Interest(rawValue: 1)
    package static let write = Interest(rawValue: 2)
}

/// One readiness event from the selector.
package struct ReadinessEvent {
    package var fd: Int32
    package var readable: Bool
    package var writable: Bool
    /// The peer hung up or the descriptor is in error; a read reports which.
    package var hangup: Bool
}
