extension Profile {
    /// Why a request of `type` can never be answered, or `nil` when it can: the profile
    /// does not classify the type as a request (it is a heartbeat, a push or an invalid
    /// type), or, with sessions (`session`), it is the hello's or the acknowledgement's.
    ///
    /// The client refuses such a request before it writes it, and the server refuses a
    /// handler for such a type when it is registered: the frame would be taken for what
    /// its type says, and the request would wait for an answer that never comes.
    func requestRefusal(of type: UInt32, session: SessionWireTypes?) -> String? {
        // Called for every request: nothing is formatted unless the type is refused.
        var hex: String { "0x" + String(type, radix: 16) }
        if let session {
            if type == session.hello {
                return "type \(hex) is the session hello's type (SessionWireTypes.hello); sessions and mailboxes use it for their hello"
            }
            if type == session.acknowledgement {
                return "type \(hex) is the session acknowledgement's type (SessionWireTypes.acknowledgement); sessions and mailboxes use it for their acknowledgements"
            }
        }
        switch classify(type) {
        case .heartbeat: return "type \(hex) is the heartbeat type in profile \(name), not a request type\(requestRange)"
        case .notification: return "type \(hex) is a push type in profile \(name), not a request type\(requestRange)"
        case .invalid: return "type \(hex) is an invalid type in profile \(name), not a request type\(requestRange)"
        default: break
        }
        return nil
    }

    /// `; requests are 0x401 and up`, as far as the first 65,536 types show (the classifier
    /// is a function: only trying types tells its ranges); nothing when none of them is one.
    private var requestRange: String {
        guard let first = (0...UInt32(0xFFFF)).first(where: { classify($0) == .message }) else { return "" }
        let hex = "0x" + String(first, radix: 16)
        let contiguous = (first...UInt32(0xFFFF)).allSatisfy { classify($0) == .message }
        return contiguous ? "; requests are \(hex) and up" : "; the first request type is \(hex)"
    }
}
